"""v9: messages.codex_message_items.

Codex Responses message ids and phases, needed to replay a Codex conversation.

Revision ID: 0009_v9_codex_items
Revises: 0008_v8_api_calls_state_meta
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_v9_codex_items"
down_revision = "0008_v8_api_calls_state_meta"
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
            "codex_message_items": "TEXT",
        },
    )
    op.execute("UPDATE schema_version SET version = 9")


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
