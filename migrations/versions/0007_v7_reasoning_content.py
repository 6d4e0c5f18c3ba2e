"""v7: messages.reasoning_content.

Upstream once renumbered this step, so stores that were 'at 7' skipped it (#14097); adding
only what is missing makes every such store whole again.

Revision ID: 0007_v7_reasoning_content
Revises: 0006_v6_reasoning
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_v7_reasoning_content"
down_revision = "0006_v6_reasoning"
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
            "reasoning_content": "TEXT",
        },
    )
    op.execute("UPDATE schema_version SET version = 7")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
