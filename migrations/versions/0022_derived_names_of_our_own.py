"""Our derived objects take names of their own (``hs_…``), and no search view reads json_each.

Two programs gave one name two meanings. The agent creates its search objects by name on every
open and keeps whatever holds a name it finds taken: when its native CJK tokenizer is installed it
added its three triggers to *our* ``messages_fts_cjk`` (other columns), and from then on every
INSERT into ``messages`` failed, its and ours. Its recovery path (``state_meta.fts_stale``) drops
its six trigger names, which revision 0019 had given to our triggers, and our indexes silently
stopped following writes. Our backfill markers were its keys too. From here on every table, view,
trigger and ``state_meta`` key of ours is ``hs_`` + a noun, a prefix no agent release uses
(docs/mixed-fleets.md lists its names); the agent builds its own objects beside ours.

The views no longer read json_each: FTS5's own 'rebuild' and 'integrity-check' (rank=1) fail on a
content view that does ("SQL logic error" on SQLite 3.40). The text of a multimodal row is derived
once, when it is written, into ``hs_part_text``; the index triggers derive it from the row itself.

SQLite: our old-named triggers and views are dropped (the agent's CJK objects, which revision 0013
now leaves alone, are not ours and stay), the side tables, retired indexes and backfill markers
are renamed (their data stays) and the new objects are created. FTS5 cannot rename an index's
content source, so the word and trigram indexes are filled again: here for a small store; for a
larger one (over ``SMALL_STORE_ROWS`` messages) the backfill window of revision 0013 is opened over
every row, search answers those rows meanwhile, and ``optimize-storage`` indexes them in
resumable chunks. The bigram index is rebuilt from its side table, whose rows are kept. Each step
checks what exists first, so an upgrade interrupted and run again takes up where it stopped.

PostgreSQL: the search columns, indexes, functions, configuration and statistics are renamed
(catalog edits, no data moved).

Revision ID: 0022_derived_names_of_our_own
Revises: 0021_pg_load_tuning
"""

from alembic import op

revision = "0022_derived_names_of_our_own"
down_revision = "0021_pg_load_tuning"
branch_labels = None
depends_on = None


class N:
    """The names this revision creates (hermes_store.db.names at the time of writing)."""

    SEARCH_TEXT = "hs_search_text"
    BACKFILL_WINDOW = "hs_backfill_window"
    WORD_SOURCE = "hs_fts_src"
    SEARCH_SCOPE = "hs_search_scope"
    TRIGRAM_SOURCE = "hs_fts_trigram_src"
    PART_TEXT = "hs_part_text"
    WORD_INDEX = "hs_fts"
    TRIGRAM_INDEX = "hs_fts_trigram"
    CJK_SIDE = "hs_cjk"
    CJK_PENDING = "hs_cjk_pending"
    CJK_INDEX = "hs_fts_cjk"
    PART_TEXT_AI = "hs_part_text_ai"
    PART_TEXT_AU = "hs_part_text_au"
    PART_TEXT_AD = "hs_part_text_ad"
    WORD_AI = "hs_fts_ai"
    WORD_BD = "hs_fts_bd"
    WORD_BU = "hs_fts_bu"
    WORD_AU = "hs_fts_au"
    TRIGRAM_AI = "hs_fts_trigram_ai"
    TRIGRAM_BD = "hs_fts_trigram_bd"
    TRIGRAM_BU = "hs_fts_trigram_bu"
    TRIGRAM_AU = "hs_fts_trigram_au"
    TRIGRAM_SESSION_BU = "hs_fts_trigram_session_bu"
    TRIGRAM_SESSION_AU = "hs_fts_trigram_session_au"
    TRIGRAM_SESSION_BD = "hs_fts_trigram_session_bd"
    CJK_AI = "hs_cjk_ai"
    CJK_AD = "hs_cjk_ad"
    CJK_AU = "hs_cjk_au"
    CJK_PENDING_AI = "hs_cjk_pending_ai"
    CJK_PENDING_AU = "hs_cjk_pending_au"
    CJK_MESSAGES_AD = "hs_cjk_ad_messages"
    CJK_SESSION_AU = "hs_cjk_session_au"
    CJK_SESSION_BD = "hs_cjk_session_bd"
    BACKFILL_HIGH_WATER = "hs_backfill_high_water"
    BACKFILL_PROGRESS = "hs_backfill_progress"


def _marker(column: str, op_: str = "=") -> str:
    return f"substr(CAST({column} AS BLOB), 1, 6) {op_} X'006A736F6E3A'"


_OUTSIDE_WINDOW = f"NOT EXISTS (SELECT 1 FROM {N.BACKFILL_WINDOW} WHERE {{id}} > lo AND {{id}} <= hi)"

# --------------------------------------------------------------------------- the text of a row
# "The text of a message" has one definition, :func:`text_of`: plain content as it is; multimodal
# content (the marker, then a JSON list of parts) reduced to its text parts, never an image or
# base64 payload; content that is neither gives ''. SQLite's text functions stop at the NUL of
# the marker, hence the BLOB casts.
#
# FTS5's own 'rebuild' and 'integrity-check' (rank=1) cannot scan a view using json_each ("SQL
# logic error" on 3.40), so the views never do: the text of a multimodal row is derived once, when
# it is written, into the side table ``hs_part_text`` (plain rows, nearly all of them, store
# nothing twice), and the index triggers derive the same text from the row at hand instead of
# reading the views, so no trigger depends on another having run first.


def _json(row: str) -> str:
    return f"CAST(substr(CAST({row}.content AS BLOB), 7) AS TEXT)"


def _parts(row: str) -> str:
    body = _json(row)
    return f"""COALESCE((
            SELECT group_concat(CASE
                WHEN j.type = 'text' THEN j.value
                WHEN j.type = 'object'
                     AND COALESCE(json_extract(j.value, '$.type'), 'text')
                         IN ('text', 'input_text', 'output_text')
                     AND json_type(j.value, '$.text') = 'text'
                THEN json_extract(j.value, '$.text') END, ' ')
            FROM json_each(CASE json_type({body}) WHEN 'array' THEN {body}
                                ELSE json_array(json({body})) END) AS j), '')"""


def _part_text(row: str) -> str:
    return f"CASE WHEN json_valid({_json(row)}) THEN {_parts(row)} ELSE '' END"


def text_of(row: str) -> str:
    """SQL for the text of the ``messages`` row ``row`` (``new``, ``old``, an alias)."""
    return (f"CASE WHEN {_marker(row + '.content', '<>')} THEN {row}.content "
            f"WHEN {_marker(row + '.content')} THEN {_part_text(row)} ELSE '' END")


def _word_content(row: str) -> str:
    return (f"CASE WHEN {row}.role = 'tool' THEN substr(COALESCE({text_of(row)}, ''), 1, 8192) "
            f"ELSE {text_of(row)} END")


def _in_trigram_scope(row: str) -> str:
    return (f"{row}.role IS NOT 'tool' AND EXISTS (SELECT 1 FROM sessions AS s "
            f"WHERE s.id = {row}.session_id AND COALESCE(s.source, '') NOT IN ('cron', 'subagent'))")


# --------------------------------------------------------------------------- views and side text

PART_TEXT_TABLE = f"CREATE TABLE {N.PART_TEXT} (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"
PART_TEXT_AI = f"""CREATE TRIGGER {N.PART_TEXT_AI} AFTER INSERT ON messages
WHEN {_marker('new.content')}
BEGIN
    INSERT OR REPLACE INTO {N.PART_TEXT} (id, text) VALUES (new.id, {_part_text('new')});
END"""
PART_TEXT_AU = f"""CREATE TRIGGER {N.PART_TEXT_AU} AFTER UPDATE OF content, id ON messages
WHEN old.content IS NOT new.content OR old.id IS NOT new.id
BEGIN
    DELETE FROM {N.PART_TEXT} WHERE id = old.id;
    INSERT OR REPLACE INTO {N.PART_TEXT} (id, text)
    SELECT new.id, {_part_text('new')} WHERE {_marker('new.content')};
END"""
PART_TEXT_AD = f"""CREATE TRIGGER {N.PART_TEXT_AD} AFTER DELETE ON messages BEGIN
    DELETE FROM {N.PART_TEXT} WHERE id = old.id;
END"""

SEARCH_TEXT_VIEW = f"""CREATE VIEW {N.SEARCH_TEXT} AS
SELECT m.id, m.session_id, m.role, m.tool_name, m.tool_calls,
    CASE
        WHEN {_marker('m.content', '<>')} THEN m.content
        ELSE COALESCE((SELECT p.text FROM {N.PART_TEXT} AS p WHERE p.id = m.id), '')
    END AS text
FROM messages AS m"""
BACKFILL_WINDOW_VIEW = f"""CREATE VIEW {N.BACKFILL_WINDOW} AS
SELECT CAST(p.value AS INTEGER) AS lo, CAST(h.value AS INTEGER) AS hi
FROM state_meta AS h JOIN state_meta AS p ON p.key = '{N.BACKFILL_PROGRESS}'
WHERE h.key = '{N.BACKFILL_HIGH_WATER}'"""
WORD_SOURCE_VIEW = f"""CREATE VIEW {N.WORD_SOURCE} AS
SELECT id,
    CASE WHEN role = 'tool' THEN substr(COALESCE(text, ''), 1, 8192) ELSE text END AS content,
    tool_name, tool_calls
FROM {N.SEARCH_TEXT}"""
SEARCH_SCOPE_VIEW = f"""CREATE VIEW {N.SEARCH_SCOPE} AS
SELECT t.id, t.session_id, t.text, t.tool_name, t.tool_calls
FROM {N.SEARCH_TEXT} AS t JOIN sessions AS s ON s.id = t.session_id
WHERE t.role IS NOT 'tool' AND COALESCE(s.source, '') NOT IN ('cron', 'subagent')"""
TRIGRAM_SOURCE_VIEW = f"""CREATE VIEW {N.TRIGRAM_SOURCE} AS
SELECT id, text AS content, tool_name FROM {N.SEARCH_SCOPE}"""

# --------------------------------------------------------------------------- word index

_WORD_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                 "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role "
                 "OR old.id IS NOT new.id)")


def _entry(index: str, columns: str, values: str, *, delete: bool, where: str = "") -> str:
    """The statement adding a row to ``index`` (or, with ``delete``, removing it)."""
    command, value = (f"{index}, ", "'delete', ") if delete else ("", "")
    head = f"INSERT INTO {index} ({command}rowid, {columns})\n    "
    if where:
        return f"{head}SELECT {value}{values} WHERE {where};"
    return f"{head}VALUES ({value}{values});"


def _word_entry(row: str, *, delete: bool = False) -> str:
    return _entry(N.WORD_INDEX, "content, tool_name, tool_calls",
                  f"{row}.id, {_word_content(row)}, {row}.tool_name, {row}.tool_calls",
                  delete=delete)


WORD_INDEX = f"""CREATE VIRTUAL TABLE {N.WORD_INDEX} USING fts5(
    content, tool_name, tool_calls,
    content='{N.WORD_SOURCE}', content_rowid='id'
)"""
WORD_AI = f"""CREATE TRIGGER {N.WORD_AI} AFTER INSERT ON messages
WHEN {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_word_entry('new')}
END"""
WORD_BD = f"""CREATE TRIGGER {N.WORD_BD} BEFORE DELETE ON messages
WHEN {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_word_entry('old', delete=True)}
END"""
WORD_BU = f"""CREATE TRIGGER {N.WORD_BU}
BEFORE UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN {_WORD_CHANGED} AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_word_entry('old', delete=True)}
END"""
WORD_AU = f"""CREATE TRIGGER {N.WORD_AU}
AFTER UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN {_WORD_CHANGED} AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_word_entry('new')}
END"""

# --------------------------------------------------------------------------- trigram index

_TRIGRAM_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                    "OR old.role IS NOT new.role OR old.session_id IS NOT new.session_id "
                    "OR old.id IS NOT new.id)")
_TRIGRAM_REMOVE_SESSION = f"""
    INSERT INTO {N.TRIGRAM_INDEX} ({N.TRIGRAM_INDEX}, rowid, content, tool_name)
    SELECT 'delete', t.id, t.content, t.tool_name FROM {N.TRIGRAM_SOURCE} AS t
    WHERE t.id IN (SELECT id FROM messages WHERE session_id = old.id)
      AND {_OUTSIDE_WINDOW.format(id="t.id")};"""


def _trigram_entry(row: str, *, delete: bool = False) -> str:
    return _entry(N.TRIGRAM_INDEX, "content, tool_name",
                  f"{row}.id, {text_of(row)}, {row}.tool_name", delete=delete,
                  where=_in_trigram_scope(row))


TRIGRAM_INDEX = f"""CREATE VIRTUAL TABLE {N.TRIGRAM_INDEX} USING fts5(
    content, tool_name,
    content='{N.TRIGRAM_SOURCE}', content_rowid='id', tokenize='trigram'
)"""
TRIGRAM_AI = f"""CREATE TRIGGER {N.TRIGRAM_AI} AFTER INSERT ON messages
WHEN new.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_trigram_entry('new')}
END"""
TRIGRAM_BD = f"""CREATE TRIGGER {N.TRIGRAM_BD} BEFORE DELETE ON messages
WHEN old.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_trigram_entry('old', delete=True)}
END"""
TRIGRAM_BU = f"""CREATE TRIGGER {N.TRIGRAM_BU}
BEFORE UPDATE OF content, tool_name, role, session_id, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_trigram_entry('old', delete=True)}
END"""
TRIGRAM_AU = f"""CREATE TRIGGER {N.TRIGRAM_AU}
AFTER UPDATE OF content, tool_name, role, session_id, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_trigram_entry('new')}
END"""
TRIGRAM_SESSION_BU = f"""CREATE TRIGGER {N.TRIGRAM_SESSION_BU}
BEFORE UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN{_TRIGRAM_REMOVE_SESSION}
END"""
TRIGRAM_SESSION_AU = f"""CREATE TRIGGER {N.TRIGRAM_SESSION_AU}
AFTER UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN
    INSERT INTO {N.TRIGRAM_INDEX} (rowid, content, tool_name)
    SELECT t.id, t.content, t.tool_name FROM {N.TRIGRAM_SOURCE} AS t
    WHERE t.id IN (SELECT id FROM messages WHERE session_id = new.id)
      AND {_OUTSIDE_WINDOW.format(id="t.id")};
END"""
TRIGRAM_SESSION_BD = f"""CREATE TRIGGER {N.TRIGRAM_SESSION_BD} BEFORE DELETE ON sessions
BEGIN{_TRIGRAM_REMOVE_SESSION}
END"""

# --------------------------------------------------------------------- CJK bigram index

_CJK_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role "
                "OR old.session_id IS NOT new.session_id OR old.id IS NOT new.id)")

CJK_SIDE_TABLE = (f"CREATE TABLE {N.CJK_SIDE} "
                  "(id INTEGER PRIMARY KEY, text TEXT NOT NULL, calls TEXT)")
CJK_PENDING_TABLE = f"CREATE TABLE {N.CJK_PENDING} (id INTEGER PRIMARY KEY)"
CJK_INDEX = f"""CREATE VIRTUAL TABLE {N.CJK_INDEX} USING fts5(
    text, calls, content='{N.CJK_SIDE}', content_rowid='id'
)"""
CJK_AI = f"""CREATE TRIGGER {N.CJK_AI} AFTER INSERT ON {N.CJK_SIDE} BEGIN
    INSERT INTO {N.CJK_INDEX} (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END"""
CJK_AD = f"""CREATE TRIGGER {N.CJK_AD} AFTER DELETE ON {N.CJK_SIDE} BEGIN
    INSERT INTO {N.CJK_INDEX} ({N.CJK_INDEX}, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
END"""
CJK_AU = f"""CREATE TRIGGER {N.CJK_AU} AFTER UPDATE ON {N.CJK_SIDE} BEGIN
    INSERT INTO {N.CJK_INDEX} ({N.CJK_INDEX}, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
    INSERT INTO {N.CJK_INDEX} (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END"""
CJK_PENDING_AI = f"""CREATE TRIGGER {N.CJK_PENDING_AI} AFTER INSERT ON messages
WHEN new.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id) VALUES (new.id);
END"""
CJK_PENDING_AU = f"""CREATE TRIGGER {N.CJK_PENDING_AU}
AFTER UPDATE OF content, tool_name, tool_calls, role, session_id, id ON messages
WHEN {_CJK_CHANGED}
BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id = old.id;
    DELETE FROM {N.CJK_PENDING} WHERE id = old.id;
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id)
    SELECT new.id WHERE new.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="new.id")};
END"""
CJK_MESSAGES_AD = f"""CREATE TRIGGER {N.CJK_MESSAGES_AD} AFTER DELETE ON messages BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id = old.id;
    DELETE FROM {N.CJK_PENDING} WHERE id = old.id;
END"""
CJK_SESSION_AU = f"""CREATE TRIGGER {N.CJK_SESSION_AU}
AFTER UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id IN (SELECT id FROM messages WHERE session_id = old.id);
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id)
    SELECT m.id FROM messages AS m
    WHERE m.session_id = new.id AND m.role IS NOT 'tool' AND {_OUTSIDE_WINDOW.format(id="m.id")};
END"""
CJK_SESSION_BD = f"""CREATE TRIGGER {N.CJK_SESSION_BD} BEFORE DELETE ON sessions BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id IN (SELECT id FROM messages WHERE session_id = old.id);
END"""


# ------------------------------------------------------------------------------ what goes

# As revision 0013: indexing this many rows inside the upgrade takes about a second.
SMALL_STORE_ROWS = 5000

OLD_TRIGGERS = (
    "messages_fts_insert", "messages_fts_delete", "messages_fts_bu", "messages_fts_update",
    "messages_fts_trigram_insert", "messages_fts_trigram_delete", "messages_fts_trigram_bu",
    "messages_fts_trigram_update", "messages_fts_trigram_session_bu",
    "messages_fts_trigram_session_au", "messages_fts_trigram_session_bd",
    "messages_cjk_ai", "messages_cjk_ad", "messages_cjk_au", "messages_cjk_pending_ai",
    "messages_cjk_pending_au", "messages_cjk_ad_messages", "messages_cjk_session_au",
    "messages_cjk_session_bd",
)
OLD_VIEWS = ("messages_fts_trigram_src", "messages_search_scope", "messages_fts_src",
             "fts_backfill_window", "messages_search_text")
# Our compact indexes at 0021; the bigram one only when it reads our side table (the agent's
# own messages_fts_cjk reads its view messages_fts_cjk_src and is left alone).
OLD_INDEXES = {"messages_fts": None, "messages_fts_trigram": None,
               "messages_fts_cjk": "messages_cjk"}
COPIED_TABLES = {"messages_cjk": (N.CJK_SIDE, CJK_SIDE_TABLE),
                 "messages_cjk_pending": (N.CJK_PENDING, CJK_PENDING_TABLE)}
# The retired inline indexes of an adopted legacy file (FTS5 renames their shadow tables too).
RENAMED_TABLES = {"messages_fts_old": "hs_fts_old", "messages_fts_trigram_old": "hs_fts_trigram_old",
                  "messages_fts_cjk_old": "hs_fts_cjk_old"}
RENAMED_KEYS = {"fts_rebuild_high_water": N.BACKFILL_HIGH_WATER,
                "fts_rebuild_progress": N.BACKFILL_PROGRESS}

TABLES = [(N.PART_TEXT, PART_TEXT_TABLE), (N.CJK_SIDE, CJK_SIDE_TABLE),
          (N.CJK_PENDING, CJK_PENDING_TABLE)]
VIEWS = [(N.SEARCH_TEXT, SEARCH_TEXT_VIEW, False), (N.BACKFILL_WINDOW, BACKFILL_WINDOW_VIEW, False),
         (N.WORD_SOURCE, WORD_SOURCE_VIEW, False), (N.SEARCH_SCOPE, SEARCH_SCOPE_VIEW, False),
         (N.TRIGRAM_SOURCE, TRIGRAM_SOURCE_VIEW, True)]
INDEXES = [(N.WORD_INDEX, WORD_INDEX, False), (N.TRIGRAM_INDEX, TRIGRAM_INDEX, True),
           (N.CJK_INDEX, CJK_INDEX, False)]
TRIGGERS = [
    (N.PART_TEXT_AI, PART_TEXT_AI, False), (N.PART_TEXT_AU, PART_TEXT_AU, False),
    (N.PART_TEXT_AD, PART_TEXT_AD, False),
    (N.WORD_AI, WORD_AI, False), (N.WORD_BD, WORD_BD, False), (N.WORD_BU, WORD_BU, False),
    (N.WORD_AU, WORD_AU, False),
    (N.TRIGRAM_AI, TRIGRAM_AI, True), (N.TRIGRAM_BD, TRIGRAM_BD, True),
    (N.TRIGRAM_BU, TRIGRAM_BU, True), (N.TRIGRAM_AU, TRIGRAM_AU, True),
    (N.TRIGRAM_SESSION_BU, TRIGRAM_SESSION_BU, True),
    (N.TRIGRAM_SESSION_AU, TRIGRAM_SESSION_AU, True),
    (N.TRIGRAM_SESSION_BD, TRIGRAM_SESSION_BD, True),
    (N.CJK_AI, CJK_AI, False), (N.CJK_AD, CJK_AD, False), (N.CJK_AU, CJK_AU, False),
    (N.CJK_PENDING_AI, CJK_PENDING_AI, False), (N.CJK_PENDING_AU, CJK_PENDING_AU, False),
    (N.CJK_MESSAGES_AD, CJK_MESSAGES_AD, False), (N.CJK_SESSION_AU, CJK_SESSION_AU, False),
    (N.CJK_SESSION_BD, CJK_SESSION_BD, False),
]

FILL_PART_TEXT = (f"INSERT OR REPLACE INTO {N.PART_TEXT} (id, text) "
                  f"SELECT m.id, {_part_text('m')} FROM messages AS m "
                  f"WHERE {_marker('m.content')}")
OUTSIDE = _OUTSIDE_WINDOW.format(id="id")
REBUILD = [
    (N.WORD_INDEX, f"INSERT INTO {N.WORD_INDEX} ({N.WORD_INDEX}) VALUES ('delete-all')"),
    (N.WORD_INDEX, (f"INSERT INTO {N.WORD_INDEX} (rowid, content, tool_name, tool_calls) "
                    f"SELECT id, content, tool_name, tool_calls FROM {N.WORD_SOURCE} "
                    f"WHERE {OUTSIDE}")),
    (N.TRIGRAM_INDEX, f"INSERT INTO {N.TRIGRAM_INDEX} ({N.TRIGRAM_INDEX}) VALUES ('delete-all')"),
    (N.TRIGRAM_INDEX, (f"INSERT INTO {N.TRIGRAM_INDEX} (rowid, content, tool_name) "
                       f"SELECT id, content, tool_name FROM {N.TRIGRAM_SOURCE} WHERE {OUTSIDE}")),
    (N.CJK_INDEX, f"INSERT INTO {N.CJK_INDEX} ({N.CJK_INDEX}) VALUES ('rebuild')"),
]

# PostgreSQL: (kind, former name, new name, statement renaming {a} to {b}); each runs only while
# the name it renames is there.
PG_RENAMES = [
    ("config", "hermes_search", "hs_search", "ALTER TEXT SEARCH CONFIGURATION {a} RENAME TO {b}"),
    ("function", "hermes_search_text", "hs_search_text", "ALTER FUNCTION {a}(text) RENAME TO {b}"),
    ("function", "hermes_word_text", "hs_word_text", "ALTER FUNCTION {a}(text) RENAME TO {b}"),
    ("column", "search_words", "hs_search_words", "ALTER TABLE messages RENAME COLUMN {a} TO {b}"),
    ("column", "search_cjk", "hs_search_cjk", "ALTER TABLE messages RENAME COLUMN {a} TO {b}"),
    ("relation", "idx_messages_search_words", "hs_idx_messages_words",
     "ALTER INDEX {a} RENAME TO {b}"),
    ("relation", "idx_messages_search_trgm", "hs_idx_messages_trgm", "ALTER INDEX {a} RENAME TO {b}"),
    ("relation", "idx_messages_search_cjk", "hs_idx_messages_cjk", "ALTER INDEX {a} RENAME TO {b}"),
    ("relation", "idx_messages_search_pending", "hs_idx_messages_cjk_pending",
     "ALTER INDEX {a} RENAME TO {b}"),
    ("relation", "idx_messages_search_time", "hs_idx_messages_time", "ALTER INDEX {a} RENAME TO {b}"),
    ("statistics", "messages_search_cjk_length", "hs_cjk_length",
     "ALTER STATISTICS {a} RENAME TO {b}"),
]
PG_EXISTS = {
    "config": "SELECT 1 FROM pg_ts_config WHERE cfgname = %s",
    "function": "SELECT 1 FROM pg_proc WHERE proname = %s",
    "column": ("SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('messages') "
               "AND attname = %s AND NOT attisdropped"),
    "relation": "SELECT 1 WHERE to_regclass(%s) IS NOT NULL",
    "statistics": "SELECT 1 FROM pg_statistic_ext WHERE stxname = %s",
}


def _has_trigram() -> bool:
    bind = op.get_bind()
    try:
        bind.exec_driver_sql(
            "CREATE VIRTUAL TABLE temp.trigram_probe USING fts5(x, tokenize='trigram')")
    except Exception:  # noqa: BLE001 - SQLite < 3.34: substring search falls back to LIKE
        return False
    bind.exec_driver_sql("DROP TABLE temp.trigram_probe")
    return True


def _objects() -> dict[tuple[str, str], str]:
    rows = op.get_bind().exec_driver_sql("SELECT type, name, sql FROM sqlite_master")
    return {(kind, name): sql or "" for kind, name, sql in rows}


def _upgrade_sqlite() -> None:
    bind = op.get_bind()
    found = _objects()
    for name in OLD_TRIGGERS:
        op.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    for name in OLD_VIEWS:
        op.execute(f'DROP VIEW IF EXISTS "{name}"')
    for name, content in OLD_INDEXES.items():
        sql = "".join(found.get(("table", name), "").split()).lower()
        if sql and (content is None or f"content='{content}'" in sql):
            op.execute(f'DROP TABLE "{name}"')
    # The side tables are copied, not renamed: a rename would store the new name quoted, and the
    # statement must read as the live layout's (db/derived.py) for repair to recognise it.
    for old, (new, create) in COPIED_TABLES.items():
        if ("table", old) in found and ("table", new) not in found:
            op.execute(create)
            op.execute(f'INSERT INTO "{new}" SELECT * FROM "{old}"')
            op.execute(f'DROP TABLE "{old}"')
    for old, new in RENAMED_TABLES.items():
        if ("table", old) in found and ("table", new) not in found:
            op.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"')
    for old, new in RENAMED_KEYS.items():
        op.execute(f"UPDATE state_meta SET key = '{new}' WHERE key = '{old}' "
                   f"AND NOT EXISTS (SELECT 1 FROM state_meta WHERE key = '{new}')")
    trigram = _has_trigram()
    present = {name for _, name in _objects()}
    for name, sql in TABLES:
        if name not in present:
            op.execute(sql)
    op.execute(FILL_PART_TEXT)
    for group in (VIEWS, INDEXES, TRIGGERS):
        for name, sql, needs_trigram in group:
            if name not in present and (trigram or not needs_trigram):
                op.execute(sql)
    tables = {name for kind, name in _objects() if kind == "table"}
    windowed = _open_window()
    for table, stmt in REBUILD:
        if table in tables and not (windowed and table != N.CJK_INDEX):
            bind.exec_driver_sql(stmt)


def _open_window() -> bool:
    """A large store's word and trigram indexes are filled by ``optimize-storage`` in resumable
    chunks, as after revision 0013: the backfill window ``(0, H]`` is recorded and search answers
    its rows meanwhile. True when this opened it; an open window is left as it is."""
    bind = op.get_bind()
    if bind.exec_driver_sql(f"SELECT 1 FROM {N.BACKFILL_WINDOW}").first() is not None:
        return False
    bounded = f"SELECT count(*) FROM (SELECT 1 FROM messages LIMIT {SMALL_STORE_ROWS + 1})"
    if bind.exec_driver_sql(bounded).scalar() <= SMALL_STORE_ROWS:
        return False
    high = bind.exec_driver_sql("SELECT max(id) FROM messages").scalar()
    bind.exec_driver_sql("INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?), (?, '0')",
                         (N.BACKFILL_HIGH_WATER, str(high), N.BACKFILL_PROGRESS))
    return True


def _upgrade_postgresql() -> None:
    bind = op.get_bind()
    for kind, old, new, stmt in PG_RENAMES:
        if bind.exec_driver_sql(PG_EXISTS[kind], (old,)).first() is not None:
            op.execute(stmt.format(a=old, b=new))


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _upgrade_sqlite()
    elif dialect == "postgresql":
        _upgrade_postgresql()


def downgrade() -> None:
    """PostgreSQL: the former names back (catalog edits). SQLite: refused, since below this
    revision the agent's reopen breaks every write (restore a backup instead)."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        raise NotImplementedError("below this revision our objects carry the agent's names; "
                                  "restore a backup to go back")
    for kind, old, new, stmt in reversed(PG_RENAMES):
        if bind.exec_driver_sql(PG_EXISTS[kind], (new,)).first() is not None:
            op.execute(stmt.format(a=new, b=old))
