"""The schema catalog: every question about what exists in the store, answered in one place.

Only this module reads the system catalogs (``sqlite_master``, ``pg_catalog``, and SQLAlchemy's
reflection, which reads them); tests/test_layers.py holds that. Each question takes the caller's
``Connection`` (inside the caller's transaction, never committing) and answers with plain Python
values: names, tuples, a small frozen dataclass. Where both backends have an answer the callers
do not choose; what only PostgreSQL has (relation sizes, index validity) and what only SQLite has
(FTS5 shadow tables, duplicate catalog rows of a damaged file) are grouped at the end.

A few questions also accept a plain ``sqlite3.Connection``: ``recover`` reads a scratch copy
without the engine, and ``repair`` must read a file whose schema no longer parses.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from hermes_store.db import names
from hermes_store.db.fts5_ddl import Fts5Options as Fts5Options  # re-exported
from hermes_store.db.fts5_ddl import fts5_options as fts5_options  # re-exported
from hermes_store.db.sqlite_driver import dbapi_of

# Our FTS5 indexes, live and retired (an adopted file's inline ones, renamed aside). Only these
# names are treated as ours: a user table called "app_config" is never touched, nor the agent's
# own indexes (AGENT_SEARCH_OBJECTS).
FTS_INDEXES = names.FTS_INDEXES
RETIRED_FTS_INDEXES = names.RETIRED_FTS_INDEXES
FTS_TABLES = FTS_INDEXES + RETIRED_FTS_INDEXES
# The names our indexes had before revision 0022 (they are the agent's): a file upgraded from
# then may hold their orphaned shadow tables, which block a CREATE of the same name.
FORMER_FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk",
                     "messages_fts_old", "messages_fts_trigram_old", "messages_fts_cjk_old")
# Each live index by its role: the word index, the trigram index, the CJK bigram index.
WORD_FTS, TRIGRAM_FTS, CJK_FTS = FTS_INDEXES
FTS_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")
# The CJK side table: the bigram index is in use once it exists.
CJK_SIDE_TABLE = names.CJK_SIDE
# The view over the two ``state_meta`` markers of an unfinished backfill (revisions 0013/0014).
BACKFILL_WINDOW_VIEW = names.BACKFILL_WINDOW

# The agent's own search objects (docs/mixed-fleets.md#names-of-our-own): it creates them by
# these names on every open, and the CJK ones only where its native tokenizer loads. None is ours.
AGENT_WORD_OBJECTS = ("messages_fts", "messages_fts_src", "messages_fts_insert",
                      "messages_fts_delete", "messages_fts_update")
AGENT_TRIGRAM_OBJECTS = ("messages_fts_trigram", "messages_fts_trigram_src",
                         "messages_fts_trigram_insert", "messages_fts_trigram_delete",
                         "messages_fts_trigram_update")
AGENT_CJK_INDEX = "messages_fts_cjk"
AGENT_CJK_VIEW = "messages_fts_cjk_src"
AGENT_CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete",
                      "messages_fts_cjk_update")
AGENT_CJK_TOKENIZER = "cjk_unicode61"
AGENT_SEARCH_OBJECTS = (AGENT_WORD_OBJECTS + AGENT_TRIGRAM_OBJECTS
                        + (AGENT_CJK_INDEX, AGENT_CJK_VIEW) + AGENT_CJK_TRIGGERS)


def is_ours(name: str | None) -> bool:
    """Whether ``name`` is one of our derived objects (never one of the agent's)."""
    return names.is_ours(name)

if TYPE_CHECKING:  # SQLAlchemy loads when a server or a reflection asks (inspect below): a
    # file's reading commands answer these questions through db.raw without it
    from sqlalchemy import Connection, Table

    Reader = Connection | sqlite3.Connection


def inspect(conn: Any) -> Any:
    """SQLAlchemy's inspector for ``conn``."""
    from sqlalchemy import inspect as inspector

    return inspector(conn)

_OBJECTS = "SELECT type, name, tbl_name, sql FROM sqlite_master"
_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
_RELATIONS = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
_HAS = "SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?"
_TABLE_SQL = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?"
_TABLE_DEFINITIONS = "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
_TRIGGERS = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
# The table-valued form binds the name: no identifier is ever spliced into the text.
_COLUMNS = "SELECT name, type FROM pragma_table_info(?)"
_COLUMN_DEFINITIONS = 'SELECT name, type, "notnull", dflt_value FROM pragma_table_info(?)'
_FOREIGN_KEYS = 'SELECT "table", "from", on_delete FROM pragma_foreign_key_list(?)'
_WINDOW = f"SELECT lo, hi FROM {BACKFILL_WINDOW_VIEW}"
_FTS5_SQL = re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE\b.*\bUSING\s+fts5\b",
                       re.IGNORECASE | re.DOTALL)


class SchemaObject(NamedTuple):
    """One catalog entry: ``type`` is table, view, index or trigger; ``table`` the one it is on."""

    type: str
    name: str
    table: str
    sql: str


class Column(NamedTuple):
    name: str
    type: str


class ColumnDefinition(NamedTuple):
    """A SQLite column as declared: ``default`` is the default's SQL text, ``None`` if none."""

    name: str
    type: str
    not_null: bool
    default: str | None


class ForeignKey(NamedTuple):
    """One column of a SQLite foreign key: ``column`` of this table refers to ``table``."""

    table: str
    column: str
    on_delete: str


def _rows(conn: Reader, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    if isinstance(conn, sqlite3.Connection):
        return conn.execute(sql, tuple(params)).fetchall()
    if params:
        return list(conn.exec_driver_sql(sql, tuple(params)))
    return list(conn.exec_driver_sql(sql))


# Search objects revisions add beside the modelled columns (FTS5 tables and their shadow tables on
# SQLite; tsvector columns and their indexes on PostgreSQL): derived data, never drift, never
# part of a message dict, whichever way they are reflected.
DERIVED_NAME_PREFIXES = (names.PREFIX, "messages_fts", "messages_cjk", "fts_", "search_",
                         "idx_messages_search", "idx_messages_fts", "idx_messages_trgm")


def is_derived_name(name: str | None) -> bool:
    return bool(name) and str(name).startswith(DERIVED_NAME_PREFIXES)


# --------------------------------------------------------------------------- what exists


def objects(conn: Reader) -> list[SchemaObject]:
    """Every table, view, index and trigger, with the statement that created it (``""`` for
    the automatic indexes, which have none)."""
    return [SchemaObject(r[0], r[1], r[2], r[3] or "") for r in _rows(conn, _OBJECTS)]


def _server(conn: Reader) -> bool:
    return not isinstance(conn, sqlite3.Connection) and conn.dialect.name != "sqlite"


# Relations of the current schema that an extension's script created (pg_depend 'e'): Citus
# puts views such as citus_tables in public. They belong to the extension, not to the store.
_EXTENSION_MEMBERS = """SELECT c.relname FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_depend AS d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
WHERE n.nspname = current_schema()"""


def extension_members(conn: Reader) -> set[str]:
    """Names of the current schema's relations owned by an extension (none on SQLite)."""
    return {r[0] for r in _rows(conn, _EXTENSION_MEMBERS)} if _server(conn) else set()


def tables(conn: Reader) -> set[str]:
    if _server(conn):
        return set(inspect(conn).get_table_names()) - extension_members(conn)
    return {r[0] for r in _rows(conn, _TABLES)}


def relations(conn: Reader) -> set[str]:
    """Names of the tables and views (an extension's own relations are not the store's)."""
    if _server(conn):
        found = inspect(conn)
        return ((set(found.get_table_names()) | set(found.get_view_names()))
                - extension_members(conn))
    return {r[0] for r in _rows(conn, _RELATIONS)}


def has_object(conn: Reader, kind: str, name: str) -> bool:
    return bool(_rows(conn, _HAS, (kind, name)))


def has_table(conn: Reader, name: str) -> bool:
    if _server(conn):
        return bool(inspect(conn).has_table(name))
    return has_object(conn, "table", name)


def table_sql(conn: Reader, name: str) -> str | None:
    """The ``CREATE`` statement of table ``name``, or ``None`` when there is no such table."""
    rows = _rows(conn, _TABLE_SQL, (name,))
    return (rows[0][0] or "") if rows else None


def table_definitions(conn: Reader) -> dict[str, str]:
    """``{table: CREATE statement}`` for every table."""
    return {r[0]: r[1] or "" for r in _rows(conn, _TABLE_DEFINITIONS)}


def triggers(conn: Reader) -> list[tuple[str, str]]:
    """``(name, CREATE statement)`` of every trigger (SQLite)."""
    return [(r[0], r[1] or "") for r in _rows(conn, _TRIGGERS)]


def columns(conn: Reader, table: str) -> list[Column]:
    """The columns of ``table`` (or view) in order, with their declared types; ``[]`` if absent."""
    if _server(conn):
        if not has_table(conn, table):
            return []
        return [Column(c["name"], str(c["type"])) for c in inspect(conn).get_columns(table)]
    return [Column(r[0], r[1] or "") for r in _rows(conn, _COLUMNS, (table,))]


def column_definitions(conn: Reader, table: str) -> list[ColumnDefinition]:
    """The columns of SQLite ``table`` in order, as declared (what a rebuild must carry over)."""
    return [ColumnDefinition(r[0], r[1] or "", bool(r[2]), r[3])
            for r in _rows(conn, _COLUMN_DEFINITIONS, (table,))]


def foreign_keys(conn: Reader, table: str) -> list[ForeignKey]:
    """The foreign-key columns of SQLite ``table`` (``[]`` if it has none or does not exist)."""
    return [ForeignKey(r[0], r[1], r[2]) for r in _rows(conn, _FOREIGN_KEYS, (table,))]


# --------------------------------------------------------------------------- reflection

# What ``copy`` needs to rebuild a table on another backend: the columns with SQLAlchemy types
# (``computed`` marks a generated one), the key, and a Core table to read or write through.


def column_details(conn: Connection, table: str) -> dict[str, dict[str, Any]]:
    """``{column: SQLAlchemy's reflected column}`` of ``table``, in order."""
    return {c["name"]: dict(c) for c in inspect(conn).get_columns(table)}


def primary_key(conn: Connection, table: str) -> list[str]:
    return list(inspect(conn).get_pk_constraint(table).get("constrained_columns") or [])


# SQLAlchemy cannot reflect an index over an expression and says so each time it reads the
# table; the agent's ``idx_sessions_effective_activity`` is one. No question asked here involves
# such an index (drift compares the models' indexes, a copy recreates none), so the warning is
# silenced where we reflect, and only that one.
_EXPRESSION_INDEX = "Skipped unsupported reflection of expression-based index"


@contextlib.contextmanager
def reflecting() -> Iterator[None]:
    """Reflection without the expression-index warning (for callers that reflect through
    SQLAlchemy or Alembic themselves)."""
    with warnings.catch_warnings():
        from sqlalchemy.exc import SAWarning

        warnings.filterwarnings("ignore", message=_EXPRESSION_INDEX, category=SAWarning)
        yield


def reflect(conn: Connection, table: str) -> Table:
    """``table`` as a Core table of its own metadata, read from the catalog."""
    with reflecting():
        from sqlalchemy import MetaData, Table

        return Table(table, MetaData(), autoload_with=conn)


def table_shapes(conn: Connection, names: Iterable[str]) -> dict[str, tuple[set[str], set[str]]]:
    """``{table: (column names, index names)}`` of those of ``names`` that exist, each kind read
    for all of them at once (on a server, one catalog query instead of one per table)."""
    found = inspect(conn)
    present = sorted(set(names) & set(found.get_table_names()))
    if not present:
        return {}
    with reflecting():
        columns = found.get_multi_columns(filter_names=present)
        indexes = found.get_multi_indexes(filter_names=present)
    return {key[1]: ({c["name"] for c in cols}, {i["name"] for i in indexes.get(key, [])})
            for key, cols in columns.items()}


# --------------------------------------------------------------------------- the search layout


@dataclass(frozen=True)
class SearchLayout:
    """Which search indexes the store has, and the backfill window the retired ones still serve.

    ``bigram`` is the CJK side table (its FTS5 index comes with it); ``window`` is ``(P, H)``:
    ids in ``(P, H]`` are not in the new indexes yet. ``glued`` is false only when the store
    records that no row of the bigram index holds Latin glued to CJK (``names.CJK_GLUED_LATIN``).
    """

    word: bool
    trigram: bool
    bigram: bool
    retired_word: bool
    retired_trigram: bool
    window: tuple[int, int] | None
    glued: bool = True


_LAYOUT_NAMES = (names.WORD_INDEX, names.TRIGRAM_INDEX, CJK_SIDE_TABLE,
                 names.RETIRED_WORD_INDEX, names.RETIRED_TRIGRAM_INDEX)
# One statement, run before every search: the index tables present, whether the window view
# exists, and whether a window is recorded at all (nearly always not, so the view is rarely read).
_LAYOUT = f"""
SELECT (SELECT json_group_array(name) FROM sqlite_master
        WHERE (type = 'table' AND name IN ({", ".join(f"'{t}'" for t in _LAYOUT_NAMES)}))
           OR (type = 'view' AND name = '{BACKFILL_WINDOW_VIEW}')),
       EXISTS (SELECT 1 FROM state_meta WHERE key = '{names.BACKFILL_HIGH_WATER}'),
       (SELECT value FROM state_meta WHERE key = '{names.CJK_GLUED_LATIN}')"""


# PostgreSQL (revision 0018): the word and CJK tsvector columns and the trigram index. A
# PostgreSQL store never has a backfill window or retired indexes.
_PG_LAYOUT = f"""
SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('messages')
               AND attname = '{names.PG_WORD_COLUMN}' AND NOT attisdropped),
       to_regclass('{names.PG_TRIGRAM_INDEX}') IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('messages')
               AND attname = '{names.PG_CJK_COLUMN}' AND NOT attisdropped)"""
_PG_LAYOUT_KEY = "hermes_search_layout"


def search_layout(conn: Connection) -> SearchLayout:
    """The search indexes present and the backfill window, read with the fewest statements.

    Runs on the DB-API cursor of ``conn`` (same transaction): this is read once per search, and
    SQLAlchemy's per-statement machinery would cost as much as the statement.
    """
    if _server(conn):
        # A server store's complete layout is remembered per connection: it comes with revision
        # 0018 and only a downgrade takes it away, and one round trip less was a tenth of a
        # "newest first" search.
        known = conn.info.get(_PG_LAYOUT_KEY)
        if isinstance(known, SearchLayout):
            return known
        driver = conn.connection.driver_connection
        if driver is None:
            raise TypeError("the connection has no driver connection (it was closed)")
        cursor = driver.cursor()
        try:
            word, trigram, bigram = cursor.execute(_PG_LAYOUT).fetchone()
        finally:
            cursor.close()
        found = SearchLayout(bool(word), bool(trigram), bool(bigram), False, False, None)
        if word and trigram and bigram:
            conn.info[_PG_LAYOUT_KEY] = found
        return found
    cursor = dbapi_of(conn.connection).cursor()
    try:
        names_json, recorded, glued = cursor.execute(_LAYOUT).fetchone()
    finally:
        cursor.close()
    present = frozenset(json.loads(names_json or "[]"))
    window = _read_window(conn) if recorded and BACKFILL_WINDOW_VIEW in present else None
    return SearchLayout(names.WORD_INDEX in present, names.TRIGRAM_INDEX in present,
                        CJK_SIDE_TABLE in present, names.RETIRED_WORD_INDEX in present,
                        names.RETIRED_TRIGRAM_INDEX in present, window, glued != "0")


def backfill_window(conn: Connection) -> tuple[int, int] | None:
    """``(P, H)`` while rows are still to be backfilled, else ``None``.

    Before revision 0014 there is no view and so no window. Any other failure surfaces: a window
    that reads as closed would let ``optimize_storage`` drop the retired indexes still serving it.
    """
    if not has_object(conn, "view", BACKFILL_WINDOW_VIEW):
        return None
    return _read_window(conn)


def _read_window(conn: Connection) -> tuple[int, int] | None:
    rows = _rows(conn, _WINDOW)
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def in_backfill_window(row_id: str) -> str:
    """SQL that is true when the id expression ``row_id`` lies inside the backfill window: for
    statements that must leave those rows to the backfill, read where they run."""
    return (f"EXISTS (SELECT 1 FROM {BACKFILL_WINDOW_VIEW} "
            f"WHERE {row_id} > lo AND {row_id} <= hi)")


# --------------------------------------------------------------------------- PostgreSQL: locale

# pg_trgm takes only characters the database's LC_CTYPE calls alphanumeric into its trigrams;
# under C/POSIX that is ASCII alone, so CJK text gives no trigram and substring search on it
# finds nothing through the index.
_CTYPE = "SELECT datctype FROM pg_database WHERE datname = current_database()"
_BLIND_CTYPES = ("c", "posix")


def database_ctype(conn: Connection) -> str | None:
    """The LC_CTYPE of a PostgreSQL database (``None`` on SQLite)."""
    if not _server(conn):
        return None
    rows = _rows(conn, _CTYPE)
    return str(rows[0][0]) if rows else None


def trigram_blind_to_cjk(ctype: str | None) -> bool:
    """True when ``ctype`` (a database's LC_CTYPE) makes pg_trgm ignore CJK characters."""
    return ctype is not None and ctype.strip().lower() in _BLIND_CTYPES


# --------------------------------------------------------------------------- PostgreSQL: upkeep

_PG_DATABASE_BYTES = "SELECT pg_database_size(current_database())"
# Relations of the current schema: tables with their own and TOAST bytes, and indexes.
_PG_RELATION_SIZES = """
SELECT c.relname, c.relkind, COALESCE(t.relname, c.relname) AS owner,
       pg_relation_size(c.oid)
       + CASE WHEN c.relkind = 'r' AND c.reltoastrelid <> 0
              THEN pg_total_relation_size(c.reltoastrelid) ELSE 0 END AS bytes
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = current_schema()
LEFT JOIN pg_index AS i ON i.indexrelid = c.oid
LEFT JOIN pg_class AS t ON t.oid = i.indrelid
WHERE c.relkind IN ('r', 'i')"""
# A CREATE INDEX CONCURRENTLY that failed leaves an index that is neither valid nor ready.
_PG_BROKEN_INDEXES = """
SELECT c.relname, t.relname
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace AND n.nspname = current_schema()
WHERE NOT (i.indisvalid AND i.indisready) AND t.relname = ANY(%s)
ORDER BY c.relname"""
_PG_EXTENSION_AVAILABLE = "SELECT 1 FROM pg_available_extensions WHERE name = %s"
_PG_GIN_INDEXES = ("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                   "AND indexdef LIKE '%USING gin%' ORDER BY indexname")


class RelationSize(NamedTuple):
    """A table (``kind`` "table", a TOAST table counted as its owner's) or an index."""

    name: str
    kind: str
    table: str
    bytes: int


def database_bytes(conn: Connection) -> int:
    rows = _rows(conn, _PG_DATABASE_BYTES)
    return int(rows[0][0] or 0) if rows else 0


def relation_sizes(conn: Connection) -> list[RelationSize]:
    """Bytes of every table and index of the current schema."""
    return [RelationSize(r[0], "index" if r[1] == "i" else "table", r[2], int(r[3] or 0))
            for r in _rows(conn, _PG_RELATION_SIZES)]


def broken_indexes(conn: Connection, tables: Sequence[str]) -> list[tuple[str, str]]:
    """``(index, table)`` of the indexes on ``tables`` that are not valid and ready."""
    return [(r[0], r[1]) for r in _rows(conn, _PG_BROKEN_INDEXES, (list(tables),))]


def extension_available(conn: Connection, name: str) -> bool:
    return bool(_rows(conn, _PG_EXTENSION_AVAILABLE, (name,)))


def gin_indexes(conn: Connection) -> list[str]:
    """Names of the current schema's GIN indexes, sorted (a server's search indexes)."""
    # Read through text(), which escapes the LIKE pattern's % for the driver's paramstyle.
    from sqlalchemy import text

    return [str(r[0]) for r in conn.execute(text(_PG_GIN_INDEXES))]


# --------------------------------------------------------------------------- SQLite: FTS5 tables


def is_fts5(sql: str) -> bool:
    """True for the ``CREATE`` statement of an FTS5 virtual table."""
    return _FTS5_SQL.match(sql) is not None


def fts5_in(found: Iterable[SchemaObject]) -> list[str]:
    """Names of the FTS5 tables among ``found`` (any FTS5 table, not only ours), sorted."""
    return sorted(o.name for o in found if o.type == "table" and is_fts5(o.sql))


def fts5_tables(conn: Reader) -> list[str]:
    """Names of every FTS5 table of the store, sorted."""
    return fts5_in(objects(conn))


def shadow_tables(index: str) -> tuple[str, ...]:
    """The names FTS5 gives the shadow tables of ``index`` (not all exist for every index)."""
    return tuple(index + suffix for suffix in FTS_SHADOW_SUFFIXES)


def orphan_fts_shadows(table_names: Iterable[str]) -> list[str]:
    """Shadow tables of our indexes whose index itself is gone, among ``table_names``.

    An interrupted DROP (or ``.recover``) leaves them behind; every later ``CREATE VIRTUAL
    TABLE`` of that index then fails with "already exists".
    """
    present = set(table_names)
    return [shadow for base in FTS_TABLES + FORMER_FTS_TABLES if base not in present
            for shadow in shadow_tables(base) if shadow in present]


def fts_owned(definitions: dict[str, str]) -> set[str]:
    """Virtual tables, and the shadow tables of any FTS index, among ``{table: CREATE}``: what a
    fresh store derives or recreates rather than holding as data."""
    virtual = {n for n, sql in definitions.items()
               if sql.lstrip().upper().startswith("CREATE VIRTUAL")}
    shadows = {s for base in virtual | set(FTS_TABLES + FORMER_FTS_TABLES)
               for s in shadow_tables(base)}
    return virtual | (shadows & set(definitions))


# --------------------------------------------------------------------------- SQLite: the agent's CJK


def agent_cjk_objects(conn: Reader) -> list[SchemaObject]:
    """The agent's own CJK search objects present in the store (its triggers first, then its
    view and index): created by the agent only where its native tokenizer loads."""
    found = {(o.type, o.name): o for o in objects(conn)}
    wanted = [("trigger", t) for t in AGENT_CJK_TRIGGERS] + [("view", AGENT_CJK_VIEW)]
    index = found.get(("table", AGENT_CJK_INDEX))
    present = [found[w] for w in wanted if w in found]
    if index is not None and is_agent_cjk_index(index.sql):
        present.append(index)
    return present


def is_agent_cjk_index(sql: str) -> bool:
    """Whether ``messages_fts_cjk``'s statement is the agent's index (its tokenizer, or its
    content view), not the bigram index ours had under that name before revision 0022."""
    return AGENT_CJK_TOKENIZER in sql or f"'{AGENT_CJK_VIEW}'" in sql


def forget_fts5_table(conn: Connection, name: str) -> None:
    """Drop the FTS5 table ``name`` whose tokenizer this connection cannot load (``DROP TABLE``
    must connect to it): its catalog row goes, then its shadow tables (inside the caller's
    transaction)."""
    conn.exec_driver_sql("PRAGMA writable_schema = ON")
    conn.exec_driver_sql("DELETE FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    # RESET also reloads the schema: this connection forgets the table at once.
    conn.exec_driver_sql("PRAGMA writable_schema = RESET")
    for shadow in shadow_tables(name):
        conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{shadow}"')


# --------------------------------------------------------------------------- SQLite: damaged files

_DUPLICATES = ("SELECT type, name, COUNT(*) FROM sqlite_master GROUP BY type, name "
               "HAVING COUNT(*) > 1")
_DROP_DUPLICATE = ("DELETE FROM sqlite_master WHERE type = ? AND name = ? AND rowid > "
                   "(SELECT MIN(rowid) FROM sqlite_master WHERE type = ? AND name = ?)")


def duplicate_entries(con: sqlite3.Connection) -> list[tuple[str, str, int]]:
    """``(type, name, count)`` of every object the catalog lists more than once.

    ``con`` must have ``writable_schema`` on: with a duplicate row every ordinary statement
    fails at schema parse.
    """
    return [(r[0], r[1], int(r[2])) for r in con.execute(_DUPLICATES)]


def drop_duplicate_entries(con: sqlite3.Connection, kind: str, name: str) -> None:
    """Keep the first catalog row of ``(kind, name)`` and delete the others (``writable_schema``
    on, inside the caller's transaction)."""
    con.execute(_DROP_DUPLICATE, (kind, name, kind, name))


_DROP_TABLE_ENTRY = "DELETE FROM sqlite_master WHERE type = 'table' AND name = ?"


def drop_table_entry(con: sqlite3.Connection, name: str) -> None:
    """Delete the catalog row of table ``name`` (``writable_schema`` on, inside the caller's
    transaction): how an FTS5 index that refuses to load is taken out, since ``DROP TABLE``
    must load it first. Its shadow tables are then orphans, dropped as such."""
    con.execute(_DROP_TABLE_ENTRY, (name,))


_DROP_SEARCH_ENTRIES = (r"DELETE FROM sqlite_master WHERE name LIKE 'messages\_fts%' ESCAPE '\' "
                        r"OR name LIKE 'hs\_%' ESCAPE '\'")


def drop_search_entries(con: sqlite3.Connection) -> None:
    """Delete every ``messages_fts*`` and ``hs_*`` catalog row (the indexes, their shadow tables, views and
    triggers) of a file whose search layout no longer parses (``writable_schema`` on, inside the
    caller's transaction); a VACUUM then frees their pages."""
    con.execute(_DROP_SEARCH_ENTRIES)
