"""``copy``: a whole store from one backend to another (SQLite ⇄ PostgreSQL, or the same kind).

* **Streamed.** Each table is read in primary-key order, ``batch`` rows per read transaction, and
  each batch is written in one target transaction together with the copy's progress marker
  (``state_meta`` key :data:`PROGRESS_KEY`: the source, and per table the last key written). A
  copy killed at any point leaves the target at a batch boundary; the rerun reads the marker and
  continues after it, so no row is written twice.
* **Refusing.** A target that holds data and is not a copy in progress *of the same source* is
  refused before anything is written (:class:`~hermes_store.errors.TargetNotEmptyError`).
* **Whole.** The modelled tables, and whatever a newer agent release added: its tables are
  created on the target, its columns added, when their type maps to the target (integer, real,
  text, blob); a column SQLite declared without a type (or a server type with no SQLite meaning)
  cannot be mapped faithfully, and is named in the report as not copied. Derived data is not
  copied but rebuilt: the FTS5 triggers fire on every inserted row, and the CJK side rows are
  derived in the same transaction as their messages (``repo.bigrams``); ``state_meta`` markers
  about derived indexes stay the target's own.
* **Sequences.** After the rows, the target's ``messages`` id generator is set past both the
  highest id and the source's own high-water mark (SQLite ``sqlite_sequence``; PostgreSQL
  ``setval``), so an id the source once handed out is never handed out again.
* **Verified.** Each table's row count and checksum are computed the same way on both sides
  (in Python over the values each side reads back: order-independent, numbers compared by
  value), printed, and a difference is an error naming the table.

Sessions arrive without their parent link, which a second pass sets once every session exists
(a child may sort before its parent); a parent id that names no session in the source is left
unset and named in the report (PostgreSQL would refuse the dangling key). The source should not
be written during a copy: the checksum would then report the difference.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    func,
    inspect,
    select,
    text,
    tuple_,
)
from sqlalchemy import types as satypes

from hermes_store.db import migrate, topics
from hermes_store.db.dialect import FLOAT, INTEGER, TEXT, insert
from hermes_store.db.engine import is_server, open_engine, reading, run_write
from hermes_store.db.models import Base
from hermes_store.errors import (
    CopyMismatchError,
    SchemaMismatchError,
    StoreNotFoundError,
    TargetNotEmptyError,
    UsageError,
)
from hermes_store.paths import StoreLocation, resolve_location
from hermes_store.repo import bigrams

ProgressFn = Callable[[str, int, int], None]
DEFAULT_BATCH = 1000
PROGRESS_KEY = "copy_in_progress"
DONE_KEY = "copied_from"
COPY_BUDGET_S = 60.0
# Bookkeeping and derived tables: recreated by the target's own schema, never copied.
_SKIP_TABLES = {"alembic_version", "schema_version", "sqlite_sequence", "sqlite_stat1",
                "sqlite_stat4"}
_DERIVED_MARKER = re.compile(r"(^fts_|layout|^cjk_)", re.IGNORECASE)
_OUR_KEYS = {PROGRESS_KEY, DONE_KEY}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LINKS = "sessions.parent_session_id"
_BLOB = satypes.LargeBinary().with_variant(satypes.LargeBinary(), "postgresql")


@dataclass
class TableCopy:
    rows: int = 0
    source_count: int = 0
    target_count: int = 0
    source_checksum: str = ""
    target_checksum: str = ""
    not_copied_columns: list[str] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return (self.source_count, self.source_checksum) == (
            self.target_count, self.target_checksum)


@dataclass
class CopyReport:
    source: str
    target: str
    resumed: bool = False
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


# --------------------------------------------------------------------------- planning


@dataclass
class _Plan:
    """One table: the columns both sides share, its key, and its reflected Core tables."""

    name: str
    src: Table
    dst: Table
    columns: list[str]
    key: list[str]


def _copyable(conn: Connection) -> list[str]:
    names = set(inspect(conn).get_table_names()) - _SKIP_TABLES
    return sorted(n for n in names if not migrate.is_derived_name(n)
                  and not n.startswith("sqlite_"))


def _ordered(names: Iterable[str]) -> list[str]:
    """Modelled tables parents first (foreign keys), then the unknown ones by name."""
    names = set(names)
    known = [t.name for t in Base.metadata.sorted_tables if t.name in names]
    return known + sorted(names - set(known))


def _mapped_type(kind: Any) -> Any | None:
    """A column type for the target, or None when there is no faithful one."""
    try:
        affinity = kind._type_affinity
    except Exception:  # noqa: BLE001 - an unknown reflected type
        return None
    if affinity is None or isinstance(kind, satypes.NullType):
        return None
    if issubclass(affinity, satypes.Integer):
        return INTEGER
    if issubclass(affinity, (satypes.Float, satypes.Numeric)):
        return FLOAT
    if issubclass(affinity, satypes.String):
        return TEXT
    if issubclass(affinity, satypes._Binary):
        return _BLOB
    return None


def _columns(conn: Connection, table: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in inspect(conn).get_columns(table)}


def _prepare(dst: Connection, name: str, src_cols: dict[str, dict[str, Any]],
             src_key: list[str], report: CopyReport) -> None:
    """Make ``name`` exist on the target with every source column that maps."""
    if name in migrate.OPT_IN_TABLES and not inspect(dst).has_table(name):
        topics.create(dst)  # with the agent's own DDL (keys, cascade, indexes)
        report.created_tables.append(name)
    if not inspect(dst).has_table(name):
        cols = []
        for col, info in src_cols.items():
            kind = _mapped_type(info["type"])
            if kind is not None:
                cols.append(Column(col, kind, nullable=col not in src_key))
        key = [k for k in src_key if any(c.name == k for c in cols)]
        extra = [PrimaryKeyConstraint(*key)] if key and key == src_key else []
        Table(name, MetaData(), *cols, *extra).create(dst)
        report.created_tables.append(name)
        return
    have = _columns(dst, name)
    for col, info in src_cols.items():
        kind = _mapped_type(info["type"])
        if col in have or kind is None:
            continue
        ddl = kind.compile(dialect=dst.dialect)
        dst.exec_driver_sql(f"ALTER TABLE {_q(dst, name)} ADD COLUMN {_q(dst, col)} {ddl}")
        report.added_columns.append(f"{name}.{col}")


def _q(conn: Connection, name: str) -> str:
    """A table or column name for DDL, quoted; names outside ``[A-Za-z_][A-Za-z0-9_]*`` are
    refused rather than trusted."""
    if not _IDENT.match(name):
        raise UsageError(f"the source has a table or column named {name!r}, which copy does "
                         "not put into SQL text; rename it first")
    return str(conn.dialect.identifier_preparer.quote(name))


def _plan(src_engine: Engine, dst_engine: Engine, report: CopyReport) -> list[_Plan]:
    with reading(src_engine) as src:
        names = _ordered(_copyable(src))
        shapes = {}
        for name in names:
            cols = {c: i for c, i in _columns(src, name).items()
                    if not i.get("computed") and not migrate.is_derived_name(c)}
            key = inspect(src).get_pk_constraint(name).get("constrained_columns") or []
            shapes[name] = (cols, key)

    def prepare(dst: Connection) -> None:
        for name in names:
            _prepare(dst, name, *shapes[name], report)

    run_write(dst_engine, prepare, what="copy", budget=COPY_BUDGET_S)
    plans = []
    with reading(src_engine) as src, reading(dst_engine) as dst:
        for name in names:
            cols, key = shapes[name]
            have = {c for c, i in _columns(dst, name).items() if not i.get("computed")}
            shared = [c for c in cols if c in have]
            for c in cols:
                if c not in have:
                    report.not_copied.append(f"{name}.{c} ({cols[c]['type']!r})")
            if not shared:
                continue
            src_t = Table(name, MetaData(), autoload_with=src)
            dst_t = Table(name, MetaData(), autoload_with=dst)
            key = [k for k in key if k in shared]
            plans.append(_Plan(name, src_t, dst_t, shared, key))
    return plans


# --------------------------------------------------------------------------- markers


def _marker(conn: Connection, key: str) -> dict[str, Any] | None:
    raw = conn.execute(text("SELECT value FROM state_meta WHERE key = :k"), {"k": key}).scalar()
    return json.loads(raw) if raw else None


def _set_marker(conn: Connection, key: str, value: dict[str, Any] | None) -> None:
    meta = Base.metadata.tables["state_meta"]
    conn.execute(meta.delete().where(meta.c.key == key))
    if value is not None:
        conn.execute(insert(conn, meta).values(key=key, value=json.dumps(value)))


def _holds_data(conn: Connection) -> str | None:
    """The first table holding rows a fresh store would not have, or None."""
    for name in _copyable(conn):
        if name == "state_meta":
            keys = [r[0] for r in conn.execute(text("SELECT key FROM state_meta"))]
            if any(not _DERIVED_MARKER.search(k) and k not in _OUR_KEYS for k in keys):
                return name
            continue
        if conn.execute(text(f"SELECT 1 FROM {_q(conn, name)} LIMIT 1")).first():
            return name
    return None


def _source_id(location: StoreLocation) -> str:
    if location.path is not None:
        return str(location.path.expanduser().resolve())
    return location.display


def _open_target(dest: StoreLocation, source_id: str) -> tuple[Engine, dict[str, Any] | None]:
    """The target engine at head, and the progress of a copy in progress of this source."""
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
            return engine, progress
        used = _holds_data(conn)
        done = _marker(conn, DONE_KEY)
    if used is not None or progress is not None:
        what = (f"a copy in progress from {progress.get('source')}" if progress else
                f"a finished copy of {done.get('source')}" if done else f"rows in {used}")
        raise TargetNotEmptyError(
            f"{dest.display} is not empty ({what}); copy into an empty store, or rerun with "
            "the same source to resume")
    return engine, None


# --------------------------------------------------------------------------- copying


def _key_of(row: Any, key: list[str]) -> list[Any]:
    return [row._mapping[k] for k in key]


def _read(src_engine: Engine, plan: _Plan, after: list[Any] | None, batch: int,
          columns: Sequence[str] | None = None) -> list[Any]:
    t = plan.src
    cols = [t.c[c] for c in (columns or plan.columns)]
    stmt = select(*cols).order_by(*[t.c[k] for k in plan.key]).limit(batch)
    if after is not None:
        stmt = stmt.where(tuple_(*[t.c[k] for k in plan.key]) > tuple_(*after))
    with reading(src_engine) as conn:
        return list(conn.execute(stmt))


def _write_batch(dst: Connection, plan: _Plan, rows: list[dict[str, Any]],
                 marker: dict[str, Any]) -> None:
    if rows:
        dst.execute(plan.dst.insert(), rows)
    if plan.name == "messages" and rows:
        bigrams.sync_messages(dst, [r["id"] for r in rows if r.get("id") is not None])
    _set_marker(dst, PROGRESS_KEY, marker)


def _shape(plan: _Plan, row: Any) -> dict[str, Any]:
    values = dict(row._mapping)
    if plan.name == "sessions":
        values["parent_session_id"] = None  # linked by the second pass
    return values


def _copy_table(src_engine: Engine, dst_engine: Engine, plan: _Plan, marker: dict[str, Any],
                batch: int, progress: ProgressFn | None, report: TableCopy) -> None:
    done = marker.setdefault("done", [])
    if plan.name in done:
        return
    with reading(src_engine) as conn:
        total = int(conn.execute(select(func.count()).select_from(plan.src)).scalar() or 0)
    after = marker.setdefault("after", {}).get(plan.name)
    copied = marker.setdefault("rows", {}).get(plan.name, 0)
    if not plan.key:  # no key to resume by: the whole table in one transaction
        rows = _read_all(src_engine, plan)
        marker["done"] = [*done, plan.name]
        marker["rows"][plan.name] = len(rows)
        run_write(dst_engine, lambda c: _write_batch(c, plan, rows, marker), what="copy",
                  budget=COPY_BUDGET_S)
        report.rows = len(rows)
        return
    while True:
        rows = _read(src_engine, plan, after, batch)
        if not rows:
            break
        after = _key_of(rows[-1], plan.key)
        copied += len(rows)
        marker["after"][plan.name] = after
        marker["rows"][plan.name] = copied
        values = [_shape(plan, r) for r in rows]
        run_write(dst_engine, lambda c, v=values: _write_batch(c, plan, v, marker),
                  what="copy", budget=COPY_BUDGET_S)
        if progress:
            progress(plan.name, copied, total)
    marker["done"] = [*marker["done"], plan.name]
    run_write(dst_engine, lambda c: _set_marker(c, PROGRESS_KEY, marker), what="copy")
    report.rows = copied


def _read_all(src_engine: Engine, plan: _Plan) -> list[dict[str, Any]]:
    with reading(src_engine) as conn:
        return [dict(r._mapping) for r in conn.execute(
            select(*[plan.src.c[c] for c in plan.columns]))]


def _link_parents(src_engine: Engine, dst_engine: Engine, plan: _Plan, marker: dict[str, Any],
                  batch: int, report: CopyReport) -> None:
    """The second pass over ``sessions``: each child gets its parent, in key order."""
    if _LINKS in marker["done"]:
        report.detached_parents = marker.get("detached", [])
        return
    after = marker["after"].get(_LINKS)
    while True:
        rows = _read(src_engine, plan, after, batch, ["id", "parent_session_id"])
        if not rows:
            break
        after = [rows[-1][0]]
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
    marker["done"] = [*marker["done"], _LINKS]
    run_write(dst_engine, lambda c: _set_marker(c, PROGRESS_KEY, marker), what="copy")
    report.detached_parents = marker.get("detached", [])


def _state_meta_rows(src_engine: Engine) -> list[dict[str, Any]]:
    with reading(src_engine) as conn:
        rows = conn.execute(text("SELECT key, value FROM state_meta ORDER BY key"))
        return [{"key": k, "value": v} for k, v in rows if _copied_marker(k)]


def _copied_marker(key: Any) -> bool:
    return key is not None and not _DERIVED_MARKER.search(str(key)) and key not in _OUR_KEYS


def _copy_state_meta(src_engine: Engine, dst_engine: Engine, marker: dict[str, Any],
                     report: TableCopy) -> None:
    """The source's own markers, in one transaction; the target's derived markers stay."""
    if "state_meta" in marker["done"]:
        return
    rows = _state_meta_rows(src_engine)
    marker["done"] = [*marker["done"], "state_meta"]

    def unit(dst: Connection) -> None:
        meta = Base.metadata.tables["state_meta"]
        for row in rows:
            stmt = insert(dst, meta).values(**row)
            dst.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key],
                                                   set_={"value": row["value"]}))
        _set_marker(dst, PROGRESS_KEY, marker)

    run_write(dst_engine, unit, what="copy", budget=COPY_BUDGET_S)
    report.rows = len(rows)


# --------------------------------------------------------------------------- sequences


def _high_water(conn: Connection) -> int:
    """The highest message id this store ever handed out (deleted rows included)."""
    top = int(conn.execute(text("SELECT COALESCE(MAX(id), 0) FROM messages")).scalar() or 0)
    if is_server(conn.engine):
        last = conn.execute(text(  # NULL until the sequence handed out a value
            "SELECT pg_sequence_last_value(pg_get_serial_sequence('messages', 'id')::regclass)"
        )).scalar()
        return max(top, int(last)) if last is not None else top
    row = conn.execute(text("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")).first()
    return max(top, int(row[0])) if row and row[0] is not None else top


def _set_sequence(dst: Connection, value: int) -> None:
    if value <= 0:
        return
    if is_server(dst.engine):
        dst.execute(text("SELECT setval(pg_get_serial_sequence('messages', 'id'), :v)"),
                    {"v": value})
        return
    updated = dst.execute(text("UPDATE sqlite_sequence SET seq = MAX(seq, :v) "
                               "WHERE name = 'messages'"), {"v": value}).rowcount
    if not updated:
        dst.execute(text("INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', :v)"),
                    {"v": value})


# --------------------------------------------------------------------------- verifying


def _cell(value: Any) -> bytes:
    if value is None:
        return b"N"
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)  # SQLite may hold 3.0 where the server holds 3: equal numbers
    if isinstance(value, int):
        return b"I" + str(value).encode()
    if isinstance(value, float):
        return b"F" + repr(value).encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"B" + bytes(value)
    return b"S" + str(value).encode("utf-8", "surrogatepass")


def checksum_rows(rows: Iterable[Sequence[Any]]) -> tuple[int, str]:
    """Count and order-independent checksum of rows (the sum of each row's SHA-256, mod 2**64):
    a missing, extra, doubled or changed row changes it."""
    count, total = 0, 0
    for row in rows:
        digest = hashlib.sha256(b"\x1f".join(_cell(v) for v in row)).digest()
        total = (total + int.from_bytes(digest[:8], "big")) % 2**64
        count += 1
    return count, f"{total:016x}"


def _table_sum(engine: Engine, table: Table, columns: list[str], batch: int) -> tuple[int, str]:
    cols = [table.c[c] for c in columns]
    with reading(engine) as conn:
        result = conn.execution_options(yield_per=batch).execute(select(*cols))
        rows: Iterable[Sequence[Any]] = result
        if table.name == "state_meta":
            rows = (r for r in result if _copied_marker(r[0]))
        elif table.name == "sessions" and "parent_session_id" in columns:
            rows = _with_live_parents(conn, table, columns, result)
        return checksum_rows(rows)


def _with_live_parents(conn: Connection, table: Table, columns: list[str],
                       rows: Iterable[Sequence[Any]]) -> Iterable[Sequence[Any]]:
    """Sessions with a parent id that names no session read as parentless (as copied)."""
    ids = {r[0] for r in conn.execute(select(table.c.id))}
    at = columns.index("parent_session_id")
    for row in rows:
        if row[at] is not None and row[at] not in ids:
            row = (*row[:at], None, *row[at + 1:])
        yield row


def _verify(src_engine: Engine, dst_engine: Engine, plans: list[_Plan], batch: int,
            report: CopyReport) -> None:
    for plan in plans:
        t = report.tables.setdefault(plan.name, TableCopy())
        cols = sorted(plan.columns)
        t.source_count, t.source_checksum = _table_sum(src_engine, plan.src, cols, batch)
        t.target_count, t.target_checksum = _table_sum(dst_engine, plan.dst, cols, batch)


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
    dst_engine, marker = _open_target(dst_loc, source_id)
    report = CopyReport(source=src_loc.display, target=dst_loc.display,
                        resumed=marker is not None)
    marker = marker or {"source": source_id, "done": [], "after": {}, "rows": {}}
    if not report.resumed:
        run_write(dst_engine, lambda c: _set_marker(c, PROGRESS_KEY, marker), what="copy")
    plans = _plan(src_engine, dst_engine, report)
    for plan in plans:
        t = report.tables.setdefault(plan.name, TableCopy())
        if plan.name == "state_meta":
            _copy_state_meta(src_engine, dst_engine, marker, t)
            continue
        _copy_table(src_engine, dst_engine, plan, marker, batch, progress, t)
        if plan.name == "sessions" and "parent_session_id" in plan.columns:
            _link_parents(src_engine, dst_engine, plan, marker, batch, report)
    with reading(src_engine) as conn:
        high = _high_water(conn)
    report.sequence = high

    def finish(dst: Connection) -> None:
        _set_sequence(dst, max(high, _high_water(dst)))
        while bigrams.catch_up(dst):  # rows the triggers queued that no batch took
            pass

    run_write(dst_engine, finish, what="copy", budget=COPY_BUDGET_S)
    _verify(src_engine, dst_engine, plans, batch, report)
    report.seconds = round(time.monotonic() - started, 3)
    if not report.verified:
        bad = [n for n, t in report.tables.items() if not t.matches]
        raise CopyMismatchError(
            f"the copy differs from {src_loc.display} in {', '.join(bad)} (was the source "
            "written during the copy?); the target keeps its progress marker",
            report=report)
    done = {"source": source_id, "finished_at": time.time(),
            "rows": {n: t.target_count for n, t in report.tables.items()}}

    def close(dst: Connection) -> None:
        _set_marker(dst, PROGRESS_KEY, None)
        _set_marker(dst, DONE_KEY, done)

    run_write(dst_engine, close, what="copy")
    return report
