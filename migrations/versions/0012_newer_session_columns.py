"""Columns users rely on from the newer upstream store: workspace, profile, flags, activity.

``archived`` and ``pinned`` back the archive/pin verbs (pinned sessions are never pruned or
auto-archived); ``cwd``/``git_*`` answer "what did I do in this repo"; ``last_activity_at`` feeds
the one shared last-activity expression; ``origin_json`` keeps import provenance; messages gain
``active``/``compacted`` so compaction and truncation flag rows instead of deleting them.
Stores adopted from newer upstream releases (schema_version 12…31) often have some of these
already: only what is missing is added, and nothing else of theirs is touched.

Revision ID: 0012_newer_session_columns
Revises: 0011_v11_inline_fts
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_newer_session_columns"
down_revision = "0011_v11_inline_fts"
branch_labels = None
depends_on = None

SESSIONS = {
    "cwd": "TEXT",
    "git_branch": "TEXT",
    "git_repo_root": "TEXT",
    "profile_name": "TEXT",
    "last_activity_at": "REAL",
    "origin_json": "TEXT",
    "archived": "INTEGER NOT NULL DEFAULT 0",
    "pinned": "INTEGER NOT NULL DEFAULT 0",
}
MESSAGES = {
    "active": "INTEGER NOT NULL DEFAULT 1",
    "compacted": "INTEGER NOT NULL DEFAULT 0",
}


def _missing(table: str, columns: dict[str, str]) -> dict[str, str]:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}
    return {name: ddl for name, ddl in columns.items() if name not in have}


def upgrade() -> None:
    for table, columns in (("sessions", SESSIONS), ("messages", MESSAGES)):
        for name, ddl in _missing(table, columns).items():
            op.execute(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}")


def downgrade() -> None:
    # Only safe on stores this project created: an adopted store may have had these columns
    # before us, and dropping them would lose its data. Refuse rather than guess.
    raise NotImplementedError("dropping columns an adopted store may have owned would lose data")
