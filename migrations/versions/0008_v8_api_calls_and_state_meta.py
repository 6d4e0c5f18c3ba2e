"""v8: sessions.api_call_count and the state_meta key/value table.

state_meta holds the store's own markers (backfill progress, layout versions, maintenance times).

Revision ID: 0008_v8_api_calls_state_meta
Revises: 0007_v7_reasoning_content
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_v8_api_calls_state_meta"
down_revision = "0007_v7_reasoning_content"
branch_labels = None
depends_on = None


def _add_missing(table: str, columns: dict[str, str]) -> None:
    # The old store added columns idempotently, so a database may hold one a version early.
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}
    for name, ddl in columns.items():
        if name not in have:
            op.execute(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # the agent's SQLite history: a PostgreSQL store starts at 0012
    _add_missing(
        "sessions",
        {
            "api_call_count": "INTEGER DEFAULT 0",
        },
    )
    op.execute("CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT)")
    op.execute("UPDATE schema_version SET version = 8")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
