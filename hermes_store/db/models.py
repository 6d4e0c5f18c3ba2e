"""Declarative models of the canonical tables: ``sessions``, ``messages``, ``state_meta``.

Columns only. The FTS5 tables, their triggers and views are derived data defined by raw-DDL
revisions in ``migrations/``; they are deliberately absent from this metadata so that
autogenerate never sees (or tries to drop) them or their shadow tables.

Types mirror the legacy DDL exactly (``TEXT``, ``INTEGER``, ``REAL``, the nullable counters)
because adopted databases keep the tables the agent created; a model that disagreed would show
up as drift in ``alembic check``. On PostgreSQL the same columns are ``bigint``, ``double
precision`` and ``text COLLATE "C"`` (``db.dialect`` says why), created by revision 0012.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, MetaData, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from hermes_store.db.dialect import FLOAT, INTEGER, TEXT

NAMING_CONVENTION = {
    "ix": "idx_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class ChatSession(Base):
    """One conversation (a row of ``sessions``); compression splits form parent→child chains."""

    __tablename__ = "sessions"

    # SQLite lets a non-INTEGER primary key hold NULL, and the legacy DDL never said NOT NULL;
    # the model states what the file really has, so autogenerate sees no drift.
    id: Mapped[str] = mapped_column(TEXT, primary_key=True, nullable=True)
    source: Mapped[str] = mapped_column(TEXT)
    user_id: Mapped[str | None] = mapped_column(TEXT)
    model: Mapped[str | None] = mapped_column(TEXT)
    model_config: Mapped[str | None] = mapped_column(TEXT)
    system_prompt: Mapped[str | None] = mapped_column(TEXT)
    parent_session_id: Mapped[str | None] = mapped_column(TEXT, ForeignKey("sessions.id"))
    started_at: Mapped[float] = mapped_column(FLOAT)
    ended_at: Mapped[float | None] = mapped_column(FLOAT)
    end_reason: Mapped[str | None] = mapped_column(TEXT)
    message_count: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    tool_call_count: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    input_tokens: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    output_tokens: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    cache_read_tokens: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    cache_write_tokens: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    reasoning_tokens: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    billing_provider: Mapped[str | None] = mapped_column(TEXT)
    billing_base_url: Mapped[str | None] = mapped_column(TEXT)
    billing_mode: Mapped[str | None] = mapped_column(TEXT)
    estimated_cost_usd: Mapped[float | None] = mapped_column(FLOAT)
    actual_cost_usd: Mapped[float | None] = mapped_column(FLOAT)
    cost_status: Mapped[str | None] = mapped_column(TEXT)
    cost_source: Mapped[str | None] = mapped_column(TEXT)
    pricing_version: Mapped[str | None] = mapped_column(TEXT)
    title: Mapped[str | None] = mapped_column(TEXT)
    api_call_count: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    # Columns of the newer upstream store that users rely on (added by 0012 when missing).
    cwd: Mapped[str | None] = mapped_column(TEXT)
    git_branch: Mapped[str | None] = mapped_column(TEXT)
    git_repo_root: Mapped[str | None] = mapped_column(TEXT)
    profile_name: Mapped[str | None] = mapped_column(TEXT)
    last_activity_at: Mapped[float | None] = mapped_column(FLOAT)
    origin_json: Mapped[str | None] = mapped_column(TEXT)
    archived: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    pinned: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))

    messages: Mapped[list[Message]] = relationship(
        back_populates="session", order_by="Message.id", passive_deletes=True
    )
    parent: Mapped[ChatSession | None] = relationship(
        remote_side=[id], back_populates="children"
    )
    children: Mapped[list[ChatSession]] = relationship(
        back_populates="parent", order_by="ChatSession.started_at"
    )

    __table_args__ = (
        Index("idx_sessions_source", "source"),
        Index("idx_sessions_parent", "parent_session_id"),
        # The DDL says "started_at DESC"; SQLite walks an index either way and its reflection
        # drops the sort order, so naming the column keeps autogenerate quiet.
        Index("idx_sessions_started", "started_at"),
        Index("idx_sessions_title_unique", "title", unique=True,
              sqlite_where=text("title IS NOT NULL"), postgresql_where=text("title IS NOT NULL")),
    )

    def __repr__(self) -> str:
        return f"ChatSession(id={self.id!r}, source={self.source!r}, title={self.title!r})"


class Message(Base):
    """One turn: user, assistant (maybe with ``tool_calls`` JSON), tool result, or system."""

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(INTEGER, primary_key=True, autoincrement=True, nullable=True)
    session_id: Mapped[str] = mapped_column(TEXT, ForeignKey("sessions.id"))
    role: Mapped[str] = mapped_column(TEXT)
    content: Mapped[str | None] = mapped_column(TEXT)
    tool_call_id: Mapped[str | None] = mapped_column(TEXT)
    tool_calls: Mapped[str | None] = mapped_column(TEXT)
    tool_name: Mapped[str | None] = mapped_column(TEXT)
    timestamp: Mapped[float] = mapped_column(FLOAT)
    token_count: Mapped[int | None] = mapped_column(INTEGER)
    finish_reason: Mapped[str | None] = mapped_column(TEXT)
    reasoning: Mapped[str | None] = mapped_column(TEXT)
    reasoning_content: Mapped[str | None] = mapped_column(TEXT)
    reasoning_details: Mapped[str | None] = mapped_column(TEXT)
    codex_reasoning_items: Mapped[str | None] = mapped_column(TEXT)
    codex_message_items: Mapped[str | None] = mapped_column(TEXT)
    # 1 = part of the live context; compaction and truncation flag rows instead of deleting them.
    active: Mapped[int] = mapped_column(INTEGER, server_default=text("1"))
    compacted: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))

    session: Mapped[ChatSession] = relationship(back_populates="messages")

    __table_args__ = (
        Index("idx_messages_session", "session_id", "timestamp"),
        {"sqlite_autoincrement": True},
    )

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, session_id={self.session_id!r}, role={self.role!r})"


class StateMeta(Base):
    """Key/value markers: backfill progress, layout versions, maintenance timestamps."""

    __tablename__ = "state_meta"

    key: Mapped[str] = mapped_column(TEXT, primary_key=True, nullable=True)
    value: Mapped[str | None] = mapped_column(TEXT)
