"""Retire whatever full-text layout the store had, cheaply, and mark the rows still to index.

The v11 indexes are inline: each keeps its own copy of every message (full tool bodies and
tool-call JSON included), which is most of a legacy file. Re-indexing a multi-GB store inside
the upgrade transaction would hold the write lock for minutes, so this revision only:

* drops every FTS trigger on ``messages``/``sessions`` (by name or by what they reference:
  upstream releases used other names) and the views such layouts read, except the agent's own
  CJK objects (``messages_fts_cjk`` on its native ``cjk_unicode61`` tokenizer, its view and
  triggers): they serve the agent, which keeps writing this file, and are left to it;
* renames inline indexes aside (``…_old``: a schema edit, no data moved). They keep answering
  queries for the rows the new indexes do not cover yet, so search is complete at once;
* drops external-content or contentless indexes (they hold no text of their own), falling back
  to removing the schema row when their tokenizer is a loadable one this runtime lacks;
* records the backfill window in ``state_meta``: ``fts_rebuild_high_water`` H = max message id,
  ``fts_rebuild_progress`` P = 0. Triggers of the new indexes handle ids outside (P, H];
  ``hermes_store.ops.storage.optimize_storage`` indexes the window in resumable chunks.

A small store (at most ``SMALL_STORE_ROWS`` messages, about a second of indexing) needs no
window: its old tables are dropped on the spot and the revisions that follow index it directly.

Revision ID: 0013_retire_inline_fts
Revises: 0012_newer_session_columns
"""

from alembic import op

revision = "0013_retire_inline_fts"
down_revision = "0012_newer_session_columns"
branch_labels = None
depends_on = None

INDEXES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")
RETIRED_SUFFIX = "_old"
# Indexing this many rows inside the upgrade takes about a second on a laptop.
SMALL_STORE_ROWS = 5000
SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")

FTS_TRIGGERS = """
SELECT name FROM sqlite_master
WHERE type = 'trigger' AND tbl_name IN ('messages', 'sessions')
  AND (name LIKE '%fts%' OR sql LIKE '%messages_fts%')
"""
FTS_VIEWS = "SELECT name FROM sqlite_master WHERE type = 'view' AND name LIKE 'messages_fts%'"
MARK_WINDOW = """
INSERT OR REPLACE INTO state_meta (key, value)
VALUES ('fts_rebuild_high_water', :high), ('fts_rebuild_progress', '0')
"""


# The agent's CJK index, built only where its native tokenizer loads (docs/mixed-fleets.md).
AGENT_CJK_INDEX = "messages_fts_cjk"
AGENT_CJK_TOKENIZER = "cjk_unicode61"


def _agent_cjk() -> bool:
    sql = op.get_bind().exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
        (AGENT_CJK_INDEX,)).scalar()
    # Its tokenizer, or its content view when a test stands unicode61 in for the tokenizer.
    return AGENT_CJK_TOKENIZER in (sql or "") or "messages_fts_cjk_src" in (sql or "")


def _names(sql: str) -> list[str]:
    return [row[0] for row in op.get_bind().exec_driver_sql(sql)]


def _tables() -> set[str]:
    return set(_names("SELECT name FROM sqlite_master WHERE type = 'table'"))


def _force_drop(name: str) -> None:
    """Drop an FTS5 table whose tokenizer cannot be loaded here (DROP needs to connect to it)."""
    bind = op.get_bind()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql("DELETE FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    # RESET also reloads the schema, so this connection forgets the removed table at once.
    bind.exec_driver_sql("PRAGMA writable_schema = RESET")
    for suffix in SHADOWS:
        bind.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}{suffix}"')


def _drop(name: str) -> None:
    try:
        op.execute(f'DROP TABLE "{name}"')
    except Exception:  # noqa: BLE001 - "no such tokenizer" and kin: the module cannot connect
        _force_drop(name)


def _is_small() -> bool:
    # Bounded count: a multi-GB table is never walked just to learn that it is large.
    sql = f"SELECT count(*) FROM (SELECT 1 FROM messages LIMIT {SMALL_STORE_ROWS + 1})"
    return op.get_bind().exec_driver_sql(sql).scalar() <= SMALL_STORE_ROWS


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return  # FTS5: PostgreSQL's search objects come from their own revision
    agents = AGENT_CJK_INDEX if _agent_cjk() else None
    for trigger in _names(FTS_TRIGGERS):
        if not (agents and trigger.startswith(agents)):
            op.execute(f'DROP TRIGGER "{trigger}"')
    for view in _names(FTS_VIEWS):
        if not (agents and view.startswith(agents)):
            op.execute(f'DROP VIEW "{view}"')
    bind = op.get_bind()
    high = bind.exec_driver_sql("SELECT max(id) FROM messages").scalar()
    windowed = bool(high) and not _is_small()
    tables = _tables()
    for name in INDEXES:
        if name == agents:
            continue
        retired = name + RETIRED_SUFFIX
        if retired in tables:  # an earlier, unfinished retirement: superseded by this one
            _drop(retired)
        if name not in tables:
            continue
        if name + "_content" in tables and windowed:
            op.execute(f'ALTER TABLE "{name}" RENAME TO "{retired}"')
        else:
            _drop(name)
    if windowed:
        bind.exec_driver_sql(MARK_WINDOW, {"high": str(high)})


def downgrade() -> None:
    raise NotImplementedError("the inline layout is history; restore a backup to go below it")
