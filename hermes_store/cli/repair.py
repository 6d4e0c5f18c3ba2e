"""``repair`` fixes in place; ``recover`` salvages offline into a new file (docs/cli.md#repair)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hermes_store.cli.app import Ctx, file_only, main, need_store
from hermes_store.cli.render import out_console
from hermes_store.errors import UsageError

# ops.recover.DEFAULT_CHUNK, kept here so that --help never loads the salvage code;
# tests/test_cli_help.py holds the two equal.
RECOVER_CHUNK = 1000
RECOVER_EXIT = {"complete": 0, "inspected": 0, "partial": 8, "nothing": 7, "damaged": 7,
                "source_changed": 1}


@main.command()
@click.option("--check-only", is_flag=True, help="Probe only: exit 0 clean, 7 problems found.")
@click.option("--no-backup", is_flag=True, help="Skip the copy taken before fixing.")
@click.option("--force", is_flag=True, help="Fix even if other processes hold the store.")
@click.option("--full", is_flag=True, help="integrity_check instead of quick_check (slow).")
@click.option("--drop-agent-cjk", "drop_agent_cjk", is_flag=True,
              help="Also remove the agent's own CJK search objects (messages_fts_cjk, its view "
                   "and triggers), for a Python that cannot load its tokenizer; the agent "
                   "rebuilds them when it next loads its library.")
@click.pass_obj
def repair(obj: Ctx, check_only: bool, no_backup: bool, force: bool, full: bool,
           drop_agent_cjk: bool) -> None:
    """Probe the store for damage and fix what can be fixed in place.

    Probes: the file opens, quick_check, FTS5 integrity-check per index, a rolled-back write
    through the triggers, orphan FTS shadow tables, triggers whose table is gone, duplicate
    schema rows. Fixes run after a copy of the store and its sidecars. Exit 0 when healthy,
    7 when damage remains (then use `recover`). On PostgreSQL: the server answers, the schema
    is at head, every index of our tables is valid; a broken one is rebuilt (REINDEX).

    \b
    Example:
      hermes-store repair --check-only
      hermes-store repair
    """
    db = obj.db
    need_store(db)
    if not isinstance(db, Path):  # probes and REINDEX; the FTS5 and file probes are SQLite-only
        from hermes_store.db.engine import open_engine
        from hermes_store.ops import server

        report = server.repair(open_engine(db), str(db), check_only=check_only)
    else:
        from hermes_store.ops import repair as recovery

        report = recovery.repair_store(db, check_only=check_only, backup=not no_backup,
                                       force=force, full=full, drop_agent=drop_agent_cjk)

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
@click.option("--chunk-size", type=click.IntRange(min=1), default=RECOVER_CHUNK,
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
    src = source or file_only(obj, "recover", "restore a pg_dump backup instead")
    from hermes_store.ops import recover as salvage

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

