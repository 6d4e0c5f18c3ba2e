"""v3+v4: session titles, unique among non-NULL titles.

Version 3 added the column and the same release went on to 4 (the partial unique index), so
no store rests at 3; one found there is stamped at v2 and this revision adds what is missing.

Revision ID: 0004_v4_titles
Revises: 0002_v2_finish_reason
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_v4_titles"
down_revision = "0002_v2_finish_reason"
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
            "title": "TEXT",
        },
    )
    op.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
        "ON sessions(title) WHERE title IS NOT NULL"
    )
    op.execute("UPDATE schema_version SET version = 4")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
