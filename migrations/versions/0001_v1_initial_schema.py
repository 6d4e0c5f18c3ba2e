"""v1: the agent's initial layout — sessions, messages, an external-content FTS5 index.

Reproduces the DDL the agent's store wrote at schema_version 1, so an empty file walks the
same history as the databases in the wild; legacy stores at version 1 are stamped here.
The FTS5 parts are skipped on a SQLite built without FTS5: search then degrades until the
indexes can be built, and the upgrade still completes.

Revision ID: 0001_v1_initial
Revises:
"""

from alembic import op

revision = "0001_v1_initial"
down_revision = None
branch_labels = None
depends_on = None

TABLES = [
    "CREATE TABLE schema_version (\n    version INTEGER NOT NULL\n)",
    """CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
)""",
    """CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER
)""",
    "CREATE INDEX idx_sessions_source ON sessions(source)",
    "CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX idx_sessions_started ON sessions(started_at DESC)",
    "CREATE INDEX idx_messages_session ON messages(session_id, timestamp)",
    "INSERT INTO schema_version (version) VALUES (1)",
]

FTS = [
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content=messages,
    content_rowid=id
)""",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
]


def _has_fts5() -> bool:
    bind = op.get_bind()
    try:
        bind.exec_driver_sql("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
    except Exception:  # noqa: BLE001 - any failure means "no usable FTS5"
        return False
    bind.exec_driver_sql("DROP TABLE temp.fts5_probe")
    return True


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # the agent's SQLite history: a PostgreSQL store starts at 0012
    for stmt in TABLES:
        op.execute(stmt)
    if _has_fts5():
        for stmt in FTS:
            op.execute(stmt)


def downgrade() -> None:
    raise NotImplementedError("the legacy layout is history; restore a backup to go below it")
