"""v5: token and billing accounting columns on sessions.

Cache and reasoning token counters and the billing/cost fields the agent's status bar reads.

Revision ID: 0005_v5_billing
Revises: 0004_v4_titles
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_v5_billing"
down_revision = "0004_v4_titles"
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
            "cache_read_tokens": "INTEGER DEFAULT 0",
            "cache_write_tokens": "INTEGER DEFAULT 0",
            "reasoning_tokens": "INTEGER DEFAULT 0",
            "billing_provider": "TEXT",
            "billing_base_url": "TEXT",
            "billing_mode": "TEXT",
            "estimated_cost_usd": "REAL",
            "actual_cost_usd": "REAL",
            "cost_status": "TEXT",
            "cost_source": "TEXT",
            "pricing_version": "TEXT",
        },
    )
    op.execute("UPDATE schema_version SET version = 5")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
