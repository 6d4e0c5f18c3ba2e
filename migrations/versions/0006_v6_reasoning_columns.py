"""v6: reasoning columns on messages.

Reasoning text and provider-specific reasoning payloads, kept for API replay.

Revision ID: 0006_v6_reasoning
Revises: 0005_v5_billing
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_v6_reasoning"
down_revision = "0005_v5_billing"
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
        "messages",
        {
            "reasoning": "TEXT",
            "reasoning_details": "TEXT",
            "codex_reasoning_items": "TEXT",
        },
    )
    op.execute("UPDATE schema_version SET version = 6")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
