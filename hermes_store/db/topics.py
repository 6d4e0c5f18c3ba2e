"""The Telegram DM topic tables: created on opt-in only, the way each backend needs.

Ordinary opens never create ``telegram_dm_topic_mode`` and ``telegram_dm_topic_bindings``:
the agent's older bot keeps running on an upgraded store only if they stay absent until
someone switches topic mode on. So no revision creates them; ``create`` here does, when
``apply_telegram_topic_migration`` asks.

On SQLite the statements are the v21 agent's own DDL, so an agent opening the file afterwards
finds exactly what it would have written; on any other backend the models' ``Table.create``
writes them, the cascade included.

An early agent release declared the bindings' foreign key without ``ON DELETE CASCADE``, so a
bound session could not be deleted. Such a SQLite table is rebuilt (``rebuild_bindings``);
other backends never had that layout.
"""

from __future__ import annotations

import logging
import re

from sqlalchemy import Connection

from hermes_store.db import catalog
from hermes_store.db.models import TOPIC_BINDINGS, TOPIC_MODES

log = logging.getLogger(__name__)

MODE = TOPIC_MODES
BINDINGS = TOPIC_BINDINGS
BINDINGS_NAME = BINDINGS.name
_REBUILD = "telegram_dm_topic_bindings_rebuild"
# What a rebuild copies from the old table's own description (catalog.column_definitions): names,
# declared types, and literal defaults; anything else is refused or left out, never spliced.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE = re.compile(r"[A-Za-z ()0-9,]*")
_LITERAL = re.compile(r"-?[0-9]+(\.[0-9]+)?|'[^']*'|NULL", re.IGNORECASE)

_MODE_DDL = """CREATE TABLE IF NOT EXISTS telegram_dm_topic_mode (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
)"""


def _bindings_ddl(name: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {name} (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)"""


_INDEX_DDL = (
    ("CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session "
     "ON telegram_dm_topic_bindings(session_id)"),
    ("CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user "
     "ON telegram_dm_topic_bindings(user_id, chat_id)"),
)


def _name(value: str) -> str:
    if not _IDENT.fullmatch(value):
        raise ValueError(f"{BINDINGS_NAME} has a column named {value!r}; not rebuilt")
    return f'"{value}"'


def _declared_type(value: str) -> str:
    if not _TYPE.fullmatch(value):
        raise ValueError(f"{BINDINGS_NAME} has a column of type {value!r}; not rebuilt")
    return value


def _literal(value: str) -> str:
    if not _LITERAL.fullmatch(value):
        raise ValueError(f"not a literal default: {value!r}")
    return value


def has_table(conn: Connection, name: str) -> bool:
    return catalog.has_table(conn, name)


def present(conn: Connection) -> bool:
    """Both tables exist (topic mode was switched on here at least once)."""
    return has_table(conn, MODE.name) and has_table(conn, BINDINGS.name)


def create(conn: Connection) -> None:
    """Create whichever of the two tables (and their indexes) is missing; idempotent."""
    if conn.dialect.name != "sqlite":
        create_from_models(conn)
        return
    conn.exec_driver_sql(_MODE_DDL)
    conn.exec_driver_sql(_bindings_ddl(BINDINGS_NAME))
    for ddl in _INDEX_DDL:
        conn.exec_driver_sql(ddl)


def create_from_models(conn: Connection) -> None:
    """The tables as the models define them (cascade included), for backends without the
    agent's own DDL."""
    for table in (MODE, BINDINGS):
        table.create(conn, checkfirst=True)


def bindings_cascade(conn: Connection) -> bool:
    """Whether the bindings' key to ``sessions`` deletes along (always so off SQLite)."""
    if conn.dialect.name != "sqlite":
        return True
    keys = catalog.foreign_keys(conn, BINDINGS_NAME)
    to_sessions = [k for k in keys if k.table == "sessions" and k.column == "session_id"]
    return bool(to_sessions) and all(k.on_delete.upper() == "CASCADE" for k in to_sessions)


def rebuild_bindings(conn: Connection) -> int:
    """Rebuild the SQLite bindings table with the cascade, keeping its rows and any columns a
    later release added; returns how many rows were dropped for naming a deleted session.

    Such a row cannot exist while foreign keys are enforced, but a file written with them off
    may hold one, and the new key would refuse it; the cascade would have removed it anyway.
    """
    old = catalog.column_definitions(conn, BINDINGS_NAME)
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_REBUILD}")
    conn.exec_driver_sql(_bindings_ddl(_REBUILD))
    known = {c.name for c in BINDINGS.columns}
    for col in old:
        if col.name in known:
            continue
        default = col.default
        # SQLite adds a NOT NULL column only with a default; an expression default is left
        # out (the rows keep their values, new rows get NULL).
        not_null = " NOT NULL" if col.not_null else ""
        tail = (f"{not_null} DEFAULT {_literal(default)}"
                if default is not None and _LITERAL.fullmatch(default) else "")
        decl = f"{_name(col.name)} {_declared_type(col.type)}{tail}"
        conn.exec_driver_sql(f"ALTER TABLE {_REBUILD} ADD COLUMN {decl}")
    names = ", ".join(_name(c.name) for c in old)
    orphans = conn.exec_driver_sql(
        f"SELECT count(*) FROM {BINDINGS_NAME} WHERE session_id NOT IN (SELECT id FROM sessions)"
    ).scalar() or 0
    conn.exec_driver_sql(
        f"INSERT INTO {_REBUILD} ({names}) SELECT {names} FROM {BINDINGS_NAME} "
        "WHERE session_id IN (SELECT id FROM sessions)")
    conn.exec_driver_sql(f"DROP TABLE {BINDINGS_NAME}")
    conn.exec_driver_sql(f"ALTER TABLE {_REBUILD} RENAME TO {BINDINGS_NAME}")
    for ddl in _INDEX_DDL:
        conn.exec_driver_sql(ddl)
    if orphans:
        log.warning("telegram_dm_topic_bindings: dropped %d binding(s) of deleted sessions "
                    "while adding ON DELETE CASCADE", orphans)
    return int(orphans)
