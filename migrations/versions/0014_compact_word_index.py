"""The word index, external-content: the text lives once, in ``messages``.

``messages_search_text`` is the one definition of "the text of a message": multimodal content
(stored as ``"\\x00json:"`` + a JSON list of parts) reduced to its text parts, never an image or
base64 payload. SQLite's text functions stop at the NUL of the sentinel, hence the BLOB casts.

``messages_fts_src`` is what the word index holds: that text (tool rows cut to their first 8,192
characters; full bodies stay searchable through the explicit tool-role LIKE route), tool name
and tool-call JSON. Every trigger reads this view for the row at hand instead of repeating the
expressions, so what is indexed, what ``'delete'`` removes and what ``'integrity-check'`` re-reads
can never disagree. Deletes run BEFORE the row changes (the view still shows what was indexed);
inserts run AFTER. The update triggers fire only when an indexed column really changed, so flag
updates (``active``, ``archived``…) never touch the index.

Rows inside the backfill window of ``fts_backfill_window`` (see 0013) are left to the backfill.

Revision ID: 0014_compact_word_index
Revises: 0013_retire_inline_fts
"""

from alembic import op

revision = "0014_compact_word_index"
down_revision = "0013_retire_inline_fts"
branch_labels = None
depends_on = None

_JSON = "CAST(substr(CAST(m.content AS BLOB), 7) AS TEXT)"
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

STATEMENTS = [
    f"""CREATE VIEW messages_search_text AS
SELECT m.id, m.session_id, m.role, m.tool_name, m.tool_calls,
    CASE
        WHEN substr(CAST(m.content AS BLOB), 1, 6) <> X'006A736F6E3A' THEN m.content
        WHEN json_valid({_JSON}) THEN {_PARTS}
        ELSE ''
    END AS text
FROM messages AS m""",
    """CREATE VIEW fts_backfill_window AS
SELECT CAST(p.value AS INTEGER) AS lo, CAST(h.value AS INTEGER) AS hi
FROM state_meta AS h JOIN state_meta AS p ON p.key = 'fts_rebuild_progress'
WHERE h.key = 'fts_rebuild_high_water'""",
    """CREATE VIEW messages_fts_src AS
SELECT id,
    CASE WHEN role = 'tool' THEN substr(COALESCE(text, ''), 1, 8192) ELSE text END AS content,
    tool_name, tool_calls
FROM messages_search_text""",
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, tool_name, tool_calls,
    content='messages_fts_src', content_rowid='id'
)""",
    """CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages
WHEN NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE new.id > lo AND new.id <= hi)
BEGIN
    INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
    SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = new.id;
END""",
    """CREATE TRIGGER messages_fts_bd BEFORE DELETE ON messages
WHEN NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE old.id > lo AND old.id <= hi)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
    SELECT 'delete', id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = old.id;
END""",
    """CREATE TRIGGER messages_fts_bu BEFORE UPDATE OF content, tool_name, tool_calls, role, id
ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role OR old.id IS NOT new.id)
  AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE old.id > lo AND old.id <= hi)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
    SELECT 'delete', id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = old.id;
END""",
    """CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, tool_name, tool_calls, role, id
ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role OR old.id IS NOT new.id)
  AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE new.id > lo AND new.id <= hi)
BEGIN
    INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
    SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = new.id;
END""",
]


BACKFILL = """
INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
SELECT id, content, tool_name, tool_calls FROM messages_fts_src"""
WINDOW_OPEN = "SELECT 1 FROM fts_backfill_window"


def _small_store() -> bool:
    """No backfill window (see 0013): the store is indexed here, in the upgrade."""
    return op.get_bind().exec_driver_sql(WINDOW_OPEN).first() is None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # FTS5: PostgreSQL's search objects come from their own revision
    for stmt in STATEMENTS:
        op.execute(stmt)
    if _small_store():
        op.execute(BACKFILL)


def downgrade() -> None:
    raise NotImplementedError("the inline layout is history; restore a backup to go below it")
