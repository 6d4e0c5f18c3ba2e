"""Index upkeep on the facade (docs/v21.md#behaviour-changes): ``optimize_fts``, ``vacuum`` and
the merge the write path runs every 1,000 writes.

FTS5 keeps each index as segments that a merge folds together; without merges, a store that
only ever appends keeps growing segment by segment and search reads more of them. Each merge
is a short write of its own, and a failure is logged, never raised: this is upkeep, and the
agent's turn must not fail over it.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from hermes_store.db import engine as engine_mod
from hermes_store.db import names
from hermes_store.errors import HermesStoreError
from hermes_store.ops import storage

log = logging.getLogger("hermes_store.facade")

EVERY_N_WRITES = 1000
# The word and substring indexes the agent counts; the CJK index is merged but not counted.
COUNTED = (names.WORD_INDEX, names.TRIGRAM_INDEX)


class SessionDB(Protocol):
    @property
    def engine(self) -> Engine: ...

    def optimize_fts(self) -> int: ...


def optimize_fts(db: SessionDB) -> int:
    """Merge every search index present; returns how many of the word and substring indexes
    were merged (2; 1 without the substring index; 0 without FTS5)."""
    engine = db.engine  # a closed store raises here, like every other method
    if engine_mod.is_server(engine):
        return 0  # PostgreSQL has no FTS5 segments to merge
    if not engine_mod.fts5_available():
        log.info("optimize_fts: this SQLite has no FTS5, there is nothing to merge")
        return 0
    merged = 0
    for name in storage.INDEXES:
        try:
            done = engine_mod.run_write(engine, functools.partial(storage.merge_index, name=name),
                                        what=f"optimize_fts {name}")
        except (sqlite3.Error, SQLAlchemyError, HermesStoreError) as err:
            log.warning("optimize_fts: merging %s failed: %s", name, err)
            continue
        merged += bool(done) and name in COUNTED
    return merged


def after_write(db: SessionDB, count: int) -> None:
    """Called by the write path after each successful write, outside its transaction.

    The cadence is the instance's ``_OPTIMIZE_EVERY_N_WRITES`` and the merge is the instance's
    ``optimize_fts``, both looked up on each call: a caller may tune one store (0 turns the
    periodic merge off) or wrap its merge, as the agent's own tests do."""
    every = getattr(db, "_OPTIMIZE_EVERY_N_WRITES", EVERY_N_WRITES)
    if not isinstance(every, int) or every <= 0 or count % every:
        return
    try:
        db.optimize_fts()
    except Exception as err:  # noqa: BLE001 - upkeep must never fail the write that ran it
        log.warning("periodic optimize_fts failed: %s", err)


def vacuum(db: SessionDB) -> int:
    """Merge the indexes, VACUUM, and empty the WAL; returns :func:`optimize_fts`'s count."""
    merged = optimize_fts(db)
    engine = db.engine
    if engine_mod.is_server(engine):
        engine_mod.vacuum(engine)  # VACUUM ANALYZE; a server has no WAL file to empty
    elif engine_mod.fts5_available():
        storage.compact(engine)
    else:
        engine_mod.vacuum(engine)
        engine_mod.checkpoint(engine, "TRUNCATE")
    return merged
