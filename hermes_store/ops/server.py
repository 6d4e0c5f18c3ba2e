"""Upkeep and health of a store on PostgreSQL: what the file-only commands mean on a server.

* ``compact`` → ``VACUUM (ANALYZE)`` (the server reclaims and re-plans; there is no file to
  rewrite, no WAL to truncate), sizes from ``pg_database_size`` before and after;
* ``repair`` → probes (the server answers, the schema is at head, every index of our tables is
  valid and ready — a ``CREATE INDEX CONCURRENTLY`` that failed leaves one that is neither —,
  every message has its CJK search tokens) and, unless checking only, ``REINDEX TABLE`` for
  each of our tables and the missing tokens derived, then the probes again;
* ``stats`` → bytes per table and index from the catalog (``pg_relation_size``; a table's
  TOAST counts as the table's).

The FTS5 parts of ``repair``, ``optimize-storage``, ``recover`` and holder detection have no
server meaning: the CLI says so (exit 2). What the server's catalog says (sizes, index
validity, extensions) is read through ``db.catalog``.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from hermes_store.db import catalog
from hermes_store.db.engine import reading, run_write, vacuum
from hermes_store.db.models import Base
from hermes_store.db.schema_state import status_of
from hermes_store.ops import stats
from hermes_store.ops.repair import Probe, RepairReport
from hermes_store.ops.stats import Space, SpaceItem, StoreStats, WalState
from hermes_store.ops.storage import CompactResult, Sizes
from hermes_store.repo import bigrams

_SQLITE_ONLY_PROBES = "FTS5 integrity, quick_check and schema-row surgery are SQLite-only"


def _our_tables(conn: Connection) -> list[str]:
    present = catalog.tables(conn)
    return [t for t in Base.metadata.tables if t in present]


def space_usage(conn: Connection) -> Space:
    items = [SpaceItem(r.name, r.kind, r.table, r.bytes) for r in catalog.relation_sizes(conn)]
    items.sort(key=lambda i: (-i.bytes, i.name))
    return Space(True, items, 0, None)


def collect(conn: Connection, display: str) -> StoreStats:
    """What ``stats`` prints for a server: the same content, sizes from the catalog."""
    stats.require_columns(conn)
    st = StoreStats(path=display, file_bytes=catalog.database_bytes(conn), wal=WalState("none"),
                    page_size=0, page_count=0, freelist_count=0, **stats.content(conn),
                    space=space_usage(conn),
                    layout={"version": "postgresql", "markers": {},
                            "fts_tables": _search_indexes(conn), "backfill": None})
    st.advice = stats.advise(st)
    return st


def _search_indexes(conn: Connection) -> list[str]:
    """The GIN indexes search reads (a server's counterpart of the FTS5 tables)."""
    return catalog.gin_indexes(conn)


def compact(engine: Engine) -> CompactResult:
    """``VACUUM (ANALYZE)``; the sizes are the database's (no WAL of ours to report)."""
    with reading(engine) as conn:
        before = Sizes(catalog.database_bytes(conn), 0)
    vacuum(engine)
    with reading(engine) as conn:
        after = Sizes(catalog.database_bytes(conn), 0)
    return CompactResult(before, after, steps=["vacuum analyze"])


def _messages(n: int) -> str:
    return f"{n:,} message" if n == 1 else f"{n:,} messages"


def probe(engine: Engine) -> list[Probe]:
    with reading(engine) as conn:
        st = status_of(conn)
        broken = [f"{index} on {table}" for index, table in
                  catalog.broken_indexes(conn, _our_tables(conn))]
        pending = bigrams.pending_count(conn) if st.at_head else 0
    return [
        Probe("opens", True, "the server answers"),
        Probe("schema", st.at_head, st.describe(), None if st.at_head else "hermes-store upgrade"),
        Probe("indexes", not broken,
              "; ".join(broken) + " (invalid or not ready)" if broken else
              f"every index of our tables is valid ({_SQLITE_ONLY_PROBES})",
              "hermes-store repair" if broken else None),
        # Rows written without the library carry no CJK tokens yet; search covers them with
        # a slower scan until they are indexed.
        Probe("search", not pending,
              f"{_messages(pending)} without CJK search tokens" if pending else
              "every message has its CJK search tokens",
              "hermes-store repair" if pending else None),
    ]


def repair(engine: Engine, display: str, *, check_only: bool = False) -> RepairReport:
    """Probe; unless ``check_only``: if an index is broken, rebuild our tables' indexes
    (``REINDEX TABLE``, in one write transaction); if messages lack their CJK search tokens,
    derive them (a chunk per transaction); then probe again. A schema behind head is for
    ``upgrade``, not for repair."""
    probes = probe(engine)
    report = RepairReport(display, check_only, probes)
    if check_only or report.healthy:
        return report
    failed = {p.name for p in probes if not p.ok}

    def unit(conn: Connection) -> list[str]:
        done = []
        for table in _our_tables(conn):
            conn.exec_driver_sql(f'REINDEX TABLE "{table}"')
            done.append(f"rebuilt the indexes of {table}")
        return done

    if "indexes" in failed:
        report.actions += run_write(engine, unit, what="repair")
    if "search" in failed:
        indexed = 0
        while taken := run_write(engine, bigrams.catch_up, what="repair"):
            indexed += taken
        report.actions.append(f"derived the CJK search tokens of {_messages(indexed)}")
    report.after = probe(engine)
    return report


def diagnose(engine: Engine, display: str) -> stats.DoctorReport:
    """``doctor`` on a server: the schema, our indexes, and what ``stats`` advises."""
    probes = probe(engine)
    with reading(engine) as conn:
        st = status_of(conn)
        version = str(conn.execute(text("SHOW server_version")).scalar())
        found = None
        if st.at_head:
            found = collect(conn, display)
            idle = stats.idle_open_sessions(conn)
    schema = {"state": st.state, "revision": st.current, "head": st.head, "pending": st.pending,
              "legacy_version": st.legacy_version}
    findings = [stats.Finding(p.name, "ok" if p.ok else ("damage" if p.name == "indexes"
                                                         else "warn"), p.detail, p.fix)
                for p in probes[1:]]
    if found is not None:
        findings.append(stats.Finding(
            "never_ended", "warn" if idle else "ok",
            f"{found.sessions['open']} open sessions, {idle} idle for more than a day",
            "hermes-store close --older-than 1d" if idle else None))
        findings += [stats.Finding("advice", "info", a.message, a.command) for a in found.advice]
    findings.append(stats.Finding("server_version", "ok", f"PostgreSQL {version}"))
    return stats.DoctorReport(display, schema, findings, found, [], f"PostgreSQL {version}")


def capabilities(conn: Connection) -> dict[str, object]:
    """What ``current`` reports beside the revision, for a server."""
    trigram = catalog.extension_available(conn, "pg_trgm")
    return {"journal_mode": None, "fts5": False, "trigram": trigram,
            "layout_version": "postgresql", "backfill": None,
            "server_version": str(conn.execute(text("SHOW server_version")).scalar())}
