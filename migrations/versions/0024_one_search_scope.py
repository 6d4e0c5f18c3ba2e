"""One search scope for every script: the trigram and CJK indexes cover every row, as the word index does.

Until here the word index held every message (tool output by its first 8,192 characters) while the
trigram and CJK bigram indexes held only non-tool rows of sessions whose source is not ``cron`` or
``subagent``. Which rows a term reached depended on the script it was written in: an English word
found a cron session or a tool result, the same sentence's Chinese word did not (or only through
``--include-tools``' LIKE pass). From here every route covers the same rows: every message, tool
output by the same 8,192-character prefix (docs/search.md#search-scope).

SQLite: the scope view loses its session join and its role filter and cuts tool text; the CJK
pending triggers take every row and lose the session triggers that moved rows in and out. The
trigram index answers CJK terms alone (Latin terms go to the word index), so from here it holds
only the rows of the scope that have a CJK character: it is emptied and filled again from its new
source here, in the upgrade's transaction (its size is that of the store's CJK rows, which
measured smaller than the index it replaces). The newly covered rows holding a CJK character are
marked pending for the bigram side table: the library derives them (each write drains a few,
``optimize-storage`` all) and search answers them by a LIKE bounded to the pending ids meanwhile.
Rows inside an open backfill window are left to the backfill, which reads the new views.

PostgreSQL: the pg_trgm index covers every row over the same cut text; the pending index covers
every NULL ``hs_search_cjk``. Tool rows had NULL there (never covered); those without a CJK
character get ``''`` here, the others stay pending until ``bigrams.catch_up`` derives them.

Revision ID: 0024_one_search_scope
Revises: 0023_sessions_carry_lineage_root
"""

from alembic import op

revision = "0024_one_search_scope"
down_revision = "0023_sessions_carry_lineage_root"
branch_labels = None
depends_on = None

class N:
    """The names this revision touches (hermes_store.db.names at the time of writing)."""

    SEARCH_TEXT = "hs_search_text"
    BACKFILL_WINDOW = "hs_backfill_window"
    SEARCH_SCOPE = "hs_search_scope"
    TRIGRAM_SOURCE = "hs_fts_trigram_src"
    TRIGRAM_INDEX = "hs_fts_trigram"
    CJK_SIDE = "hs_cjk"
    CJK_PENDING = "hs_cjk_pending"
    TRIGRAM_AI = "hs_fts_trigram_ai"
    TRIGRAM_BD = "hs_fts_trigram_bd"
    TRIGRAM_BU = "hs_fts_trigram_bu"
    TRIGRAM_AU = "hs_fts_trigram_au"
    CJK_PENDING_AI = "hs_cjk_pending_ai"
    CJK_PENDING_AU = "hs_cjk_pending_au"
    PG_TEXT_FUNCTION = "hs_search_text"
    PG_CJK_COLUMN = "hs_search_cjk"
    PG_TRIGRAM_INDEX = "hs_idx_messages_trgm"
    PG_PENDING_INDEX = "hs_idx_messages_cjk_pending"


# Objects of revision 0022 this one replaces (the session triggers go for good).
OLD_TRIGGERS = ("hs_fts_trigram_ai", "hs_fts_trigram_bd", "hs_fts_trigram_bu", "hs_fts_trigram_au",
                "hs_fts_trigram_session_bu", "hs_fts_trigram_session_au",
                "hs_fts_trigram_session_bd", "hs_cjk_pending_ai", "hs_cjk_pending_au",
                "hs_cjk_session_au", "hs_cjk_session_bd")
OLD_VIEWS = (N.TRIGRAM_SOURCE, N.SEARCH_SCOPE)

def _marker(column: str, op_: str = "=") -> str:
    return f"substr(CAST({column} AS BLOB), 1, 6) {op_} X'006A736F6E3A'"


_OUTSIDE_WINDOW = f"NOT EXISTS (SELECT 1 FROM {N.BACKFILL_WINDOW} WHERE {{id}} > lo AND {{id}} <= hi)"

# The text of a row, as revision 0022 spells it (the trigram triggers now cut tool output as the
# word triggers do).


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


def _entry(index: str, columns: str, values: str, *, delete: bool, where: str = "") -> str:
    """The statement adding a row to ``index`` (or, with ``delete``, removing it)."""
    command, value = (f"{index}, ", "'delete', ") if delete else ("", "")
    head = f"INSERT INTO {index} ({command}rowid, {columns})\n    "
    if where:
        return f"{head}SELECT {value}{values} WHERE {where};"
    return f"{head}VALUES ({value}{values});"



# --------------------------------------------------------------------------- the new objects

SEARCH_SCOPE_VIEW = f"""CREATE VIEW {N.SEARCH_SCOPE} AS
SELECT id, session_id,
    CASE WHEN role = 'tool' THEN substr(COALESCE(text, ''), 1, 8192) ELSE text END AS text,
    tool_name, tool_calls
FROM {N.SEARCH_TEXT}"""
# The CJK letters and punctuation of docs/search.md#cjk-bigrams, for GLOB (which compares code
# points): the trigram index answers CJK terms alone, so it holds only rows that have one.
CJK_CLASS = ("\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
             "\U00020000-\U0002a6df\U0002a700-\U0002ebef")


def _holds_cjk(text: str, tool_name: str) -> str:
    return f"({text} GLOB '*[{CJK_CLASS}]*' OR {tool_name} GLOB '*[{CJK_CLASS}]*')"


TRIGRAM_SOURCE_VIEW = f"""CREATE VIEW {N.TRIGRAM_SOURCE} AS
SELECT id, text AS content, tool_name FROM {N.SEARCH_SCOPE}
WHERE {_holds_cjk('text', 'tool_name')}"""

_WORD_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                 "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role "
                 "OR old.id IS NOT new.id)")
_TRIGRAM_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                    "OR old.role IS NOT new.role OR old.id IS NOT new.id)")


def _trigram_entry(row: str, *, delete: bool = False) -> str:
    return _entry(N.TRIGRAM_INDEX, "content, tool_name",
                  f"{row}.id, {_word_content(row)}, {row}.tool_name", delete=delete,
                  where=_holds_cjk(_word_content(row), f"{row}.tool_name"))


TRIGRAM_AI = f"""CREATE TRIGGER {N.TRIGRAM_AI} AFTER INSERT ON messages
WHEN {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_trigram_entry('new')}
END"""
TRIGRAM_BD = f"""CREATE TRIGGER {N.TRIGRAM_BD} BEFORE DELETE ON messages
WHEN {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_trigram_entry('old', delete=True)}
END"""
TRIGRAM_BU = f"""CREATE TRIGGER {N.TRIGRAM_BU}
BEFORE UPDATE OF content, tool_name, role, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_trigram_entry('old', delete=True)}
END"""
TRIGRAM_AU = f"""CREATE TRIGGER {N.TRIGRAM_AU}
AFTER UPDATE OF content, tool_name, role, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_trigram_entry('new')}
END"""
CJK_PENDING_AI = f"""CREATE TRIGGER {N.CJK_PENDING_AI} AFTER INSERT ON messages
WHEN {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id) VALUES (new.id);
END"""
CJK_PENDING_AU = f"""CREATE TRIGGER {N.CJK_PENDING_AU}
AFTER UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN {_WORD_CHANGED}
BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id = old.id;
    DELETE FROM {N.CJK_PENDING} WHERE id = old.id;
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id)
    SELECT new.id WHERE {_OUTSIDE_WINDOW.format(id="new.id")};
END"""

# Rows the former scope left out: tool output, and rows of cron or subagent sessions (or of none).
NEWLY_COVERED = """(m.role IS 'tool' OR NOT EXISTS (SELECT 1 FROM sessions AS s
    WHERE s.id = m.session_id AND COALESCE(s.source, '') NOT IN ('cron', 'subagent')))"""
_OUTSIDE = _OUTSIDE_WINDOW.format(id="m.id")
TRIGRAM_EMPTY = f"INSERT INTO {N.TRIGRAM_INDEX} ({N.TRIGRAM_INDEX}) VALUES ('delete-all')"
TRIGRAM_FILL = (f"INSERT INTO {N.TRIGRAM_INDEX} (rowid, content, tool_name) "
                f"SELECT id, content, tool_name FROM {N.TRIGRAM_SOURCE} AS m WHERE {_OUTSIDE}")
CJK_PEND = (f"INSERT OR IGNORE INTO {N.CJK_PENDING} (id) "
            f"SELECT sc.id FROM {N.SEARCH_SCOPE} AS sc JOIN messages AS m ON m.id = sc.id "
            f"WHERE {NEWLY_COVERED} AND {_OUTSIDE} AND {_holds_cjk('sc.text', 'sc.tool_name')}")
# PostgreSQL: the statements of db/derived.py's PG layout at this revision.
_PG_SCOPE_TEXT = (f"(CASE WHEN role = 'tool' THEN left({N.PG_TEXT_FUNCTION}(content), 8192) "
                  f"ELSE {N.PG_TEXT_FUNCTION}(content) END || E'\\n' || COALESCE(tool_name, ''))")
PG_TRIGRAM_INDEX = (f"CREATE INDEX {N.PG_TRIGRAM_INDEX} ON messages USING gin (\n"
                    f"    {_PG_SCOPE_TEXT} gin_trgm_ops)")
PG_PENDING_INDEX = (f"CREATE INDEX {N.PG_PENDING_INDEX} ON messages (id)\n"
                    f"    WHERE {N.PG_CJK_COLUMN} IS NULL")
# Tool rows were never given tokens; those without a CJK character need none.
PG_NO_CJK_TOOL_ROWS = (
    f"UPDATE messages SET {N.PG_CJK_COLUMN} = ''::tsvector "
    f"WHERE role = 'tool' AND {N.PG_CJK_COLUMN} IS NULL "
    f"AND left({N.PG_TEXT_FUNCTION}(content), 8192) !~ %(cjk)s "
    f"AND COALESCE(tool_name, '') !~ %(cjk)s")


def _objects() -> dict[tuple[str, str], str]:
    rows = op.get_bind().exec_driver_sql("SELECT type, name, sql FROM sqlite_master")
    return {(kind, name): sql or "" for kind, name, sql in rows}


def _upgrade_sqlite() -> None:
    bind = op.get_bind()
    found = _objects()
    if "cron" not in found.get(("view", N.SEARCH_SCOPE), ""):
        return  # not the former layout: repair builds a missing one from the live definition
    trigram = ("table", N.TRIGRAM_INDEX) in found
    for name in OLD_TRIGGERS:
        op.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    for name in OLD_VIEWS:
        op.execute(f'DROP VIEW IF EXISTS "{name}"')
    op.execute(SEARCH_SCOPE_VIEW)
    if trigram:
        for sql in (TRIGRAM_SOURCE_VIEW, TRIGRAM_AI, TRIGRAM_BD, TRIGRAM_BU, TRIGRAM_AU):
            op.execute(sql)
        bind.exec_driver_sql(TRIGRAM_EMPTY)
        bind.exec_driver_sql(TRIGRAM_FILL)
    if ("table", N.CJK_PENDING) in found:
        op.execute(CJK_PENDING_AI)
        op.execute(CJK_PENDING_AU)
        bind.exec_driver_sql(CJK_PEND)


def _upgrade_postgresql() -> None:
    bind = op.get_bind()
    if bind.exec_driver_sql(f"SELECT to_regclass('{N.PG_PENDING_INDEX}')").scalar() is None:
        return  # no search layout (revision 0018 left it out): nothing to widen
    op.execute(f"DROP INDEX IF EXISTS {N.PG_TRIGRAM_INDEX}")
    op.execute(f"DROP INDEX {N.PG_PENDING_INDEX}")
    bind.exec_driver_sql(PG_NO_CJK_TOOL_ROWS, {"cjk": f"[{CJK_CLASS}]"})
    op.execute(PG_TRIGRAM_INDEX)
    op.execute(PG_PENDING_INDEX)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _upgrade_sqlite()
    elif dialect == "postgresql":
        _upgrade_postgresql()


# Revision 0022's PostgreSQL indexes, for a downgrade.
OLD_PG_TRIGRAM_INDEX = (f"CREATE INDEX {N.PG_TRIGRAM_INDEX} ON messages USING gin (\n"
                        f"    ({N.PG_TEXT_FUNCTION}(content) || E'\\n' || COALESCE(tool_name, '')) "
                        f"gin_trgm_ops)\n    WHERE role IS DISTINCT FROM 'tool'")
OLD_PG_PENDING_INDEX = (f"CREATE INDEX {N.PG_PENDING_INDEX} ON messages (id)\n"
                        f"    WHERE {N.PG_CJK_COLUMN} IS NULL AND role IS DISTINCT FROM 'tool'")


def downgrade() -> None:
    """PostgreSQL: the former partial indexes back (tool rows keep their tokens, which the former
    queries never read). SQLite: refused, since below this revision search scope depends on a
    term's script (restore a backup to go back)."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        raise NotImplementedError("below this revision search scope depends on a term's script; "
                                  "restore a backup to go back")
    if bind.exec_driver_sql(f"SELECT to_regclass('{N.PG_PENDING_INDEX}')").scalar() is None:
        return
    op.execute(f"DROP INDEX IF EXISTS {N.PG_TRIGRAM_INDEX}")
    op.execute(f"DROP INDEX {N.PG_PENDING_INDEX}")
    op.execute(OLD_PG_TRIGRAM_INDEX)
    op.execute(OLD_PG_PENDING_INDEX)
