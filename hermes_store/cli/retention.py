"""Retention verbs over the shared filter set: ``prune``, ``archive``, ``unarchive``, ``close``
(docs/cli.md#filters, docs/cli.md#retention).

Each runs its :mod:`hermes_store.repo.retention` function twice: first as a dry run on a read
transaction (the preview, with the spared groups and the candidates), then, after the
confirmation, for real in one write transaction restricted to the previewed sessions, so a
confirmation never covers more than what was shown.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from hermes_store.cli.app import Ctx, filter_options, main, open_read
from hermes_store.cli.render import count, iso, say, when
from hermes_store.errors import UsageError

if TYPE_CHECKING:
    from hermes_store.repo import retention
    from hermes_store.repo.filter_values import SessionFilter

DEFAULT_RETENTION = "90d"
_INFINITIVE = {"prune": "delete", "archive": "archive", "unarchive": "unarchive",
               "close": "close"}
PREVIEW_ROWS = 15

# {sessions}: "1 pinned session" / "3 pinned sessions"; {match}: "matches" / "match".
_SPARED_NOTES = {
    "pinned": "Note: {sessions} also {match} and will NOT be {verb} (use --include-pinned).",
    "archived": "Note: {sessions} also {match} and will NOT be {verb} (use --include-archived).",
    "open": "Note: {sessions} also {match} but {was} skipped: {open_why}",
    "busy": "Note: {sessions} {was} active in the last minute and {was} skipped (busy).",
    "lineage": "Note: {sessions} {match} on {its} own but stay with their lineage, which does "
               "not match.",
}

_ARCHIVE_NOTES = {
    "pinned": "Note: {sessions} also {match} and will NOT be archived (pinned sessions are never "
              "archived; `unpin` first).",
    "archived": "Note: already archived: {n}.",
}

_CLOSE_NOTES = {"pinned": "Note: {sessions} also {match} and will NOT be closed."}
_NOUNS = {"pinned": "pinned session", "archived": "archived session", "busy": "session",
          "lineage": "compressed ancestor"}


def _spared_words(group: str, n: int, open_sessions: int) -> dict[str, str]:
    one = n == 1
    noun = _NOUNS.get(group, "open session")
    sessions = f"{n} {noun}{'' if one else 's'}"
    if group == "open" and open_sessions != n:
        # The lineage is the unit: its ended segments are spared with its open one.
        sessions = (f"{n} session{'' if one else 's'} of lineages still open "
                    f"({open_sessions} never ended)")
    return {"sessions": sessions, "match": "matches" if one else "match",
            "was": "was" if one else "were", "its": "its" if one else "their"}


def _preview(obj: Ctx, result: retention.RetentionResult, rows: list[dict[str, Any]],
             description: str, *, verb: str, open_why: str, everything: bool,
             notes: dict[str, str]) -> None:
    """Spared notes, the filter description, the candidates oldest first, the activity span."""
    for group, n in dataclasses.asdict(result.spared).items():
        if n:
            template = notes.get(group, _SPARED_NOTES[group])
            obj.note(template.format(n=n, verb=verb, open_why=open_why,
                                     **_spared_words(group, n, result.open_sessions)))
    if obj.as_json or obj.quiet and not result.dry_run:
        return
    echo = say if result.dry_run else (lambda text: say(text, err=True))
    echo(f"Matching: {description}")
    shown = rows if everything else rows[:PREVIEW_ROWS]
    for r in shown:
        extra = f" (+{len(r['segments']) - 1} segments)" if len(r["segments"]) > 1 else ""
        echo(f"  {r['id']}  {when(r['last_active'])}  {r['source'] or '?'}  "
             f"{r['model'] or '-'}  {r['messages']} msgs  {r['title'] or ''}{extra}")
    if len(rows) > len(shown):
        echo(f"  … {len(rows) - len(shown)} more")
    if rows:
        echo(f"oldest activity {when(rows[0]['last_active'])}, "
             f"newest activity {when(rows[-1]['last_active'])}")


def run_verb(obj: Ctx, command: str, flt: SessionFilter, *, description: str, dry_run: bool,
             yes: bool, past: str, ids: list[str] | None = None, open_why: str = "",
             notes: dict[str, str] | None = None, **options: Any) -> None:
    """Preview (dry run on a read transaction), confirm, then apply to the previewed ids."""
    from hermes_store.db.engine import open_engine, reading, run_write
    from hermes_store.repo import retention

    engine = open_read(obj)
    if engine is None:
        obj.emit(command, retention.RetentionResult(command, dry_run).as_dict(),
                 f"no store: nothing {past}")
        return
    with reading(engine) as conn:
        plan = retention.apply_filter(conn, command, flt, ids=ids, dry_run=True, **options)
        rows = retention.candidate_rows(conn, plan)
    _preview(obj, plan, rows, description, verb=past, open_why=open_why, everything=dry_run,
             notes=notes or {})
    payload = {**plan.as_dict(), "filter": description, "candidates": [
        {**r, "last_active": iso(r["last_active"])} for r in rows]}
    if dry_run or not plan.ids:
        obj.emit(command, payload,
                 f"would {_INFINITIVE[command]} {count(plan.matched, 'session')} (dry run)"
                 if dry_run else f"nothing to do: no session is {past}")
        return
    obj.confirm(f"{_INFINITIVE[command]} {count(plan.matched, 'session')} "
                f"({count(len(rows), 'lineage')})?", yes=yes)
    result = run_write(open_engine(obj.db),
                       lambda conn: retention.apply_filter(conn, command, flt, ids=plan.ids,
                                                           **options),
                       what=command)
    # Restricted to the previewed ids, the real run sees none of the spared lineages.
    result.spared = plan.spared
    obj.emit(command, {**result.as_dict(), "filter": description},
             f"{command}: {count(result.changed, 'session')} {past}")


# --------------------------------------------------------------------------- prune


@main.command()
@filter_options
@click.option("--include-pinned", is_flag=True, help="Delete pinned lineages too.")
@click.option("--include-archived", is_flag=True, help="Delete archived lineages too.")
@click.option("--dry-run", is_flag=True, help="Print every match and change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Skip the confirmation.")
@click.pass_obj
def prune(obj: Ctx, flt: SessionFilter, include_pinned: bool, include_archived: bool,
          dry_run: bool, yes: bool) -> None:
    """Delete ended sessions, whole compression lineages at a time.

    With no filter: sessions last active more than 90 days ago. Any explicit filter replaces
    that cutoff. Pinned, archived, open and busy sessions are spared, with a note saying how
    many and why.

    \b
    Example:
      hermes-store prune --dry-run
      hermes-store prune --older-than 30d --source cron --yes
    """
    description = flt.describe()
    if flt.is_empty:
        flt = dataclasses.replace(flt, older_than=DEFAULT_RETENTION)
        description = f"{flt.describe()} (default retention {DEFAULT_RETENTION})"
    elif flt.older_than is None:
        description += ", any age"
    run_verb(obj, "prune", flt, description=description, dry_run=dry_run, yes=yes,
             past="deleted", open_why="prune only deletes ended sessions (see `close`).",
             include_pinned=include_pinned, include_archived=include_archived)


# --------------------------------------------------------------------------- archive


@main.command()
@click.argument("sessions", nargs=-1)
@filter_options
@click.option("--include-open", is_flag=True, help="Archive lineages that never ended too.")
@click.option("--dry-run", is_flag=True, help="Print every match and change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Skip the confirmation.")
@click.pass_obj
def archive(obj: Ctx, sessions: tuple[str, ...], flt: SessionFilter, include_open: bool,
            dry_run: bool, yes: bool) -> None:
    """Hide whole lineages from list and pickers; they stay searchable and exportable.

    Needs IDs or at least one filter (an unfiltered archive is refused, exit 2). Pinned
    lineages are always spared; open ones unless --include-open.

    \b
    Example:
      hermes-store archive --older-than 30d --dry-run
      hermes-store archive 20260915_0749 --yes
    """
    if flt.is_empty and not sessions:
        raise UsageError("archive needs IDs or a filter (e.g. --older-than 30d)")
    _retarget(obj, "archive", sessions, flt, dry_run, yes, past="archived",
              open_why="use --include-open to archive them too.", notes=_ARCHIVE_NOTES,
              include_open=include_open)


@main.command()
@click.argument("sessions", nargs=-1)
@filter_options
@click.option("--dry-run", is_flag=True, help="Print every match and change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Skip the confirmation.")
@click.pass_obj
def unarchive(obj: Ctx, sessions: tuple[str, ...], flt: SessionFilter, dry_run: bool,
              yes: bool) -> None:
    """Bring archived lineages back into list and pickers (IDs or filters).

    \b
    Example:
      hermes-store unarchive 20260915_0749
      hermes-store unarchive --source telegram --yes
    """
    if flt.is_empty and not sessions:
        raise UsageError("unarchive needs IDs or a filter")
    _retarget(obj, "unarchive", sessions, flt, dry_run, yes or bool(sessions and flt.is_empty),
              past="unarchived")


def _retarget(obj: Ctx, command: str, refs: tuple[str, ...], flt: SessionFilter, dry_run: bool,
              yes: bool, *, past: str, open_why: str = "", notes: dict[str, str] | None = None,
              **options: Any) -> None:
    """The shared body of the verbs that take IDs as well as filters."""
    from hermes_store.db.engine import reading
    from hermes_store.repo import listing

    chosen: list[str] | None = None
    if refs:
        engine = open_read(obj)
        if engine is not None:
            with reading(engine) as conn:
                chosen = listing.resolve_refs(conn, refs)
    description = flt.describe() if not refs else (
        f"sessions {', '.join(chosen or refs)}" + ("" if flt.is_empty else f", {flt.describe()}"))
    run_verb(obj, command, flt, ids=chosen, description=description, dry_run=dry_run, yes=yes,
             past=past, open_why=open_why, notes=notes, **options)


# --------------------------------------------------------------------------- close


@main.command()
@filter_options
@click.option("--dry-run", is_flag=True, help="Print every match and change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Skip the confirmation.")
@click.pass_obj
def close(obj: Ctx, flt: SessionFilter, dry_run: bool, yes: bool) -> None:
    """End sessions left open (hard kills, abandoned chats) idle longer than --older-than.

    Records end_reason='closed_idle' so prune and archive see them; they stay resumable.
    Pinned and busy sessions are spared. --older-than is required.

    \b
    Example:
      hermes-store close --older-than 7d --dry-run
      hermes-store close --older-than 2w --source telegram --yes
    """
    if flt.older_than is None:
        raise UsageError("close needs --older-than AGE (e.g. --older-than 7d)")
    run_verb(obj, "close", flt, description=flt.describe(), dry_run=dry_run, yes=yes,
             past="closed", notes=_CLOSE_NOTES)
