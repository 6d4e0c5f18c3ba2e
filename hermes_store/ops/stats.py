"""What is in the store and where its bytes go: the library behind ``stats`` (and ``doctor``).

Everything here reads: a caller-owned read transaction plus ``stat()`` and a read of the
``-shm`` header. The WAL is judged by its checkpoint state (frames in the log against frames
already copied back), read from the wal-index header, never by the file's size: a fully
checkpointed WAL keeps its size until the next writer rewinds it, and that is healthy
(docs/lessons.md#wal). Space per table and index comes from ``dbstat`` when the build has it.
"""

from __future__ import annotations

import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, exc, func, select, text

from hermes_store.db import catalog, index_writers
from hermes_store.db import derived as layout
from hermes_store.db.engine import fts5_available
from hermes_store.db.models import ChatSession
from hermes_store.db.schema_state import status_of
from hermes_store.db.sqlite_driver import agent_tokenizer_problem
from hermes_store.errors import SchemaMismatchError
from hermes_store.ops.layout_state import layout_info
from hermes_store.repo import index_health
from hermes_store.repo.lineage import SANE_FUTURE_S, SANE_MIN_TS, last_activity

WAL_INDEX_VERSION = 3007000
FTS_SHARE_ADVICE = 0.40
FREELIST_ADVICE = 0.20
FREELIST_MIN_PAGES = 16
WAL_PENDING_ADVICE_FRAMES = 16384  # 64 MiB at 4 KiB pages
OPEN_ADVICE_RATIO = 0.5
IDLE_OPEN_S = 86400.0
_sessions = ChatSession.__table__

# Columns stats reads beyond the legacy ones; their absence means "run upgrade".
REQUIRED_COLUMNS = {"sessions": ("archived", "pinned", "ended_at", "source", "started_at"),
                    "messages": ("compacted", "session_id")}

# aggregate=TRUE (SQLite 3.31+) returns one row per object instead of one per page.
_DBSTAT_SQL = "SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE"


@dataclass
class WalState:
    """``state``: none (no WAL file), empty, checkpointed, pending, or unknown."""

    state: str
    bytes: int = 0
    log_frames: int | None = None
    checkpointed_frames: int | None = None

    @property
    def pending_frames(self) -> int:
        if self.log_frames is None or self.checkpointed_frames is None:
            return 0
        return max(0, self.log_frames - self.checkpointed_frames)

    def describe(self) -> str:
        if self.state in ("none", "empty"):
            return "no WAL content"
        if self.state == "checkpointed":
            return f"fully checkpointed ({self.log_frames} frames; reused by the next write)"
        if self.state == "pending":
            return (f"{self.pending_frames} of {self.log_frames} frames not yet checkpointed")
        return "checkpoint state unknown (no readable -shm)"


@dataclass
class SpaceItem:
    name: str
    kind: str  # table | index | fts
    table: str
    bytes: int


@dataclass
class Space:
    available: bool
    items: list[SpaceItem] = field(default_factory=list)
    fts_bytes: int = 0
    fts_share: float | None = None
    note: str | None = None


@dataclass
class Advice:
    message: str
    command: str


@dataclass
class StoreStats:
    path: str
    file_bytes: int
    wal: WalState
    page_size: int
    page_count: int
    freelist_count: int
    sessions: dict[str, int]
    messages: dict[str, int]
    sources: list[dict[str, Any]]
    oldest_open: dict[str, Any] | None
    oldest: dict[str, Any] | None
    newest: dict[str, Any] | None
    space: Space
    layout: dict[str, Any]
    advice: list[Advice] = field(default_factory=list)

    @property
    def freelist_ratio(self) -> float:
        return self.freelist_count / self.page_count if self.page_count else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["freelist_ratio"] = round(self.freelist_ratio, 4)
        out["wal"]["pending_frames"] = self.wal.pending_frames
        return out


def sane_window(now: float | None = None) -> tuple[float, float]:
    now = time.time() if now is None else now
    return SANE_MIN_TS, now + SANE_FUTURE_S


# --------------------------------------------------------------------------- file level


def wal_state(path: Path) -> WalState:
    """Checkpoint state from the first wal-index header copy in ``-shm`` (read, never locked)."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if not wal.exists():
        return WalState("none")
    size = wal.stat().st_size
    if size == 0:
        return WalState("empty", 0, 0, 0)
    try:
        with open(shm, "rb") as fh:
            head = fh.read(100)
    except OSError:
        return WalState("unknown", size)
    if len(head) < 100 or struct.unpack_from("=I", head, 0)[0] != WAL_INDEX_VERSION:
        return WalState("unknown", size)
    mx_frame = struct.unpack_from("=I", head, 16)[0]
    backfill = struct.unpack_from("=I", head, 96)[0]
    if mx_frame == 0:
        return WalState("empty", size, 0, 0)
    state = "checkpointed" if backfill >= mx_frame else "pending"
    return WalState(state, size, mx_frame, backfill)


def probe_columns(conn: Connection) -> list[str]:
    """``table.column`` names stats needs that the store lacks (behind the code)."""
    missing = []
    for table, cols in REQUIRED_COLUMNS.items():
        have = {c.name for c in catalog.columns(conn, table)}
        missing += [f"{table}.{c}" for c in cols if c not in have]
    return missing


def space_usage(conn: Connection, page_size: int, page_count: int) -> Space:
    """Bytes per table and index from ``dbstat``; FTS shadow tables are attributed to their index."""
    try:
        rows = conn.exec_driver_sql(_DBSTAT_SQL).all()
    except exc.DBAPIError as err:
        return Space(False, note=f"per-table sizes unavailable: this SQLite has no dbstat ({err.orig})")
    found = catalog.objects(conn)
    master = {o.name: (o.type, o.table) for o in found}
    shadow_of = {s: t for t in catalog.fts5_in(found) for s in catalog.shadow_tables(t)}
    items: list[SpaceItem] = []
    for name, size in rows:
        kind, table = master.get(name, ("table", name))  # the catalog does not list itself
        owner = shadow_of.get(name) or shadow_of.get(table)
        if owner is not None:
            kind, table = "fts", owner
        items.append(SpaceItem(name, kind, table, int(size)))
    items.sort(key=lambda i: (-i.bytes, i.name))
    fts_bytes = sum(i.bytes for i in items if i.kind == "fts")
    total = page_size * page_count
    return Space(True, items, fts_bytes, round(fts_bytes / total, 4) if total else None)


# --------------------------------------------------------------------------- content


def _one_session(conn: Connection, where: str, order: str, lo: float, hi: float
                 ) -> dict[str, Any] | None:
    # ``where`` and ``order`` are fixed fragments chosen below, never user input.
    row = conn.execute(text(
        f"SELECT id, started_at, source, title FROM sessions WHERE {where} "
        f"AND started_at BETWEEN :lo AND :hi ORDER BY started_at {order} LIMIT 1"),
        {"lo": lo, "hi": hi}).first()
    if row is None:
        return None
    return {"id": row[0], "started_at": row[1], "source": row[2], "title": row[3]}


def idle_open_sessions(conn: Connection, idle_s: float = IDLE_OPEN_S,
                       now: float | None = None) -> int:
    """Open sessions whose last activity (the expression every listing uses) is older than
    ``idle_s``."""
    now = time.time() if now is None else now
    return int(conn.execute(
        select(func.count()).select_from(_sessions)
        .where(_sessions.c.ended_at.is_(None), last_activity(_sessions, now) < now - idle_s)
    ).scalar() or 0)


def require_columns(conn: Connection) -> None:
    missing = probe_columns(conn)
    if missing:
        raise SchemaMismatchError(
            f"the store lacks {', '.join(missing)}: run `hermes-store upgrade`", state="behind")


def content(conn: Connection) -> dict[str, Any]:
    """The counts, sources and landmark sessions ``stats`` prints (either backend)."""
    s = conn.exec_driver_sql(
        "SELECT COUNT(*), SUM(CASE WHEN ended_at IS NULL THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN ended_at IS NOT NULL THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN archived != 0 THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN pinned != 0 THEN 1 ELSE 0 END) FROM sessions").one()
    m = conn.exec_driver_sql(
        "SELECT COUNT(*), SUM(CASE WHEN compacted != 0 THEN 1 ELSE 0 END) FROM messages").one()
    sources = [{"source": r[0], "sessions": int(r[1])} for r in conn.exec_driver_sql(
        "SELECT source, COUNT(*) FROM sessions GROUP BY source ORDER BY COUNT(*) DESC, source")]
    lo, hi = sane_window()
    return {
        "sessions": {"total": int(s[0]), "open": int(s[1] or 0), "ended": int(s[2] or 0),
                     "archived": int(s[3] or 0), "pinned": int(s[4] or 0)},
        "messages": {"total": int(m[0]), "compacted": int(m[1] or 0),
                     "uncompacted": int(m[0]) - int(m[1] or 0)},
        "sources": sources,
        "oldest_open": _one_session(conn, "ended_at IS NULL", "ASC", lo, hi),
        "oldest": _one_session(conn, "1=1", "ASC", lo, hi),
        "newest": _one_session(conn, "1=1", "DESC", lo, hi),
    }


def collect(conn: Connection, path: Path) -> StoreStats:
    """Everything ``stats`` prints, read inside the caller's read transaction (a SQLite file;
    ``ops.server.collect`` is the server's)."""
    require_columns(conn)
    page_size = int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0)
    page_count = int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)
    freelist = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
    stats = StoreStats(
        path=str(path),
        file_bytes=path.stat().st_size,
        wal=wal_state(path),
        page_size=page_size,
        page_count=page_count,
        freelist_count=freelist,
        **content(conn),
        space=space_usage(conn, page_size, page_count),
        layout=layout_info(conn),
    )
    stats.advice = advise(stats)
    return stats


OPTIMIZE_STORAGE = "hermes-store optimize-storage"
COMPACT = "hermes-store compact"


def _upkeep(layout: dict[str, Any], freelist_count: int, freelist_ratio: float,
            fts_share: float | None = None) -> list[Advice]:
    """The file-level upkeep worth running: one command, never both. optimize-storage also
    vacuums and truncates the WAL, so while it is due, compact is not advised."""
    reasons: list[str] = []
    backfill = layout.get("backfill") or {}
    if backfill.get("pending"):
        # Search stays complete meanwhile: the ids not yet moved are read through the retired
        # index, or a LIKE over them (docs/search.md#backfill-window); only speed and space wait.
        reasons.append("a search-index move is unfinished (search still finds every row; "
                       "finishing it speeds up older rows and frees the old index's space)")
    retired = any(t.endswith("_old") for t in layout.get("fts_tables") or ())
    if retired:
        reasons.append("the old inline search index still fills the file")
    current = str(layout.get("version") or "").startswith("compact") and not retired
    if fts_share is not None and fts_share >= FTS_SHARE_ADVICE and not current:
        reasons.append(f"FTS is {fts_share:.0%} of the file")
    if reasons:
        return [Advice("; ".join(reasons), OPTIMIZE_STORAGE)]
    if freelist_count >= FREELIST_MIN_PAGES and freelist_ratio >= FREELIST_ADVICE:
        return [Advice(f"freelist {freelist_ratio:.0%} of the file is unused pages", COMPACT)]
    return []


def upkeep_advice(conn: Connection) -> list[Advice]:
    """:func:`advise`'s file-level upkeep from what is cheap to read (no ``dbstat`` scan):
    what ``upgrade`` prints as the one thing to run next."""
    page_count = int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)
    freelist = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
    return _upkeep(layout_info(conn), freelist, freelist / page_count if page_count else 0.0)


def advise(st: StoreStats) -> list[Advice]:
    """Findings worth acting on, each naming the command that acts on it."""
    out = _upkeep(st.layout, st.freelist_count, st.freelist_ratio, st.space.fts_share)
    if (st.wal.state == "pending" and st.wal.pending_frames >= WAL_PENDING_ADVICE_FRAMES
            and not out):
        out.append(Advice(f"the WAL holds {st.wal.pending_frames} frames not yet checkpointed "
                          "(a long-running reader may be blocking checkpoints)", COMPACT))
    total, open_ = st.sessions["total"], st.sessions["open"]
    if total and open_ / total >= OPEN_ADVICE_RATIO and open_ > 1:
        out.append(Advice(f"{open_} of {total} sessions never ended; prune skips them",
                          "hermes-store close --older-than 7d"))
    if not st.space.available:
        out.append(Advice("per-table sizes need a SQLite build with dbstat",
                          "hermes-store stats (under a Python whose SQLite has dbstat)"))
    return out


# --------------------------------------------------------------------------- doctor

_VOCAB_CREATE = "CREATE VIRTUAL TABLE temp.hermes_doctor_vocab USING fts5vocab(main, {t}, 'instance')"
_VOCAB_SCAN = "SELECT COUNT(*) FROM temp.hermes_doctor_vocab"
_VOCAB_DROP = "DROP TABLE IF EXISTS temp.hermes_doctor_vocab"


@dataclass
class Finding:
    check: str
    status: str  # ok | info | warn | damage
    detail: str
    fix: str | None = None


@dataclass
class DoctorReport:
    path: str
    schema: dict[str, Any]
    findings: list[Finding]
    stats: StoreStats | None
    holders: list[tuple[int, str]]
    sqlite_version: str

    @property
    def damaged(self) -> bool:
        return any(f.status == "damage" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.status == "warn" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "healthy": not self.damaged, "damaged": self.damaged,
                "warnings": self.warnings,
                "schema": self.schema, "sqlite_version": self.sqlite_version,
                "holders": [{"pid": p, "cmdline": c} for p, c in self.holders],
                "findings": [asdict(f) for f in self.findings],
                "stats": self.stats.to_dict() if self.stats else None}


def has_wal_reset_bug(version: tuple[int, ...]) -> bool:
    """SQLite's WAL-reset bug: fixed in 3.51.3, backported to 3.50.7 and 3.44.6."""
    v = tuple(version[:3])
    fixed = v >= (3, 51, 3) or (3, 50, 7) <= v < (3, 51, 0) or (3, 44, 6) <= v < (3, 45, 0)
    return not fixed


# What an "ok" covers, said where it is shown: SQLite keeps no checksum of stored values, so
# bytes flipped inside a message's text pass both checks (they read back as U+FFFD, and
# ``recover`` keeps them as the bytes they are).
_INTEGRITY_SCOPE = {
    False: "ok (page structure; not the bytes inside stored text, which no check can verify, "
           "nor index agreement: --full)",
    True: "ok (every page and index; not the bytes inside stored text, which no check can "
          "verify)",
}


def _integrity(conn: Connection, full: bool) -> Finding:
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = [str(r[0]) for r in conn.exec_driver_sql(f"PRAGMA {pragma}")]
    except exc.DBAPIError as err:
        rows = [str(err.orig)]
    if rows == ["ok"]:
        return Finding(pragma, "ok", _INTEGRITY_SCOPE[full])
    return Finding(pragma, "damage", "; ".join(rows[:5]),
                   "hermes-store repair --check-only, then hermes-store repair")


def _fts_structure(conn: Connection, table: str) -> Finding:
    """Read every term instance of the index: a read-only stand-in for FTS5 integrity-check,
    which is an INSERT and so needs the write lock; ``repair --check-only`` runs the real one."""
    try:
        # ``table`` is one of the catalog's fts5 tables, not user input.
        conn.exec_driver_sql(_VOCAB_CREATE.format(t=f'"{table}"'))
        count = conn.exec_driver_sql(_VOCAB_SCAN).scalar()
        return Finding(f"fts:{table}", "ok", f"index readable ({count} term instances)")
    except exc.DBAPIError as err:
        if not fts5_available():  # the runtime lacks the module: the file is not at fault
            return Finding(f"fts:{table}", "warn", "this SQLite has no FTS5: the index cannot "
                           "be read here and search answers nothing",
                           "run under a Python whose SQLite has FTS5")
        return Finding(f"fts:{table}", "damage", f"index unreadable: {err.orig}",
                       "hermes-store repair")
    finally:
        conn.exec_driver_sql(_VOCAB_DROP)


def _index_health(conn: Connection, index: str, full: bool) -> Finding:
    """Our index against what it must hold (``repo.index_health``): its structure and the
    bounded probe a search runs; with ``full``, against a copy built afresh from its content
    (and, for the CJK index, every covered message against its side row)."""
    problems = index_health.findings(conn, index, full=full)
    checked = "structure, a known row and its full content" if full else (
        "structure and a known row")
    if problems:
        return Finding(f"index:{index}", "damage", "; ".join(problems), "hermes-store repair")
    return Finding(f"index:{index}", "ok", f"{checked} ok")


def trigram_locale(conn: Connection) -> Finding | None:
    """On PostgreSQL, whether pg_trgm can read CJK text under the database's LC_CTYPE (under
    C/POSIX it takes no CJK character into a trigram, so the substring index cannot narrow a
    CJK term and every covered row is read); ``None`` on SQLite."""
    ctype = catalog.database_ctype(conn)
    if ctype is None:
        return None
    if catalog.trigram_blind_to_cjk(ctype):
        return Finding(
            "trigram_locale", "warn",
            f"the database's LC_CTYPE is {ctype}: pg_trgm sees no CJK character, so substring "
            "search of Chinese, Japanese and Korean terms reads every message",
            "create a database with a UTF-8 locale (createdb --template=template0 "
            "--locale=C.UTF-8 NAME) and copy the store into it")
    return Finding("trigram_locale", "ok", f"LC_CTYPE {ctype}: pg_trgm reads CJK text")


def _agent_cjk(conn: Connection) -> Finding | None:
    """The agent's CJK index on its native tokenizer, which this process has not loaded: every
    write to messages is refused here (docs/mixed-fleets.md#the-agents-cjk-tokenizer)."""
    index = next((o for o in catalog.agent_cjk_objects(conn) if o.type == "table"), None)
    problem = agent_tokenizer_problem()
    if index is None or catalog.AGENT_CJK_TOKENIZER not in index.sql or problem is None:
        return None
    return Finding("agent_cjk", "warn", f"the agent's CJK index {index.name} needs its tokenizer "
                   f"to write messages, and {problem}",
                   "a Python whose sqlite3 can load extensions, or "
                   "hermes-store repair --drop-agent-cjk")


def _layout_drift(check: str, wrong: list[str], found: str, ok: str) -> Finding:
    if not wrong:
        return Finding(check, "ok", ok)
    return Finding(check, "damage", found + ", ".join(wrong), "hermes-store repair")


def diagnose(conn: Connection, path: Path, *, full: bool = False,
             holders: list[tuple[int, str]] | None = None,
             sqlite_version: tuple[int, ...] = (0,)) -> DoctorReport:
    """The read-only health report, inside the caller's read transaction."""
    findings: list[Finding] = []
    st = status_of(conn)
    schema = {"state": st.state, "revision": st.current, "head": st.head, "pending": st.pending,
              "legacy_version": st.legacy_version}
    findings.append(Finding("schema", "ok" if st.at_head else "warn", st.describe(),
                            None if st.at_head else "hermes-store upgrade"))
    locale = trigram_locale(conn)
    if locale is not None:
        findings.append(locale)
    findings.append(_integrity(conn, full))
    tables = catalog.fts5_tables(conn)
    for table in tables:
        findings.append(_fts_structure(conn, table))
    findings += [_index_health(conn, index, full) for index in catalog.FTS_INDEXES
                 if index in tables]
    if st.at_head:
        # Missing or foreign triggers mean search silently misses or doubles rows: not a warning.
        findings.append(_layout_drift(
            "search_layout", layout.missing_objects(conn),
            "missing, so rows written meanwhile are not searchable until repair restores them: ",
            "every view, index and trigger of ours"))
        findings.append(_layout_drift(
            "foreign_triggers", index_writers.foreign_index_triggers(conn),
            "second writers to the search indexes (another program's triggers): ", "none"))
    agent_cjk = _agent_cjk(conn)
    if agent_cjk is not None:
        findings.append(agent_cjk)
    stats = None
    try:
        stats = collect(conn, path)
    except SchemaMismatchError as err:
        findings.append(Finding("stats", "warn", str(err), "hermes-store upgrade"))
    if stats is not None:
        wal = stats.wal
        busy = wal.state == "pending" and wal.pending_frames >= WAL_PENDING_ADVICE_FRAMES
        findings.append(Finding("wal", "warn" if busy else "ok", wal.describe(),
                                "stop idle readers, then hermes-store compact" if busy else None))
        idle = idle_open_sessions(conn)
        findings.append(Finding(
            "never_ended", "warn" if idle else "ok",
            f"{stats.sessions['open']} open sessions, {idle} idle for more than a day",
            "hermes-store close --older-than 1d" if idle else None))
        findings += [Finding("advice", "info", a.message, a.command) for a in stats.advice]
    version = ".".join(map(str, sqlite_version))
    if has_wal_reset_bug(sqlite_version):
        findings.append(Finding(
            "sqlite_version", "warn",
            f"SQLite {version} has the WAL-reset bug (fixed in 3.51.3; backports 3.50.7, "
            "3.44.6): never run the sqlite3 shell (.recover, .backup) on the live store",
            "prefer a Python built with SQLite >= 3.51.3; to salvage, hermes-store recover "
            "(it reads a copy)"))
    else:
        findings.append(Finding("sqlite_version", "ok", f"SQLite {version}"))
    held = holders or []
    findings.append(Finding(
        "holders", "info",
        "; ".join(f"pid {p}: {c}" for p, c in held) if held else "no other process holds the store"))
    return DoctorReport(str(path), schema, findings, stats, held, version)
