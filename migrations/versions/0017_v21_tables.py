"""The v21 agent's tables, columns and indexes, so the store stands in for the agent it runs today.

The agent's v0.21 line keeps gateway peers, handoff state and compression advisory state on
``sessions``, message provenance (``platform_message_id``, ``observed``, ``effect_disposition``)
on ``messages``, and four tables of its own: per-model usage, the gateway routing index,
compression locks and async delegations. Stores adopted from that line already hold all of it
(and their rows are carried through untouched); older ones get exactly the DDL the agent writes,
so a v21 agent opening the file afterwards finds nothing to add. Only what is missing is created.
The Telegram topic tables are absent on purpose: the agent creates them only on opt-in.

On PostgreSQL the same objects are created with the models' PostgreSQL types (``bigint``,
``double precision``, text in the "C" collation, as revision 0012 explains) and constraint names
of the models' naming convention, so that autogenerate compares them equal.

Revision ID: 0017_v21_tables
Revises: 0016_cjk_bigram_index
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_v21_tables"
down_revision = "0016_cjk_bigram_index"
branch_labels = None
depends_on = None

SESSIONS = {
    "session_key": "TEXT",
    "chat_id": "TEXT",
    "chat_type": "TEXT",
    "thread_id": "TEXT",
    "display_name": "TEXT",
    "expiry_finalized": "INTEGER DEFAULT 0",
    "handoff_state": "TEXT",
    "handoff_platform": "TEXT",
    "handoff_error": "TEXT",
    "compression_failure_cooldown_until": "REAL",
    "compression_failure_error": "TEXT",
    "compression_fallback_streak": "INTEGER NOT NULL DEFAULT 0",
    "rewind_count": "INTEGER NOT NULL DEFAULT 0",
}
MESSAGES = {
    "effect_disposition": "TEXT",
    "platform_message_id": "TEXT",
    "observed": "INTEGER DEFAULT 0",
}

TABLES = {
    "session_model_usage": """CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode)
)""",
    "gateway_routing": """CREATE TABLE gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
)""",
    "compression_locks": """CREATE TABLE compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
)""",
    "async_delegations": """CREATE TABLE async_delegations (
    delegation_id TEXT PRIMARY KEY,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at REAL NOT NULL,
    completed_at REAL,
    updated_at REAL NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at REAL
)""",
}

# Exactly the agent's index DDL, so its own "IF NOT EXISTS" finds every one of them.
INDEXES = {
    "idx_sessions_source_id": "ON sessions(source, id)",
    "idx_compression_locks_expires": "ON compression_locks(expires_at)",
    "idx_session_model_usage_session": "ON session_model_usage(session_id)",
    "idx_session_model_usage_model": "ON session_model_usage(model)",
    "idx_async_delegations_delivery": "ON async_delegations(delivery_state, completed_at)",
    "idx_messages_session_active": "ON messages(session_id, active, timestamp)",
    "idx_messages_active_null": "ON messages(active) WHERE active IS NULL",
    "idx_sessions_session_key": "ON sessions(session_key, started_at DESC)",
    "idx_sessions_gateway_peer":
        "ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC)",
    "idx_sessions_handoff_state": "ON sessions(handoff_state, started_at)",
    "idx_messages_platform_msg_id":
        "ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL",
}


T = 'TEXT COLLATE "C"'
PG_TYPES = {"TEXT": T, "INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION"}
POSTGRESQL_TABLES = [
    f"""CREATE TABLE session_model_usage (
    session_id {T} NOT NULL,
    model {T} NOT NULL,
    billing_provider {T} NOT NULL DEFAULT '',
    billing_base_url {T} NOT NULL DEFAULT '',
    billing_mode {T} NOT NULL DEFAULT '',
    api_call_count BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    estimated_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    actual_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    cost_status {T},
    cost_source {T},
    first_seen DOUBLE PRECISION,
    last_seen DOUBLE PRECISION,
    CONSTRAINT pk_session_model_usage
        PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode),
    CONSTRAINT fk_session_model_usage_session_id_sessions
        FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE
)""",
    f"""CREATE TABLE gateway_routing (
    scope {T} NOT NULL DEFAULT '',
    session_key {T} NOT NULL,
    entry_json {T} NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    CONSTRAINT pk_gateway_routing PRIMARY KEY (scope, session_key)
)""",
    f"""CREATE TABLE compression_locks (
    session_id {T} NOT NULL,
    holder {T} NOT NULL,
    acquired_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    CONSTRAINT pk_compression_locks PRIMARY KEY (session_id)
)""",
    f"""CREATE TABLE async_delegations (
    delegation_id {T} NOT NULL,
    origin_session {T} NOT NULL,
    origin_ui_session_id {T} NOT NULL DEFAULT '',
    parent_session_id {T},
    state {T} NOT NULL,
    dispatched_at DOUBLE PRECISION NOT NULL,
    completed_at DOUBLE PRECISION,
    updated_at DOUBLE PRECISION NOT NULL,
    event_json {T},
    result_json {T},
    delivery_state {T} NOT NULL DEFAULT 'pending',
    delivery_attempts BIGINT NOT NULL DEFAULT 0,
    delivered_at DOUBLE PRECISION,
    owner_pid BIGINT,
    owner_started_at BIGINT,
    task_json {T},
    delivery_claim {T},
    delivery_claimed_at DOUBLE PRECISION,
    CONSTRAINT pk_async_delegations PRIMARY KEY (delegation_id)
)""",
]


def _pg_column(ddl: str) -> str:
    kind, _, rest = ddl.partition(" ")
    return f"{PG_TYPES[kind]} {rest}".strip()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in (("sessions", SESSIONS), ("messages", MESSAGES)):
            for name, ddl in columns.items():
                op.execute(f"ALTER TABLE {table} ADD COLUMN {name} {_pg_column(ddl)}")
        for stmt in POSTGRESQL_TABLES:
            op.execute(stmt)
        # PostgreSQL reflects a DESC key (SQLite does not) and scans an index either way: the
        # model names the plain column, so the index is created that way here.
        for name, body in INDEXES.items():
            op.execute(f"CREATE INDEX {name} {body.replace(' DESC', '')}")
        return
    inspector = sa.inspect(op.get_bind())
    tables = set(inspector.get_table_names())
    for table, columns in (("sessions", SESSIONS), ("messages", MESSAGES)):
        have = {c["name"] for c in inspector.get_columns(table)}
        for name, ddl in columns.items():
            if name not in have:
                op.execute(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}")
    for name, ddl in TABLES.items():
        if name not in tables:
            op.execute(ddl)
    for name, body in INDEXES.items():
        op.execute(f"CREATE INDEX IF NOT EXISTS {name} {body}")


def downgrade() -> None:
    # Adopted v21 stores owned these before us; dropping them would lose the agent's data.
    raise NotImplementedError("dropping tables an adopted store may have owned would lose data")
