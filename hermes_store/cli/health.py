"""Health and upkeep: ``stats``, ``doctor``, ``compact``, ``optimize-storage`` (docs/cli.md)."""

from __future__ import annotations

import copy
import dataclasses
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_store.cli.app import (
    Ctx,
    file_only,
    main,
    need_store,
    open_read,
    require_head,
)
from hermes_store.cli.render import commands_marked, iso, out_console, size, visible, when
from hermes_store.errors import StoreFullError, StoreUnopenableError

if TYPE_CHECKING:
    from hermes_store.ops import stats, store_stats


def _stats_json(st: store_stats.StoreStats) -> dict[str, Any]:
    data = st.to_dict()
    for key in ("oldest_open", "oldest", "newest"):
        if data[key]:
            raw = data[key]["started_at"]
            data[key]["started_at"] = iso(raw)
            if data[key]["started_at"] is None:
                data[key]["started_at_raw"] = raw
    return data


def _render_stats(st: store_stats.StoreStats) -> None:
    from rich.markup import escape
    from rich.table import Table

    from hermes_store.cli.formats import Column, table_lines, terminal_width, wrap

    width = terminal_width()
    narrow = width < 80
    con = out_console()

    def line(text: str) -> None:
        # A narrow terminal gets the line folded at spaces under its label; a word longer than
        # the line (an id, a path) stays whole.
        for part in wrap(text, width, indent=10) if narrow else [text]:
            con.print(part, markup=False)

    s, m = st.sessions, st.messages
    con.print(f"[bold]{escape(str(st.path))}[/bold]")
    line(f"sessions  {s['total']:,}  (open {s['open']:,}, ended {s['ended']:,}, "
         f"archived {s['archived']:,}, pinned {s['pinned']:,})")
    line(f"messages  {m['total']:,}  (compacted {m['compacted']:,})")
    for label, one in (("oldest open", st.oldest_open), ("oldest", st.oldest),
                       ("newest", st.newest)):
        if one:
            line(f"{label:<11} {when(one['started_at'], short=narrow)}  {one['id']}")
    if st.layout.get("version") == "postgresql":
        line(f"database  {size(st.file_bytes)} (PostgreSQL)")
    else:
        line(f"file      {size(st.file_bytes)}, WAL {size(st.wal.bytes)} "
             f"({st.wal.describe()}), freelist {st.freelist_ratio:.0%}")
    if st.sources:
        table = Table("source", "sessions", title="sessions by source", title_justify="left")
        for row in st.sources:
            table.add_row(visible(str(row["source"])), f"{row['sessions']:,}")
        con.print(table)
    if st.space.available:
        # Names are never cut (cut ones read as duplicates); a narrow terminal drops the
        # owning-table column and the borders, and gives a long name a line of its own.
        if narrow:
            con.print("space")
            rows = [[visible(item.name), item.kind, size(item.bytes)] for item in st.space.items]
            for text in table_lines((Column("object", own_line=True), Column("kind"),
                                     Column("bytes")), rows, width=width):
                con.print(text, markup=False)
        else:
            table = Table("object", "kind", "table", "bytes", title="space",
                          title_justify="left")
            for item in st.space.items:
                table.add_row(visible(item.name), item.kind, visible(item.table),
                              size(item.bytes))
            con.print(table)
        if st.space.fts_share is not None:
            line(f"FTS share {st.space.fts_share:.0%} of the file ({size(st.space.fts_bytes)})")
    else:
        line(st.space.note or "per-table sizes unavailable")
    layout = st.layout
    line(f"layout    {layout.get('version')}; indexes: {', '.join(layout['fts_tables']) or 'none'}")
    backfill = layout.get("backfill")
    if backfill and backfill.get("pending"):
        line(f"backfill  pending: {backfill.get('done', 0):,}/{backfill.get('total', 0):,}")
    for advice in st.advice:
        line(f"advice    {advice.message} -> {commands_marked(advice.command)}")


@main.command("stats")
@click.pass_obj
def stats_cmd(obj: Ctx) -> None:
    """Totals and space: sessions, messages, sources, WAL state, per-table bytes, advice.

    Opens the store read-only; a store behind the code exits 6 (run `hermes-store upgrade`).
    On PostgreSQL the sizes are the database's and each table's and index's, from the catalog.

    \b
    Example:
      hermes-store stats
      hermes-store --json stats | jq .sources
    """
    store = open_read(obj, stdlib=True)  # a file: through the standard library (db.raw)
    if store is None:
        obj.emit("stats", {"path": str(obj.db), "exists": False, "sessions": {"total": 0},
                           "messages": {"total": 0}, "sources": []},
                 f"{obj.db}: no store (0 sessions)")
        return
    db = obj.db
    if not isinstance(db, Path):
        from hermes_store.db.engine import reading
        from hermes_store.ops import server

        with reading(store) as conn:
            st = server.collect(conn, str(db))
    else:
        from hermes_store.db import raw
        from hermes_store.ops import store_stats

        with raw.reading(store) as conn:
            st = store_stats.collect(conn, db)
    obj.emit("stats", {"exists": True, **_stats_json(st)}, lambda: _render_stats(st))


_MARK = {"ok": "ok  ", "info": "info", "warn": "WARN", "damage": "DAMAGE"}


def _render_findings(path: str, findings: list[Any]) -> None:
    con = out_console()
    con.print(f"[bold]{path}[/bold]")
    for f in findings:
        fix = f"  -> {commands_marked(f.fix)}" if f.fix else ""
        con.print(f"{_MARK.get(f.status, f.status):<6} {f.check}: {f.detail}{fix}",
                  markup=False)


@main.command()
@click.option("--full", is_flag=True, help="Run integrity_check instead of quick_check (slow).")
@click.pass_obj
def doctor(obj: Ctx, full: bool) -> None:
    """Read-only health report: schema, integrity, FTS indexes, WAL, holders, SQLite version.

    Everything `stats` reports, plus findings that each name their fix. Exit 0 healthy,
    7 damage found, 6 schema behind. Never writes to the store.

    \b
    Example:
      hermes-store doctor
      hermes-store --json doctor --full
    """
    db = obj.db
    if not isinstance(db, Path):
        from hermes_store.db.engine import open_engine
        from hermes_store.ops import server

        _doctor_done(obj, server.diagnose(open_engine(db, readonly=True), str(db)))
        return
    need_store(db)
    from hermes_store.db.engine import open_engine, reading
    from hermes_store.ops import stats
    from hermes_store.ops.holders import find_holders

    holders = find_holders(db)
    try:
        engine = open_engine(db, readonly=True)
        with reading(engine) as conn:
            report = stats.diagnose(conn, db, full=full, holders=holders,
                                    sqlite_version=sqlite3.sqlite_version_info)
    except StoreFullError:
        raise  # a full disk is no damage: the error says to free space, not to recover
    except StoreUnopenableError:
        raise  # a directory, a file we may not read, not SQLite at all: not damage
    except sqlite3.DatabaseError as err:
        report = stats.DoctorReport(
            str(obj.db), {"state": "unreadable"},
            [stats.Finding("opens", "damage", f"the store does not open: {err}",
                           f"hermes-store recover --source {obj.db} --output NEW.db "
                           "--inspect-only")],
            None, holders, sqlite3.sqlite_version)
    _doctor_done(obj, report)


def _doctor_done(obj: Ctx, report: stats.DoctorReport) -> None:
    obj.emit("doctor", {"exists": True, **report.to_dict()},
             lambda: _render_findings(report.path, report.findings))
    if report.damaged:
        sys.exit(7)
    if report.schema.get("state") in ("behind", "legacy", "ahead", "unknown"):
        sys.exit(6)


# --------------------------------------------------------------------------- whole-file upkeep


@main.command()
@click.option("--force", is_flag=True, help="Proceed even if other processes hold the store.")
@click.pass_context
def compact(ctx: click.Context, force: bool) -> None:
    """Whole-store upkeep: merge FTS segments, refresh planner statistics, VACUUM, empty the WAL.

    Refuses (exit 5) while another process holds the store, unless --force, and checks for
    free disk of about the store's size first. Prints main and WAL sizes before and after.
    (`optimize` is the old name of this command and still works.) On PostgreSQL it is
    VACUUM (ANALYZE), with the database's size before and after.

    \b
    Example:
      hermes-store compact
      hermes-store --json compact --force
    """
    from hermes_store.db.engine import open_engine
    from hermes_store.ops import storage
    from hermes_store.ops.holders import ensure_not_held

    obj: Ctx = ctx.obj
    command = ctx.info_name or "compact"
    db = obj.db
    need_store(db)
    require_head(obj)
    if not isinstance(db, Path):  # the server's VACUUM (ANALYZE): no file, no holders, no WAL
        from hermes_store.ops import server

        result = server.compact(open_engine(db))
        obj.emit(command, {"path": str(db), **result.to_dict()},
                 f"{db}: VACUUM (ANALYZE) done; database {size(result.before.main)} -> "
                 f"{size(result.after.main)}")
        return
    holders = ensure_not_held(db, force=force, what=command)
    for pid, cmd in holders:
        obj.note(f"warning: --force: pid {pid} ({cmd}) holds the store")
    storage.preflight(db)
    result = storage.compact(open_engine(db), progress=lambda s: obj.note(f"{s} …"))
    b, a = result.before, result.after
    obj.emit(command, {"path": str(db), **result.to_dict()},
             f"{db}: main {size(b.main)} -> {size(a.main)}, "
             f"WAL {size(b.wal)} -> {size(a.wal)}")


# The command's name before one name per operation: kept, out of the help, for scripts.
_optimize_alias = copy.copy(compact)
_optimize_alias.hidden = True
main.add_command(_optimize_alias, "optimize")


ASK_ABOVE_BYTES = 500 * 1024 * 1024
NO_VACUUM_SHARE = 0.3
_PHASE_LABEL = {"backfill": "backfill", "teardown": "reclaiming old index", "vacuum": "vacuum",
                "done": "done"}


@main.command("optimize-storage")
@click.option("--no-vacuum", is_flag=True, help="Skip the VACUUM (needs less free disk).")
@click.option("--force", is_flag=True, help="Proceed even if other processes hold the store.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before a store above 500 MB.")
@click.pass_obj
def optimize_storage(obj: Ctx, no_vacuum: bool, force: bool, yes: bool) -> None:
    """Move the search indexes to the current layout: backfill, teardown, vacuum, done.

    Resumable: an interrupted run continues where it stopped. Needs free disk of about the
    store's size (about 30% with --no-vacuum); refuses (exit 5) while another process holds
    the store unless --force; asks before a store above 500 MB unless --yes. SQLite only
    (exit 2 on PostgreSQL, whose search indexes have no older layout).

    \b
    Example:
      hermes-store optimize-storage
      hermes-store optimize-storage --no-vacuum --yes
    """
    db = file_only(obj, "optimize-storage",
                   "its search indexes are always in the current layout")
    from hermes_store.db.engine import open_engine
    from hermes_store.ops import storage
    from hermes_store.ops.backup import require_free_space
    from hermes_store.ops.holders import ensure_not_held

    need_store(db)
    require_head(obj)
    holders = ensure_not_held(db, force=force, what="optimize-storage")
    for pid, cmd in holders:
        obj.note(f"warning: --force: pid {pid} ({cmd}) holds the store")
    # The size announced here is measured as the result's "before" is (file plus WAL), so the
    # two figures a user compares are the same quantity.
    store_bytes = storage.file_bytes(db)
    need = int(store_bytes * (NO_VACUUM_SHARE if no_vacuum else 1.0))
    require_free_space(db.parent, need, "optimize-storage")
    if store_bytes > ASK_ABOVE_BYTES:
        obj.note(f"warning: the store is {size(store_bytes)}; this takes a while and writes "
                 "about that much (it can be interrupted and resumed)")
        obj.confirm("continue?", yes=yes)
    phases: list[str] = []
    with obj.progress() as update:
        def progress(phase: str, done: int, total: int) -> None:
            if phase not in phases:
                phases.append(phase)
            update(_PHASE_LABEL.get(phase, phase), done, total)

        report = storage.optimize_storage(open_engine(obj.db), progress=progress,
                                              vacuum=not no_vacuum)
    delta = report.bytes_before - report.bytes_after
    change = (f"reclaimed {size(delta)}" if delta >= 0 else f"grew by {size(-delta)}")
    obj.emit("optimize-storage", {"path": str(obj.db), "phases": phases,
                                  **dataclasses.asdict(report), "reclaimed_bytes": delta},
             f"{obj.db}: {change} ({size(report.bytes_before)} -> {size(report.bytes_after)}); "
             f"{report.rows_backfilled:,} rows indexed, dropped "
             f"{', '.join(report.tables_dropped) or 'nothing'}")
