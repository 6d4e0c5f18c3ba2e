"""Telegram DM topic mode: which chats use topics, and which topic holds which session.

Both tables are opt-in (db/topics.py): readers answer the neutral value while they are absent,
and only ``apply_migration`` (run first by every writer that needs them) creates them. A topic
holds one session and a session sits in one topic; a topic may move to another session.

Functions take a caller-owned ``Connection`` and never commit. Ids arrive already as ``str``.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)

from hermes_store.db import topics as tables
from hermes_store.db.models import SESSIONS, TOPIC_BINDINGS, TOPIC_MODES
from hermes_store.repo import lineage, listing
from hermes_store.repo.sessions import full_row, get_meta, set_meta

log = logging.getLogger(__name__)

modes = TOPIC_MODES
bindings = TOPIC_BINDINGS
sessions = SESSIONS

SCHEMA_KEY = "telegram_dm_topic_schema_version"
SCHEMA_VERSION = 2
TELEGRAM = "telegram"
BINDING_KEYS = ("chat_id", "thread_id", "user_id", "session_key", "session_id", "managed_mode",
                "linked_at", "updated_at")


class TopicBinding(TypedDict):
    """One topic's binding (the columns of :data:`BINDING_KEYS`)."""

    chat_id: str
    thread_id: str
    user_id: str
    session_key: str
    session_id: str
    managed_mode: str
    linked_at: float
    updated_at: float


class TopicTaken(ValueError):
    """The session is already bound to another topic (one topic per session)."""


def _flag(value: object) -> int | None:
    return None if value is None else int(bool(value))


def _stamped(conn: Connection) -> bool:
    """Whether the meta key says the cascade rebuild already happened (version 2 or later)."""
    value = get_meta(conn, SCHEMA_KEY)
    try:
        return value is not None and int(value) >= SCHEMA_VERSION
    except ValueError:
        return False


# --------------------------------------------------------------------------- writers


def apply_migration(conn: Connection) -> None:
    """Create the tables if missing, give the bindings their cascade, stamp the meta key."""
    tables.create(conn)
    if _stamped(conn):
        return  # a later release's higher stamp is kept: it knows its own layout
    if not tables.bindings_cascade(conn):
        tables.rebuild_bindings(conn)
    set_meta(conn, SCHEMA_KEY, SCHEMA_VERSION)


def enable(conn: Connection, *, chat_id: str, user_id: str, has_topics_enabled: object,
           allows_users_to_create_topics: object, now: float) -> None:
    apply_migration(conn)
    values = {"user_id": user_id, "enabled": 1, "updated_at": now,
              "capability_checked_at": now,
              "has_topics_enabled": _flag(has_topics_enabled),
              "allows_users_to_create_topics": _flag(allows_users_to_create_topics)}
    changed = conn.execute(update(modes).where(modes.c.chat_id == chat_id)
                           .values(**values)).rowcount
    if not changed:
        conn.execute(insert(modes).values(chat_id=chat_id, activated_at=now, **values))


def disable(conn: Connection, *, chat_id: str, clear_bindings: bool, now: float) -> None:
    """Switch the chat off; never creates the tables."""
    if not tables.present(conn):
        return
    conn.execute(update(modes).where(modes.c.chat_id == chat_id)
                 .values(enabled=0, updated_at=now))
    if clear_bindings:
        conn.execute(delete(bindings).where(bindings.c.chat_id == chat_id))


def bind(conn: Connection, *, chat_id: str, thread_id: str, user_id: str, session_key: str,
         session_id: str, managed_mode: str, now: float) -> None:
    """Bind the topic to the session (moving the topic if it held another one).

    A session bound elsewhere raises :class:`TopicTaken`; an unknown session fails the foreign
    key (``IntegrityError``). Either way the unit rolls back, tables included.
    """
    apply_migration(conn)
    elsewhere = conn.execute(
        select(bindings.c.chat_id, bindings.c.thread_id)
        .where(bindings.c.session_id == session_id)).first()
    if elsewhere is not None and tuple(elsewhere) != (chat_id, thread_id):
        raise TopicTaken(
            f"session {session_id!r} is already linked to topic {elsewhere.thread_id!r} of chat "
            f"{elsewhere.chat_id!r}; unlink it first (one topic per session)")
    values = {"user_id": user_id, "session_key": session_key, "session_id": session_id,
              "managed_mode": managed_mode, "updated_at": now}
    changed = conn.execute(
        update(bindings).where(bindings.c.chat_id == chat_id, bindings.c.thread_id == thread_id)
        .values(**values)).rowcount
    if not changed:
        conn.execute(insert(bindings).values(chat_id=chat_id, thread_id=thread_id,
                                             linked_at=now, **values))


def delete_binding(conn: Connection, *, chat_id: str, thread_id: str, now: float) -> int:
    """Unbind the topic; the chat's last binding gone switches topic mode off for it."""
    if not tables.present(conn):
        return 0
    deleted = conn.execute(delete(bindings).where(
        bindings.c.chat_id == chat_id, bindings.c.thread_id == thread_id)).rowcount or 0
    if deleted:
        left = conn.execute(select(func.count()).select_from(bindings)
                            .where(bindings.c.chat_id == chat_id)).scalar()
        if not left:
            conn.execute(update(modes).where(modes.c.chat_id == chat_id)
                         .values(enabled=0, updated_at=now))
    return int(deleted)


# --------------------------------------------------------------------------- readers


def is_enabled(conn: Connection, *, chat_id: str, user_id: str) -> bool:
    if not tables.has_table(conn, modes.name):
        return False
    found = conn.execute(select(modes.c.chat_id).where(
        modes.c.chat_id == chat_id, modes.c.user_id == user_id, modes.c.enabled == 1)).first()
    return found is not None


def _bindings_where(conn: Connection, *clauses: ColumnElement[bool]) -> list[TopicBinding]:
    if not tables.has_table(conn, bindings.name):
        return []
    cols = [bindings.c[k] for k in BINDING_KEYS]
    query = select(*cols).where(*clauses).order_by(bindings.c.updated_at.desc(),
                                                   bindings.c.thread_id)
    # The statement selects exactly BINDING_KEYS, TopicBinding's keys.
    return [cast(TopicBinding, dict(r)) for r in conn.execute(query).mappings()]


def binding(conn: Connection, *, chat_id: str, thread_id: str) -> TopicBinding | None:
    rows = _bindings_where(conn, bindings.c.chat_id == chat_id,
                           bindings.c.thread_id == thread_id)
    return rows[0] if rows else None


def binding_by_session(conn: Connection, *, session_id: str) -> TopicBinding | None:
    rows = _bindings_where(conn, bindings.c.session_id == session_id)
    return rows[0] if rows else None


def bindings_for_chat(conn: Connection, *, chat_id: str) -> list[TopicBinding]:
    """The chat's bindings, most recently updated first."""
    return _bindings_where(conn, bindings.c.chat_id == chat_id)


def session_linked(conn: Connection, *, session_id: str) -> bool:
    return binding_by_session(conn, session_id=session_id) is not None


def unlinked_sessions(conn: Connection, *, user_id: str, limit: int,
                      now: float) -> list[dict[str, Any]]:
    """The user's Telegram sessions bound to no topic: rows plus ``preview`` and
    ``last_active``, newest activity first (archived rows and children included)."""
    if limit <= 0 or not tables.has_table(conn, bindings.name):
        return []
    last_active = lineage.last_activity(sessions, now)
    bound = select(bindings.c.session_id).where(bindings.c.session_id == sessions.c.id)
    query = (select(literal_column("*"),
                    listing.preview_source(sessions.c.id, sessions.c.root_session_id)
                    .label("preview"),
                    last_active.label("last_active"))
             .select_from(sessions)
             .where(sessions.c.source == TELEGRAM, sessions.c.user_id == user_id,
                    ~bound.exists())
             .order_by(last_active.desc(), sessions.c.started_at.desc(), sessions.c.id.desc())
             .limit(limit))
    out = []
    for row in conn.execute(query).mappings():
        item = full_row(row)
        item["preview"] = listing.make_preview(item.get("preview"))
        out.append(item)
    return out
