"""What is in the store and where its bytes go: the library behind ``doctor``, and ``stats``
through :mod:`ops.store_stats` (its reads, without SQLAlchemy; re-exported here).

Everything here reads: a caller-owned read transaction plus ``stat()`` and a read of the
``-shm`` header. The WAL is judged by its checkpoint state (frames in the log against frames
already copied back), read from the wal-index header, never by the file's size: a fully
checkpointed WAL keeps its size until the next writer rewinds it, and that is healthy
(docs/lessons.md#wal). Space per table and index comes from ``dbstat`` when the build has it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, exc, func, select

from hermes_store.db import catalog, index_writers
from hermes_store.db import derived as layout
from hermes_store.db.engine import fts5_available
from hermes_store.db.models import ChatSession
from hermes_store.db.schema_state import status_of
from hermes_store.db.sqlite_driver import agent_tokenizer_problem
from hermes_store.errors import SchemaMismatchError
from hermes_store.ops.layout_state import layout_info
from hermes_store.ops.store_stats import (
    COMPACT,
    OPTIMIZE_STORAGE,
    WAL_PENDING_ADVICE_FRAMES,
    Advice,
    Space,
    SpaceItem,
    StoreStats,
    WalState,
    advise,
    collect,
    content,
    probe_columns,
    require_columns,
    sane_window,
    space_usage,
    upkeep_advice,
    wal_state,
)
from hermes_store.repo import index_health
from hermes_store.repo.lineage import last_activity

# ``stats``' own reads live in ops.store_stats (no SQLAlchemy); their names stay importable here.
__all__ = ["COMPACT", "OPTIMIZE_STORAGE", "Advice", "Space", "SpaceItem", "StoreStats", "WalState",
           "advise", "collect", "content", "layout_info", "probe_columns", "require_columns",
           "sane_window", "space_usage", "upkeep_advice", "wal_state"]

IDLE_OPEN_S = 86400.0
_sessions = ChatSession.__table__


def idle_open_sessions(conn: Connection, idle_s: float = IDLE_OPEN_S,
                       now: float | None = None) -> int:
    """Open sessions whose last activity (the expression every listing uses) is older than
    ``idle_s``."""
    now = time.time() if now is None else now
    return int(conn.execute(
        select(func.count()).select_from(_sessions)
        .where(_sessions.c.ended_at.is_(None), last_activity(_sessions, now) < now - idle_s)
    ).scalar() or 0)


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
