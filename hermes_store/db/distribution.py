"""Distributing a PostgreSQL store over Citus: ``sessions`` and ``messages`` by lineage root.

``hermes-store upgrade`` on a database where the ``citus`` extension is installed brings the
schema to head as anywhere, then (once) reshapes the two big tables the way a distributed
table must be and distributes them, co-located, by ``root_session_id`` (docs/scale-out.md):

* a distributed table's primary and unique keys must hold the distribution column, so
  ``sessions``' key becomes ``(root_session_id, id)`` and ``messages`` gains ``root_session_id``
  (filled from its session) with the key ``(root_session_id, id)``;
* the self foreign key ``parent_session_id → sessions.id`` and the store-wide unique title index
  go (neither can be checked across shards); the title keeps a plain index;
* ``messages → sessions`` becomes ``(root_session_id, session_id) → (root_session_id, id)``;
  the keys of the small session-keyed tables onto ``sessions`` go (they stay local tables);
* the PostgreSQL root trigger goes: a Citus writer must supply the distribution column.

Nothing here runs without the extension (``citus_installed``), and nothing runs twice
(``is_distributed``). The reshape is tested on any PostgreSQL (rolled back), the rest against a
Citus build (tests/test_citus.py, opt-in). An engine learns whether its store is distributed
when it first connects (:func:`note`): a process whose store is distributed by another while it
runs must be restarted.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import Boolean

DISTRIBUTED = ("sessions", "messages")
# Modelled indexes a distributed store goes without (a unique index across shards).
DROPPED_INDEXES = ("idx_sessions_title_unique",)

_INSTALLED = "SELECT 1 FROM pg_extension WHERE extname = 'citus'"
_DISTRIBUTED = ("SELECT 1 FROM pg_dist_partition "
                "WHERE logicalrelid = to_regclass(current_schema() || '.sessions')")
_FOREIGN_KEYS_ONTO_SESSIONS = """SELECT c.conrelid::regclass::text, c.conname
FROM pg_constraint AS c
WHERE c.contype = 'f' AND c.confrelid = to_regclass(current_schema() || '.sessions')"""

RESHAPE = (
    "DROP TRIGGER IF EXISTS hs_sessions_root ON sessions",
    "DROP FUNCTION IF EXISTS hs_sessions_root()",
    "UPDATE sessions SET root_session_id = id WHERE root_session_id IS NULL",
    "ALTER TABLE sessions ALTER COLUMN root_session_id SET NOT NULL",
    "DROP INDEX IF EXISTS idx_sessions_title_unique",
    "CREATE INDEX IF NOT EXISTS idx_sessions_title ON sessions (title)",
    "ALTER TABLE sessions DROP CONSTRAINT pk_sessions",
    "ALTER TABLE sessions ADD CONSTRAINT pk_sessions PRIMARY KEY (root_session_id, id)",
    'ALTER TABLE messages ADD COLUMN IF NOT EXISTS root_session_id TEXT COLLATE "C"',
    ("UPDATE messages AS m SET root_session_id = s.root_session_id FROM sessions AS s "
     "WHERE s.id = m.session_id AND m.root_session_id IS NULL"),
    "ALTER TABLE messages ALTER COLUMN root_session_id SET NOT NULL",
    "ALTER TABLE messages DROP CONSTRAINT pk_messages",
    "ALTER TABLE messages ADD CONSTRAINT pk_messages PRIMARY KEY (root_session_id, id)",
)
DISTRIBUTE = (
    "SELECT create_distributed_table('sessions', 'root_session_id')",
    ("SELECT create_distributed_table('messages', 'root_session_id', "
     "colocate_with => 'sessions')"),
)
# After both are distributed: Citus refuses a local table's key onto a distributed one.
LINK = (
    ("ALTER TABLE messages ADD CONSTRAINT fk_messages_session_id_sessions "
     "FOREIGN KEY (root_session_id, session_id) REFERENCES sessions (root_session_id, id)"),
)


def citus_installed(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.exec_driver_sql(_INSTALLED).first() is not None


def is_distributed(conn: Connection) -> bool:
    return conn.exec_driver_sql(_DISTRIBUTED).first() is not None


# Whether an engine's store is distributed is asked once, when its first connection opens
# (:func:`note`, before any statement is compiled), and kept on the engine's own dialect: the
# compiled-statement cache is per engine, so :class:`SameRoot` may render by it.
_FLAG = "hermes_distributed"


def note(dialect: Any, dbapi_conn: Any, _record: Any) -> None:
    """``first_connect`` of a PostgreSQL engine: remember whether its store is distributed."""
    cursor = dbapi_conn.cursor()
    try:
        # pg_dist_partition exists only where the extension is installed: ask in that order.
        found = cursor.execute(_INSTALLED).fetchone() is not None and cursor.execute(
            _DISTRIBUTED).fetchone() is not None
    finally:
        cursor.close()
        dbapi_conn.rollback()
    setattr(dialect, _FLAG, bool(found))


def distributed(conn: Connection) -> bool:
    """True when this connection's store has ``sessions`` and ``messages`` distributed: writes
    then supply ``root_session_id`` themselves, and a session's root never moves (Citus does
    not update a distribution column)."""
    return bool(getattr(conn.dialect, _FLAG, False))


class SameRoot(ColumnElement[bool]):
    """``messages`` rows correlated with their session by id alone, plus — on a distributed
    store only — by the root: Citus joins two distributed tables only on their distribution
    column, and only a distributed store's ``messages`` has ``root_session_id``. Elsewhere it
    is the constant true (the planners drop it)."""

    type = Boolean()
    inherit_cache = True
    _traverse_internals = [("message_session", InternalTraversal.dp_clauseelement),
                           ("session_root", InternalTraversal.dp_clauseelement)]

    def __init__(self, message_session: Any, session_root: Any) -> None:
        self.message_session = message_session
        self.session_root = session_root


@compiles(SameRoot)
def _same_root(element: SameRoot, compiler: SQLCompiler, **kw: Any) -> str:
    if not getattr(compiler.dialect, _FLAG, False):
        return "1 = 1"
    own = compiler.process(element.message_session, **kw)
    assert own.endswith("session_id"), own
    root = compiler.process(element.session_root, **kw)
    return f"{own[:-len('session_id')]}root_session_id = {root}"


def same_root(message_session: Any, session_root: Any) -> ColumnElement[bool]:
    return SameRoot(message_session, session_root)


def explains(diff: Any) -> bool:
    """True for a difference between the models and a distributed store that the reshape made
    (``hermes-store check`` reports drift, not these)."""
    return all(_reshaped(item) for item in (diff if isinstance(diff, list) else [diff]))


def _reshaped(item: Any) -> bool:
    kind = item[0]
    if kind in ("add_fk", "remove_fk"):
        referred: str = item[1].referred_table.name
        return referred == "sessions"
    if kind in ("add_index", "remove_index"):
        return item[1].name in (*DROPPED_INDEXES, "idx_sessions_title")
    if kind == "modify_nullable":
        return item[2] in DISTRIBUTED and item[3] == "root_session_id"
    if kind == "remove_column":
        column_name: str = item[3].name
        return item[2] == "messages" and column_name == "root_session_id"
    return False


def statements(conn: Connection) -> list[str]:
    """What :func:`distribute` runs on this store: the foreign keys onto ``sessions`` first
    (each names its own table), then the reshaping and the distribution."""
    drops = [f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'
             for table, name in conn.exec_driver_sql(_FOREIGN_KEYS_ONTO_SESSIONS)]
    return [*drops, *RESHAPE, *DISTRIBUTE, *LINK]


def distribute(conn: Connection) -> list[str]:
    """Reshape and distribute ``sessions`` and ``messages`` in the caller's transaction, once;
    returns the statements run (none when the store is not on Citus or already distributed)."""
    if not citus_installed(conn) or is_distributed(conn):
        return []
    done = statements(conn)
    for statement in done:
        conn.exec_driver_sql(statement)
    # From now on this engine's statements take their distributed form.
    setattr(conn.dialect, _FLAG, True)
    conn.engine.clear_compiled_cache()
    return done
