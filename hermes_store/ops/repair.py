"""``repair``: probe a store for damage, back it up, fix what can be fixed in place, probe again.

The probes tell "fresh" from "broken" by asking ``db.catalog`` first, check each search
index for what FTS5 itself misses (``repo.index_health``), and include a write
through the triggers that is always rolled back: damage that leaves reads working (a trigger
that outlived its FTS table, a malformed index) only shows up on write (docs/lessons.md#damage).
No ORM session is used: the models may not even map onto a damaged file.

Fixes run only after the store and its sidecars were copied to a timestamped backup, in this
order: schema surgery on duplicate catalog rows (``db.catalog``) (nothing else can run while they
exist), search indexes FTS5 refuses to load taken out of the catalog (FTS5 cannot drop them),
orphan FTS5 shadow tables, triggers writing to tables that are gone, derived objects of
the head layout that are missing (``layout.recreate_missing``: views, indexes, side tables,
triggers, each only if absent), the FTS indexes
(``storage.rebuild_indexes``; should it fail, FTS5 ``rebuild`` of each index, by hand
for external-content indexes), ``REINDEX``. Then every probe runs again and decides the verdict.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, exc

from hermes_store.db import catalog, index_writers, migrate, names
from hermes_store.db import derived as layout
from hermes_store.db.catalog import SchemaObject
from hermes_store.db.engine import open_engine, run_write
from hermes_store.db.sqlite_driver import (
    agent_tokenizer_error,
    agent_tokenizer_problem,
    is_lock_error,
)
from hermes_store.errors import StoreDamagedError, StoreNotFoundError, StoreUnopenableError
from hermes_store.ops import storage
from hermes_store.ops.backup import backup_path, copy_with_sidecars
from hermes_store.ops.holders import ensure_not_held
from hermes_store.repo import bigrams, index_health

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Tables a trigger body writes to: INSERT INTO t, DELETE FROM t, UPDATE t, REPLACE INTO t.
_TRIGGER_TARGET = re.compile(
    r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|REPLACE\s+INTO|DELETE\s+FROM|UPDATE(?:\s+OR\s+\w+)?)"
    r"\s+(?:main\s*\.\s*)?[\"`\[]?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
PROBE_TEXT = "hermes-store repair write probe"
DROP_AGENT_CJK = "hermes-store repair --drop-agent-cjk"
_DROP = {"trigger": "DROP TRIGGER IF EXISTS", "view": "DROP VIEW IF EXISTS"}
NEXT_STEPS = ("hermes-store recover --source {path} --output NEW.db --inspect-only",
              "hermes-store recover --source {path} --output NEW.db --allow-partial")


@dataclass
class Probe:
    name: str
    ok: bool
    detail: str = ""
    fix: str | None = None


@dataclass
class RepairReport:
    path: str
    check_only: bool
    probes: list[Probe]
    backup: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    after: list[Probe] | None = None

    @property
    def final(self) -> list[Probe]:
        return self.after if self.after is not None else self.probes

    @property
    def healthy(self) -> bool:
        return all(p.ok for p in self.final)

    @property
    def problems(self) -> list[Probe]:
        return [p for p in self.final if not p.ok]

    def next_steps(self) -> list[str]:
        if self.healthy:
            return []
        if self.check_only and all(p.fix == "hermes-store repair" for p in self.problems):
            return [f"hermes-store --db {self.path} repair"]
        return [s.format(path=self.path) for s in NEXT_STEPS]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "check_only": self.check_only, "healthy": self.healthy,
                "probes": [asdict(p) for p in self.probes], "backup": self.backup,
                "actions": self.actions,
                "after": None if self.after is None else [asdict(p) for p in self.after],
                "next_steps": self.next_steps()}


def _quote(name: str) -> str:
    if not _IDENT.match(name):
        raise StoreDamagedError(f"refusing to touch a schema object with an odd name: {name!r}")
    return f'"{name}"'


def _message(err: BaseException) -> str:
    """SQLite's own words: without SQLAlchemy's wrapper or the engine's generic advice."""
    inner = err.orig if isinstance(err, exc.DBAPIError) and err.orig is not None else err
    while isinstance(inner, StoreDamagedError) and inner.__cause__ is not None:
        inner = inner.__cause__
    return str(inner)


# --------------------------------------------------------------------------- schema reading


def orphan_shadows(rows: list[SchemaObject]) -> list[str]:
    """What ``migrate.drop_orphan_fts_shadows`` would drop, found without dropping it."""
    return catalog.orphan_fts_shadows(o.name for o in rows if o.type == "table")


def dead_triggers(rows: list[SchemaObject]) -> dict[str, list[str]]:
    """Triggers whose body writes to a table or view that no longer exists."""
    names = {o.name.lower() for o in rows if o.type in ("table", "view")}
    dead: dict[str, list[str]] = {}
    for obj in rows:
        if obj.type != "trigger":
            continue
        body = re.split(r"\bBEGIN\b", obj.sql, maxsplit=1, flags=re.I)
        targets = _TRIGGER_TARGET.findall(body[1] if len(body) > 1 else "")
        gone = sorted({t for t in targets if t.lower() not in names})
        if gone:
            dead[obj.name] = gone
    return dead


def duplicate_schema_rows(path: Path) -> list[tuple[str, str, int]]:
    """Duplicate catalog entries, read with ``writable_schema`` so parsing is skipped.

    A plain connection is used on purpose: with a duplicate row every prepared statement fails
    at schema parse, including the engine's own connection pragmas.
    """
    con = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True,
                          isolation_level=None)
    try:
        con.execute("PRAGMA writable_schema=ON")
        return catalog.duplicate_entries(con)
    except sqlite3.DatabaseError:
        return []
    finally:
        con.close()


# --------------------------------------------------------------------------- probes


def _probe_write(conn: Connection) -> Probe:
    """Insert and delete a message inside a savepoint (triggers fire), then roll it all back."""
    trans = conn.begin()
    try:
        conn.exec_driver_sql("SAVEPOINT hermes_probe")
        sid = conn.exec_driver_sql("SELECT id FROM sessions LIMIT 1").scalar()
        if sid is None:
            sid = "hermes_repair_probe"
            conn.exec_driver_sql(
                "INSERT INTO sessions (id, source, started_at) VALUES (?, 'repair', ?)",
                (sid, time.time()))
        mid = conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, PROBE_TEXT, time.time())).lastrowid
        conn.exec_driver_sql("UPDATE messages SET content = ? WHERE id = ?", (PROBE_TEXT + ".", mid))
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (mid,))
        conn.exec_driver_sql("ROLLBACK TO hermes_probe")
        conn.exec_driver_sql("RELEASE hermes_probe")
    except exc.DBAPIError as err:
        if is_lock_error(err):
            return Probe("write_probe", True, "skipped: another process holds the write lock")
        if "no such tokenizer" in _message(err):
            return Probe("write_probe", False, str(agent_tokenizer_error(_message(err))),
                         DROP_AGENT_CJK)
        return Probe("write_probe", False, f"a write through the triggers fails: {_message(err)}",
                     "hermes-store repair")
    finally:
        trans.rollback()
    return Probe("write_probe", True, "insert/update/delete through the triggers works")


def _probe_fts(conn: Connection, names: list[str]) -> list[Probe]:
    """``storage.integrity_problems`` of every FTS5 table, one probe each, rolled back."""
    for name in names:
        _quote(name)  # an odd name is refused before anything runs
    trans = conn.begin()
    try:
        problems = storage.integrity_problems(conn, names)
    finally:
        trans.rollback()
    return [Probe(f"fts:{name}", False, f"FTS5 integrity-check failed: {problems[name]}",
                  "hermes-store repair") if name in problems
            else Probe(f"fts:{name}", True, "FTS5 integrity-check ok") for name in names]


def _probe_indexes(conn: Connection, present: set[str], full: bool) -> list[Probe]:
    """Each of our indexes against what it must hold (``repo.index_health``): what FTS5's
    integrity-check misses (a zeroed structure record, an emptied term table, lost CJK side
    rows) and what a search would answer with fewer hits."""
    probes = []
    for index in catalog.FTS_INDEXES:
        if index not in present:
            continue
        with conn.begin():
            problems = index_health.findings(conn, index, full=full)
        probes.append(Probe(f"index:{index}", False, "; ".join(problems), "hermes-store repair")
                      if problems else Probe(f"index:{index}", True, "holds what it must"))
    return probes


def _probe_quick(conn: Connection, full: bool) -> Probe:
    pragma = "integrity_check" if full else "quick_check"
    try:
        with conn.begin():
            rows = [str(r[0]) for r in conn.exec_driver_sql(f"PRAGMA {pragma}")]
    except exc.DBAPIError as err:
        rows = [_message(err)]
    if rows == ["ok"]:
        return Probe(pragma, True, "ok")
    return Probe(pragma, False, "; ".join(rows[:5]) + (" …" if len(rows) > 5 else ""),
                 "hermes-store repair (REINDEX), else hermes-store recover")


def _at_head(conn: Connection) -> bool:
    """Only a store at head is held to the head layout; ``upgrade`` builds it for the others."""
    with conn.begin():
        return migrate.status_of(conn).at_head


def _probe_head_objects(conn: Connection, name: str, find: Callable[[Connection], list[str]],
                        *, found: str, ok: str, behind: str) -> Probe:
    """A probe of a store at head: ``find`` lists what is wrong with its layout (a store behind
    head passes, with ``behind`` saying why)."""
    try:
        if not _at_head(conn):
            return Probe(name, True, behind)
        with conn.begin():
            wrong = find(conn)
    except exc.DBAPIError as err:
        return Probe(name, False, f"cannot read the schema: {_message(err)}",
                     "hermes-store recover --inspect-only")
    if wrong:
        return Probe(name, False, found + ", ".join(wrong), "hermes-store repair")
    return Probe(name, True, ok)


def _probe_layout(conn: Connection) -> Probe:
    """Views, indexes and triggers of the head layout that are gone altogether.

    Dropped together with its triggers, an index leaves nothing behind that a write or an
    integrity-check would trip over: search stays complete through its fallbacks, slowly.
    """
    return _probe_head_objects(conn, "derived_layout", layout.missing_objects,
                               found="missing: ",
                               ok="every view, index and trigger of the head layout",
                               behind="not at head: hermes-store upgrade builds it")


def _probe_foreign(conn: Connection) -> Probe:
    """Triggers of another program writing to our indexes (an agent of another release adds
    its own beside ours): every write then indexes a row twice (docs/mixed-fleets.md)."""
    return _probe_head_objects(conn, "foreign_triggers", index_writers.foreign_index_triggers,
                               found="second writers to the search indexes: ", ok="none",
                               behind="not at head: hermes-store upgrade")


def _agent_cjk(rows: list[SchemaObject]) -> tuple[list[str], str | None]:
    """The agent's CJK objects among ``rows``, and its index when this process cannot open it
    (its native tokenizer is not loaded here)."""
    found = {(o.type, o.name): o for o in rows}
    present = [n for n in catalog.AGENT_CJK_TRIGGERS if ("trigger", n) in found]
    present += [catalog.AGENT_CJK_VIEW] if ("view", catalog.AGENT_CJK_VIEW) in found else []
    index = found.get(("table", catalog.AGENT_CJK_INDEX))
    unreadable = None
    if index is not None and catalog.is_agent_cjk_index(index.sql):
        present.append(index.name)
        if catalog.AGENT_CJK_TOKENIZER in index.sql and agent_tokenizer_problem():
            unreadable = index.name
    return present, unreadable


def _probe_agent_cjk(agents: list[str], unreadable: str | None) -> Probe:
    """The agent's CJK objects are its own and stay (never dropped unless asked); where this
    process cannot load their tokenizer, every write to messages fails."""
    if not agents:
        return Probe("agent_cjk", True, "none")
    if unreadable is None:
        return Probe("agent_cjk", True, f"{', '.join(agents)}: the agent's, left as they are")
    problem = agent_tokenizer_problem()
    return Probe("agent_cjk", False, f"{', '.join(agents)}: writes to messages fail here, "
                 f"{problem}", f"a Python whose sqlite3 can load extensions, or {DROP_AGENT_CJK}")


def drop_agent_cjk(engine: Engine) -> list[str]:
    """Remove the agent's own CJK search objects (asked for: ``--drop-agent-cjk``); nothing of
    ours and no row is touched. The agent creates them again when it next loads its library."""
    def unit(conn: Connection) -> list[str]:
        done = []
        for obj in catalog.agent_cjk_objects(conn):
            if obj.type == "table":
                try:
                    with conn.begin_nested():
                        conn.exec_driver_sql(f"DROP TABLE {_quote(obj.name)}")
                except exc.DBAPIError:  # "no such tokenizer": DROP cannot connect to it
                    catalog.forget_fts5_table(conn, obj.name)
            else:
                conn.exec_driver_sql(f"{_DROP[obj.type]} {_quote(obj.name)}")
            done.append(f"dropped the agent's {obj.type} {obj.name} (--drop-agent-cjk)")
        return done
    return run_write(engine, unit, what="repair")


def probe_store(path: str | Path, *, full: bool = False) -> list[Probe]:
    """Every probe, in order; stops after the first when the file does not open at all."""
    p = Path(path)
    if not p.exists():
        raise StoreNotFoundError(f"no store at {p}")
    try:
        engine = open_engine(p)
        # Pooled connections keep the schema they parsed; a damaged schema must be read afresh.
        engine.dispose()
        with engine.connect() as conn, conn.begin():
            rows = catalog.objects(conn)
    except StoreUnopenableError as err:
        if err.reason != "not_sqlite":
            raise  # a directory, a file we may not read or write: not damage
        return [Probe("opens", False, f"the file does not open as a database: {err}",
                      "hermes-store recover --inspect-only")]
    except (exc.DBAPIError, sqlite3.DatabaseError) as err:
        text = _message(err)
        dups = duplicate_schema_rows(p) if "malformed database schema" in text else []
        if dups:
            listing = ", ".join(f"{t} {n} ×{c}" for t, n, c in dups)
            return [Probe("opens", False, f"duplicate schema rows ({listing}): {text}",
                          "hermes-store repair")]
        return [Probe("opens", False, f"the file does not open as a database: {text}",
                      "hermes-store recover --inspect-only")]
    probes = [Probe("opens", True, f"{len(rows)} schema objects")]
    with engine.connect() as conn:
        probes.append(_probe_quick(conn, full))
        orphans = orphan_shadows(rows)
        probes.append(Probe("orphan_fts_shadows", not orphans,
                            ", ".join(orphans) or "none", "hermes-store repair" if orphans else None))
        dead = dead_triggers(rows)
        probes.append(Probe(
            "dead_triggers", not dead,
            "; ".join(f"{t} writes to missing {', '.join(g)}" for t, g in dead.items()) or "none",
            "hermes-store repair" if dead else None))
        probes.append(_probe_layout(conn))
        probes.append(_probe_foreign(conn))
        agents, unreadable = _agent_cjk(rows)
        probes.append(_probe_agent_cjk(agents, unreadable))
        # The agent's own index cannot even be opened without its tokenizer: not ours to check.
        probes += _probe_fts(conn, [n for n in catalog.fts5_in(rows) if n != unreadable])
        tables = {o.name for o in rows if o.type == "table"}
        probes += _probe_indexes(conn, tables, full)
        if {"sessions", "messages"} <= tables:
            probes.append(_probe_write(conn))
        elif tables - {"sqlite_sequence"}:
            probes.append(Probe("write_probe", False, "sessions or messages table is missing",
                                "hermes-store recover"))
    return probes


# --------------------------------------------------------------------------- fixes


def remove_duplicate_schema_rows(path: Path, dups: list[tuple[str, str, int]]) -> list[str]:
    """Keep the first row of each duplicated (type, name); the file was backed up first."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA writable_schema=ON")
        con.execute("BEGIN IMMEDIATE")
        for kind, name, _ in dups:
            catalog.drop_duplicate_entries(con, kind, name)
        con.execute("COMMIT")
        con.execute("PRAGMA writable_schema=RESET")
    finally:
        con.close()
    return [f"removed duplicate schema rows of {kind} {name}" for kind, name, _ in dups]


def _attempt(conn: Connection, fn: Callable[[], Any]) -> str | None:
    """Run ``fn`` inside a savepoint; undo it and return the error text if it fails."""
    conn.exec_driver_sql("SAVEPOINT hermes_fix")
    try:
        fn()
    except (exc.DBAPIError, StoreDamagedError) as err:
        conn.exec_driver_sql("ROLLBACK TO hermes_fix")
        conn.exec_driver_sql("RELEASE hermes_fix")
        return _message(err)
    conn.exec_driver_sql("RELEASE hermes_fix")
    return None


def _reindex_external(conn: Connection, table: str, sql: str) -> None:
    """FTS5 ``rebuild`` by hand: empty the index, re-insert every row of its content table."""
    options = catalog.fts5_options(sql)
    if options.content is None:
        raise StoreDamagedError(f"{table} stores no content it could be rebuilt from")
    cols = [c.name for c in catalog.columns(conn, table)]
    key = options.content_rowid
    names = ", ".join(map(_quote, cols))
    where = ""
    params: tuple[int, ...] = ()
    # Rows in (progress, high_water] are not indexed yet by design (docs/cli.md#upkeep).
    window = catalog.backfill_window(conn)
    if window is not None:
        where, params = f" WHERE NOT ({_quote(key)} > ? AND {_quote(key)} <= ?)", window
    conn.exec_driver_sql(f"INSERT INTO {_quote(table)}({_quote(table)}) VALUES ('delete-all')")
    conn.exec_driver_sql(
        f"INSERT INTO {_quote(table)}(rowid, {names}) SELECT {_quote(key)}, {names} "
        f"FROM {_quote(options.content)}{where}", params)


def _rebuild_fts(conn: Connection) -> list[str]:
    """The search layer's rebuild when it works; else each index on its own."""
    error = _attempt(conn, lambda: storage.rebuild_indexes(conn))
    if error is None:
        return ["rebuilt the search indexes (storage.rebuild_indexes)"]
    done = [f"storage.rebuild_indexes failed ({error}); rebuilding index by index"]
    found = catalog.objects(conn)
    sql_of = {o.name: o.sql for o in found if o.type == "table"}
    for table in catalog.fts5_in(found):
        stmt = f"INSERT INTO {_quote(table)}({_quote(table)}) VALUES ('rebuild')"
        error = _attempt(conn, functools.partial(conn.exec_driver_sql, stmt))
        if error is not None:
            error = _attempt(conn, functools.partial(_reindex_external, conn, table,
                                                     sql_of[table]))
        done.append(f"rebuilt FTS index {table}" if error is None
                    else f"could not rebuild {table}: {error}")
    return done


_PEND_ALL_CJK = f"INSERT OR IGNORE INTO {names.CJK_PENDING} (id) SELECT id FROM messages"


def _recreate_layout(conn: Connection) -> list[str]:
    """Put back missing head-layout objects; the rebuild that follows fills the indexes.

    A recreated CJK side table starts empty, so every covered row is marked pending first:
    should the rebuild fail, search still answers those rows (bounded LIKE) and catch-up
    derives them, instead of silently missing CJK hits.
    """
    if not migrate.status_of(conn).at_head:
        return []
    created = layout.recreate_missing(conn)
    if {names.CJK_SIDE, names.CJK_PENDING} & set(created):
        conn.exec_driver_sql(_PEND_ALL_CJK)
    elif catalog.CJK_FTS in created:
        # A new, empty bigram index beside side rows that were kept: fill it from them now
        # (FTS5's rebuild reads a plain table), so the rebuild's delete of each side row meets
        # an index that holds it.
        conn.exec_driver_sql(f"INSERT INTO {_quote(catalog.CJK_FTS)}({_quote(catalog.CJK_FTS)}) "
                             "VALUES ('rebuild')")
    return [f"recreated {name} (head layout)" for name in created]


def _catch_up_cjk(conn: Connection) -> list[str]:
    """Derive CJK rows still pending (the rebuild normally leaves none); report, never raise."""
    taken = 0

    def drain() -> None:
        nonlocal taken
        while caught := bigrams.catch_up(conn):
            taken += caught

    error = _attempt(conn, drain)
    if error is not None:
        return [f"could not derive pending CJK rows: {error}"]
    return [f"derived the CJK rows of {taken} pending messages"] if taken else []


def _fix_in_place(engine: Engine, probes: list[Probe]) -> list[str]:
    failing = {p.name for p in probes if not p.ok}
    actions: list[str] = []

    def unit(conn: Connection) -> None:
        actions.clear()
        dropped = migrate.drop_orphan_fts_shadows(conn)
        actions.extend(f"dropped orphan FTS shadow table {t}" for t in dropped)
        for trigger in dead_triggers(catalog.objects(conn)):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {_quote(trigger)}")
            actions.append(f"dropped trigger {trigger} (its target table is gone)")
        if migrate.status_of(conn).at_head:
            for trigger in index_writers.foreign_index_triggers(conn):
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {_quote(trigger)}")
                actions.append(f"dropped trigger {trigger} (a second writer to a search index)")
        actions.extend(_recreate_layout(conn))
        if actions or any(n.startswith(("fts:", "index:")) or n == "write_probe"
                          for n in failing):
            actions.extend(_rebuild_fts(conn))
            actions.extend(_catch_up_cjk(conn))
        if failing & {"quick_check", "integrity_check"}:
            conn.exec_driver_sql("REINDEX")
            actions.append("REINDEX")

    run_write(engine, unit, what="repair")
    return list(actions)


def unloadable_indexes(engine: Engine) -> list[str]:
    """Our indexes FTS5 refuses to load, in a store at head (where the layout can be built
    again); such an index cannot be emptied or even dropped through FTS5."""
    with engine.connect() as conn, conn.begin():
        if not migrate.status_of(conn).at_head:
            return []
        present = catalog.tables(conn)
        return [i for i in catalog.FTS_INDEXES
                if i in present and index_health.load_error(conn, i) is not None]


def unregister_indexes(path: Path, names: list[str]) -> list[str]:
    """Take indexes that refuse to load out of the catalog (the file was backed up first);
    their shadow tables are then orphans and their triggers dead, which the fixes that follow
    drop, before the head layout is created and rebuilt from ``messages``."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA writable_schema=ON")
        con.execute("BEGIN IMMEDIATE")
        for name in names:
            catalog.drop_table_entry(con, name)
        con.execute("COMMIT")
        con.execute("PRAGMA writable_schema=RESET")
    finally:
        con.close()
    return [f"took {name} out of the catalog (FTS5 refused to load it)" for name in names]


def repair_store(path: str | Path, *, check_only: bool = False, backup: bool = True,
                 force: bool = False, full: bool = False,
                 drop_agent: bool = False) -> RepairReport:
    """Probe; unless ``check_only`` and if anything failed, back up, fix and probe again.
    ``drop_agent`` also removes the agent's own CJK objects (:func:`drop_agent_cjk`)."""
    p = Path(path)
    probes = probe_store(p, full=full)
    report = RepairReport(str(p), check_only, probes)
    agents = drop_agent and not check_only and any(
        q.name == "agent_cjk" and q.detail != "none" for q in probes)
    if check_only or (report.healthy and not agents):
        return report
    opened = probes[0].ok
    dups = [] if opened else duplicate_schema_rows(p)
    if not opened and not dups:
        return report  # nothing in place can help a file that does not open
    ensure_not_held(p, force=force, what="repair")
    if backup:
        target = backup_path(p, "repair")
        report.backup = [str(f) for f in copy_with_sidecars(p, target)]
    if dups:
        report.actions += remove_duplicate_schema_rows(p, dups)
        open_engine(p).dispose()  # pooled connections cached the broken schema
    if agents:
        report.actions += drop_agent_cjk(open_engine(p))
    unloadable = unloadable_indexes(open_engine(p))
    if unloadable:
        open_engine(p).dispose()
        report.actions += unregister_indexes(p, unloadable)
        open_engine(p).dispose()
    report.actions += _fix_in_place(open_engine(p), probe_store(p, full=full))
    report.after = probe_store(p, full=full)
    return report
