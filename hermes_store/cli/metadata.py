"""Per-session verbs: ``pin``, ``unpin``, ``rename`` and ``delete`` (docs/cli.md#retention)."""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import click
from sqlalchemy import Connection, func, select

from hermes_store.cli.app import Ctx, main, open_read, open_write, resolve_all, when
from hermes_store.db.engine import reading, run_write
from hermes_store.errors import HermesStoreError, StoreBusyError, UsageError
from hermes_store.repo import lineage, retention, sessions, titles

_s = lineage.sessions
_m = lineage.messages
NOTHING_SPARED = dataclasses.asdict(retention.Spared())
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class TitleInUseError(HermesStoreError):
    """``rename`` to a title another session holds (exit 1)."""

    code = "title_in_use"


class PlanChangedError(HermesStoreError):
    """``delete`` found the store changed between its preview and the write (exit 1)."""

    code = "changed_since_preview"


def _resolve(obj: Ctx, refs: tuple[str, ...]) -> list[str]:
    engine = open_write(obj)
    with reading(engine) as conn:
        return resolve_all(conn, refs)


def _flag_verb(obj: Ctx, command: str, refs: tuple[str, ...], dry_run: bool) -> None:
    ids = _resolve(obj, refs)
    verb = retention.pin if command == "pin" else retention.unpin
    result = run_write(open_write(obj), lambda c: verb(c, ids, dry_run=dry_run), what=command)
    for sid in result.unarchived:
        obj.note(f"note: {sid} was archived; pinning unarchived it")
    already = len(ids) - (result.matched if command == "unpin" else result.changed)
    state = "pinned" if command == "pin" else "unpinned"
    human = (f"would {command} {result.matched} sessions" if dry_run
             else f"{state}: {', '.join(result.ids) or 'nothing'}"
             + (f" (already {state}: {already})" if already and not dry_run else ""))
    obj.emit(command, {**result.as_dict(), "unarchived": result.unarchived}, human)


@main.command()
@click.argument("sessions_", metavar="ID...", nargs=-1, required=True)
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.pass_obj
def pin(obj: Ctx, sessions_: tuple[str, ...], dry_run: bool) -> None:
    """Keep sessions: pinned lineages are never pruned or archived and always listed.

    Pinning an archived session unarchives its lineage (with a note).

    \b
    Example:
      hermes-store pin 20260915_0749
    """
    _flag_verb(obj, "pin", sessions_, dry_run)


@main.command()
@click.argument("sessions_", metavar="ID...", nargs=-1, required=True)
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.pass_obj
def unpin(obj: Ctx, sessions_: tuple[str, ...], dry_run: bool) -> None:
    """Clear the keep flag.

    \b
    Example:
      hermes-store unpin 20260915_0749 20260916_1010
    """
    _flag_verb(obj, "unpin", sessions_, dry_run)


# --------------------------------------------------------------------------- rename


def check_title(words: tuple[str, ...]) -> str:
    """The words joined by spaces; empty, control characters, newlines or >100 are exit 2."""
    title = " ".join(words).strip()
    if not title:
        raise UsageError("the title is empty")
    if _CONTROL.search(title):
        raise UsageError("the title may not contain newlines or control characters")
    if len(title) > titles.MAX_TITLE_LENGTH:
        raise UsageError(f"the title has {len(title)} characters; the limit is "
                         f"{titles.MAX_TITLE_LENGTH}")
    cleaned = titles.sanitize_title(title)
    if cleaned is None:
        raise UsageError("the title has no visible characters")
    return cleaned


@main.command()
@click.argument("session")
@click.argument("words", metavar="TITLE...", nargs=-1, required=True)
@click.pass_obj
def rename(obj: Ctx, session: str, words: tuple[str, ...]) -> None:
    """Set a session's title (the words are joined; titles are unique).

    \b
    Example:
      hermes-store rename 20260915_0749 Fix the flaky login test
    """
    title = check_title(words)
    sid = _resolve(obj, (session,))[0]

    def write(conn: Connection) -> str | None:
        holder = sessions.title_holder(conn, title)
        if holder is not None and holder != sid:
            return holder
        sessions.set_title(conn, sid, title)
        return None

    holder = run_write(open_write(obj), write, what="rename")
    if holder is not None:
        raise TitleInUseError(f"title {title!r} is already used by session {holder}")
    obj.emit("rename", {"id": sid, "title": title, "dry_run": False, "matched": 1,
                        "changed": 1, "ids": [sid], "spared": NOTHING_SPARED},
             f"{sid}: {title}")


# --------------------------------------------------------------------------- delete


def _delete_plan(conn: Connection, ids: list[str], keep_children: bool) -> dict[str, Any]:
    """The lineages of ``ids`` and (unless keep_children) everything below them."""
    segments: list[str] = []
    for sid in ids:
        segments += retention.lineage_of(conn, sid) or [sid]
    segments = list(dict.fromkeys(segments))
    below: list[str] = []
    for sid in segments:
        below += [r.id for r in conn.execute(lineage.descendants(sid)) if r.id not in segments]
    below = list(dict.fromkeys(below))
    doomed = segments + ([] if keep_children else below)
    rows = {r.id: r for r in conn.execute(
        select(_s.c.id, _s.c.title, _s.c.pinned, _s.c.ended_at,
               lineage.last_activity(_s).label("last_active"),
               select(func.count()).where(_m.c.session_id == _s.c.id).scalar_subquery()
               .label("messages")).where(_s.c.id.in_(segments + below)))}
    busy_since = time.time() - retention.DEFAULT_BUSY_WINDOW_S
    return {"segments": segments, "children": below, "doomed": doomed, "rows": rows,
            "pinned": [sid for sid in doomed if rows[sid].pinned],
            "busy": [sid for sid in doomed if rows[sid].ended_at is None
                     and (rows[sid].last_active or 0) > busy_since]}


@main.command()
@click.argument("sessions_", metavar="ID...", nargs=-1, required=True)
@click.option("--keep-children", is_flag=True,
              help="Detach delegate/branch children instead of deleting them.")
@click.option("--force", is_flag=True, help="Delete pinned sessions too.")
@click.option("--dry-run", is_flag=True, help="Preview only.")
@click.option("-y", "--yes", is_flag=True, help="Skip the confirmation.")
@click.pass_obj
def delete(obj: Ctx, sessions_: tuple[str, ...], keep_children: bool, force: bool,
           dry_run: bool, yes: bool) -> None:
    """Permanently delete sessions: each whole compression lineage, and its children unless
    --keep-children. Pinned sessions need --force.

    \b
    Example:
      hermes-store delete 20260915_0749 --dry-run
      hermes-store delete 20260915_0749 --keep-children --yes
    """
    engine = open_read(obj)
    if engine is None:
        raise UsageError(f"no store at {obj.db}")
    with reading(engine) as conn:
        ids = resolve_all(conn, sessions_)
        plan = _delete_plan(conn, ids, keep_children)
    rows = plan["rows"]
    echo = click.echo if dry_run else (lambda text: click.echo(text, err=True))
    if not obj.as_json:
        for label, group in (("segment", plan["segments"]), ("child", plan["children"])):
            for sid in group:
                r = rows[sid]
                fate = "detached" if label == "child" and keep_children else "deleted"
                echo(f"  {label:<8} {sid}  {r.messages} msgs  {when(r.last_active)}  "
                     f"{'PINNED ' if r.pinned else ''}{r.title or ''}  -> {fate}")
    if plan["busy"] and not dry_run:
        raise StoreBusyError(f"{', '.join(plan['busy'])} wrote in the last minute and may be in "
                             "a live turn; end it (or wait) and try again")
    if plan["pinned"]:
        obj.note(f"warning: {len(plan['pinned'])} pinned: {', '.join(plan['pinned'])}")
        if not force and not dry_run:
            raise UsageError("pinned sessions are deleted only with --force")
    payload = {"dry_run": dry_run, "matched": len(plan["doomed"]), "ids": plan["doomed"],
               "detached": plan["children"] if keep_children else [],
               "messages": sum(rows[s].messages for s in plan["doomed"]),
               "spared": NOTHING_SPARED}
    if dry_run:
        obj.emit("delete", {**payload, "changed": 0},
                 f"would delete {len(plan['doomed'])} sessions, {payload['messages']} messages")
        return
    obj.confirm(f"delete {len(plan['doomed'])} sessions and {payload['messages']} messages "
                "permanently?", yes=yes)

    def unit(conn: Connection) -> int:
        # The preview was read before the prompt; whatever changed while the user answered
        # must not be deleted on the strength of a plan they never saw.
        now = _delete_plan(conn, ids, keep_children)
        if now["busy"]:
            raise StoreBusyError(f"{', '.join(now['busy'])} wrote since the preview and may be "
                                 "in a live turn; end it (or wait) and try again")
        if now["doomed"] != plan["doomed"]:
            raise PlanChangedError("the sessions to delete changed since the preview; nothing "
                                   "was deleted: run the command again")
        newly_pinned = [sid for sid in now["pinned"] if sid not in plan["pinned"]]
        if newly_pinned:
            raise PlanChangedError(f"{', '.join(newly_pinned)} pinned since the preview; "
                                   "nothing was deleted: run the command again")
        return retention.delete_sessions(conn, now["doomed"])

    changed = run_write(open_write(obj), unit, what="delete")
    obj.emit("delete", {**payload, "changed": changed}, f"deleted {changed} sessions")
