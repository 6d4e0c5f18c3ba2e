"""Files as the agent's current releases (schema 30 and 31) write them, and what it does when it
reopens a file, replayed with plain SQL.

Written from the facts in docs/mixed-fleets.md#the-agent-today (tables, columns, search objects,
open-time behaviour), not from the agent's code: the column types and trigger bodies are ours.
What the tests rely on is what the agent does with names: it creates its search objects by name
with ``IF NOT EXISTS``, keeps whatever holds a name, and its stale path drops its six trigger
names and rebuilds.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

# Schema 31 adds these five columns (the others are in both).
V31_SESSION_COLUMNS = ("auto_archived",)
V31_MESSAGE_COLUMNS = ("message_uid", "absorbed_message_uids", "tool_call_uids", "tool_call_uid")

SESSION_COLUMNS = """
id TEXT PRIMARY KEY, source TEXT NOT NULL, created_source TEXT, user_id TEXT, session_key TEXT,
chat_id TEXT, chat_type TEXT, thread_id TEXT, display_name TEXT, origin_json TEXT,
expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT, system_prompt TEXT,
system_prompt_hash TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
end_reason TEXT, message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
reasoning_tokens INTEGER DEFAULT 0, cwd TEXT, git_branch TEXT, git_repo_root TEXT,
git_metadata_generation INTEGER DEFAULT 0, billing_provider TEXT, billing_base_url TEXT,
billing_mode TEXT, estimated_cost_usd REAL, actual_cost_usd REAL, cost_status TEXT,
cost_source TEXT, pricing_version TEXT, title TEXT, title_source TEXT, last_activity_at REAL,
last_activity_description TEXT, last_activity_provenance TEXT, api_call_count INTEGER DEFAULT 0,
handoff_state TEXT, handoff_platform TEXT, handoff_error TEXT,
compression_failure_cooldown_until REAL, compression_failure_error TEXT,
compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
compression_ineffective_count INTEGER NOT NULL DEFAULT 0, compression_recovery_deadline REAL,
compression_overload_streak INTEGER NOT NULL DEFAULT 0, profile_name TEXT,
transport_profile TEXT, rewind_count INTEGER NOT NULL DEFAULT 0,
archived INTEGER NOT NULL DEFAULT 0, auto_archived INTEGER NOT NULL DEFAULT 0,
pinned INTEGER NOT NULL DEFAULT 0, hidden INTEGER NOT NULL DEFAULT 0, last_read_at REAL,
tool_names TEXT"""
MESSAGE_COLUMNS = """
id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
effect_disposition TEXT, timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT,
reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT, codex_reasoning_items TEXT,
codex_message_items TEXT, platform_message_id TEXT, observed INTEGER DEFAULT 0,
_compressed_summary INTEGER DEFAULT 0, active INTEGER NOT NULL DEFAULT 1,
compacted INTEGER NOT NULL DEFAULT 0, api_content TEXT, display_kind TEXT,
display_metadata TEXT, display_identity BLOB, display_order INTEGER, message_uid TEXT,
absorbed_message_uids TEXT, tool_call_uids TEXT, tool_call_uid TEXT"""


def _columns(block: str, left_out: tuple[str, ...]) -> str:
    parts = [p.strip() for p in block.replace("\n", " ").split(", ") if p.strip()]
    # A REFERENCES clause has no comma of its own: each part starts with its column name.
    return ",\n    ".join(p for p in parts if p.split()[0] not in left_out)


def schema_sql(version: int) -> str:
    """The agent's tables and indexes at ``version`` (30 or 31), each ``IF NOT EXISTS``."""
    sessions = _columns(SESSION_COLUMNS, () if version >= 31 else V31_SESSION_COLUMNS)
    messages = _columns(MESSAGE_COLUMNS, () if version >= 31 else V31_MESSAGE_COLUMNS)
    return f"""
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sessions (
    {sessions},
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);
CREATE TABLE IF NOT EXISTS messages (
    {messages}
);
CREATE TABLE IF NOT EXISTS system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '', task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
);
CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT NULL, entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (scope, session_key)
);
CREATE TABLE IF NOT EXISTS gateway_hygiene_state (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS gateway_heartbeats (gateway TEXT PRIMARY KEY, beat_at REAL);
CREATE TABLE IF NOT EXISTS conversation_generations (session_id TEXT PRIMARY KEY,
                                                     generation INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS compression_locks (session_id TEXT PRIMARY KEY, holder TEXT NOT NULL,
                                              acquired_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS session_turn_leases (session_id TEXT PRIMARY KEY, holder TEXT,
                                                expires_at REAL);
CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT, state TEXT NOT NULL,
    dispatched_at REAL NOT NULL, completed_at REAL, updated_at REAL NOT NULL, event_json TEXT,
    result_json TEXT, delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL, owner_pid INTEGER,
    owner_started_at INTEGER, task_json TEXT, delivery_claim TEXT, delivery_claimed_at REAL,
    delivery_error TEXT
);
CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX IF NOT EXISTS idx_sessions_effective_activity
    ON sessions(COALESCE(last_activity_at, started_at) DESC);
CREATE TRIGGER IF NOT EXISTS messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = new.id WHERE id = new.id;
END;
"""


# The agent's default search objects: gated on its own backfill keys.
_GATE = ("NOT EXISTS (SELECT 1 FROM state_meta WHERE key = 'fts_rebuild_high_water' "
         "AND {id} <= CAST(value AS INTEGER))")
SEARCH_SQL = f"""
CREATE VIEW IF NOT EXISTS messages_fts_src AS
SELECT id, CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192) ELSE content END
       AS content, tool_name, tool_calls FROM messages;
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages
WHEN {_GATE.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
    SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = new.id;
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN {_GATE.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, CASE WHEN old.role = 'tool'
            THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END,
            old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls
ON messages WHEN {_GATE.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, CASE WHEN old.role = 'tool'
            THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END,
            old.tool_name, old.tool_calls);
    INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
    SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = new.id;
END;
CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS
SELECT m.id, m.role, m.content, m.tool_name FROM messages AS m JOIN sessions AS s
ON s.id = m.session_id WHERE m.role != 'tool' AND s.source NOT IN ('cron', 'subagent')
  AND COALESCE(json_extract(s.model_config, '$._delegate_from'), '') = '';
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content, tool_name, content='messages_fts_trigram_src', content_rowid='id',
    tokenize='trigram');
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages
WHEN {_GATE.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id = new.id;
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete BEFORE DELETE ON messages
WHEN {_GATE.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', id, content, tool_name FROM messages_fts_trigram_src WHERE id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update AFTER UPDATE OF content, tool_name
ON messages WHEN {_GATE.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_trigram (messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name
    WHERE old.role != 'tool' AND old.id IN (SELECT id FROM messages_fts_trigram_src);
    INSERT INTO messages_fts_trigram (rowid, content, tool_name)
    SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id = new.id;
END;
"""
SIX_TRIGGERS = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update",
                "messages_fts_trigram_insert", "messages_fts_trigram_delete",
                "messages_fts_trigram_update")
CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")
_CJK_GATE = ("NOT EXISTS (SELECT 1 FROM state_meta WHERE key = 'fts_cjk_rebuild_high_water' "
             "AND {id} <= CAST(value AS INTEGER))")


def cjk_sql(tokenizer: str = "cjk_unicode61") -> str:
    """The agent's CJK objects (only where its native tokenizer loads). Tests stand unicode61
    in for it where no connection loads a library."""
    return f"""
CREATE VIEW IF NOT EXISTS messages_fts_cjk_src AS
SELECT id, role, content, tool_name, tool_calls FROM messages WHERE role != 'tool';
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_cjk USING fts5(
    content, tool_name, tool_calls, content='messages_fts_cjk_src', content_rowid='id',
    tokenize='{tokenizer}');
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_insert AFTER INSERT ON messages
WHEN new.role != 'tool' AND {_CJK_GATE.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_cjk (rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_delete AFTER DELETE ON messages
WHEN old.role != 'tool' AND {_CJK_GATE.format(id="old.id")}
BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_update AFTER UPDATE OF content, tool_name, tool_calls
ON messages WHEN new.role != 'tool' AND {_CJK_GATE.format(id="new.id")}
BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts_cjk (rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;
"""


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()


SESSIONS = [  # id, source, model_config, system prompt (moved into system_prompts), hidden
    ("cli-1", "cli", None, "You are a careful assistant.", 0),
    ("tg-1", "telegram", '{"temperature": 0.2}', "You are a careful assistant.", 0),
    ("cron-1", "cron", None, "Nightly digest.", 1),
]
MESSAGES = [  # session, role, content, tool_name, tool_calls
    ("cli-1", "user", "why does the kubernetes deployment restart", None, None),
    ("cli-1", "assistant", "the liveness probe fails", None,
     '[{"function": {"name": "terminal"}}]'),
    ("cli-1", "tool", "x" * 9000 + " tailword", "terminal", None),
    ("tg-1", "user", "部署失败了 记忆 日志", None, None),
    ("tg-1", "assistant", "ログを確認してください", None, None),
    ("cron-1", "user", "nightly report 定时", None, None),
]


def build(path: Path, version: int = 31, *, cjk: str | None = None) -> Path:
    """A file as the agent at ``version`` leaves it: its tables, search objects and rows, the
    prompts moved into ``system_prompts``; with ``cjk`` (a tokenizer name) its CJK objects too,
    on a connection that can use that tokenizer."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.executescript(schema_sql(version))
        con.executescript(SEARCH_SQL)
        if cjk is not None:
            con.executescript(cjk_sql(cjk))
        con.execute("PRAGMA application_id = 1212501075")
        con.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        con.executemany("INSERT INTO state_meta (key, value) VALUES (?, ?)",
                        [("fts_storage_version", "3"), ("state_db_generation", "9f2c41aa")])
        for n, (sid, source, config, prompt, hidden) in enumerate(SESSIONS):
            con.execute("INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)",
                        (prompt_hash(prompt), prompt))
            con.execute("INSERT INTO sessions (id, source, model_config, system_prompt_hash, "
                        "started_at, hidden, title) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (sid, source, config, prompt_hash(prompt), 1.7e9 + n, hidden,
                         f"title {sid}"))
        for n, (sid, role, content, tool, calls) in enumerate(MESSAGES):
            con.execute("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
                        "timestamp) VALUES (?, ?, ?, ?, ?, ?)",
                        (sid, role, content, tool, calls, 1.7e9 + n))
    finally:
        con.close()
    return path


def reopen(con: sqlite3.Connection, *, cjk: str | None = None) -> None:
    """The agent's open of a file someone else shaped: its scripts, every statement ``IF NOT
    EXISTS`` (a taken name is kept), and FTS5 'rebuild' of an index whose trigger names were
    missing."""
    triggers = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    con.executescript(SEARCH_SQL)
    if cjk is not None:
        con.executescript(cjk_sql(cjk))
    for index, names in (("messages_fts", SIX_TRIGGERS[:3]),
                         ("messages_fts_trigram", SIX_TRIGGERS[3:])):
        if not set(names) <= triggers:
            con.execute(f"INSERT INTO {index} ({index}) VALUES ('rebuild')")
    if cjk is not None and not set(CJK_TRIGGERS) <= triggers:
        con.execute("INSERT INTO messages_fts_cjk (messages_fts_cjk) VALUES ('rebuild')")


def stale_path(con: sqlite3.Connection) -> None:
    """The agent's recovery with ``state_meta.fts_stale`` set: its six trigger names dropped,
    its search tables dropped and recreated, 'rebuild', the flag cleared."""
    for name in SIX_TRIGGERS:
        con.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    con.execute("DROP TABLE IF EXISTS messages_fts")
    con.execute("DROP TABLE IF EXISTS messages_fts_trigram")
    reopen(con)
    con.execute("DELETE FROM state_meta WHERE key = 'fts_stale'")
