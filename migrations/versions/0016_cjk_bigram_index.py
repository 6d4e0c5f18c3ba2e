"""The CJK bigram index: 1- and 2-character CJK terms at index speed, with no loadable extension.

unicode61 reads a run of CJK letters as one token and the trigram tokenizer needs three
characters, so short CJK terms used to scan every message with LIKE. Upstream solved it with a
native tokenizer; this runtime cannot load one, and the index must stay correct whatever client
writes ``messages`` (the ``sqlite3`` shell, Alembic, another program).

* ``messages_cjk(id, text, calls)`` holds, for rows of ``messages_search_scope`` whose text has a
  CJK character, the derived bigram text of content and tool name (``fts.cjk_bigram_text``) and
  the raw tool-call JSON; ``messages_fts_cjk`` is an external-content unicode61 index over it,
  kept in step by plain triggers on the side table. ``calls`` lets a Latin term be judged on
  those rows by this index alone (the row split of docs/search.md#routing), keeping tool-call hits.
* Deriving bigrams needs Python, and no application function may live in a trigger. So plain
  triggers on ``messages`` do the part SQL can: on insert, or on a real change of an indexed
  column, they drop the stale side row and record the id in ``messages_cjk_pending``; on delete
  they remove the side row. The library derives the side row in the writer's own transaction
  (``hermes_store.repo.bigrams.sync_messages``) and clears the id, so pending is normally empty.
* Rows another program wrote stay in ``messages_cjk_pending`` until a catch-up drains it
  (maintenance, and writers opportunistically). Search answers pending ids with a LIKE bounded
  to those ids, so results are complete at every moment, never a scan of the whole table.

Revision ID: 0016_cjk_bigram_index
Revises: 0015_trigram_without_tools
"""

from alembic import op

revision = "0016_cjk_bigram_index"
down_revision = "0015_trigram_without_tools"
branch_labels = None
depends_on = None

OUTSIDE_WINDOW = "NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE {id} > lo AND {id} <= hi)"
CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
           "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role "
           "OR old.session_id IS NOT new.session_id OR old.id IS NOT new.id)")

STATEMENTS = [
    "CREATE TABLE messages_cjk (id INTEGER PRIMARY KEY, text TEXT NOT NULL, calls TEXT)",
    "CREATE TABLE messages_cjk_pending (id INTEGER PRIMARY KEY)",
    """CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(
    text, calls, content='messages_cjk', content_rowid='id'
)""",
    """CREATE TRIGGER messages_cjk_ai AFTER INSERT ON messages_cjk BEGIN
    INSERT INTO messages_fts_cjk (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END""",
    """CREATE TRIGGER messages_cjk_ad AFTER DELETE ON messages_cjk BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
END""",
    """CREATE TRIGGER messages_cjk_au AFTER UPDATE ON messages_cjk BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
    INSERT INTO messages_fts_cjk (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END""",
    f"""CREATE TRIGGER messages_cjk_pending_ai AFTER INSERT ON messages
WHEN new.role IS NOT 'tool' AND {OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT OR IGNORE INTO messages_cjk_pending (id) VALUES (new.id);
END""",
    f"""CREATE TRIGGER messages_cjk_pending_au
AFTER UPDATE OF content, tool_name, tool_calls, role, session_id, id ON messages
WHEN {CHANGED}
BEGIN
    DELETE FROM messages_cjk WHERE id = old.id;
    DELETE FROM messages_cjk_pending WHERE id = old.id;
    INSERT OR IGNORE INTO messages_cjk_pending (id)
    SELECT new.id WHERE new.role IS NOT 'tool' AND {OUTSIDE_WINDOW.format(id="new.id")};
END""",
    """CREATE TRIGGER messages_cjk_ad_messages AFTER DELETE ON messages BEGIN
    DELETE FROM messages_cjk WHERE id = old.id;
    DELETE FROM messages_cjk_pending WHERE id = old.id;
END""",
    f"""CREATE TRIGGER messages_cjk_session_au AFTER UPDATE OF source, id ON sessions
WHEN old.source IS NOT new.source OR old.id IS NOT new.id
BEGIN
    DELETE FROM messages_cjk WHERE id IN (SELECT id FROM messages WHERE session_id = old.id);
    INSERT OR IGNORE INTO messages_cjk_pending (id)
    SELECT m.id FROM messages AS m
    WHERE m.session_id = new.id AND m.role IS NOT 'tool' AND {OUTSIDE_WINDOW.format(id="m.id")};
END""",
    """CREATE TRIGGER messages_cjk_session_bd BEFORE DELETE ON sessions BEGIN
    DELETE FROM messages_cjk WHERE id IN (SELECT id FROM messages WHERE session_id = old.id);
END""",
]

# Deriving bigrams needs Python: rows of a small store go to the pending list, which search
# answers with a bounded LIKE and the first writer or maintenance run drains.
BACKFILL = """
INSERT INTO messages_cjk_pending (id) SELECT id FROM messages WHERE role IS NOT 'tool'"""
WINDOW_OPEN = "SELECT 1 FROM fts_backfill_window"


def _small_store() -> bool:
    """No backfill window (see 0013): the store is indexed here, in the upgrade."""
    return op.get_bind().exec_driver_sql(WINDOW_OPEN).first() is None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # FTS5: PostgreSQL's search objects come from their own revision
    # The agent's own messages_fts_cjk (its native tokenizer, kept by 0013) holds the name: our
    # bigram index and the triggers writing to it come with revision 0022, under names of ours.
    taken = op.get_bind().exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_cjk'").first() is not None
    for stmt in STATEMENTS:
        if not (taken and "messages_fts_cjk" in stmt):
            op.execute(stmt)
    if _small_store():
        op.execute(BACKFILL)


def downgrade() -> None:
    raise NotImplementedError("the inline layout is history; restore a backup to go below it")
