"""``copy``: a whole store from one backend to another (SQLite ⇄ PostgreSQL, or the same kind).

* **Streamed.** Each table is read in primary-key order, ``batch`` rows per read transaction, and
  each batch is written in one target transaction together with the copy's progress marker
  (``state_meta`` key :data:`PROGRESS_KEY`: the source, and per table the last key written). A
  copy killed at any point leaves the target at a batch boundary; the rerun reads the marker and
  continues after it, so no row is written twice.
* **Refusing.** A target that holds data and is not a copy in progress *of the same source* is
  refused before anything is written (:class:`~hermes_store.errors.TargetNotEmptyError`).
* **Whole.** The modelled tables, and whatever a newer agent release added (``ops.copy_plan``
  creates its tables and adds its columns on the target, or names what cannot be mapped
  faithfully as not copied).
* **Searchable.** Derived data is not copied but derived again in each batch's transaction: on
  SQLite the FTS5 triggers fire and the CJK bigram side rows are written (``repo.bigrams``); on
  PostgreSQL the word tsvector is a generated column and the CJK ``hs_search_cjk`` tokens ride along
  with each row, as an append writes them. ``state_meta`` markers about derived indexes stay the
  target's own.
* **Sequences.** After the rows, the target's ``messages`` id generator is set past both the
  highest id and the source's own high-water mark (SQLite ``sqlite_sequence``; PostgreSQL's
  identity sequence), so an id the source once handed out is never handed out again.
* **Verified.** Each table's row count and checksum (``ops.checksum``) are computed the same way
  on both sides, printed, and a difference is an error naming the table.
* **Idempotent.** Rerun into a finished copy of the same source, it copies nothing: it verifies
  the counts and checksums again and reports the copy as already done (``already_copied``); a
  difference found then is the same error as above.

Sessions arrive without their parent link, which a second pass sets once every session exists
(a child may sort before its parent); a parent id that names no session in the source is left
unset and named in the report (PostgreSQL would refuse the dangling key). The source should not
be written during a copy: the checksum would then report the difference.
"""
from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, Row, Table, func, literal, select, tuple_
from sqlalchemy import table as table_clause

from hermes_store.db import migrate, names
from hermes_store.db.dialect import id_high_water, insert, keep_ids_above
from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.db.models import Base
from hermes_store.errors import (
    CopyMismatchError,
    SchemaMismatchError,
    StoreNotFoundError,
    TargetNotEmptyError,
    UsageError,
)
from hermes_store.ops.checksum import RowFilter, table_checksum
from hermes_store.ops.copy_plan import CopyPlan, TablePlan, copyable, make_plan
from hermes_store.paths import StoreLocation, resolve_location
from hermes_store.repo import bigrams, lineage, messages

ProgressFn = Callable[[str, int, int], None]
DEFAULT_BATCH = 1000
PROGRESS_KEY = "copy_in_progress"
DONE_KEY = "copied_from"
COPY_BUDGET_S = 60.0
_DERIVED_MARKER = re.compile(r"(^fts_|layout|^cjk_)", re.IGNORECASE)
# The glued-Latin flag describes the target's own bigram rows, which its writers keep.
_OUR_KEYS = {PROGRESS_KEY, DONE_KEY, names.CJK_GLUED_LATIN}
_LINKS = "sessions.parent_session_id"
_MESSAGES = Base.metadata.tables["messages"]


@dataclass
class TableCopy:
    rows: int = 0
    source_count: int = 0
    target_count: int = 0
    source_checksum: str = ""
    target_checksum: str = ""

    @property
    def matches(self) -> bool:
        return (self.source_count, self.source_checksum) == (
            self.target_count, self.target_checksum)


@dataclass
class CopyReport:
    source: str
    target: str
    resumed: bool = False
    already_copied: bool = False
    finished_at: float | None = None
    tables: dict[str, TableCopy] = field(default_factory=dict)
    created_tables: list[str] = field(default_factory=list)
    added_columns: list[str] = field(default_factory=list)
    not_copied: list[str] = field(default_factory=list)
    detached_parents: list[str] = field(default_factory=list)
    sequence: int | None = None
    seconds: float = 0.0

    @property
    def verified(self) -> bool:
        return all(t.matches for t in self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name, t in self.tables.items():
            out["tables"][name]["matches"] = t.matches
        out["verified"] = self.verified
        return out


# --------------------------------------------------------------------------- markers

_STATE_META = Base.metadata.tables["state_meta"]


def _marker(conn: Connection, key: str) -> dict[str, Any] | None:
    meta = _STATE_META
    raw = conn.execute(select(meta.c.value).where(meta.c.key == key)).scalar()
    return json.loads(raw) if raw else None


def _set_marker(conn: Connection, key: str, value: dict[str, Any] | None) -> None:
    meta = _STATE_META
    conn.execute(meta.delete().where(meta.c.key == key))
    if value is not None:
        conn.execute(insert(conn, meta).values(key=key, value=json.dumps(value)))


def _copied_marker(key: Any) -> bool:
    """A ``state_meta`` key that travels: not one about derived indexes, not the copy's own."""
    return key is not None and not _DERIVED_MARKER.search(str(key)) and key not in _OUR_KEYS


def _holds_data(conn: Connection) -> str | None:
    """The first table holding rows a fresh store would not have, or None."""
    for name in copyable(conn):
        if name == "state_meta":
            keys = conn.execute(select(_STATE_META.c.key)).scalars()
            if any(_copied_marker(k) for k in keys):
                return name
            continue
        if conn.execute(select(literal(1)).select_from(table_clause(name)).limit(1)).first():
            return name
    return None


def _source_id(location: StoreLocation) -> str:
    """Which store this is, whoever connects to it: a rerun that logs in as another role, or
    with a password where the first run had none, still resumes its own copy."""
    if location.path is not None:
        return str(location.path.expanduser().resolve())
    url = location.url
    return f"postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database}"


def _open_target(dest: StoreLocation, source_id: str
                 ) -> tuple[Engine, dict[str, Any] | None, dict[str, Any] | None]:
    """The target engine at head, the progress of a copy in progress of this source, and the
    marker of a finished copy of this source (a rerun: nothing to copy, only to verify)."""
    st = migrate.status(dest)
    if st.state in ("missing", "empty"):
        migrate.upgrade(dest)
    elif not st.at_head:
        raise TargetNotEmptyError(
            f"{dest.display} already holds a store ({st.describe()}); copy into an empty one")
    engine = open_engine(dest)
    with reading(engine) as conn:
        progress = _marker(conn, PROGRESS_KEY)
        if progress is not None and progress.get("source") == source_id:
            return engine, progress, None
        done = _marker(conn, DONE_KEY)
        if progress is None and done is not None and done.get("source") == source_id:
            return engine, None, done
        used = _holds_data(conn)
    if progress is not None:
        raise TargetNotEmptyError(
            f"{dest.display} is not empty (a copy in progress from {progress.get('source')}); "
            "copy into an empty store, or resume that copy from its own source")
    if used is not None:
        what = f"a finished copy of {done.get('source')}" if done else f"rows in {used}"
        raise TargetNotEmptyError(
            f"{dest.display} is not empty ({what}); copy into an empty store")
    return engine, None, None


# --------------------------------------------------------------------------- copying


def _read(src_engine: Engine, plan: TablePlan, after: list[Any] | None, batch: int,
          columns: Sequence[str] | None = None) -> list[Row[*tuple[Any, ...]]]:
    t = plan.src
    stmt = (select(*[t.c[c] for c in (columns or plan.columns)])
            .order_by(*[t.c[k] for k in plan.key]).limit(batch))
    if after is not None:
        stmt = stmt.where(tuple_(*[t.c[k] for k in plan.key]) > tuple_(*after))
    with reading(src_engine) as conn:
        return list(conn.execute(stmt))


def _write_batch(dst: Connection, plan: TablePlan, rows: list[dict[str, Any]],
                 marker: dict[str, Any]) -> None:
    """One batch and the progress marker that names it, in the caller's one transaction. The
    search columns come out right in the same transaction: PostgreSQL's CJK tokens ride along
    with each row (its word tsvector is generated), SQLite's FTS5 triggers fire and its bigram
    side rows are derived."""
    if rows and plan.name == "messages":
        if bigrams.writes_vector(dst, plan.dst):
            rows = [bigrams.with_vector(r) for r in rows]
        if "root_session_id" in plan.dst.c and "root_session_id" not in rows[0]:
            # A distributed target (db/distribution.py): its rows carry their session's root.
            roots = messages.roots_of(dst, {r["session_id"] for r in rows})
            rows = [{**r, "root_session_id": roots.get(r["session_id"], r["session_id"])}
                    for r in rows]
        dst.execute(plan.dst.insert(), rows)
        bigrams.sync_messages(dst, [r["id"] for r in rows if r.get("id") is not None])
    elif rows:
        dst.execute(plan.dst.insert(), rows)
    _set_marker(dst, PROGRESS_KEY, marker)


def _shape(plan: TablePlan, row: Any) -> dict[str, Any]:
    values = dict(row._mapping)
    if plan.name == "sessions":
        values["parent_session_id"] = None  # linked by the second pass
    return values


def _copy_table(src_engine: Engine, dst_engine: Engine, plan: TablePlan, marker: dict[str, Any],
                batch: int, progress: ProgressFn | None, report: TableCopy) -> None:
    done = marker.setdefault("done", [])
    if plan.name in done:
        report.rows = marker.get("rows", {}).get(plan.name, 0)
        return
    with reading(src_engine) as conn:
        total = int(conn.execute(select(func.count()).select_from(plan.src)).scalar() or 0)
    after = marker.setdefault("after", {}).get(plan.name)
    copied = marker.setdefault("rows", {}).get(plan.name, 0)
    if not plan.key:  # no key to resume by: the whole table in one transaction
        with reading(src_engine) as conn:
            everything = [_shape(plan, r) for r in conn.execute(
                select(*[plan.src.c[c] for c in plan.columns]))]
        marker["done"] = [*done, plan.name]
        marker["rows"][plan.name] = len(everything)
        run_write(dst_engine, lambda c: _write_batch(c, plan, everything, marker), what="copy",
                  budget=COPY_BUDGET_S)
        report.rows = len(everything)
        if progress:
            progress(plan.name, len(everything), total)
        return
    while True:
        rows = _read(src_engine, plan, after, batch)
        if not rows:
            break
        after = [rows[-1]._mapping[k] for k in plan.key]
        copied += len(rows)
        marker["after"][plan.name] = after
        marker["rows"][plan.name] = copied
        values = [_shape(plan, r) for r in rows]
        run_write(dst_engine, functools.partial(_write_batch, plan=plan, rows=values,
                                                marker=marker),
                  what="copy", budget=COPY_BUDGET_S)
        if progress:
            progress(plan.name, copied, total)
    marker["done"] = [*marker["done"], plan.name]
    run_write(dst_engine, lambda c: _set_marker(c, PROGRESS_KEY, marker), what="copy")
    report.rows = copied


def _link_parents(src_engine: Engine, dst_engine: Engine, plan: TablePlan,
                  marker: dict[str, Any], batch: int, report: CopyReport) -> None:
    """The second pass over ``sessions``: each child gets its parent, in key order."""
    if _LINKS in marker["done"]:
        report.detached_parents = marker.get("detached", [])
        return
    after = marker["after"].get(_LINKS)
    while True:
        # Paged by the source's key: (root_session_id, id) on a distributed source.
        rows = _read(src_engine, plan, after, batch, ["id", "parent_session_id", *plan.key])
        if not rows:
            break
        after = list(rows[-1][2:])
        links = [(r[0], r[1]) for r in rows if r[1] is not None]
        marker["after"][_LINKS] = after
        before = list(marker.get("detached", []))

        def unit(dst: Connection, links: list[tuple[Any, Any]] = links,
                 before: list[str] = before) -> None:
            t = plan.dst
            present = {r[0] for r in dst.execute(
                select(t.c.id).where(t.c.id.in_({p for _, p in links})))} if links else set()
            for child, parent in links:
                if parent in present:
                    dst.execute(t.update().where(t.c.id == child).values(
                        parent_session_id=parent))
            marker["detached"] = before + [c for c, p in links if p not in present]
            _set_marker(dst, PROGRESS_KEY, marker)

        run_write(dst_engine, unit, what="copy", budget=COPY_BUDGET_S)
    if "root_session_id" in plan.dst.c:
        # Rows were linked in key order, not parents first: the roots follow once all are in.
        run_write(dst_engine, lineage.refresh_roots, what="copy", budget=COPY_BUDGET_S)
    marker["done"] = [*marker["done"], _LINKS]
    run_write(dst_engine, lambda c: _set_marker(c, PROGRESS_KEY, marker), what="copy")
    report.detached_parents = marker.get("detached", [])


def _copy_state_meta(src_engine: Engine, dst_engine: Engine, marker: dict[str, Any],
                     report: TableCopy) -> None:
    """The source's own markers, in one transaction; the target's derived markers stay."""
    if "state_meta" in marker["done"]:
        return
    meta = _STATE_META
    with reading(src_engine) as conn:
        rows = [{"key": k, "value": v} for k, v in conn.execute(
            select(meta.c.key, meta.c.value).order_by(meta.c.key)) if _copied_marker(k)]
    marker["done"] = [*marker["done"], "state_meta"]

    def unit(dst: Connection) -> None:
        for row in rows:
            stmt = insert(dst, meta).values(**row)
            dst.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key],
                                                   set_={"value": row["value"]}))
        _set_marker(dst, PROGRESS_KEY, marker)

    run_write(dst_engine, unit, what="copy", budget=COPY_BUDGET_S)
    report.rows = len(rows)


def _catch_up_search(dst_engine: Engine) -> None:
    """Index what no batch derived (rows another program wrote into the target meanwhile),
    a chunk per transaction."""
    while run_write(dst_engine, bigrams.catch_up, what="copy", budget=COPY_BUDGET_S):
        continue


# --------------------------------------------------------------------------- verifying


def _live_parents(table: Table, columns: list[str]) -> RowFilter:
    """Sessions with a parent id that names no session read as parentless (as copied)."""
    at = columns.index("parent_session_id")

    def adjust(c: Connection, rows: Iterable[Sequence[Any]]) -> Iterable[Sequence[Any]]:
        ids = {r[0] for r in c.execute(select(table.c.id))}
        for row in rows:
            if row[at] is not None and row[at] not in ids:
                row = (*row[:at], None, *row[at + 1:])
            yield row

    return adjust


def _verify(src_engine: Engine, dst_engine: Engine, plan: CopyPlan, batch: int,
            report: CopyReport) -> None:
    for p in plan.tables:
        t = report.tables.setdefault(p.name, TableCopy())
        cols = sorted(p.columns)
        for side, engine, table in (("source", src_engine, p.src), ("target", dst_engine, p.dst)):
            adjust: RowFilter | None = None
            if p.name == "state_meta":
                adjust = _only_copied_markers
            elif p.name == "sessions" and "parent_session_id" in cols:
                adjust = _live_parents(table, cols)
            count, digest = table_checksum(engine, table, cols, batch=batch, adjust=adjust)
            setattr(t, f"{side}_count", count)
            setattr(t, f"{side}_checksum", digest)


def _only_copied_markers(conn: Connection, rows: Iterable[Sequence[Any]]
                         ) -> Iterable[Sequence[Any]]:
    return (r for r in rows if _copied_marker(r[0]))


def _reverify(src_engine: Engine, dst_engine: Engine, finished: dict[str, Any], batch: int,
              report: CopyReport, started: float) -> CopyReport:
    """A rerun into a finished copy of the same source: nothing is copied; every table is
    counted and checksummed again on both sides."""
    report.already_copied = True
    report.finished_at = finished.get("finished_at")
    plan = make_plan(src_engine, dst_engine, budget=COPY_BUDGET_S)
    report.not_copied = plan.not_copied
    _checked(src_engine, dst_engine, plan, batch, report, started,
             f"{report.target} is a finished copy of {report.source} but differs from it now",
             "(was either store written since?); copy into an empty store to copy it again")
    return report


def _checked(src_engine: Engine, dst_engine: Engine, plan: CopyPlan, batch: int,
             report: CopyReport, started: float, differs: str, hint: str) -> None:
    """Verify both sides into the report and time it; a difference raises
    :class:`CopyMismatchError` naming the tables (``differs in <tables> <hint>``)."""
    _verify(src_engine, dst_engine, plan, batch, report)
    report.seconds = round(time.monotonic() - started, 3)
    if not report.verified:
        bad = [n for n, t in report.tables.items() if not t.matches]
        raise CopyMismatchError(f"{differs} in {', '.join(bad)} {hint}", report=report)


# --------------------------------------------------------------------------- the command


def copy_store(source: str | StoreLocation, dest: str | StoreLocation, *,
               batch: int = DEFAULT_BATCH, progress: ProgressFn | None = None) -> CopyReport:
    """Copy the store at ``source`` (at head) into ``dest`` (empty, or a copy in progress of the
    same source); see the module docstring. Raises :class:`CopyMismatchError` (report attached)
    when the verification finds a difference."""
    if batch < 1:
        raise UsageError("the batch size must be at least 1")
    started = time.monotonic()
    src_loc, dst_loc = resolve_location(source), resolve_location(dest)
    source_id = _source_id(src_loc)
    if source_id == _source_id(dst_loc):
        raise UsageError(f"{dst_loc.display} is the source itself; copy into another store")
    st = migrate.status(src_loc)
    if st.state == "missing":
        raise StoreNotFoundError(f"no store at {src_loc.display}")
    if not st.at_head:
        raise SchemaMismatchError(
            f"{src_loc.display} is {st.describe()}: run `hermes-store upgrade` on it first",
            state=st.state, current=st.current, head=st.head)
    src_engine = open_engine(src_loc, readonly=True)
    dst_engine, marker, finished = _open_target(dst_loc, source_id)
    report = CopyReport(source=src_loc.display, target=dst_loc.display,
                        resumed=marker is not None)
    if finished is not None:
        return _reverify(src_engine, dst_engine, finished, batch, report, started)
    marker = marker or {"source": source_id, "done": [], "after": {}, "rows": {}}
    if not report.resumed:
        run_write(dst_engine, lambda c: _set_marker(c, PROGRESS_KEY, marker), what="copy")
    plan = make_plan(src_engine, dst_engine, budget=COPY_BUDGET_S)
    report.created_tables, report.added_columns = plan.created_tables, plan.added_columns
    report.not_copied = plan.not_copied
    for p in plan.tables:
        t = report.tables.setdefault(p.name, TableCopy())
        if p.name == "state_meta":
            _copy_state_meta(src_engine, dst_engine, marker, t)
            continue
        _copy_table(src_engine, dst_engine, p, marker, batch, progress, t)
        if p.name == "sessions" and "parent_session_id" in p.columns:
            _link_parents(src_engine, dst_engine, p, marker, batch, report)
    with reading(src_engine) as conn:
        high = id_high_water(conn, _MESSAGES)
    report.sequence = high
    run_write(dst_engine, lambda c: keep_ids_above(c, _MESSAGES, high), what="copy")
    _catch_up_search(dst_engine)
    _checked(src_engine, dst_engine, plan, batch, report, started,
             f"the copy differs from {src_loc.display}",
             "(was the source written during the copy?); the target keeps its progress marker")
    done = {"source": source_id, "finished_at": time.time(),
            "rows": {n: t.target_count for n, t in report.tables.items()}}

    def close(dst: Connection) -> None:
        _set_marker(dst, PROGRESS_KEY, None)
        _set_marker(dst, DONE_KEY, done)

    run_write(dst_engine, close, what="copy")
    return report
