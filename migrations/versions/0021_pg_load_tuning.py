"""PostgreSQL under load: "newest first" from an index, small GIN pending lists, no parallel plans.

Three measured changes to revision 0018's layout (docs/search.md#postgresql, README
"Performance at scale"), none of which SQLite has a use for:

* ``idx_messages_search_time`` on ``messages (timestamp, id)``: a search in time order walks it
  and stops at the page for a common term (0.2 ms where sorting every hit took ~50 ms), and a
  rare term still reads the GIN indexes. Named ``idx_messages_search…`` so that the model
  comparison of ``check`` treats it as part of the search layout, as the GIN indexes.
* ``gin_pending_list_limit = 128`` (kB) on the three GIN indexes, ``fastupdate`` left on: with the
  default 4 MB the append that overflows the list merges all of it first (~250 ms measured);
  with 128 kB a merge takes ~10 ms (at most ~40 ms) and appends stay as fast, while
  ``fastupdate = off`` made every append slower (benchmarks/bench_gin.py).
* statistics on ``COALESCE(length(search_cjk), 0)`` (PostgreSQL 14+): the search splits rows by
  this expression (CJK rows are judged by the bigram column), and without statistics the planner
  guessed 0.5% for it whatever the store held, so a time-ordered search could walk the time
  index for a term found in few rows, or none.
* ``parallel_workers = 0`` on ``messages`` and ``sessions``: the planner chose two parallel
  workers for some searches of a few milliseconds, and starting them cost ~25 ms on a busy
  two-core server. A LIKE scan over tool output (the one route that reads the whole table) loses
  parallelism.

Revision ID: 0021_pg_load_tuning
Revises: 0020_pg_words_split_at_punctuation
"""

from alembic import op

revision = "0021_pg_load_tuning"
down_revision = "0020_pg_words_split_at_punctuation"
branch_labels = None
depends_on = None

GIN_INDEXES = ("idx_messages_search_words", "idx_messages_search_trgm", "idx_messages_search_cjk")
PENDING_LIST_KB = 128

# Statistics on an expression need PostgreSQL 14; older servers go without (and guess).
EXPRESSION_STATISTICS = ("CREATE STATISTICS IF NOT EXISTS messages_search_cjk_length "
                         "ON (COALESCE(length(search_cjk), 0)) FROM messages")
STATEMENTS = [
    "CREATE INDEX IF NOT EXISTS idx_messages_search_time ON messages (timestamp, id)",
    *(f"ALTER INDEX {index} SET (gin_pending_list_limit = {PENDING_LIST_KB})"
      for index in GIN_INDEXES),
    "ALTER TABLE messages SET (parallel_workers = 0)",
    "ALTER TABLE sessions SET (parallel_workers = 0)",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite: FTS5 has no pending list, the time order is not served by this index
    for stmt in STATEMENTS:
        op.execute(stmt)
    if op.get_bind().dialect.server_version_info >= (14,):
        op.execute(EXPRESSION_STATISTICS)
        op.execute("ANALYZE messages")  # statistics exist once gathered: do it now


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE messages RESET (parallel_workers)")
    op.execute("ALTER TABLE sessions RESET (parallel_workers)")
    op.execute("DROP STATISTICS IF EXISTS messages_search_cjk_length")
    for index in GIN_INDEXES:
        op.execute(f"ALTER INDEX {index} RESET (gin_pending_list_limit)")
    op.execute("DROP INDEX IF EXISTS idx_messages_search_time")
