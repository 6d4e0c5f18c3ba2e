"""Storage maintenance, one name per operation (library, facade and CLI alike):

- ``optimize_storage`` moves the search indexes off the inline layout (``optimize-storage``);
- ``optimize_fts`` merges each FTS5 index's segments and runs ``PRAGMA optimize``;
- ``compact`` is the whole-store upkeep: ``optimize_fts``, ``VACUUM``, a TRUNCATE checkpoint
  (``hermes-store compact``; ``SessionDB.vacuum`` keeps the v11 name for it);
- ``vacuum`` is ``VACUUM`` alone.

Also FTS integrity and rebuild (``repair``); retention lives elsewhere.

``optimize_storage`` finishes what revision 0013 started cheaply:

1. **backfill** — index the window ``(P, H]`` of ``state_meta`` (``hs_backfill_progress``,
   ``hs_backfill_high_water``) in chunks. Each chunk is one short write transaction that indexes
   its ids in every index and moves ``P`` in the same commit, so a ``kill -9`` anywhere leaves
   either the whole chunk or none of it: a rerun continues from ``P`` and indexes every row
   exactly once. When ``P`` reaches ``H`` both keys are deleted and the triggers own every row.
   Rows written by other programs (``hs_cjk_pending``) are caught up too.
2. **teardown** — the retired inline tables (``…_old``) are no longer read once the window is
   closed. Their shadow tables are emptied in small transactions (an FTS5 ``DELETE`` would
   re-tokenize every row; the retired index is never consulted again, so its pages are simply
   released), then the emptied tables are dropped.
3. **vacuum** — ``VACUUM`` returns the freed pages to the file system; a ``TRUNCATE``
   checkpoint empties the WAL.

Progress is reported as ``progress(phase, done, total)`` with phases ``backfill``,
``teardown``, ``vacuum`` and ``done``.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from hermes_store.db import catalog, derived, names
from hermes_store.db import engine as db_engine
from hermes_store.db.catalog import backfill_window as backfill_window  # re-exported
from hermes_store.db.catalog import tables
from hermes_store.db.engine import checkpoint, engine_path, open_engine, reading, run_write
from hermes_store.errors import StoreFullError
from hermes_store.ops.backup import require_free_space
from hermes_store.paths import resolve_db_path
from hermes_store.repo import bigrams

Progress = Callable[[str, int, int], None]

BACKFILL_CHUNK = 500
TEARDOWN_CHUNK = 200
INDEXES = catalog.FTS_INDEXES
RETIRED = catalog.RETIRED_FTS_INDEXES
# FTS5 keeps its averages (rowid 1) and structure record (rowid 10) in _data; leaving them lets
# the emptied table still connect, so DROP TABLE can run its normal path.
_KEEP_DATA_ROWID = 10

_BACKFILL_WORD = f"""
INSERT INTO {names.WORD_INDEX} (rowid, content, tool_name, tool_calls)
SELECT id, content, tool_name, tool_calls FROM {names.WORD_SOURCE} WHERE id > ? AND id <= ?"""
_BACKFILL_TRIGRAM = f"""
INSERT INTO {names.TRIGRAM_INDEX} (rowid, content, tool_name)
SELECT id, content, tool_name FROM {names.TRIGRAM_SOURCE} WHERE id > ? AND id <= ?"""
_SET_PROGRESS = f"UPDATE state_meta SET value = ? WHERE key = '{names.BACKFILL_PROGRESS}'"
_CLOSE_WINDOW = ("DELETE FROM state_meta "
                 f"WHERE key IN ('{names.BACKFILL_PROGRESS}', '{names.BACKFILL_HIGH_WATER}')")
# The word and trigram indexes are emptied and filled from their views (the content sources,
# which FTS5's own 'rebuild' reads as well), the window's rows included.
_REBUILD = {
    names.WORD_INDEX: (f"INSERT INTO {names.WORD_INDEX} ({names.WORD_INDEX}) VALUES ('delete-all')",
                       _BACKFILL_WORD),
    names.TRIGRAM_INDEX: (
        f"INSERT INTO {names.TRIGRAM_INDEX} ({names.TRIGRAM_INDEX}) VALUES ('delete-all')",
        _BACKFILL_TRIGRAM),
}
_DELETE_ALL_CJK = f"INSERT INTO {names.CJK_INDEX} ({names.CJK_INDEX}) VALUES ('delete-all')"
_CLEAR_CJK_SIDE = f"DELETE FROM {names.CJK_SIDE}"
# The multimodal rows' text (names.PART_TEXT) derived again from messages, before the views are read.
_REFILL_PART_TEXT = (f"DELETE FROM {names.PART_TEXT}", derived.FILL_PART_TEXT)
_MAX_ID = "SELECT COALESCE(max(id), 0) FROM messages"
_OPTIMIZE = {name: f"INSERT INTO {name} ({name}) VALUES ('optimize')" for name in INDEXES}
_INTEGRITY = "INSERT INTO {t} ({t}) VALUES ('integrity-check')"
# Shadow tables of a retired table, with the statement that deletes one chunk of each.
_DRAIN = {
    "_data": 'DELETE FROM "{t}_data" WHERE rowid IN '
             f'(SELECT rowid FROM "{{t}}_data" WHERE rowid > {_KEEP_DATA_ROWID} LIMIT ?)',
    "_idx": 'DELETE FROM "{t}_idx" WHERE (segid, term) IN '
            '(SELECT segid, term FROM "{t}_idx" LIMIT ?)',
    "_content": 'DELETE FROM "{t}_content" WHERE rowid IN '
                '(SELECT rowid FROM "{t}_content" LIMIT ?)',
    "_docsize": 'DELETE FROM "{t}_docsize" WHERE rowid IN '
                '(SELECT rowid FROM "{t}_docsize" LIMIT ?)',
}
_COUNT = {
    "_data": f'SELECT count(*) FROM "{{t}}_data" WHERE rowid > {_KEEP_DATA_ROWID}',
    "_idx": 'SELECT count(*) FROM "{t}_idx"',
    "_content": 'SELECT count(*) FROM "{t}_content"',
    "_docsize": 'SELECT count(*) FROM "{t}_docsize"',
}


@dataclass
class StorageReport:
    """What ``optimize_storage`` did: rows indexed, retired tables dropped, file sizes."""

    rows_backfilled: int = 0
    pending_caught_up: int = 0
    tables_dropped: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    vacuumed: bool = False


def _engine(target: str | os.PathLike[str] | Engine | None) -> Engine:
    return target if isinstance(target, Engine) else open_engine(resolve_db_path(target))


def file_bytes(path: str | os.PathLike[str]) -> int:
    """The store's size on disk as before/after figures measure it: the file and its WAL."""
    return sum(p.stat().st_size for p in (Path(path), Path(f"{path}-wal")) if p.exists())


def _file_bytes(engine: Engine) -> int:
    return file_bytes(engine_path(engine))


def backfill_chunk(conn: Connection, chunk: int = BACKFILL_CHUNK) -> tuple[int, int] | None:
    """Index the next ``chunk`` ids of the window; returns the new ``(P, H)`` or ``None``.

    Runs inside the caller's transaction; the marker moves in it, so the chunk is all or nothing.
    """
    window = backfill_window(conn)
    if window is None:
        return None
    lo, hi = window
    top = min(lo + max(1, chunk), hi)
    present = tables(conn)
    if names.WORD_INDEX in present:
        conn.exec_driver_sql(_BACKFILL_WORD, (lo, top))
    if names.TRIGRAM_INDEX in present:
        conn.exec_driver_sql(_BACKFILL_TRIGRAM, (lo, top))
    if names.CJK_SIDE in present:
        bigrams.index_range(conn, lo, top)
    if top >= hi:
        conn.exec_driver_sql(_CLOSE_WINDOW)
    else:
        conn.exec_driver_sql(_SET_PROGRESS, (str(top),))
    return top, hi


def _drain_chunk(conn: Connection, table: str, limit: int) -> int:
    """Delete up to ``limit`` rows from the shadow tables of a retired table; 0 when empty."""
    present = tables(conn)
    removed = 0
    for suffix, stmt in _DRAIN.items():
        if table + suffix in present and removed < limit:
            removed += conn.exec_driver_sql(stmt.format(t=table), (limit - removed,)).rowcount
    return removed


def _remaining(conn: Connection, table: str) -> int:
    present = tables(conn)
    return sum(int(conn.exec_driver_sql(stmt.format(t=table)).scalar() or 0)
               for suffix, stmt in _COUNT.items() if table + suffix in present)


def _drop(conn: Connection, table: str) -> None:
    if table in tables(conn):
        conn.exec_driver_sql(f'DROP TABLE "{table}"')


def optimize_storage(target: str | os.PathLike[str] | Engine | None = None,
                     progress: Progress | None = None, vacuum: bool = True, *,
                     chunk: int = BACKFILL_CHUNK,
                     teardown_chunk: int = TEARDOWN_CHUNK) -> StorageReport:
    """Backfill the new indexes, retire the inline ones, return the space. Resumable."""
    engine = _engine(target)
    report = StorageReport(bytes_before=_file_bytes(engine))
    notify = progress or (lambda phase, done, total: None)

    with reading(engine) as conn:
        window = backfill_window(conn)
    if window is not None:
        first = window[0]
        notify("backfill", 0, window[1] - first)
        while window is not None:
            window = run_write(engine, lambda c: backfill_chunk(c, chunk), what="backfill")
            if window is not None:
                notify("backfill", window[0] - first, window[1] - first)
                report.rows_backfilled = window[0] - first
                if window[0] >= window[1]:
                    window = None
    while taken := run_write(engine, bigrams.catch_up, what="cjk catch-up"):
        report.pending_caught_up += taken

    with reading(engine) as conn:
        retired = [t for t in RETIRED if t in tables(conn)]
        total = sum(_remaining(conn, t) for t in retired)
    done = 0
    notify("teardown", 0, total)
    for table in retired:
        drain = functools.partial(_drain_chunk, table=table, limit=teardown_chunk)
        while removed := run_write(engine, drain, what="teardown"):
            done += removed
            notify("teardown", min(done, total), total)
        run_write(engine, functools.partial(_drop, table=table), what="teardown")
        report.tables_dropped.append(table)

    if vacuum:
        notify("vacuum", 0, 1)
        db_engine.vacuum(engine)
        report.vacuumed = True
        notify("vacuum", 1, 1)
    checkpoint(engine, "TRUNCATE")
    report.bytes_after = _file_bytes(engine)
    notify("done", 1, 1)
    return report


# --------------------------------------------------------------------------- upkeep


def optimize_fts(target: str | os.PathLike[str] | Engine | None = None) -> list[str]:
    """Merge each index's segments (FTS5 ``optimize``), catch up CJK rows, ``PRAGMA optimize``;
    the names of the indexes merged."""
    engine = _engine(target)
    done: list[str] = []

    def unit(conn: Connection) -> None:
        present = tables(conn)
        for name in INDEXES:
            if name in present:
                conn.exec_driver_sql(_OPTIMIZE[name])
                done.append(name)
        conn.exec_driver_sql("PRAGMA optimize")

    while run_write(engine, bigrams.catch_up, what="cjk catch-up"):
        pass
    run_write(engine, unit, what="optimize_fts")
    return done


def vacuum(target: str | os.PathLike[str] | Engine | None = None) -> None:
    """``VACUUM`` alone, under the write retry policy. It leaves a WAL the size of the file:
    :func:`compact` is the upkeep that also empties it."""
    db_engine.vacuum(_engine(target))


@dataclass
class Sizes:
    """Bytes of the main file and of its ``-wal`` (``compact`` prints both)."""

    main: int
    wal: int

    @classmethod
    def of(cls, path: Path) -> Sizes:
        wal = Path(f"{path}-wal")
        return cls(path.stat().st_size if path.exists() else 0,
                   wal.stat().st_size if wal.exists() else 0)


@dataclass
class CompactResult:
    """What ``compact`` did: sizes before and after, the steps run, the indexes merged."""

    before: Sizes
    after: Sizes
    steps: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def preflight(path: Path) -> None:
    """VACUUM needs about the store's size free beside it (the new copy goes through the WAL)
    and again in the temp directory (its build copy): twice over when both are one disk."""
    need = path.stat().st_size
    temp = Path(tempfile.gettempdir())
    try:
        same_disk = os.stat(temp).st_dev == os.stat(path.parent).st_dev
    except OSError:
        same_disk = False
    if same_disk:
        require_free_space(path.parent, 2 * need, "compact (VACUUM, its WAL and temp copy)")
        return
    require_free_space(path.parent, need, "compact (VACUUM)")
    require_free_space(temp, need, "compact (VACUUM's temp copy)")


def compact(engine: Engine, progress: Callable[[str], None] | None = None, *,
            vacuum: bool = True) -> CompactResult:
    """The whole-store upkeep: :func:`optimize_fts`, a PASSIVE checkpoint so VACUUM starts
    from a short WAL, ``VACUUM``, then a TRUNCATE checkpoint.

    VACUUM writes the whole file through the WAL: without the last step a 3 GB store leaves a
    3 GB ``-wal`` (docs/lessons.md#wal). The caller owns the whole-file preconditions (no other
    holder, free disk); :func:`preflight` states the disk one. ``progress`` gets each step's name.
    """
    path = Path(engine_path(engine))
    note = progress or (lambda step: None)
    result = CompactResult(Sizes.of(path), Sizes.of(path))
    step = "merging FTS segments"
    try:
        note(step)
        result.merged = optimize_fts(engine)
        result.steps += ["fts optimize", "pragma optimize"]
        note(step := "checkpoint (PASSIVE)")
        checkpoint(engine, "PASSIVE")
        result.steps.append("checkpoint passive")
        if vacuum:
            note(step := "VACUUM")
            db_engine.vacuum(engine)
            result.steps.append("vacuum")
        note(step := "checkpoint (TRUNCATE)")
        checkpoint(engine, "TRUNCATE")
        result.steps.append("checkpoint truncate")
    except StoreFullError as err:
        raise _stopped(path, step, result.steps, err) from err
    result.after = Sizes.of(path)
    return result


def _stopped(path: Path, step: str, done: list[str], err: StoreFullError) -> StoreFullError:
    """A full disk part way: say which steps were kept (each commits on its own) and that the
    one that failed was rolled back, rather than suggest the whole command changed nothing."""
    kept = f"done before it and kept: {', '.join(done)}" if done else "nothing was changed"
    return StoreFullError(
        f"disk full: compact stopped at {step}, which was rolled back ({kept}); the store is "
        f"intact. Make about {2 * path.stat().st_size:,} bytes free on its disk and run compact "
        f"again ({getattr(err.__cause__, 'orig', None) or err.__cause__ or err})")


def integrity_problems(conn: Connection,
                       names: Iterable[str] = INDEXES) -> dict[str, str]:
    """FTS5 ``integrity-check`` of each present table of ``names``: ``{name: error}``, empty
    when all agree. ``repair`` passes every FTS5 table of the schema, retired ones included.

    Rows inside an open backfill window are not indexed yet by design; check after the
    backfill (the external-content check compares every row of the source view).
    """
    problems: dict[str, str] = {}
    present = tables(conn)
    for name in names:
        if name not in present:
            continue
        # The name is one of the schema's own tables, quoted: never text from a user.
        quoted = '"' + name.replace('"', '""') + '"'
        conn.exec_driver_sql("SAVEPOINT fts_check")
        try:
            conn.exec_driver_sql(_INTEGRITY.format(t=quoted))
        except Exception as err:  # noqa: BLE001 - the message is the finding
            problems[name] = str(getattr(err, "orig", err))
        finally:
            conn.exec_driver_sql("RELEASE fts_check")
    return problems


def rebuild_indexes(conn: Connection) -> None:
    """Rebuild every index from ``messages`` in the caller's transaction (used by ``repair``).

    The word and trigram indexes re-read their views; the CJK side rows are derived again. Any
    backfill window is closed, since the rebuild covers every row.
    """
    present = tables(conn)
    top = int(conn.exec_driver_sql(_MAX_ID).scalar() or 0)
    if names.PART_TEXT in present:
        for stmt in _REFILL_PART_TEXT:
            conn.exec_driver_sql(stmt)
    for name, (empty, fill) in _REBUILD.items():
        if name in present:
            conn.exec_driver_sql(empty)
            conn.exec_driver_sql(fill, (0, top))
    if names.CJK_SIDE in present:
        conn.exec_driver_sql(_CLEAR_CJK_SIDE)
        conn.exec_driver_sql(_DELETE_ALL_CJK)
        for lo in range(0, top, BACKFILL_CHUNK):
            bigrams.index_range(conn, lo, min(lo + BACKFILL_CHUNK, top))
    if "state_meta" in present:
        conn.exec_driver_sql(_CLOSE_WINDOW)


def merge_index(conn: Connection, name: str) -> bool:
    """FTS5 ``optimize`` of one index in the caller's transaction (a short write of its own,
    where :func:`optimize` holds the lock for all of them); False when the index is absent."""
    if name not in _OPTIMIZE:
        raise ValueError(f"{name!r} is not one of the search indexes {INDEXES}")
    if name not in tables(conn):
        return False
    conn.exec_driver_sql(_OPTIMIZE[name])
    return True
