"""v2: messages.finish_reason.

Why the model stopped; the agent began recording it at schema_version 2.

Revision ID: 0002_v2_finish_reason
Revises: 0001_v1_initial
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_v2_finish_reason"
down_revision = "0001_v1_initial"
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
            "finish_reason": "TEXT",
        },
    )
    op.execute("UPDATE schema_version SET version = 2")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
