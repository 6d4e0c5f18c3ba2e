"""What ``stats`` prints for a store file: counts, sources, the WAL's checkpoint state, space per
table and index, the search layout, and the upkeep worth running (``ops.stats`` adds doctor).

No SQLAlchemy here: ``stats`` on a store file reads through the standard library
(:mod:`db.raw`); every function takes either connection (``exec_driver_sql``), and
:func:`content` serves the server's ``stats`` too (``ops.server``).
"""

from __future__ import annotations

import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_store.content import SANE_FUTURE_S, SANE_MIN_TS
from hermes_store.db import catalog
from hermes_store.db.sqlite_driver import driver_errors
from hermes_store.errors import SchemaMismatchError
from hermes_store.ops.layout_state import layout_info

if TYPE_CHECKING:
    from sqlalchemy import Connection

WAL_INDEX_VERSION = 3007000
FTS_SHARE_ADVICE = 0.40
FREELIST_ADVICE = 0.20
FREELIST_MIN_PAGES = 16
WAL_PENDING_ADVICE_FRAMES = 16384  # 64 MiB at 4 KiB pages
OPEN_ADVICE_RATIO = 0.5

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
    except driver_errors() as err:
        return Space(False, note="per-table sizes unavailable: this SQLite has no dbstat "
                                 f"({getattr(err, 'orig', err)})")
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
    # ``where`` and ``order`` are fixed fragments chosen below, and the bounds floats of our
    # own (float() keeps them so): no user input, and one spelling for either driver.
    row = conn.exec_driver_sql(
        f"SELECT id, started_at, source, title FROM sessions WHERE {where} AND started_at "
        f"BETWEEN {float(lo)!r} AND {float(hi)!r} ORDER BY started_at {order} LIMIT 1").first()
    if row is None:
        return None
    return {"id": row[0], "started_at": row[1], "source": row[2], "title": row[3]}


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
