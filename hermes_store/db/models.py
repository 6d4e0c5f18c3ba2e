"""Declarative models of the canonical tables: ``sessions``, ``messages``, ``state_meta``, and the
v21 agent's tables (per-model usage, gateway routing, compression locks, async delegations).

Columns only. The FTS5 tables, their triggers and views are derived data defined by raw-DDL
revisions in ``migrations/``; they are deliberately absent from this metadata so that
autogenerate never sees (or tries to drop) them or their shadow tables.

Types mirror the legacy DDL exactly (``TEXT``, ``INTEGER``, ``REAL``, the nullable counters)
because adopted databases keep the tables the agent created; a model that disagreed would show
up as drift in ``alembic check``. On PostgreSQL the same columns are ``bigint``, ``double
precision`` and ``text COLLATE "C"`` (``db.dialect`` says why), created by revision 0012.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, MetaData, PrimaryKeyConstraint, Table, text
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
    # The v21 agent's columns (revision 0017): gateway peer, handoff, compression advisory state.
    session_key: Mapped[str | None] = mapped_column(TEXT)
    chat_id: Mapped[str | None] = mapped_column(TEXT)
    chat_type: Mapped[str | None] = mapped_column(TEXT)
    thread_id: Mapped[str | None] = mapped_column(TEXT)
    display_name: Mapped[str | None] = mapped_column(TEXT)
    expiry_finalized: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))
    handoff_state: Mapped[str | None] = mapped_column(TEXT)
    handoff_platform: Mapped[str | None] = mapped_column(TEXT)
    handoff_error: Mapped[str | None] = mapped_column(TEXT)
    compression_failure_cooldown_until: Mapped[float | None] = mapped_column(FLOAT)
    compression_failure_error: Mapped[str | None] = mapped_column(TEXT)
    compression_fallback_streak: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    rewind_count: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    # The topmost ancestor by parent links (the session itself for a root, or when its parent
    # row is gone), kept by the write units and, for foreign writers, SQLite triggers
    # (revision 0023): lineage walks filter on it and a distributed engine shards by it.
    root_session_id: Mapped[str | None] = mapped_column(TEXT)

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
        Index("idx_sessions_source_id", "source", "id"),
        # v21 declares the two below with "started_at DESC"; see idx_sessions_started.
        Index("idx_sessions_session_key", "session_key", "started_at"),
        Index("idx_sessions_gateway_peer", "source", "user_id", "chat_id", "chat_type",
              "thread_id", "started_at"),
        Index("idx_sessions_handoff_state", "handoff_state", "started_at"),
        Index("idx_sessions_root", "root_session_id", "parent_session_id"),
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
    # The v21 agent's columns (revision 0017).
    effect_disposition: Mapped[str | None] = mapped_column(TEXT)
    platform_message_id: Mapped[str | None] = mapped_column(TEXT)
    observed: Mapped[int | None] = mapped_column(INTEGER, server_default=text("0"))

    session: Mapped[ChatSession] = relationship(back_populates="messages")

    __table_args__ = (
        Index("idx_messages_session", "session_id", "timestamp"),
        Index("idx_messages_session_active", "session_id", "active", "timestamp"),
        # Finds rows whose ``active`` lost its default (the v21 open heals them) without a scan.
        Index("idx_messages_active_null", "active", sqlite_where=text("active IS NULL"),
              postgresql_where=text("active IS NULL")),
        Index("idx_messages_platform_msg_id", "session_id", "platform_message_id",
              sqlite_where=text("platform_message_id IS NOT NULL"),
              postgresql_where=text("platform_message_id IS NOT NULL")),
        {"sqlite_autoincrement": True},
    )

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, session_id={self.session_id!r}, role={self.role!r})"


class StateMeta(Base):
    """Key/value markers: backfill progress, layout versions, maintenance timestamps."""

    __tablename__ = "state_meta"

    key: Mapped[str] = mapped_column(TEXT, primary_key=True, nullable=True)
    value: Mapped[str | None] = mapped_column(TEXT)


class SessionModelUsage(Base):
    """Tokens and cost per (session, model, billing route): the v21 per-model roll-up."""

    __tablename__ = "session_model_usage"

    session_id: Mapped[str] = mapped_column(TEXT, ForeignKey("sessions.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(TEXT)
    billing_provider: Mapped[str] = mapped_column(TEXT, server_default=text("''"))
    billing_base_url: Mapped[str] = mapped_column(TEXT, server_default=text("''"))
    billing_mode: Mapped[str] = mapped_column(TEXT, server_default=text("''"))
    api_call_count: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    input_tokens: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    cache_read_tokens: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    cache_write_tokens: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    reasoning_tokens: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    estimated_cost_usd: Mapped[float] = mapped_column(FLOAT, server_default=text("0"))
    actual_cost_usd: Mapped[float] = mapped_column(FLOAT, server_default=text("0"))
    cost_status: Mapped[str | None] = mapped_column(TEXT)
    cost_source: Mapped[str | None] = mapped_column(TEXT)
    first_seen: Mapped[float | None] = mapped_column(FLOAT)
    last_seen: Mapped[float | None] = mapped_column(FLOAT)

    __table_args__ = (
        PrimaryKeyConstraint("session_id", "model", "billing_provider", "billing_base_url",
                             "billing_mode"),
        Index("idx_session_model_usage_session", "session_id"),
        Index("idx_session_model_usage_model", "model"),
    )


class GatewayRoute(Base):
    """The gateway's routing index: an opaque entry per session key, per session directory."""

    __tablename__ = "gateway_routing"

    scope: Mapped[str] = mapped_column(TEXT, primary_key=True, server_default=text("''"))
    session_key: Mapped[str] = mapped_column(TEXT, primary_key=True)
    entry_json: Mapped[str] = mapped_column(TEXT)
    updated_at: Mapped[float] = mapped_column(FLOAT)


class CompressionLock(Base):
    """Who compresses a session now. No foreign key: any id can be locked; stale rows expire."""

    __tablename__ = "compression_locks"

    session_id: Mapped[str] = mapped_column(TEXT, primary_key=True, nullable=True)
    holder: Mapped[str] = mapped_column(TEXT)
    acquired_at: Mapped[float] = mapped_column(FLOAT)
    expires_at: Mapped[float] = mapped_column(FLOAT)

    __table_args__ = (Index("idx_compression_locks_expires", "expires_at"),)


class AsyncDelegation(Base):
    """Written by the agent's delegation tool over its own connection; the store creates the
    table and never rewrites it (the tool may add later columns, carried through)."""

    __tablename__ = "async_delegations"

    delegation_id: Mapped[str] = mapped_column(TEXT, primary_key=True, nullable=True)
    origin_session: Mapped[str] = mapped_column(TEXT)
    origin_ui_session_id: Mapped[str] = mapped_column(TEXT, server_default=text("''"))
    parent_session_id: Mapped[str | None] = mapped_column(TEXT)
    state: Mapped[str] = mapped_column(TEXT)
    dispatched_at: Mapped[float] = mapped_column(FLOAT)
    completed_at: Mapped[float | None] = mapped_column(FLOAT)
    updated_at: Mapped[float] = mapped_column(FLOAT)
    event_json: Mapped[str | None] = mapped_column(TEXT)
    result_json: Mapped[str | None] = mapped_column(TEXT)
    delivery_state: Mapped[str] = mapped_column(TEXT, server_default=text("'pending'"))
    delivery_attempts: Mapped[int] = mapped_column(INTEGER, server_default=text("0"))
    delivered_at: Mapped[float | None] = mapped_column(FLOAT)
    owner_pid: Mapped[int | None] = mapped_column(INTEGER)
    owner_started_at: Mapped[int | None] = mapped_column(INTEGER)
    task_json: Mapped[str | None] = mapped_column(TEXT)
    delivery_claim: Mapped[str | None] = mapped_column(TEXT)
    delivery_claimed_at: Mapped[float | None] = mapped_column(FLOAT)

    __table_args__ = (
        Index("idx_async_delegations_delivery", "delivery_state", "completed_at"),
    )


class TelegramTopicMode(Base):
    """A Telegram DM chat switched to topic mode. Opt-in: ordinary opens never create this table
    (an older bot must keep running on an upgraded store); ``apply_telegram_topic_migration``
    does (db/topics.py)."""

    __tablename__ = "telegram_dm_topic_mode"

    chat_id: Mapped[str] = mapped_column(TEXT, primary_key=True, nullable=True)
    user_id: Mapped[str] = mapped_column(TEXT)
    enabled: Mapped[int] = mapped_column(INTEGER, server_default=text("1"))
    activated_at: Mapped[float] = mapped_column(FLOAT)
    updated_at: Mapped[float] = mapped_column(FLOAT)
    has_topics_enabled: Mapped[int | None] = mapped_column(INTEGER)
    allows_users_to_create_topics: Mapped[int | None] = mapped_column(INTEGER)
    capability_checked_at: Mapped[float | None] = mapped_column(FLOAT)
    intro_message_id: Mapped[str | None] = mapped_column(TEXT)
    pinned_message_id: Mapped[str | None] = mapped_column(TEXT)


class TelegramTopicBinding(Base):
    """One DM topic bound to one session (and a session to one topic); opt-in like the mode."""

    __tablename__ = "telegram_dm_topic_bindings"

    chat_id: Mapped[str] = mapped_column(TEXT)
    thread_id: Mapped[str] = mapped_column(TEXT)
    user_id: Mapped[str] = mapped_column(TEXT)
    session_key: Mapped[str] = mapped_column(TEXT)
    # Deleting a session takes its binding along (every delete path relies on the cascade).
    session_id: Mapped[str] = mapped_column(TEXT, ForeignKey("sessions.id", ondelete="CASCADE"))
    managed_mode: Mapped[str] = mapped_column(TEXT, server_default=text("'auto'"))
    linked_at: Mapped[float] = mapped_column(FLOAT)
    updated_at: Mapped[float] = mapped_column(FLOAT)

    __table_args__ = (
        PrimaryKeyConstraint("chat_id", "thread_id"),
        Index("idx_telegram_dm_topic_bindings_session", "session_id", unique=True),
        Index("idx_telegram_dm_topic_bindings_user", "user_id", "chat_id"),
    )


# --------------------------------------------------------------------------- Core handles
# SQLAlchemy types ``Model.__table__`` as a FromClause (a mapping may target any selectable);
# Core statements (insert/update on a table) want the Table these models do map to. Repositories
# that build Core statements take these instead of ``__table__``.


def table_of(model: type[Base]) -> Table:
    """The :class:`Table` that ``model`` maps."""
    found = model.__table__
    if not isinstance(found, Table):  # every model here maps a plain table
        raise TypeError(f"{model.__name__} maps {type(found).__name__}, not a Table")
    return found


SESSIONS = table_of(ChatSession)
MESSAGES = table_of(Message)
STATE_META = table_of(StateMeta)
MODEL_USAGE = table_of(SessionModelUsage)
GATEWAY_ROUTES = table_of(GatewayRoute)
COMPRESSION_LOCKS = table_of(CompressionLock)
ASYNC_DELEGATIONS = table_of(AsyncDelegation)
TOPIC_MODES = table_of(TelegramTopicMode)
TOPIC_BINDINGS = table_of(TelegramTopicBinding)
