"""v11: both FTS5 indexes re-created inline, over content, tool name and tool-call JSON.

Reproduces schema_version 11 exactly — the layout the seed documents call current — with each
index keeping its own copy of the text. It is history: the compact layout that follows
replaces it. Back-filled from every message row; skipped where FTS5 is missing.

Revision ID: 0011_v11_inline_fts
Revises: 0010_v10_trigram
"""

from alembic import op

revision = "0011_v11_inline_fts"
down_revision = "0010_v10_trigram"
branch_labels = None
depends_on = None

DOC = "COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, '')"

DROP = [
    "DROP TRIGGER IF EXISTS messages_fts_insert",
    "DROP TRIGGER IF EXISTS messages_fts_delete",
    "DROP TRIGGER IF EXISTS messages_fts_update",
    "DROP TRIGGER IF EXISTS messages_fts_trigram_insert",
    "DROP TRIGGER IF EXISTS messages_fts_trigram_delete",
    "DROP TRIGGER IF EXISTS messages_fts_trigram_update",
    "DROP TABLE IF EXISTS messages_fts",
    "DROP TABLE IF EXISTS messages_fts_trigram",
]


def _index(name: str, tokenize: str) -> list[str]:
    options = f",\n    tokenize='{tokenize}'" if tokenize else ""
    return [
        f"CREATE VIRTUAL TABLE {name} USING fts5(\n    content{options}\n)",
        f"""CREATE TRIGGER {name}_insert AFTER INSERT ON messages BEGIN
    INSERT INTO {name}(rowid, content) VALUES (
        new.id,
        {DOC}
    );
END""",
        f"""CREATE TRIGGER {name}_delete AFTER DELETE ON messages BEGIN
    DELETE FROM {name} WHERE rowid = old.id;
END""",
        f"""CREATE TRIGGER {name}_update AFTER UPDATE ON messages BEGIN
    DELETE FROM {name} WHERE rowid = old.id;
    INSERT INTO {name}(rowid, content) VALUES (
        new.id,
        {DOC}
    );
END""",
        f"INSERT INTO {name}(rowid, content) SELECT id, "
        "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '') "
        "FROM messages",
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
    return "0013_retire_inline_fts" in op.get_context().opts.get("hermes_upgrade_through", ())


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # the agent's SQLite history: a PostgreSQL store starts at 0012
    if not _retired_later() and _has_trigram():
        for stmt in DROP + _index("messages_fts", "") + _index("messages_fts_trigram", "trigram"):
            op.execute(stmt)
    op.execute("UPDATE schema_version SET version = 11")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
