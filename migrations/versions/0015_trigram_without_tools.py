"""The trigram (substring) index, external-content, over what people actually read.

``messages_search_scope`` is the coverage shared by the trigram and the CJK bigram index:
non-tool rows of sessions whose source is not ``cron`` or ``subagent``. Tool outputs, tool-call
JSON and machine traffic were what grew upstream's trigram index to 18× the text; they stay
searchable through the word index and the explicit tool-role LIKE route.

Coverage depends on the session too, so besides the message triggers (same pattern as the word
index: read the view, BEFORE for removal and AFTER for insertion, only on real changes), a change
of ``sessions.source`` re-indexes that session's rows and deleting a session first (foreign keys
off) removes them, so ``'integrity-check'`` stays clean whatever plain SQL does.

Revision ID: 0015_trigram_without_tools
Revises: 0014_compact_word_index
"""

from alembic import op

revision = "0015_trigram_without_tools"
down_revision = "0014_compact_word_index"
branch_labels = None
depends_on = None

OUTSIDE_WINDOW = "NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE {id} > lo AND {id} <= hi)"
CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
           "OR old.role IS NOT new.role OR old.session_id IS NOT new.session_id "
           "OR old.id IS NOT new.id)")
REMOVE_SESSION = """
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', t.id, t.content, t.tool_name FROM messages_fts_trigram_src AS t
    WHERE t.id IN (SELECT id FROM messages WHERE session_id = old.id)
      AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE t.id > lo AND t.id <= hi);"""

SCOPE = """CREATE VIEW messages_search_scope AS
SELECT t.id, t.session_id, t.text, t.tool_name, t.tool_calls
FROM messages_search_text AS t JOIN sessions AS s ON s.id = t.session_id
WHERE t.role IS NOT 'tool' AND COALESCE(s.source, '') NOT IN ('cron', 'subagent')"""
TRIGRAM = [
    """CREATE VIEW messages_fts_trigram_src AS
SELECT id, text AS content, tool_name FROM messages_search_scope""",
    """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content, tool_name,
    content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram'
)""",
    f"""CREATE TRIGGER messages_fts_trigram_ai AFTER INSERT ON messages
WHEN new.role IS NOT 'tool' AND {OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id = new.id;
END""",
    f"""CREATE TRIGGER messages_fts_trigram_bd BEFORE DELETE ON messages
WHEN old.role IS NOT 'tool' AND {OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', id, content, tool_name FROM messages_fts_trigram_src WHERE id = old.id;
END""",
    f"""CREATE TRIGGER messages_fts_trigram_bu
BEFORE UPDATE OF content, tool_name, role, session_id, id ON messages
WHEN {CHANGED} AND {OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', id, content, tool_name FROM messages_fts_trigram_src WHERE id = old.id;
END""",
    f"""CREATE TRIGGER messages_fts_trigram_au
AFTER UPDATE OF content, tool_name, role, session_id, id ON messages
WHEN {CHANGED} AND {OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id = new.id;
END""",
    f"""CREATE TRIGGER messages_fts_trigram_session_bu BEFORE UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN{REMOVE_SESSION}
END""",
    """CREATE TRIGGER messages_fts_trigram_session_au AFTER UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT t.id, t.content, t.tool_name FROM messages_fts_trigram_src AS t
    WHERE t.id IN (SELECT id FROM messages WHERE session_id = new.id)
      AND NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE t.id > lo AND t.id <= hi);
END""",
    f"""CREATE TRIGGER messages_fts_trigram_session_bd BEFORE DELETE ON sessions
BEGIN{REMOVE_SESSION}
END""",
]


def _has_trigram() -> bool:
    bind = op.get_bind()
    try:
        bind.exec_driver_sql(
            "CREATE VIRTUAL TABLE temp.trigram_probe USING fts5(x, tokenize='trigram')")
    except Exception:  # noqa: BLE001 - SQLite < 3.34: substring search falls back to LIKE
        return False
    bind.exec_driver_sql("DROP TABLE temp.trigram_probe")
    return True


BACKFILL = """
INSERT INTO messages_fts_trigram (rowid, content, tool_name)
SELECT id, content, tool_name FROM messages_fts_trigram_src"""
WINDOW_OPEN = "SELECT 1 FROM fts_backfill_window"


def _small_store() -> bool:
    """No backfill window (see 0013): the store is indexed here, in the upgrade."""
    return op.get_bind().exec_driver_sql(WINDOW_OPEN).first() is None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # FTS5: PostgreSQL's search objects come from their own revision
    op.execute(SCOPE)
    if _has_trigram():
        for stmt in TRIGRAM:
            op.execute(stmt)
        if _small_store():
            op.execute(BACKFILL)


def downgrade() -> None:
    raise NotImplementedError("the inline layout is history; restore a backup to go below it")
