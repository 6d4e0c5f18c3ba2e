"""Moving sessions in and out: ``export`` and ``import`` (docs/formats.md)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_store.cli.app import Ctx, filter_options, main, open_read, require_head
from hermes_store.cli.render import count, say, size
from hermes_store.errors import InputNotFoundError, UsageError

if TYPE_CHECKING:
    from hermes_store.paths import StoreLocation
    from hermes_store.repo.filter_values import SessionFilter
    from hermes_store.transfer import load

# transfer.export.FORMATS, kept here so that --help never loads the exporter; tests/
# test_cli_help.py holds the two equal.
EXPORT_FORMATS = ("jsonl", "md", "qmd", "html", "trace")

DISCOVERABLE = ("claude", "codex")


# --------------------------------------------------------------------------- export


@main.command("export")
@click.argument("output", required=False)
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="jsonl",
              show_default=True, help="jsonl (backup, round-trips), md/qmd, html or trace.")
@click.option("--session-id", "session_ids", multiple=True,
              help="A session (id or unique prefix); repeatable.")
@filter_options
@click.option("--ended-only", is_flag=True, help="Leave open sessions out.")
@click.option("--all", "export_all", is_flag=True, help="md/qmd: export every session.")
@click.option("--only", type=click.Choice(["user-prompts"]), default=None,
              help="One record per real user prompt (jsonl or md).")
@click.option("--redact/--no-redact", default=None,
              help="Mask secrets in text and metadata (default: on for trace only).")
@click.option("--lineage", "lineage_mode", type=click.Choice(["single", "logical"]),
              default="single", show_default=True, help="md: one file per compression lineage.")
@click.option("--no-reasoning", is_flag=True, help="trace: drop thinking blocks.")
@click.option("--no-attachments", is_flag=True, help="jsonl: omit attachment data.")
@click.option("--dry-run", is_flag=True, help="List what would be exported; write nothing.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option("-y", "--yes", is_flag=True, help="Never ask (export itself never deletes).")
@click.pass_obj
def export_cmd(obj: Ctx, output: str | None, fmt: str, session_ids: tuple[str, ...],
               flt: SessionFilter, ended_only: bool, export_all: bool, only: str | None,
               redact: bool | None, lineage_mode: str, no_reasoning: bool,
               no_attachments: bool, dry_run: bool, force: bool, yes: bool) -> None:
    """Export sessions as jsonl, md/qmd, html or trace; streams, never loads a whole session.

    OUTPUT is a file, a directory (or a path ending in /), or - for stdout (jsonl, trace,
    user prompts). Without --session-id or filters: every session (open, archived and pinned
    included); md needs --all for that; trace takes the most recent session.

    \b
    Example:
      hermes-store export backup.jsonl
      hermes-store export - --session-id 20260915_0749 --format trace
      hermes-store export notes/ --format md --source cli --newer-than 30d
    """
    from hermes_store.db.engine import reading
    from hermes_store.repo import listing, sessions
    from hermes_store.transfer import export as exporters

    options = exporters.ExportOptions(format=fmt, only=only, redact=redact,
                                      lineage=lineage_mode, force=force,
                                      reasoning=not no_reasoning, attachments=not no_attachments)
    if obj.as_json and output == "-" and not dry_run:
        raise UsageError("--json and '-' both want stdout: give OUTPUT a file name")
    selected = bool(session_ids) or not flt.is_empty or ended_only
    if fmt in ("md", "qmd") and not selected and not export_all and not dry_run:
        raise UsageError(f"a {fmt} export of every session needs --all "
                         "(or --session-id / filters)")
    engine = open_read(obj)
    if engine is None:
        obj.emit("export", {"sessions": 0, "messages": 0, "files": [], "dry_run": dry_run},
                 "nothing to export")
        return
    with reading(engine) as conn:
        ids: list[str] | None
        if session_ids:
            ids = listing.resolve_refs(conn, session_ids)
            for sid in ids:
                tip = listing.lineage_tip(conn, sid)
                if tip != sid:
                    obj.note(f"note: {sid} was compressed; the conversation continued in {tip}")
        elif selected:
            ids = listing.matching_ids(conn, flt, ended_only=ended_only)
        elif fmt == "trace":
            recent = listing.most_recent_id(conn)
            ids = [recent] if recent is not None else []
        else:
            ids = None
        total = len(ids) if ids is not None else sessions.session_count(conn)
        if dry_run:
            plan = exporters.plan_export(conn, ids)
    if dry_run:
        _emit_plan(obj, fmt, plan)
        return
    if ids == []:
        obj.emit("export", {"sessions": 0, "messages": 0, "files": [], "dry_run": False},
                 "no sessions match; nothing written")
        return
    with obj.progress() as update:
        result = exporters.export_sessions(
            engine, output, ids, options,
            progress=lambda _sid, n: update("sessions", n, max(total, n)))
    for note in result.notes:
        obj.note(f"note: {note}")
    if result.redacted:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(result.redaction_counts.items()))
        obj.note(f"redacted: {counts or 'nothing found'}")
    payload = {"dry_run": False, "format": result.format, "sessions": result.sessions,
               "messages": result.messages, "files": result.files, "redacted": result.redacted,
               "redaction_counts": result.redaction_counts, "manifest": result.manifest,
               "notes": result.notes}
    summary = (f"exported {count(result.sessions, 'session')}, "
               f"{count(result.messages, 'message')} "
               f"({fmt}) to {', '.join(result.files[:3]) or '-'}"
               + (f" and {len(result.files) - 3} more files" if len(result.files) > 3 else ""))
    if output == "-" and not obj.as_json:
        obj.note(summary)  # stdout carries the export itself
    else:
        obj.emit("export", payload, summary)


def _emit_plan(obj: Ctx, fmt: str, plan: list[dict[str, Any]]) -> None:
    messages = sum(p["messages"] for p in plan)

    def render() -> None:
        for p in plan:
            say(f"{p['id']}  {p['messages']:>6,} msgs  {p['source'] or '?':<10} "
                       f"{p['title'] or ''}")
        say(f"would export {count(len(plan), 'session')}, {count(messages, 'message')} "
            f"({fmt})")

    obj.emit("export", {"dry_run": True, "format": fmt, "sessions": len(plan),
                        "messages": messages, "plan": plan}, render)


@main.command()
@click.argument("target", metavar="MANIFEST", type=click.Path(path_type=Path))
@click.pass_obj
def verify(obj: Ctx, target: Path) -> None:
    """Check a Markdown export against its manifest: every listed file present, unchanged.

    MANIFEST is a manifest.jsonl or the export directory holding one. Each record's sha256
    is the file's checksum (what sha256sum prints). Exit 0 when every file matches, 1 when
    one is missing or changed, 3 when there is no manifest. Never opens the store.

    \b
    Example:
      hermes-store export notes/ --format md --all
      hermes-store verify notes/
    """
    from hermes_store.transfer import manifest

    checks = manifest.verify(target)
    bad = [c for c in checks if c.status != "ok"]

    def render() -> None:
        for c in checks:
            say(f"{c.status:<8} {c.path}")
        say(f"{len(checks) - len(bad)} of {len(checks)} files match the manifest")

    obj.emit("verify", {"path": str(target), "verified": not bad, "problems": len(bad),
                        "files": manifest.as_dicts(checks)}, render)
    if bad:
        sys.exit(1)


# --------------------------------------------------------------------------- import


def _discover(kind: str | None, since: float | None, with_subagents: bool) -> list[Path]:
    from hermes_store.transfer import parse as importers

    if kind == "jsonl":
        raise UsageError("jsonl files have no default location: give PATH")
    found: list[Path] = []
    for k in (kind,) if kind else DISCOVERABLE:
        found += importers.discover(k, include_subagents=with_subagents)
    if since is not None:
        found = [p for p in found if p.stat().st_mtime >= since]
    return found


def _pick(obj: Ctx, files: list[Path]) -> list[Path]:
    """A numbered list and a prompt ("all", or numbers like 1,3-5) on a TTY."""
    for n, path in enumerate(files, 1):
        say(f"{n:>4}  {path}", err=True)
    answer = click.prompt("import which files? (all, 1,3-5, or empty to cancel)", default="",
                          show_default=False, err=True).strip().lower()
    if not answer:
        say("Nothing changed.", err=True)
        sys.exit(1)
    if answer == "all":
        return files
    chosen: list[Path] = []
    try:
        for part in answer.replace(" ", "").split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                chosen.append(files[n - 1])
    except (ValueError, IndexError):
        raise UsageError(f"not a selection: {answer!r}") from None
    return list(dict.fromkeys(chosen))


def _check_inputs(files: list[Path]) -> None:
    """Every named file exists and is a file, before anything is opened or created."""
    for path in files:
        if path.is_dir():
            raise UsageError(f"{path} is a directory: give the log files in it ({path}/*.jsonl)"
                             ", or import discovered logs with --from claude|codex --all")
        if not path.exists():
            raise InputNotFoundError(f"no such file: {path}")


def _import_engine(obj: Ctx) -> tuple[Any, bool]:
    """The target store, and whether this command created it: a missing or empty one is
    created at head (nothing to migrate)."""
    from hermes_store.db import migrate, schema_state
    from hermes_store.db.engine import open_engine

    st = schema_state.status(obj.db)
    created = st.state == "missing"
    if st.state in ("missing", "empty"):
        migrate.upgrade(obj.db)
    else:
        require_head(obj, st)
    return open_engine(obj.db), created


def _discard_new_store(path: Path) -> None:
    """Remove a store this command created when nothing was written into it (a dry run,
    files that could not be read): importing nothing leaves nothing behind."""
    from hermes_store.db.engine import forget

    forget(path)
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        file.unlink(missing_ok=True)


def _file_size(db: Path | StoreLocation) -> str:
    # A server's database is no file: there is no size to show, and it is never created here.
    if not isinstance(db, Path):
        return ""
    return f" ({size(db.stat().st_size) if db.exists() else 'not created'})"


def _summary_line(f: load.FileImportSummary) -> str:
    parts = [f"{f.status}", count(f.sessions_imported, "session"),
             count(f.messages_imported, "message")]
    if f.sessions_skipped:
        parts.append(f"{f.sessions_skipped} skipped")
    if f.malformed_lines:
        parts.append(count(f.malformed_lines, "malformed line"))
    if f.dropped_wrappers:
        parts.append(f"{count(f.dropped_wrappers, 'injected wrapper')} dropped")
    if f.error:
        parts.append(f"error: {f.error}")
    return f"{f.path} ({f.format or '?'}): " + ", ".join(parts)


@main.command("import")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--from", "kind", type=click.Choice(["claude", "codex", "jsonl"]), default=None,
              help="The format (default: detected per file).")
@click.option("--all", "import_all", is_flag=True,
              help="Without PATH: import every discovered file.")
@click.option("--since", default=None, metavar="AGE",
              help="Without PATH: only files modified since AGE/TIME.")
@click.option("--with-subagents", is_flag=True, help="Claude: subagent logs too.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@click.option("--replace", is_flag=True, help="Overwrite sessions that exist or changed.")
@click.pass_obj
def import_cmd(obj: Ctx, paths: tuple[Path, ...], kind: str | None, import_all: bool,
               since: str | None, with_subagents: bool, dry_run: bool, replace: bool) -> None:
    """Import our jsonl backups, Claude Code or Codex logs; re-importing never duplicates.

    Without PATH it looks in ~/.claude/projects and ~/.codex/sessions (or $CLAUDE_CONFIG_DIR,
    $CODEX_HOME): on a terminal it offers a picker, otherwise it lists the files and needs
    PATH or --all. One transaction per file; exit 8 when some file failed.

    \b
    Example:
      hermes-store import backup.jsonl
      hermes-store import --from claude --all --since 30d
    """
    from hermes_store.repo.filter_values import parse_time
    from hermes_store.transfer import load

    files = list(paths)
    if not files:
        cutoff = parse_time(since, flag="--since") if since else None
        found = _discover(kind, cutoff, with_subagents)
        if not found:
            obj.emit("import", {"dry_run": dry_run, "files": [], "discovered": 0},
                     "no Claude Code or Codex logs found")
            return
        if import_all:
            files = found
        elif obj.interactive():
            files = _pick(obj, found)
        else:
            for path in found:
                say(str(path), err=True)
            raise UsageError(f"found {len(found)} files: give PATH or --all to import them")
    _check_inputs(files)
    engine, created = _import_engine(obj)

    def done(_path: str, summary: load.FileImportSummary) -> None:
        obj.note(_summary_line(summary))

    result = load.import_paths(engine, files, kind=kind, replace=replace, dry_run=dry_run,
                               progress=done)
    db = obj.db
    # Only a file is created here: a server's database exists before anything imports into it.
    if created and isinstance(db, Path) and (dry_run or not result.sessions_imported):
        _discard_new_store(db)
    elif created:
        obj.note(f"created {obj.db}")
    payload = {"dry_run": dry_run, "sessions_imported": result.sessions_imported,
               "sessions_skipped": result.sessions_skipped,
               "messages_imported": result.messages_imported,
               "malformed_lines": result.malformed_lines, "failed": len(result.failed),
               "files": [dataclasses.asdict(f) for f in result.files]}
    if result.failed:
        payload["error"] = {"code": "partial", "message": f"{len(result.failed)} of "
                            f"{len(result.files)} files failed", "failed": [
                                f.path for f in result.failed]}
    verb = "would import" if dry_run else "imported"
    obj.emit("import", payload,
             f"{verb} {count(result.sessions_imported, 'session')}, "
             f"{count(result.messages_imported, 'message')} from "
             f"{count(len(result.files), 'file')} ({len(result.failed)} failed, "
             f"{count(result.malformed_lines, 'malformed line')} skipped); store {obj.db}"
             f"{_file_size(obj.db)}",
             ok=not result.failed)
    if result.exit_code:
        sys.exit(result.exit_code)
