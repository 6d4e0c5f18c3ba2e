"""v10: a trigram twin of the word index, for substring and CJK search.

Reproduces schema_version 10: an external-content ``messages_fts_trigram`` table with its three
triggers, back-filled from every row with content. Skipped where FTS5 is missing.

Revision ID: 0010_v10_trigram
Revises: 0009_v9_codex_items
"""

from alembic import op

revision = "0010_v10_trigram"
down_revision = "0009_v9_codex_items"
branch_labels = None
depends_on = None

FTS = [
    """CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content,
    content=messages,
    content_rowid=id,
    tokenize='trigram'
)""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) VALUES('delete', old.id, old.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END""",
    "INSERT INTO messages_fts_trigram(rowid, content) "
    "SELECT id, content FROM messages WHERE content IS NOT NULL",
]


def _has_trigram() -> bool:
    bind = op.get_bind()
    try:
        bind.exec_driver_sql("CREATE VIRTUAL TABLE temp.trigram_probe USING fts5(x, tokenize='trigram')")
    except Exception:  # noqa: BLE001 - no FTS5, or a SQLite older than 3.34
        return False
    bind.exec_driver_sql("DROP TABLE temp.trigram_probe")
    return True


def _retired_later() -> bool:
    # env.py names every revision this run goes through: building an index that a later one
    # drops costs a full copy of the text, free pages left behind and time under the write lock.
    return "0011_v11_inline_fts" in op.get_context().opts.get("hermes_upgrade_through", ())


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # the agent's SQLite history: a PostgreSQL store starts at 0012
    if not _retired_later() and _has_trigram():
        for stmt in FTS:
            op.execute(stmt)
    op.execute("UPDATE schema_version SET version = 10")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
