"""The derived objects of the head layout: search views, FTS5 indexes, CJK side tables, triggers.

The library carries its own copy of this DDL on purpose. Revisions are history: they record how
a store got here, may be superseded by later ones and must never be imported by the library.
``repair`` needs the *live* definition to put back an index, view or trigger that was dropped
(by hand, by another program, by a half-finished upgrade elsewhere). tests/test_layout_definition
compares every statement here with what a fresh upgrade to head creates, so a revision that
changes the layout without this module fails the suite.

Everything here is derived from ``messages`` and ``sessions``: recreating it loses nothing, and
the caller rebuilds the indexes afterwards (``maintenance.rebuild_indexes``), in the same
transaction. Only objects the store lacks are created; nothing that exists is dropped.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from sqlalchemy import Connection

from hermes_store.content import MARKER_BYTES, marker_sql
from hermes_store.db import catalog, engine

# The trigram tokenizer ships with FTS5 from SQLite 3.34; revision 0015 leaves the trigram
# objects out on an older runtime, and substring search falls back to LIKE there.
TRIGRAM_AVAILABLE = sqlite3.sqlite_version_info >= (3, 34, 0)

_OUTSIDE_WINDOW = "NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE {id} > lo AND {id} <= hi)"

# --------------------------------------------------------------------------- views (0014, 0015)

_JSON = f"CAST(substr(CAST(m.content AS BLOB), {len(MARKER_BYTES) + 1}) AS TEXT)"
_PARTS = f"""COALESCE((
            SELECT group_concat(CASE
                WHEN j.type = 'text' THEN j.value
                WHEN j.type = 'object'
                     AND COALESCE(json_extract(j.value, '$.type'), 'text')
                         IN ('text', 'input_text', 'output_text')
                     AND json_type(j.value, '$.text') = 'text'
                THEN json_extract(j.value, '$.text') END, ' ')
            FROM json_each(CASE json_type({_JSON}) WHEN 'array' THEN {_JSON}
                                ELSE json_array(json({_JSON})) END) AS j), '')"""

SEARCH_TEXT_VIEW = f"""CREATE VIEW messages_search_text AS
SELECT m.id, m.session_id, m.role, m.tool_name, m.tool_calls,
    CASE
        WHEN {marker_sql('m.content', '<>')} THEN m.content
        WHEN json_valid({_JSON}) THEN {_PARTS}
        ELSE ''
    END AS text
FROM messages AS m"""
BACKFILL_WINDOW_VIEW = """CREATE VIEW fts_backfill_window AS
SELECT CAST(p.value AS INTEGER) AS lo, CAST(h.value AS INTEGER) AS hi
FROM state_meta AS h JOIN state_meta AS p ON p.key = 'fts_rebuild_progress'
WHERE h.key = 'fts_rebuild_high_water'"""
WORD_SOURCE_VIEW = """CREATE VIEW messages_fts_src AS
SELECT id,
    CASE WHEN role = 'tool' THEN substr(COALESCE(text, ''), 1, 8192) ELSE text END AS content,
    tool_name, tool_calls
FROM messages_search_text"""
SEARCH_SCOPE_VIEW = """CREATE VIEW messages_search_scope AS
SELECT t.id, t.session_id, t.text, t.tool_name, t.tool_calls
FROM messages_search_text AS t JOIN sessions AS s ON s.id = t.session_id
WHERE t.role IS NOT 'tool' AND COALESCE(s.source, '') NOT IN ('cron', 'subagent')"""
TRIGRAM_SOURCE_VIEW = """CREATE VIEW messages_fts_trigram_src AS
SELECT id, text AS content, tool_name FROM messages_search_scope"""

# --------------------------------------------------------------------------- word index (0014)
# The insert, delete and after-update triggers of both indexes carry the agent's own trigger
# names (revision 0019): the agent's store runs ``CREATE TRIGGER IF NOT EXISTS
# messages_fts_insert …`` on every open, and finding the name taken is what keeps it from
# adding a second writer to our index (docs/mixed-fleets.md).

WORD_INDEX = """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, tool_name, tool_calls,
    content='messages_fts_src', content_rowid='id'
)"""
WORD_AI = """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE new.id > lo AND new.id <= hi)
BEGIN
    INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
    SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = new.id;
END"""
WORD_BD = """CREATE TRIGGER messages_fts_delete BEFORE DELETE ON messages
WHEN NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE old.id > lo AND old.id <= hi)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
    SELECT 'delete', id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = old.id;
END"""
WORD_BU = """CREATE TRIGGER messages_fts_bu
BEFORE UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role OR old.id IS NOT new.id)
  AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE old.id > lo AND old.id <= hi)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
    SELECT 'delete', id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = old.id;
END"""
WORD_AU = """CREATE TRIGGER messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role OR old.id IS NOT new.id)
  AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE new.id > lo AND new.id <= hi)
BEGIN
    INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
    SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = new.id;
END"""

# --------------------------------------------------------------------------- trigram index (0015)

_TRIGRAM_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                    "OR old.role IS NOT new.role OR old.session_id IS NOT new.session_id "
                    "OR old.id IS NOT new.id)")
_TRIGRAM_REMOVE_SESSION = """
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', t.id, t.content, t.tool_name FROM messages_fts_trigram_src AS t
    WHERE t.id IN (SELECT id FROM messages WHERE session_id = old.id)
      AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE t.id > lo AND t.id <= hi);"""

TRIGRAM_INDEX = """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content, tool_name,
    content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram'
)"""
TRIGRAM_AI = f"""CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id = new.id;
END"""
TRIGRAM_BD = f"""CREATE TRIGGER messages_fts_trigram_delete BEFORE DELETE ON messages
WHEN old.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', id, content, tool_name FROM messages_fts_trigram_src WHERE id = old.id;
END"""
TRIGRAM_BU = f"""CREATE TRIGGER messages_fts_trigram_bu
BEFORE UPDATE OF content, tool_name, role, session_id, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', id, content, tool_name FROM messages_fts_trigram_src WHERE id = old.id;
END"""
TRIGRAM_AU = f"""CREATE TRIGGER messages_fts_trigram_update
AFTER UPDATE OF content, tool_name, role, session_id, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id = new.id;
END"""
TRIGRAM_SESSION_BU = f"""CREATE TRIGGER messages_fts_trigram_session_bu
BEFORE UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN{_TRIGRAM_REMOVE_SESSION}
END"""
TRIGRAM_SESSION_AU = """CREATE TRIGGER messages_fts_trigram_session_au
AFTER UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT t.id, t.content, t.tool_name FROM messages_fts_trigram_src AS t
    WHERE t.id IN (SELECT id FROM messages WHERE session_id = new.id)
      AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE t.id > lo AND t.id <= hi);
END"""
TRIGRAM_SESSION_BD = f"""CREATE TRIGGER messages_fts_trigram_session_bd BEFORE DELETE ON sessions
BEGIN{_TRIGRAM_REMOVE_SESSION}
END"""

# --------------------------------------------------------------------- CJK bigram index (0016)

_CJK_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role "
                "OR old.session_id IS NOT new.session_id OR old.id IS NOT new.id)")

CJK_SIDE_TABLE = ("CREATE TABLE messages_cjk "
                  "(id INTEGER PRIMARY KEY, text TEXT NOT NULL, calls TEXT)")
CJK_PENDING_TABLE = "CREATE TABLE messages_cjk_pending (id INTEGER PRIMARY KEY)"
CJK_INDEX = """CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(
    text, calls, content='messages_cjk', content_rowid='id'
)"""
CJK_AI = """CREATE TRIGGER messages_cjk_ai AFTER INSERT ON messages_cjk BEGIN
    INSERT INTO messages_fts_cjk (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END"""
CJK_AD = """CREATE TRIGGER messages_cjk_ad AFTER DELETE ON messages_cjk BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
END"""
CJK_AU = """CREATE TRIGGER messages_cjk_au AFTER UPDATE ON messages_cjk BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
    INSERT INTO messages_fts_cjk (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END"""
CJK_PENDING_AI = f"""CREATE TRIGGER messages_cjk_pending_ai AFTER INSERT ON messages
WHEN new.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT OR IGNORE INTO messages_cjk_pending (id) VALUES (new.id);
END"""
CJK_PENDING_AU = f"""CREATE TRIGGER messages_cjk_pending_au
AFTER UPDATE OF content, tool_name, tool_calls, role, session_id, id ON messages
WHEN {_CJK_CHANGED}
BEGIN
    DELETE FROM messages_cjk WHERE id = old.id;
    DELETE FROM messages_cjk_pending WHERE id = old.id;
    INSERT OR IGNORE INTO messages_cjk_pending (id)
    SELECT new.id WHERE new.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="new.id")};
END"""
CJK_MESSAGES_AD = """CREATE TRIGGER messages_cjk_ad_messages AFTER DELETE ON messages BEGIN
    DELETE FROM messages_cjk WHERE id = old.id;
    DELETE FROM messages_cjk_pending WHERE id = old.id;
END"""
CJK_SESSION_AU = f"""CREATE TRIGGER messages_cjk_session_au
AFTER UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN
    DELETE FROM messages_cjk WHERE id IN (SELECT id FROM messages WHERE session_id = old.id);
    INSERT OR IGNORE INTO messages_cjk_pending (id)
    SELECT m.id FROM messages AS m
    WHERE m.session_id = new.id AND m.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="m.id")};
END"""
CJK_SESSION_BD = """CREATE TRIGGER messages_cjk_session_bd BEFORE DELETE ON sessions BEGIN
    DELETE FROM messages_cjk WHERE id IN (SELECT id FROM messages WHERE session_id = old.id);
END"""


@dataclass(frozen=True)
class LayoutObject:
    """One schema object: its ``sqlite_master`` type and name, and the statement creating it."""

    type: str
    name: str
    sql: str
    trigram: bool = False


# Dependency order: views read views, the CJK index reads its side table, triggers write to
# the indexes and read the views.
OBJECTS: tuple[LayoutObject, ...] = (
    LayoutObject("view", "messages_search_text", SEARCH_TEXT_VIEW),
    LayoutObject("view", "fts_backfill_window", BACKFILL_WINDOW_VIEW),
    LayoutObject("view", "messages_fts_src", WORD_SOURCE_VIEW),
    LayoutObject("view", "messages_search_scope", SEARCH_SCOPE_VIEW),
    LayoutObject("view", "messages_fts_trigram_src", TRIGRAM_SOURCE_VIEW, trigram=True),
    LayoutObject("table", "messages_cjk", CJK_SIDE_TABLE),
    LayoutObject("table", "messages_cjk_pending", CJK_PENDING_TABLE),
    LayoutObject("table", "messages_fts", WORD_INDEX),
    LayoutObject("table", "messages_fts_trigram", TRIGRAM_INDEX, trigram=True),
    LayoutObject("table", "messages_fts_cjk", CJK_INDEX),
    LayoutObject("trigger", "messages_fts_insert", WORD_AI),
    LayoutObject("trigger", "messages_fts_delete", WORD_BD),
    LayoutObject("trigger", "messages_fts_bu", WORD_BU),
    LayoutObject("trigger", "messages_fts_update", WORD_AU),
    LayoutObject("trigger", "messages_fts_trigram_insert", TRIGRAM_AI,
                 trigram=True),
    LayoutObject("trigger", "messages_fts_trigram_delete", TRIGRAM_BD,
                 trigram=True),
    LayoutObject("trigger", "messages_fts_trigram_bu", TRIGRAM_BU, trigram=True),
    LayoutObject("trigger", "messages_fts_trigram_update", TRIGRAM_AU,
                 trigram=True),
    LayoutObject("trigger", "messages_fts_trigram_session_bu", TRIGRAM_SESSION_BU, trigram=True),
    LayoutObject("trigger", "messages_fts_trigram_session_au", TRIGRAM_SESSION_AU, trigram=True),
    LayoutObject("trigger", "messages_fts_trigram_session_bd", TRIGRAM_SESSION_BD, trigram=True),
    LayoutObject("trigger", "messages_cjk_ai", CJK_AI),
    LayoutObject("trigger", "messages_cjk_ad", CJK_AD),
    LayoutObject("trigger", "messages_cjk_au", CJK_AU),
    LayoutObject("trigger", "messages_cjk_pending_ai", CJK_PENDING_AI),
    LayoutObject("trigger", "messages_cjk_pending_au", CJK_PENDING_AU),
    LayoutObject("trigger", "messages_cjk_ad_messages", CJK_MESSAGES_AD),
    LayoutObject("trigger", "messages_cjk_session_au", CJK_SESSION_AU),
    LayoutObject("trigger", "messages_cjk_session_bd", CJK_SESSION_BD),
)


def expected_objects(*, trigram: bool = TRIGRAM_AVAILABLE) -> tuple[LayoutObject, ...]:
    """The objects a head store has on a runtime with (or without) the trigram tokenizer."""
    return tuple(o for o in OBJECTS if trigram or not o.trigram)


def missing_objects(conn: Connection) -> list[str]:
    """Names of the head layout's derived objects absent from the store, in creation order.

    An object of the right name but another type counts as missing: it cannot serve.
    """
    present = {(o.type, o.name) for o in catalog.objects(conn)}
    return [o.name for o in expected_objects() if (o.type, o.name) not in present]


def recreate_missing(conn: Connection) -> list[str]:
    """Create the missing objects in the caller's transaction; returns their names.

    The new indexes are empty: the caller rebuilds them (``maintenance.rebuild_indexes``)
    before committing. A name taken by an object of another type makes the ``CREATE`` fail
    loudly rather than being dropped here.
    """
    missing = set(missing_objects(conn))
    created = []
    for obj in expected_objects():
        if obj.name in missing:
            conn.exec_driver_sql(obj.sql)
            created.append(obj.name)
    return created


# --------------------------------------------------------------- PostgreSQL search layout (0018)

# The configuration of the word index: ``simple`` (no stemming) with diacritics folded, as
# FTS5's unicode61 reads text.
PG_SEARCH_CONFIG = "hermes_search"
PG_WORD_COLUMN = "search_words"
PG_CJK_COLUMN = "search_cjk"
PG_WORD_INDEX = "idx_messages_search_words"
PG_TRIGRAM_INDEX = "idx_messages_search_trgm"
PG_CJK_INDEX = "idx_messages_search_cjk"
PG_PENDING_INDEX = "idx_messages_search_pending"
# to_tsvector refuses a result above 1 MB of lexemes: the inputs are cut so that even text of
# 4-byte characters stays below it (200,000 + 1,000 + 40,000 characters).
PG_WORD_TEXT_CHARS = 200_000
# The expression the trigram index covers (and the substring route compares): the text, then the
# tool name, on lines of their own so a term never spans the two.
PG_SCOPE_TEXT = "(hermes_search_text({t}.content) || E'\\n' || COALESCE({t}.tool_name, ''))"

PG_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("extension", "CREATE EXTENSION IF NOT EXISTS pg_trgm"),
    ("extension", "CREATE EXTENSION IF NOT EXISTS unaccent"),
    ("config", f"CREATE TEXT SEARCH CONFIGURATION {PG_SEARCH_CONFIG} (COPY = simple)"),
    ("config", f"""ALTER TEXT SEARCH CONFIGURATION {PG_SEARCH_CONFIG}
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
    WITH unaccent, simple"""),
    ("function", """CREATE FUNCTION hermes_search_text(content text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc jsonb;
BEGIN
    IF content IS NULL THEN
        RETURN '';
    END IF;
    IF left(content, 7) IS DISTINCT FROM U&'\\FFFF' || '0json:' THEN
        RETURN content;
    END IF;
    BEGIN
        doc := substr(content, 8)::jsonb;
    EXCEPTION WHEN others THEN
        RETURN '';
    END;
    IF jsonb_typeof(doc) <> 'array' THEN
        doc := jsonb_build_array(doc);
    END IF;
    RETURN COALESCE((
        SELECT string_agg(CASE
            WHEN jsonb_typeof(e) = 'string' THEN e #>> '{}'
            WHEN jsonb_typeof(e) = 'object'
                 AND COALESCE(e ->> 'type', 'text') IN ('text', 'input_text', 'output_text')
                 AND jsonb_typeof(e -> 'text') = 'string'
            THEN e ->> 'text' END, ' ' ORDER BY n)
        FROM jsonb_array_elements(doc) WITH ORDINALITY AS t(e, n)), '');
END
$$"""),
    (PG_WORD_COLUMN, f"ALTER TABLE messages ADD COLUMN {PG_WORD_COLUMN} tsvector "
     f"""GENERATED ALWAYS AS (
    to_tsvector('hermes_search'::regconfig, left(CASE WHEN role = 'tool'
        THEN left(hermes_search_text(content), 8192)
        ELSE hermes_search_text(content) END, {PG_WORD_TEXT_CHARS}))
    || to_tsvector('hermes_search'::regconfig, left(COALESCE(tool_name, ''), 1000))
    || to_tsvector('hermes_search'::regconfig, left(COALESCE(tool_calls, ''), 40000))
) STORED"""),
    (PG_CJK_COLUMN, f"ALTER TABLE messages ADD COLUMN {PG_CJK_COLUMN} tsvector"),
    (PG_WORD_INDEX, f"CREATE INDEX {PG_WORD_INDEX} ON messages USING gin ({PG_WORD_COLUMN})"),
    (PG_TRIGRAM_INDEX, f"""CREATE INDEX {PG_TRIGRAM_INDEX} ON messages USING gin (
    (hermes_search_text(content) || E'\\n' || COALESCE(tool_name, '')) gin_trgm_ops)
    WHERE role IS DISTINCT FROM 'tool'"""),
    (PG_CJK_INDEX, f"CREATE INDEX {PG_CJK_INDEX} ON messages USING gin ({PG_CJK_COLUMN})"),
    (PG_PENDING_INDEX, f"""CREATE INDEX {PG_PENDING_INDEX} ON messages (id)
    WHERE search_cjk IS NULL AND role IS DISTINCT FROM 'tool'"""),
)

# --------------------------------------------------------------------------- index writers

# Tables our triggers keep in step with ``messages``: a trigger of another name writing to one
# of them is a second writer (another program's, usually an agent of another release).
INDEX_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk", "messages_cjk",
                "messages_cjk_pending")
_VIRTUAL = re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE\b.*?\bUSING\s+(\w+)",
                      re.IGNORECASE | re.DOTALL)
# Tables a trigger body writes to: INSERT INTO t, DELETE FROM t, UPDATE t, REPLACE INTO t.
_WRITES = re.compile(
    r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|REPLACE\s+INTO|DELETE\s+FROM|UPDATE(?:\s+OR\s+\w+)?)"
    r"\s+(?:main\s*\.\s*)?[\"`\[]?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def is_fts5(table_sql: str | None) -> bool:
    """Whether a table's ``CREATE`` statement makes an FTS5 virtual table."""
    found = _VIRTUAL.match(table_sql or "")
    return found is not None and found.group(1).lower() == engine.FTS5_MODULE.lower()


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def written_tables(trigger_sql: str) -> set[str]:
    """Lower-cased names of the tables a trigger's body writes to."""
    body = re.split(r"\bBEGIN\b", trigger_sql or "", maxsplit=1, flags=re.IGNORECASE)
    return {t.lower() for t in _WRITES.findall(body[1] if len(body) > 1 else "")}


def foreign_index_triggers(conn: Connection) -> list[str]:
    """Triggers writing to one of our indexes that are not the head layout's own (by name and
    definition): each makes every write index a row a second time, or what we leave out."""
    ours = {o.name: _normal(o.sql) for o in expected_objects() if o.type == "trigger"}
    found = []
    for name, sql in catalog.triggers(conn):
        if ours.get(name) == _normal(sql or ""):
            continue
        if written_tables(sql or "") & set(INDEX_TABLES):
            found.append(name)
    return sorted(found)


def fts5_writers(conn: Connection) -> list[str]:
    """Triggers writing to an FTS5 table: each makes a write fail on a runtime without FTS5."""
    fts5 = {n.lower() for n, sql in catalog.table_definitions(conn).items() if is_fts5(sql)}
    return sorted(name for name, sql in catalog.triggers(conn)
                  if written_tables(sql or "") & fts5)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote_name(name: str) -> str:
    """A schema object's name, double-quoted; anything but a plain identifier is refused."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"refusing a schema object with an odd name: {name!r}")
    return f'"{name}"'


def drop_triggers(conn: Connection, names: list[str]) -> None:
    for name in names:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quote_name(name)}")
