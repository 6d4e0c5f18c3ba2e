"""hermes-store: the operator's command line. Each command is a thin layer over one library call.

Exit codes (cli-and-formats.md §1.2): 0 ok, 1 failure, 2 usage, 3 not found, 4 ambiguous id,
5 busy/held, 6 schema mismatch, 7 damage, 8 partial, 130 interrupted.

Results go to stdout (one JSON document with ``--json``); notes, warnings and progress go to
stderr. Reading commands open the store read-only and never migrate it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

import click
from alembic.script import ScriptDirectory
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import Engine

from . import __version__, compaction, migrate, recovery, salvage, stats
from .backup import backup_store, require_free_space
from .engine import open_engine, reading
from .errors import (
    HermesStoreError,
    SchemaMismatchError,
    StoreNotFoundError,
    UsageError,
)
from .holders import ensure_not_held, find_holders
from .paths import resolve_db_path

SANE_MIN, SANE_FUTURE = stats.SANE_MIN_EPOCH, stats.SANE_FUTURE_S
RECOVER_EXIT = {"complete": 0, "inspected": 0, "partial": 8, "nothing": 7, "damaged": 7,
                "source_changed": 1}


# --------------------------------------------------------------------------- plumbing


@dataclass
class Ctx:
    db: Path
    as_json: bool
    quiet: bool

    def emit(self, command: str, payload: dict[str, Any], human: str | Callable[[], None],
             *, ok: bool = True) -> None:
        """One JSON document on stdout with --json, else the human text (or renderer)."""
        if self.as_json:
            click.echo(json.dumps({"ok": ok, "command": command, "format": 1, **payload},
                                  ensure_ascii=False, default=str))
        elif callable(human):
            human()
        else:
            click.echo(human)

    def note(self, text: str) -> None:
        if not self.quiet:
            click.echo(text, err=True)

    @contextlib.contextmanager
    def progress(self) -> Iterator[Callable[[str, int, int], None]]:
        """``update(label, done, total)``: a rich bar on a TTY; without one, a note per tenth
        ("messages: 120,000/212,455") so logs still show progress; nothing with -q."""
        tty = sys.stderr.isatty()
        bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                       TextColumn("{task.completed:,}/{task.total:,}"), TimeElapsedColumn(),
                       console=Console(stderr=True), transient=True,
                       disable=self.quiet or not tty)
        tasks: dict[str, Any] = {}
        tenths: dict[str, int] = {}

        def update(label: str, done: int, total: int) -> None:
            total = max(total, done, 1)
            if tty:
                if label not in tasks:
                    tasks[label] = bar.add_task(label, total=total)
                bar.update(tasks[label], completed=done, total=total)
                return
            tenth = done * 10 // total
            if tenth > tenths.get(label, -1):
                tenths[label] = tenth
                self.note(f"{label}: {done:,}/{total:,}")

        with bar:
            yield update


def out_console() -> Console:
    stream = sys.stdout  # read at call time: CliRunner swaps it
    return Console(file=stream, width=None if stream.isatty() else 120, highlight=False,
                   soft_wrap=True)


def _fail(ctx: click.Context, err: HermesStoreError) -> NoReturn:
    obj: Ctx | None = ctx.find_object(Ctx)
    command = ctx.invoked_subcommand or ctx.info_name
    if obj is not None and obj.as_json:
        error: dict[str, Any] = {"code": err.code, "message": str(err)}
        for attr in ("candidates", "holders", "state"):
            if getattr(err, attr, None):
                error[attr] = getattr(err, attr)
        click.echo(json.dumps({"ok": False, "command": command, "error": error},
                              ensure_ascii=False, default=str))
    else:
        click.echo(f"error: {err}", err=True)
    ctx.exit(err.exit_code)


class StoreGroup(click.Group):
    """Turns our errors into their documented exit codes instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HermesStoreError as err:
            _fail(ctx, err)
        except KeyboardInterrupt:
            click.echo("interrupted; everything committed before stays valid", err=True)
            ctx.exit(130)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"hermes-store {__version__} (schema head {migrate.head_revision()})")
    ctx.exit(0)


def _iso(ts: Any) -> str | None:
    if not isinstance(ts, (int, float)) or not SANE_MIN <= ts <= time.time() + SANE_FUTURE:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def _when(ts: Any) -> str:
    if _iso(ts) is None:
        return "?"
    local = datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    return f"{local} ({_age(max(0.0, time.time() - ts))})"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _open_read(obj: Ctx) -> Engine | None:
    """The store opened read-only at head, or None (with a note) when there is none yet."""
    st = migrate.status(obj.db)
    if st.state in ("missing", "empty"):
        obj.note(f"note: no store at {obj.db} yet (`hermes-store upgrade` creates one)")
        return None
    if not st.at_head:
        raise SchemaMismatchError(f"{obj.db} is {st.describe()}: run `hermes-store upgrade`",
                                  state=st.state, current=st.current, head=st.head)
    return open_engine(obj.db, readonly=True)


def _pending_revisions(st: migrate.SchemaStatus, revision: str) -> list[str]:
    script = ScriptDirectory(migrate.script_location())
    if revision != "head":
        try:
            script.get_revision(revision)
        except Exception as err:  # noqa: BLE001 - alembic raises several kinds for a bad id
            raise StoreNotFoundError(f"unknown schema revision {revision!r}") from err
    if st.state in ("behind", "up-to-date") and revision == "head":
        return list(st.pending)
    base = st.current
    if st.state == "legacy" and st.legacy_version is not None:
        base = migrate.LEGACY_REVISIONS[min(st.legacy_version, migrate.LEGACY_MAX_KNOWN)]
    upper = script.get_current_head() if revision == "head" else revision
    revs = [s.revision for s in script.iterate_revisions(upper, base or "base")]
    return list(reversed(revs))


def _need_store(path: Path) -> None:
    if not path.exists():
        raise StoreNotFoundError(f"no store at {path}")


# --------------------------------------------------------------------------- group


@click.group(cls=StoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The store (default: $HERMES_HOME/state.db, else ~/.hermes/state.db).")
@click.option("--profile", default=None, help="Use ~/.hermes/profiles/NAME/state.db.")
@click.option("--json", "as_json", is_flag=True, help="Exactly one JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No notes or progress on stderr.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print the version and the head schema revision.")
@click.pass_context
def main(ctx: click.Context, db: Path | None, profile: str | None, as_json: bool,
         quiet: bool) -> None:
    """Maintain the Hermes agent's session store.

    \b
    Example:
      hermes-store --db ~/.hermes/state.db upgrade
      hermes-store --json stats
    """
    ctx.obj = Ctx(db=resolve_db_path(db, profile), as_json=as_json, quiet=quiet)


# --------------------------------------------------------------------------- schema


@main.command()
@click.argument("revision", default="head")
@click.option("--dry-run", is_flag=True, help="List the pending revisions and change nothing.")
@click.option("--no-backup", is_flag=True, help="Skip the online backup taken before a change.")
@click.option("--force", is_flag=True, help="Proceed even if other processes hold the store.")
@click.pass_obj
def upgrade(obj: Ctx, revision: str, dry_run: bool, no_backup: bool, force: bool) -> None:
    """Create the store, or bring it (legacy stores included) to the newest schema.

    Before changing an existing store it checks that no other process holds it and takes an
    online backup (STORE.pre-upgrade-<time>) under a bounded busy deadline.

    \b
    Example:
      hermes-store upgrade --dry-run
      hermes-store --db /backup/state.db upgrade
    """
    before = migrate.status(obj.db)
    if before.state in ("ahead", "unknown"):
        migrate.upgrade(obj.db)  # raises the explanatory SchemaMismatchError
    pending = _pending_revisions(before, revision)
    base = {"path": str(obj.db), "before": before.state, "revision": before.current,
            "head": before.head, "pending": pending}
    if dry_run:
        obj.emit("upgrade", {**base, "dry_run": True},
                 f"{obj.db}: {before.describe()}; would apply {len(pending)} revision(s)"
                 + "".join(f"\n  {r}" for r in pending))
        return
    backup_file = None
    if pending and before.state not in ("missing", "empty"):
        ensure_not_held(obj.db, force=force, what="upgrade")
        if no_backup:
            require_free_space(obj.db.parent, obj.db.stat().st_size, "upgrade")
        else:
            backup_file = backup_store(obj.db, label="pre-upgrade")
            obj.note(f"backup: {backup_file.path} ({_size(backup_file.bytes)})")
    after = migrate.upgrade(obj.db, revision)
    human = (f"{obj.db}: already at {after.head}" if not pending
             else f"{obj.db}: {before.describe()} -> {after.current}")
    obj.emit("upgrade", {**base, "dry_run": False, "revision": after.current,
                         "applied": pending,
                         "backup": str(backup_file.path) if backup_file else None}, human)


@main.command()
@click.pass_obj
def current(obj: Ctx) -> None:
    """Print the store's schema revision and state; exit 0 at head, 6 otherwise.

    \b
    Example:
      hermes-store current --json
    """
    st = migrate.status(obj.db)
    caps: dict[str, Any] = {}
    if st.state not in ("missing", "empty"):
        with reading(open_engine(obj.db, readonly=True)) as conn:
            caps = stats.capabilities(conn)
    lines = [str(obj.db), f"revision: {st.current or '-'}", f"head:     {st.head}",
             f"state:    {st.describe()}", f"sqlite:   {sqlite3.sqlite_version}"]
    if caps:
        backfill = caps["backfill"] or {}
        lines += [f"journal:  {caps['journal_mode']}",
                  f"layout:   {caps['layout_version'] or 'not stamped'}"
                  + (" (backfill pending)" if backfill.get("pending") else ""),
                  f"fts5:     {'yes' if caps['fts5'] else 'no'}, trigram: "
                  f"{'yes' if caps['trigram'] else 'no'}"]
    obj.emit("current", {"path": str(obj.db), "state": st.state, "revision": st.current,
                         "head": st.head, "pending": st.pending,
                         "legacy_version": st.legacy_version,
                         "sqlite_version": sqlite3.sqlite_version, **caps}, "\n".join(lines))
    if not st.at_head:
        sys.exit(6)


@main.command()
@click.pass_obj
def check(obj: Ctx) -> None:
    """Exit 0 when the store is at head and matches the models, 1 otherwise.

    \b
    Example:
      hermes-store --db state.db check && echo current
    """
    st = migrate.status(obj.db)
    drift = [repr(d) for d in migrate.check(obj.db)] if st.state != "missing" else []
    ok = st.at_head and not drift
    human = "ok: at head, no drift" if ok else (
        f"not current: {st.describe()}" + "".join(f"\n  drift: {d}" for d in drift))
    obj.emit("check", {"path": str(obj.db), "state": st.state, "at_head": st.at_head,
                       "drift": drift, "ok_schema": ok}, human)
    if not ok:
        sys.exit(1)


# --------------------------------------------------------------------------- stats / doctor


def _stats_json(st: stats.StoreStats) -> dict[str, Any]:
    data = st.to_dict()
    for key in ("oldest_open", "oldest", "newest"):
        if data[key]:
            raw = data[key]["started_at"]
            data[key]["started_at"] = _iso(raw)
            if data[key]["started_at"] is None:
                data[key]["started_at_raw"] = raw
    return data


def _render_stats(st: stats.StoreStats) -> None:
    con = out_console()
    s, m = st.sessions, st.messages
    con.print(f"[bold]{st.path}[/bold]")
    con.print(f"sessions  {s['total']:,}  (open {s['open']:,}, ended {s['ended']:,}, "
              f"archived {s['archived']:,}, pinned {s['pinned']:,})")
    con.print(f"messages  {m['total']:,}  (compacted {m['compacted']:,})")
    for label, item in (("oldest open", st.oldest_open), ("oldest", st.oldest),
                        ("newest", st.newest)):
        if item:
            con.print(f"{label:<11} {_when(item['started_at'])}  {item['id']}")
    con.print(f"file      {_size(st.file_bytes)}, WAL {_size(st.wal.bytes)} "
              f"({st.wal.describe()}), freelist {st.freelist_ratio:.0%}")
    if st.sources:
        table = Table("source", "sessions", title="sessions by source", title_justify="left")
        for row in st.sources:
            table.add_row(str(row["source"]), f"{row['sessions']:,}")
        con.print(table)
    if st.space.available:
        table = Table("object", "kind", "table", "bytes", title="space", title_justify="left")
        for item in st.space.items:
            table.add_row(item.name, item.kind, item.table, _size(item.bytes))
        con.print(table)
        con.print(f"FTS share {st.space.fts_share or 0:.0%} of the file ({_size(st.space.fts_bytes)})")
    else:
        con.print(st.space.note or "per-table sizes unavailable")
    layout = st.layout
    con.print(f"layout    {layout.get('version') or 'not stamped'}; indexes: "
              f"{', '.join(layout['fts_tables']) or 'none'}")
    backfill = layout.get("backfill")
    if backfill and backfill.get("pending"):
        con.print(f"backfill  pending: {backfill.get('done', 0):,}/{backfill.get('total', 0):,}")
    for advice in st.advice:
        con.print(f"advice    {advice.message} -> `{advice.command}`")


@main.command("stats")
@click.pass_obj
def stats_cmd(obj: Ctx) -> None:
    """Totals and space: sessions, messages, sources, WAL state, per-table bytes, advice.

    Opens the store read-only; a store behind the code exits 6 (run `hermes-store upgrade`).

    \b
    Example:
      hermes-store stats
      hermes-store --json stats | jq .sources
    """
    engine = _open_read(obj)
    if engine is None:
        obj.emit("stats", {"path": str(obj.db), "exists": False, "sessions": {"total": 0},
                           "messages": {"total": 0}, "sources": []},
                 f"{obj.db}: no store (0 sessions)")
        return
    with reading(engine) as conn:
        st = stats.collect(conn, obj.db)
    obj.emit("stats", {"exists": True, **_stats_json(st)}, lambda: _render_stats(st))


_MARK = {"ok": "ok  ", "info": "info", "warn": "WARN", "damage": "DAMAGE"}


def _render_findings(path: str, findings: list[Any]) -> None:
    con = out_console()
    con.print(f"[bold]{path}[/bold]")
    for f in findings:
        fix = f"  -> `{f.fix}`" if f.fix else ""
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
    if not obj.db.exists():
        obj.note(f"note: no store at {obj.db} yet (`hermes-store upgrade` creates one)")
        obj.emit("doctor", {"path": str(obj.db), "exists": False, "healthy": True,
                            "findings": []}, f"{obj.db}: no store")
        return
    holders = find_holders(obj.db)
    try:
        engine = open_engine(obj.db, readonly=True)
        with reading(engine) as conn:
            report = stats.diagnose(conn, obj.db, full=full, holders=holders,
                                    sqlite_version=sqlite3.sqlite_version_info)
    except sqlite3.DatabaseError as err:
        report = stats.DoctorReport(
            str(obj.db), {"state": "unreadable"},
            [stats.Finding("opens", "damage", f"the store does not open: {err}",
                           f"hermes-store recover --source {obj.db} --output NEW.db "
                           "--inspect-only")],
            None, holders, sqlite3.sqlite_version)
    obj.emit("doctor", {"exists": True, **report.to_dict()},
             lambda: _render_findings(report.path, report.findings))
    if report.damaged:
        sys.exit(7)
    if report.schema.get("state") in ("behind", "legacy", "ahead", "unknown"):
        sys.exit(6)


# --------------------------------------------------------------------------- whole-file upkeep


@main.command()
@click.option("--force", is_flag=True, help="Proceed even if other processes hold the store.")
@click.pass_obj
def optimize(obj: Ctx, force: bool) -> None:
    """Merge FTS segments, PRAGMA optimize, VACUUM, then a TRUNCATE checkpoint.

    Refuses (exit 5) while another process holds the store, unless --force, and checks for
    free disk of about the store's size first. Prints main and WAL sizes before and after.

    \b
    Example:
      hermes-store optimize
      hermes-store --json optimize --force
    """
    _need_store(obj.db)
    st = migrate.status(obj.db)
    if not st.at_head:
        raise SchemaMismatchError(f"{obj.db} is {st.describe()}: run `hermes-store upgrade`",
                                  state=st.state, current=st.current, head=st.head)
    holders = ensure_not_held(obj.db, force=force, what="optimize")
    for pid, cmd in holders:
        obj.note(f"warning: --force: pid {pid} ({cmd}) holds the store")
    compaction.preflight(obj.db)
    result = compaction.optimize(open_engine(obj.db), progress=lambda s: obj.note(f"{s} …"))
    b, a = result.before, result.after
    obj.emit("optimize", {"path": str(obj.db), **result.to_dict()},
             f"{obj.db}: main {_size(b.main)} -> {_size(a.main)}, "
             f"WAL {_size(b.wal)} -> {_size(a.wal)}")


# --------------------------------------------------------------------------- repair / recover


@main.command()
@click.option("--check-only", is_flag=True, help="Probe only: exit 0 clean, 7 problems found.")
@click.option("--no-backup", is_flag=True, help="Skip the copy taken before fixing.")
@click.option("--force", is_flag=True, help="Fix even if other processes hold the store.")
@click.option("--full", is_flag=True, help="integrity_check instead of quick_check (slow).")
@click.pass_obj
def repair(obj: Ctx, check_only: bool, no_backup: bool, force: bool, full: bool) -> None:
    """Probe the store for damage and fix what can be fixed in place.

    Probes: the file opens, quick_check, FTS5 integrity-check per index, a rolled-back write
    through the triggers, orphan FTS shadow tables, triggers whose table is gone, duplicate
    schema rows. Fixes run after a copy of the store and its sidecars. Exit 0 when healthy,
    7 when damage remains (then use `recover`).

    \b
    Example:
      hermes-store repair --check-only
      hermes-store repair
    """
    _need_store(obj.db)
    report = recovery.repair_store(obj.db, check_only=check_only, backup=not no_backup,
                                   force=force, full=full)

    def render() -> None:
        con = out_console()
        con.print(f"[bold]{obj.db}[/bold]")
        for p in report.probes:
            con.print(f"{'ok  ' if p.ok else 'FAIL'} {p.name}: {p.detail}", markup=False)
        for path in report.backup:
            con.print(f"backup: {path}", markup=False)
        for action in report.actions:
            con.print(f"fixed: {action}", markup=False)
        if report.after is not None:
            for p in report.after:
                if not p.ok:
                    con.print(f"still FAIL {p.name}: {p.detail}", markup=False)
        con.print("healthy" if report.healthy else "problems found")
        for step in report.next_steps():
            con.print(f"next: {step}", markup=False)

    obj.emit("repair", report.to_dict(), render)
    if not report.healthy:
        sys.exit(7)


@main.command()
@click.option("--source", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The damaged store (default: --db).")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The NEW store to write; must not exist.")
@click.option("--inspect-only", is_flag=True, help="Only read the copy and write the report.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the source is copied first (default: a temp dir beside --output).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=salvage.DEFAULT_CHUNK,
              show_default=True, help="Rows read per chunk.")
@click.option("--allow-partial", is_flag=True,
              help="Skip unreadable rows (bisected down to single rows) instead of failing.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="JSON report path (default: OUTPUT.recovery.json).")
@click.option("--force", is_flag=True, help="Proceed even if other processes hold the source.")
@click.pass_obj
def recover(obj: Ctx, source: Path | None, output: Path, inspect_only: bool,
            work_dir: Path | None, chunk_size: int, allow_partial: bool,
            report_path: Path | None, force: bool) -> None:
    """Offline salvage of a damaged store into a NEW file; the source is never modified.

    The source and its sidecars are copied to a work directory first and fingerprinted
    (size, mtime, SHA-256) before and after. Exit 0 complete, 8 partial (--allow-partial
    skipped rows), 7 nothing salvageable, 2 usage (existing output or report).

    \b
    Example:
      hermes-store recover --source ~/.hermes/state.db --output /tmp/new.db --inspect-only
      hermes-store recover --source ~/.hermes/state.db --output /tmp/new.db --allow-partial
    """
    src = source or obj.db
    report_file = report_path or Path(f"{output}.recovery.json")
    if report_file.exists():
        raise UsageError(f"{report_file} already exists; choose another --report")
    with obj.progress() as update:
        report = salvage.recover_store(src, output, work_dir=work_dir, chunk_size=chunk_size,
                                       allow_partial=allow_partial, inspect_only=inspect_only,
                                       force=force, progress=update)
    salvage.write_report(report, report_file)
    obj.note(f"report: {report_file}")
    code = RECOVER_EXIT.get(report.status, 1)

    def render() -> None:
        con = out_console()
        con.print(f"recover {report.source} -> {report.output or '(inspect only)'}: "
                  f"{report.status}", markup=False)
        for name, t in report.tables.items():
            con.print(f"  {name}: read {t.read:,}, written {t.written:,}, skipped {t.skipped:,}",
                      markup=False)
        for name, info in report.inspection.get("tables", {}).items():
            con.print(f"  {name}: {info.get('rows')} rows {info.get('error') or ''}", markup=False)
        for r in report.skipped_ranges:
            con.print(f"  skipped {r['table']} rowids {r['first_rowid']}..{r['last_rowid']}: "
                      f"{r['error']}", markup=False)
        for err in report.errors:
            con.print(f"  error: {err}", markup=False)
        for step in report.next_steps:
            con.print(f"  then: {step}", markup=False)

    payload = {"report_path": str(report_file), **report.to_dict()}
    if code in (0, 8):
        obj.emit("recover", payload, render)
    else:
        obj.emit("recover", {**payload, "error": {"code": report.status,
                                                  "message": "; ".join(report.errors)}},
                 render, ok=False)
    if code:
        sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
