"""``recover``: offline salvage of a damaged store into a NEW file; the source is never touched.

The source and its ``-wal``/``-shm``/``-journal`` are copied into a work directory before SQLite
opens anything (opening would replay or reset them), and the source is fingerprinted (size,
mtime, SHA-256) before the copy, after it, and at the end: any change fails loudly. The copy is
read with plain ``sqlite3`` (it is scratch, not a store) in rowid chunks; the new store is created
at head by ``migrate.upgrade`` and written through the engine, so its triggers rebuild the derived
indexes as rows arrive.

What is copied: the modelled tables (``sessions``, ``messages``, ``state_meta``) and every table
of the source that a fresh store does not have (an upstream release's extras). Tables a fresh
store already has but the models do not own (FTS shadows, the bigram table, version markers)
are derived or bookkeeping, recreated rather than copied; so are derived ``state_meta`` markers.

With ``allow_partial`` a chunk that fails to read is bisected down to single rowids (a per-row
equality lookup each), so healthy rows beside a damaged page survive (docs/lessons.md#damage); every
skipped range is reported. Messages whose session row was lost go to a placeholder session
with the same id and ``source='recovered'``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, exc

from hermes_store.db import catalog, migrate, topics, writer_queue
from hermes_store.db.engine import (
    FILE_MODE,
    checkpoint,
    forget,
    is_lock_error,
    open_engine,
    reading,
    run_write,
)
from hermes_store.db.models import Base
from hermes_store.db.sqlite_driver import UndecodableText, decode_text
from hermes_store.errors import OutputError, StoreNotFoundError, UsageError
from hermes_store.ops.backup import copy_with_sidecars, require_free_space, store_bytes
from hermes_store.ops.holders import DATA_SUFFIXES, SIDECAR_SUFFIXES, ensure_not_held
from hermes_store.repo import lineage
from hermes_store.version import __version__

ProgressFn = Callable[[str, int, int], None]
DEFAULT_CHUNK = 1000
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DERIVED_MARKER = re.compile(r"(^fts_|layout|^cjk_)", re.I)
_SKIP_TABLES = {"alembic_version", "schema_version", "sqlite_sequence"}
RECOVERED_SOURCE = "recovered"


class _Unreadable(Exception):
    """A chunk failed to read and partial salvage was not allowed."""


@dataclass
class Fingerprint:
    path: str
    size: int
    mtime_ns: int
    sha256: str


@dataclass
class TableResult:
    read: int = 0
    written: int = 0
    skipped: int = 0


@dataclass
class RecoveryReport:
    source: str
    output: str | None
    status: str = "running"  # complete | partial | nothing | damaged | source_changed | inspected
    fingerprint_before: list[Fingerprint] = field(default_factory=list)
    fingerprint_after: list[Fingerprint] = field(default_factory=list)
    sqlite_version: str = sqlite3.sqlite_version
    tool: str = f"hermes-store {__version__}"
    tables: dict[str, TableResult] = field(default_factory=dict)
    skipped_ranges: list[dict[str, Any]] = field(default_factory=list)
    placeholder_sessions: list[str] = field(default_factory=list)
    detached_parents: int = 0
    errors: list[str] = field(default_factory=list)
    inspection: dict[str, Any] = field(default_factory=dict)
    next_steps: list[str] = field(default_factory=list)
    started_at: str = ""
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"format": "hermes-store/recovery-report", "version": 1, **asdict(self)}


def fingerprint(path: Path) -> Fingerprint:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    st = path.stat()
    return Fingerprint(str(path), st.st_size, st.st_mtime_ns, digest.hexdigest())


def fingerprints(source: Path) -> list[Fingerprint]:
    files = [source, *(Path(f"{source}{s}") for s in DATA_SUFFIXES)]
    return [fingerprint(f) for f in files if f.exists()]


def _q(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"unusual identifier {name!r}")
    return f'"{name}"'


# --------------------------------------------------------------------------- reading the copy


def _columns(conn: sqlite3.Connection | Connection, table: str) -> list[tuple[str, str]]:
    _q(table)  # an odd name is refused before anything reads it
    return [(c.name, c.type) for c in catalog.columns(conn, table)]


def _read_chunk(src: sqlite3.Connection, sql: str, lo: int, hi: int, table: str,
                allow_partial: bool, report: RecoveryReport) -> list[tuple[Any, ...]]:
    """Rows with lo <= rowid <= hi; failing ranges are bisected to single rowids when allowed."""
    out: list[tuple[Any, ...]] = []
    stack = [(lo, hi)]
    while stack:
        a, b = stack.pop()
        try:
            out.extend(src.execute(sql, (a, b)).fetchall())
        except sqlite3.DatabaseError as err:
            if not allow_partial:
                raise _Unreadable(f"{table} rowids {a}..{b}: {err}") from err
            if a == b:
                _record_skip(report, table, a, str(err))
            else:
                mid = (a + b) // 2
                stack += [(mid + 1, b), (a, mid)]
    out.sort(key=lambda r: r[0])
    return out


def _record_skip(report: RecoveryReport, table: str, rowid: int, error: str) -> None:
    report.tables.setdefault(table, TableResult()).skipped += 1
    last = report.skipped_ranges[-1] if report.skipped_ranges else None
    if last and last["table"] == table and last["last_rowid"] == rowid - 1 and last["error"] == error:
        last["last_rowid"] = rowid
    else:
        report.skipped_ranges.append({"table": table, "first_rowid": rowid, "last_rowid": rowid,
                                      "error": error})


# --------------------------------------------------------------------------- writing the output


def _insert_sql(verb: str, table: str, cols: Sequence[str], as_text: frozenset[int]) -> str:
    """The insert of one row; the cells in ``as_text`` are bound as bytes and cast to TEXT."""
    marks = ("CAST(? AS TEXT)" if i in as_text else "?" for i in range(len(cols)))
    return f"{verb} INTO {_q(table)} ({', '.join(map(_q, cols))}) VALUES ({', '.join(marks)})"


def _lossless(row: tuple[Any, ...]) -> tuple[frozenset[int], tuple[Any, ...]]:
    """Text that is not valid UTF-8 (damaged bytes, or another program's) goes back in as the
    bytes it is, still typed TEXT, instead of being dropped or replaced."""
    as_text = frozenset(i for i, v in enumerate(row) if isinstance(v, UndecodableText))
    if not as_text:
        return as_text, row
    return as_text, tuple(v.raw if i in as_text else v for i, v in enumerate(row))


def _insert_rows(conn: Connection, sql_for: Callable[[frozenset[int]], str],
                 rows: Sequence[tuple[Any, ...]]) -> list[str]:
    """Insert all rows; if the batch fails, row by row, returning one error per rejected row."""
    shaped = [_lossless(row) for row in rows]
    groups: dict[frozenset[int], list[tuple[Any, ...]]] = {}
    for as_text, row in shaped:
        groups.setdefault(as_text, []).append(row)
    conn.exec_driver_sql("SAVEPOINT chunk")
    try:
        for as_text, group in groups.items():
            conn.exec_driver_sql(sql_for(as_text), group)
        conn.exec_driver_sql("RELEASE chunk")
        return []
    except exc.DBAPIError as err:  # any row may be the culprit; retried one by one below
        if is_lock_error(err):
            raise
        conn.exec_driver_sql("ROLLBACK TO chunk")
        conn.exec_driver_sql("RELEASE chunk")
    errors = []
    for as_text, row in shaped:
        conn.exec_driver_sql("SAVEPOINT one")
        try:
            conn.exec_driver_sql(sql_for(as_text), row)
            conn.exec_driver_sql("RELEASE one")
        except exc.DBAPIError as err:
            if is_lock_error(err):
                raise
            conn.exec_driver_sql("ROLLBACK TO one")
            conn.exec_driver_sql("RELEASE one")
            errors.append(f"{row[0]!r}: {err.orig}")
    return errors


def _prepare_table(dst: Connection, table: str, src_cols: list[tuple[str, str]],
                   create_sql: str | None) -> list[str]:
    """Make ``table`` exist in the output with every source column; return the shared columns."""
    have = {c for c, _ in _columns(dst, table)}
    if not have and create_sql:
        dst.exec_driver_sql(create_sql)
        have = {c for c, _ in _columns(dst, table)}
    for name, decl in src_cols:
        if name not in have and _IDENT.match(name) and re.fullmatch(r"[A-Za-z ()0-9,]*", decl):
            dst.exec_driver_sql(f"ALTER TABLE {_q(table)} ADD COLUMN {_q(name)} {decl}")
            have.add(name)
    return [c for c, _ in src_cols if c in have and _IDENT.match(c)]


_PLACEHOLDER_SQL = ("INSERT INTO sessions (id, source, title, started_at, ended_at, end_reason) "
                    "VALUES (?, ?, NULL, ?, ?, 'recovered')")
_PLACEHOLDER_FIX_SQL = (
    "UPDATE sessions SET started_at = (SELECT MIN(timestamp) FROM messages WHERE session_id = ?), "
    "ended_at = (SELECT MAX(timestamp) FROM messages WHERE session_id = ?), "
    "message_count = (SELECT COUNT(*) FROM messages WHERE session_id = sessions.id) WHERE id = ?")
_EXISTING_SQL = "SELECT id FROM sessions WHERE id IN ({marks})"
_MAX_PARAMS = 900


def _existing_sessions(conn: Connection, ids: list[Any]) -> set[Any]:
    found: set[Any] = set()
    for i in range(0, len(ids), _MAX_PARAMS):
        part = ids[i:i + _MAX_PARAMS]
        found.update(r[0] for r in conn.exec_driver_sql(
            _EXISTING_SQL.format(marks=", ".join("?" for _ in part)), tuple(part)))
    return found


class _Copier:
    """Copies one table at a time in rowid chunks; every write unit is safe to retry."""

    def __init__(self, src: sqlite3.Connection, out_engine: Engine, report: RecoveryReport,
                 chunk: int, allow_partial: bool, progress: ProgressFn | None):
        self.src, self.engine, self.report = src, out_engine, report
        self.chunk, self.allow_partial, self.progress = chunk, allow_partial, progress
        self.parents: dict[Any, Any] = {}

    def copy(self, table: str, create_sql: str | None) -> None:
        result = self.report.tables.setdefault(table, TableResult())
        src_cols = _columns(self.src, table)
        cols = run_write(self.engine, lambda c: _prepare_table(c, table, src_cols, create_sql),
                         what="recover")
        select = (f"SELECT rowid, {', '.join(map(_q, cols))} FROM {_q(table)} "
                  "WHERE rowid BETWEEN ? AND ? ORDER BY rowid")
        verb = "INSERT OR IGNORE" if table == "state_meta" else "INSERT"
        insert = functools.partial(_insert_sql, verb, table, cols)
        lo, hi = self._bounds(table)
        if lo is None or hi is None:
            return
        try:  # a full count may cross damaged pages; it only sizes the progress bar
            total = int(self.src.execute(f"SELECT COUNT(*) FROM {_q(table)}").fetchone()[0])
        except sqlite3.DatabaseError:
            total = hi - lo + 1
        idx = {c: i for i, c in enumerate(cols)}
        for start in range(lo, hi + 1, self.chunk):
            rows = _read_chunk(self.src, select, start, min(hi, start + self.chunk - 1), table,
                               self.allow_partial, self.report)
            values = [v for v in (self._shape(table, r[1:], idx) for r in rows) if v is not None]
            result.read += len(rows)
            errors, created = run_write(
                self.engine, functools.partial(self._write, table=table, insert=insert,
                                               values=values, idx=idx), what="recover")
            self.report.placeholder_sessions += created
            result.written += len(values) - len(errors)
            result.skipped += len(errors) + (len(rows) - len(values))
            self.report.errors += [f"{table} row {e}" for e in errors]
            if self.progress:
                self.progress(table, result.read, total)

    def _bounds(self, table: str) -> tuple[int | None, int | None]:
        """The first and last rowid. A truncated or damaged file may answer MIN but not MAX
        (the rightmost pages are gone): with ``allow_partial`` the last rowid comes from
        ``sqlite_sequence``, else from a forward scan up to the first unreadable page."""
        try:
            first, last = self.src.execute(
                f"SELECT MIN(rowid), MAX(rowid) FROM {_q(table)}").fetchone()
            return first, last
        except sqlite3.DatabaseError:
            if not self.allow_partial:
                raise
        lo = hi = None
        try:
            for (rowid,) in self.src.execute(f"SELECT rowid FROM {_q(table)} ORDER BY rowid"):
                lo = rowid if lo is None else lo
                hi = rowid
        except sqlite3.DatabaseError as err:
            self.report.errors.append(f"{table}: read in rowid order up to {hi} ({err})")
        try:
            seq = self.src.execute("SELECT seq FROM sqlite_sequence WHERE name = ?",
                                   (table,)).fetchone()
        except sqlite3.DatabaseError:
            seq = None
        if seq is not None and isinstance(seq[0], int):
            hi = max(hi or seq[0], seq[0])
            lo = 1 if lo is None else lo
        return lo, hi

    def _shape(self, table: str, row: tuple[Any, ...], idx: dict[str, int]) -> tuple[Any, ...] | None:
        if table == "sessions" and "parent_session_id" in idx:
            values = list(row)
            parent = values[idx["parent_session_id"]]
            if parent is not None:
                self.parents[values[idx["id"]]] = parent
            values[idx["parent_session_id"]] = None  # linked afterwards, once parents exist
            return tuple(values)
        if table == "state_meta" and _DERIVED_MARKER.search(str(row[idx["key"]])):
            return None
        return row

    @staticmethod
    def _write(conn: Connection, table: str, insert: Callable[[frozenset[int]], str],
               values: list[tuple[Any, ...]],
               idx: dict[str, int]) -> tuple[list[str], list[str]]:
        created: list[str] = []
        if table == "messages":
            first_seen: dict[Any, Any] = {}
            for v in values:
                first_seen.setdefault(v[idx["session_id"]], v[idx["timestamp"]])
            first_seen.pop(None, None)
            known = _existing_sessions(conn, list(first_seen))
            for sid, ts in first_seen.items():
                if sid not in known:
                    ts = ts if isinstance(ts, (int, float)) else time.time()
                    conn.exec_driver_sql(_PLACEHOLDER_SQL, (sid, RECOVERED_SOURCE, ts, ts))
                    created.append(str(sid))
        return _insert_rows(conn, insert, values), created

    def finish_sessions(self) -> None:
        def unit(conn: Connection) -> int:
            present = _existing_sessions(conn, [*self.parents, *self.parents.values()])
            links = [(p, c) for c, p in self.parents.items() if p in present and c in present]
            if links:
                conn.exec_driver_sql("UPDATE sessions SET parent_session_id = ? WHERE id = ?",
                                     links)
            lineage.refresh_roots(conn)  # links came in any order; roots follow them all
            return len(links)

        linked = run_write(self.engine, unit, what="recover")
        self.report.detached_parents = len(self.parents) - linked

    def finish_placeholders(self) -> None:
        ids = [(s, s, s) for s in self.report.placeholder_sessions]
        if ids:
            run_write(self.engine, lambda c: c.exec_driver_sql(_PLACEHOLDER_FIX_SQL, ids),
                      what="recover")


# --------------------------------------------------------------------------- the command


def _inspect(src: sqlite3.Connection, report: RecoveryReport) -> None:
    tables: dict[str, Any] = {}
    for name in sorted(catalog.table_definitions(src)):
        try:
            tables[name] = {"rows": src.execute(f"SELECT COUNT(*) FROM {_q(name)}").fetchone()[0]}
        except (sqlite3.DatabaseError, ValueError) as err:
            tables[name] = {"rows": None, "error": str(err)}
    try:
        check = [r[0] for r in src.execute("PRAGMA quick_check(20)")]
    except sqlite3.DatabaseError as err:
        check = [str(err)]
    report.inspection = {"tables": tables, "quick_check": check}


def _swap_steps(source: Path, output: Path) -> list[str]:
    return ["stop every process using the store (the agent, gateways, dashboards)",
            f"mv {source} {source}.damaged"]+ [
            f"mv {source}{s} {source}.damaged{s}  # if present" for s in ("-wal", "-shm")] + [
            f"mv {output} {source}"]


def recover_store(source: str | os.PathLike[str], output: str | os.PathLike[str], *,
                  work_dir: str | os.PathLike[str] | None = None, chunk_size: int = DEFAULT_CHUNK,
                  allow_partial: bool = False, inspect_only: bool = False, force: bool = False,
                  progress: ProgressFn | None = None) -> RecoveryReport:
    """Salvage ``source`` into the new file ``output``; the caller writes the report."""
    src_path, out_path = Path(source).expanduser(), Path(output).expanduser()
    if not src_path.exists():
        raise StoreNotFoundError(f"no store at {src_path}")
    if chunk_size < 1:
        raise UsageError("--chunk-size must be at least 1")
    if not inspect_only and (out_path.exists() or out_path.resolve() == src_path.resolve()):
        raise UsageError(f"{out_path} already exists; recover only writes a new file")
    ensure_not_held(src_path, force=force, what="recover (stop the agent first)")
    start = time.monotonic()
    report = RecoveryReport(str(src_path), None if inspect_only else str(out_path),
                            started_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"))
    report.fingerprint_before = fingerprints(src_path)
    own_work = work_dir is None
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="hermes-recover-", dir=out_path.parent)) \
            if work_dir is None else Path(work_dir).expanduser()
        work.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError.writing(out_path if own_work else work_dir, err) from err
    # Built under a scratch name and renamed only when finished: a killed run must never leave
    # a partial store where the result goes.
    building = out_path.with_name(f".{out_path.name}.partial")
    if not inspect_only:
        _discard(building)  # scratch of an earlier, interrupted run
    try:
        copy = work / src_path.name
        copy_with_sidecars(src_path, copy)
        if fingerprints(src_path) != report.fingerprint_before:
            report.status = "source_changed"
            report.errors.append("the source changed while it was being copied; stop its writers")
            return report
        try:
            _salvage(copy, building, report, chunk_size, allow_partial, inspect_only, progress)
        except BaseException:
            if not inspect_only:
                _discard(building)
            raise
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
        report.fingerprint_after = fingerprints(src_path)
        if report.fingerprint_after != report.fingerprint_before:
            report.status = "source_changed"
            report.errors.append("the source changed during recovery: its fingerprint differs")
        report.duration_s = round(time.monotonic() - start, 3)
    if report.status in ("complete", "partial"):
        forget(building)
        os.replace(building, out_path)
        # Writers of the new store lock the file named after it; the scratch name's is stale.
        Path(writer_queue.lock_path(building)).unlink(missing_ok=True)
        report.next_steps = _swap_steps(src_path, out_path)
    elif not inspect_only:
        _discard(building)
    return report


def _discard(path: Path) -> None:
    forget(path)
    for f in (path, *(Path(f"{path}{s}") for s in SIDECAR_SUFFIXES)):
        f.unlink(missing_ok=True)


def _salvage(copy: Path, out_path: Path, report: RecoveryReport, chunk: int, allow_partial: bool,
             inspect_only: bool, progress: ProgressFn | None) -> None:
    # The copy is scratch in our work dir, not a store: a plain connection may replay its WAL.
    src = sqlite3.connect(copy, isolation_level=None)
    # Flipped bytes in a text cell must not cost the row: it is read with its raw bytes kept.
    src.text_factory = decode_text
    try:
        try:
            tables = catalog.table_definitions(src)
        except sqlite3.DatabaseError as err:
            salvaged = _damaged_schema(src, report, err, allow_partial or inspect_only)
            if salvaged is None:
                return
            tables = salvaged
        if inspect_only:
            _inspect(src, report)
            report.status = "inspected"
            return
        out_path.parent.mkdir(parents=True, exist_ok=True)
        require_free_space(out_path.parent, store_bytes(copy), "the recovered store")
        migrate.upgrade(out_path)
        os.chmod(out_path, FILE_MODE)
        engine = open_engine(out_path)
        with reading(engine) as conn:
            fresh = catalog.tables(conn)
        skip = _SKIP_TABLES | catalog.fts_owned(tables)
        canonical = [t for t in Base.metadata.tables if t in tables]
        # Modelled tables a fresh store lacks (the opt-in ones) are canonical, copied once.
        extras = sorted(t for t in tables if t not in fresh and t not in skip
                        and t not in canonical
                        and not t.startswith("sqlite_") and _IDENT.match(t))
        copier = _Copier(src, engine, report, chunk, allow_partial, progress)
        try:
            for table in [*canonical, *extras]:
                try:
                    copier.copy(table, None if table in fresh else tables[table])
                except sqlite3.DatabaseError as err:
                    if not allow_partial:
                        raise _Unreadable(f"{table}: {err}") from err
                    report.errors.append(f"{table}: unreadable ({err})")
                    report.tables.setdefault(table, TableResult())
            copier.finish_placeholders()
            copier.finish_sessions()  # after placeholders, so a lost parent's lineage holds
            if topics.MODE.name in tables or topics.BINDINGS.name in tables:
                # Opt-in tables are copied by their source DDL alone: their indexes (one topic
                # per session) come back with the agent's statements, as an opt-in makes them.
                run_write(engine, topics.create, what="recover")
        except _Unreadable as err:
            report.status = "damaged"
            report.errors.append(f"{err}; rerun with --allow-partial to skip damaged rows")
            return
        checkpoint(engine, "TRUNCATE")
        engine.dispose()
        written = sum(t.written for t in report.tables.values())
        lost = report.skipped_ranges or report.errors or any(
            t.skipped for t in report.tables.values())
        report.status = "nothing" if written == 0 and lost else ("partial" if lost else "complete")
    finally:
        src.close()


def _damaged_schema(src: sqlite3.Connection, report: RecoveryReport, err: Exception,
                    allowed: bool) -> dict[str, str] | None:
    """The tables of a file whose schema does not parse (a truncated copy loses the pages
    that later DDL added to the catalog). ``writable_schema`` makes SQLite skip the
    entries it cannot read, so the tables whose own entries survive stay reachable; only on
    the scratch copy, and nothing is ever written to it."""
    try:
        src.execute("PRAGMA writable_schema = ON")
        tables = catalog.table_definitions(src)
    except sqlite3.DatabaseError as again:
        report.status = "nothing"
        report.errors.append(f"the schema cannot be read ({again}); nothing can be salvaged "
                             "from this file: restore a JSONL export or a backup")
        return None
    if not allowed:
        report.status = "damaged"
        report.errors.append(f"the schema is damaged ({err}); rerun with --allow-partial to "
                             "salvage the tables whose pages are still readable")
        return None
    report.errors.append(f"the schema is damaged ({err}); entries that could not be read "
                         "were skipped")
    return tables


def write_report(report: RecoveryReport, path: Path) -> None:
    """The JSON report, created 0600 and never over an existing file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(report.to_dict(), fh, indent=2, ensure_ascii=False)
        fh.write("\n")
