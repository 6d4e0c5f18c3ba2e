"""Our index triggers take the agent's own trigger names, so its open adds no second writer.

The agent's v21 store runs its full-text DDL on every open, ``CREATE TRIGGER IF NOT EXISTS
messages_fts_insert …`` and five more by its names. Beside our ``messages_fts_ai``/``…_au``/
``…_bd`` (and the trigram ones) that created a second writer for each index: every insert was
indexed twice, the trigram index received the tool output our layout leaves out, and a store
grew 2.4× in a day while every check still passed (docs/mixed-fleets.md). Once our insert,
delete and after-update triggers carry those six names, the agent's ``IF NOT EXISTS`` finds
them and does nothing.

A store an agent already opened holds its triggers under those names: they are dropped before
ours are renamed, and both indexes are rebuilt from ``messages`` (rows inside an open backfill
window stay for ``optimize-storage``), which removes the doubled and out-of-scope entries.

SQLite only; other dialects have no such triggers, and this revision does nothing there.

Revision ID: 0019_index_triggers_take_agent_names
Revises: 0018_pg_search_indexes
"""

import re

from alembic import op

revision = "0019_index_triggers_take_agent_names"
down_revision = "0018_pg_search_indexes"
branch_labels = None
depends_on = None

RENAMES = {
    "messages_fts_ai": "messages_fts_insert",
    "messages_fts_bd": "messages_fts_delete",
    "messages_fts_au": "messages_fts_update",
    "messages_fts_trigram_ai": "messages_fts_trigram_insert",
    "messages_fts_trigram_bd": "messages_fts_trigram_delete",
    "messages_fts_trigram_au": "messages_fts_trigram_update",
}
TRIGGERS = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
OUTSIDE_WINDOW = "NOT EXISTS (SELECT 1 FROM fts_backfill_window WHERE id > lo AND id <= hi)"
REBUILD = {
    "messages_fts": (
        "INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')",
        "INSERT INTO messages_fts (rowid, content, tool_name, tool_calls) "
        f"SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE {OUTSIDE_WINDOW}",
    ),
    "messages_fts_trigram": (
        "INSERT INTO messages_fts_trigram (messages_fts_trigram) VALUES ('delete-all')",
        "INSERT INTO messages_fts_trigram (rowid, content, tool_name) "
        f"SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE {OUTSIDE_WINDOW}",
    ),
}


def _renamed(sql: str | None, old: str, new: str) -> str | None:
    """``sql`` creating the same trigger under ``new``; None when it is not there (a store
    someone edited by hand keeps its trigger, and ``repair`` reports it)."""
    head = re.compile(rf"^(\s*CREATE\s+TRIGGER\s+)[\"`\[]?{old}[\"`\]]?(?=\s)", re.IGNORECASE)
    if sql is None or not head.match(sql):
        return None
    return head.sub(lambda m: m.group(1) + new, sql, count=1)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    triggers = {name: sql or "" for name, sql in bind.exec_driver_sql(TRIGGERS)}
    foreign = False
    for old, new in RENAMES.items():
        if new in triggers:
            op.execute(f'DROP TRIGGER "{new}"')
            foreign = True
        renamed = _renamed(triggers.get(old), old, new)
        if renamed is not None:
            op.execute(f'DROP TRIGGER "{old}"')
            op.execute(renamed)
    if foreign:
        tables = {row[0] for row in bind.exec_driver_sql(TABLES)}
        for table, statements in REBUILD.items():
            if table in tables:
                for stmt in statements:
                    op.execute(stmt)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    triggers = {name: sql or "" for name, sql in bind.exec_driver_sql(TRIGGERS)}
    for old, new in RENAMES.items():
        renamed = _renamed(triggers.get(new), new, old)
        if renamed is not None:
            op.execute(f'DROP TRIGGER "{new}"')
            op.execute(renamed)
