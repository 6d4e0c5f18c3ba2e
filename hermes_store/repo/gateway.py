"""The gateway: a session's peer (platform, chat, thread, user), the expiry flag, the routing
index (``gateway_routing``) and the lookups the gateway resumes by.

Functions take a caller-owned ``Connection`` and never commit. Comparisons are string to
string: the facade turns ids that arrive as numbers into text first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from hermes_store.db.models import GATEWAY_ROUTES, MESSAGES, SESSIONS
from hermes_store.repo import lineage
from hermes_store.repo.executor import rowcount
from hermes_store.repo.sessions import Executor, full_row

sessions = SESSIONS
messages = MESSAGES
routes = GATEWAY_ROUTES

# Ended by older gateway code that closed sessions it should have kept; still resumable.
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")
_MAX_PARAMS = 900
# Built once: an alias of the wide sessions table is slow to build.
_SAME_KEY = sessions.alias("same_key")


def ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only (SQLite's ``lower()``), so platform names compare alike."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _platform_is(platform: str) -> ColumnElement[bool]:
    return func.lower(sessions.c.source) == ascii_lower(platform)


def _rows(conn: Executor, query: Select[*tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [full_row(r) for r in conn.execute(query).mappings()]


# --------------------------------------------------------------------------- peer


def record_peer(conn: Executor, session_id: str, values: Mapping[str, Any]) -> None:
    """Write the peer columns given (the facade decides which are unconditional)."""
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))


def set_expiry_finalized(conn: Executor, session_id: str, finalized: bool) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(expiry_finalized=1 if finalized else 0))


# --------------------------------------------------------------------------- routing index


def save_route(conn: Executor, scope: str, session_key: str, entry_json: str, *,
               now: float) -> None:
    """Upsert one entry: update, else insert; a racing insert (possible outside SQLite's
    write lock) falls back to the update, so the last writer wins either way."""
    where = (routes.c.scope == scope, routes.c.session_key == session_key)
    change = update(routes).where(*where).values(entry_json=entry_json, updated_at=now)
    if rowcount(conn.execute(change)):
        return
    try:
        with conn.begin_nested():
            conn.execute(insert(routes).values(scope=scope, session_key=session_key,
                                               entry_json=entry_json, updated_at=now))
    except IntegrityError:
        conn.execute(change)


def replace_routes(conn: Executor, scope: str, entries: Mapping[str, str], *, now: float) -> None:
    conn.execute(delete(routes).where(routes.c.scope == scope))
    rows = [{"scope": scope, "session_key": key, "entry_json": value, "updated_at": now}
            for key, value in entries.items()]
    if rows:
        conn.execute(insert(routes), rows)


def load_routes(conn: Executor, scope: str) -> dict[str, str]:
    return {r.session_key: r.entry_json for r in conn.execute(
        select(routes.c.session_key, routes.c.entry_json).where(routes.c.scope == scope))}


def delete_routes(conn: Executor, scope: str, session_keys: Sequence[str]) -> int:
    keys = list(dict.fromkeys(session_keys))
    deleted = 0
    for start in range(0, len(keys), _MAX_PARAMS):
        deleted += rowcount(conn.execute(delete(routes).where(
            routes.c.scope == scope,
            routes.c.session_key.in_(keys[start:start + _MAX_PARAMS]))))
    return deleted


# --------------------------------------------------------------------------- lookups


def list_gateway_sessions(conn: Executor, *, platform: str | None, active_only: bool,
                          now: float) -> list[dict[str, Any]]:
    """The newest row of each session key (ties: all), with ``last_active``, newest first.

    "Newest" is judged over every row of the key before the platform and open filters, so an
    ended newest row hides its key instead of surfacing an older open one."""
    same_key = _SAME_KEY
    newest = (select(func.max(same_key.c.started_at))
              .where(same_key.c.session_key == sessions.c.session_key).scalar_subquery())
    last_active = lineage.last_activity(sessions, now).label("last_active")
    query: Select[*tuple[Any, ...]] = (
        select(literal_column("*"), last_active).select_from(sessions)
        .where(sessions.c.session_key.is_not(None), sessions.c.started_at == newest))
    if platform:
        query = query.where(_platform_is(platform))
    if active_only:
        query = query.where(sessions.c.ended_at.is_(None))
    query = query.order_by(last_active.desc(), sessions.c.started_at.desc(), sessions.c.id.desc())
    return _rows(conn, query)


def origin_candidates(conn: Executor, *, platform: str, chat_id: str,
                      thread_id: str | None) -> list[tuple[str, str | None]]:
    """``(id, user_id)`` of open keyed sessions in that chat (and thread), newest first."""
    query = (select(sessions.c.id, sessions.c.user_id)
             .where(sessions.c.ended_at.is_(None), sessions.c.session_key.is_not(None),
                    _platform_is(platform), sessions.c.chat_id == chat_id)
             .order_by(sessions.c.started_at.desc(), sessions.c.id.desc()))
    if thread_id is not None:
        query = query.where(func.coalesce(sessions.c.thread_id, "") == thread_id)
    return [(r.id, r.user_id) for r in conn.execute(query)]


def _recoverable() -> ColumnElement[bool]:
    return or_(sessions.c.ended_at.is_(None),
               sessions.c.end_reason.in_(RECOVERABLE_END_REASONS))


def _has_content() -> ColumnElement[bool]:
    return or_(sessions.c.message_count > 0,
               exists(select(messages.c.id).where(messages.c.session_id == sessions.c.id)))


def _newest_row(conn: Executor, *where: ColumnElement[bool]) -> dict[str, Any] | None:
    query: Select[*tuple[Any, ...]] = (
        select(literal_column("*")).select_from(sessions)
        .where(*where, _recoverable(), _has_content())
        .order_by(sessions.c.started_at.desc(), sessions.c.id.desc()).limit(1))
    rows = _rows(conn, query)
    return rows[0] if rows else None


def latest_for_peer(conn: Executor, *, source: str, session_key: str, user_id: str | None,
                    chat_id: str | None, chat_type: str | None,
                    thread_id: str | None) -> dict[str, Any] | None:
    """The session a gateway peer resumes: by its key first, else by its exact peer columns
    (only when the chat is known). Never reopens anything."""
    found = _newest_row(conn, sessions.c.session_key == session_key,
                        sessions.c.source == source)
    if found is not None or chat_id is None or chat_type is None:
        return found
    peer = [func.coalesce(sessions.c[name], "") == (value or "")
            for name, value in (("user_id", user_id), ("chat_id", chat_id),
                                ("chat_type", chat_type), ("thread_id", thread_id))]
    return _newest_row(conn, sessions.c.source == source, *peer)
