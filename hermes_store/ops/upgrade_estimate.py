"""How long an upgrade will take and how much disk it needs, said before it runs
(``hermes-store upgrade --dry-run``; docs/cli.md#schema).

The cost of an upgrade is the search indexes it builds; every other revision edits the schema
and takes about a second whatever the size. The estimate reads two facts of the store, its
message count and the bytes of text the new indexes read (the word index reads every row, tool
output by its first 8,192 characters; the trigram index reads the rows that are not tool
output), and applies rates measured on a shared 2-core VM (SQLite 3.40): indexing takes about
``SECONDS_PER_MB`` seconds per MB of that text and the indexes take about
``INDEX_BYTES_PER_TEXT_BYTE`` bytes of file per byte of it. A store of at most the retiring
revision's ``SMALL_STORE_ROWS`` messages is indexed inside the upgrade; a larger one is upgraded
with a backfill window, and the indexing is left to ``optimize-storage`` (search meanwhile
scans the unindexed rows), so the estimate names both parts. The legacy index revisions build
nothing that a later revision of the same run retires, so neither part includes the old inline
indexes. A server store is estimated with the same rates: an order of magnitude, not a promise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from hermes_store.db import catalog
from hermes_store.db.models import Message

# Measured: a 6,358-message v9 store (6.0 MB of text, 7.8 MB read by the indexes) took 5.1 s
# and 5.0 MB to index with optimize-storage, VACUUM included.
SECONDS_PER_MB = 0.7
INDEX_BYTES_PER_TEXT_BYTE = 0.65
# The schema-only revisions and Alembic's own start.
SCHEMA_SECONDS = 1.0
TOOL_TEXT_INDEXED = 8192
RETIRING_REVISION = "0013_retire_inline_fts"
# Revisions that (re)build the search indexes over every row.
INDEXING_REVISIONS = frozenset({
    RETIRING_REVISION, "0014_compact_word_index", "0015_trigram_without_tools",
    "0016_cjk_bigram_index", "0018_pg_search_indexes", "0020_pg_words_split_at_punctuation"})
BASIS = (f"rates measured on a shared 2-core VM: {SECONDS_PER_MB} s per MB of indexed text, "
         f"{INDEX_BYTES_PER_TEXT_BYTE} bytes of index per byte of it")

messages = Message.__table__


@dataclass(frozen=True)
class UpgradeEstimate:
    """Seconds and bytes of file growth: the upgrade itself, then the ``optimize-storage`` run
    a large legacy store is left for (zeros when there is none)."""

    messages: int
    indexed_text_bytes: int
    upgrade_seconds: float
    upgrade_bytes: int
    backfill_seconds: float
    backfill_bytes: int
    large: bool
    basis: str = BASIS

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _small_store_rows() -> int:
    # The retiring revision owns the bound; read it from there rather than restating it.
    from alembic.script import ScriptDirectory

    from hermes_store.db.revisions import script_location

    module = ScriptDirectory(script_location()).get_revision(RETIRING_REVISION).module
    return int(module.SMALL_STORE_ROWS)


def _text_read(conn: Connection) -> tuple[int, int]:
    """(messages, bytes of text the head indexes read)."""
    length = sa.func.coalesce(sa.func.length(messages.c.content), 0)
    is_tool = messages.c.role == "tool"
    word = sa.case((is_tool & (length > TOOL_TEXT_INDEXED), TOOL_TEXT_INDEXED), else_=length)
    trigram = sa.case((is_tool, 0), else_=length)
    count, total = conn.execute(sa.select(
        sa.func.count(), sa.func.coalesce(sa.func.sum(word + trigram), 0))).one()
    return int(count), int(total)


def estimate(conn: Connection, pending: list[str]) -> UpgradeEstimate:
    """The cost of applying ``pending`` to the store behind ``conn`` (reads only)."""
    count, text = _text_read(conn) if catalog.has_table(conn, "messages") else (0, 0)
    index_seconds = text / 1e6 * SECONDS_PER_MB
    index_bytes = int(text * INDEX_BYTES_PER_TEXT_BYTE)
    indexing = bool(INDEXING_REVISIONS.intersection(pending))
    windowed = (indexing and RETIRING_REVISION in pending and conn.dialect.name == "sqlite"
                and count > _small_store_rows())
    in_upgrade = indexing and not windowed
    upgrade_seconds = (SCHEMA_SECONDS if pending else 0.0) + (index_seconds if in_upgrade else 0)
    return UpgradeEstimate(
        messages=count, indexed_text_bytes=text,
        upgrade_seconds=round(upgrade_seconds, 1),
        upgrade_bytes=index_bytes if in_upgrade else 0,
        backfill_seconds=round(index_seconds, 1) if windowed else 0.0,
        backfill_bytes=index_bytes if windowed else 0,
        large=windowed or upgrade_seconds >= 10)
