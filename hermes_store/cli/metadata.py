"""Per-session verbs: ``pin``, ``unpin``, ``rename`` and ``delete`` (docs/cli.md#retention)."""

from __future__ import annotations

import dataclasses

import click

from hermes_store.cli.app import Ctx, main, open_read, open_write
from hermes_store.cli.render import count, say, when
from hermes_store.errors import UsageError


def _nothing_spared() -> dict[str, int]:
    from hermes_store.repo import retention

    return dataclasses.asdict(retention.Spared())


def _resolve(obj: Ctx, refs: tuple[str, ...]) -> list[str]:
    from hermes_store.db.engine import reading
    from hermes_store.repo import listing

    engine = open_write(obj)
    with reading(engine) as conn:
        return listing.resolve_refs(conn, refs)


def _flag_verb(obj: Ctx, command: str, refs: tuple[str, ...], dry_run: bool) -> None:
    from hermes_store.db.engine import run_write
    from hermes_store.repo import retention

    ids = _resolve(obj, refs)
    verb = retention.pin if command == "pin" else retention.unpin
    result = run_write(open_write(obj), lambda c: verb(c, ids, dry_run=dry_run), what=command)
    for sid in result.unarchived:
        obj.note(f"note: {sid} was archived; pinning unarchived it")
    already = len(ids) - (result.matched if command == "unpin" else result.changed)
    state = "pinned" if command == "pin" else "unpinned"
    human = (f"would {command} {count(result.matched, 'session')}" if dry_run
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
    from hermes_store.db.engine import run_write
    from hermes_store.repo import sessions, titles

    title = titles.title_from_words(words)
    sid = _resolve(obj, (session,))[0]
    run_write(open_write(obj), lambda conn: sessions.rename(conn, sid, title), what="rename")
    obj.emit("rename", {"id": sid, "title": title, "dry_run": False, "matched": 1,
                        "changed": 1, "ids": [sid], "spared": _nothing_spared()},
             f"{sid}: {title}")


# --------------------------------------------------------------------------- delete


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
    from hermes_store.db.engine import reading, run_write
    from hermes_store.repo import deletion, listing

    engine = open_read(obj)
    if engine is None:
        raise UsageError(f"no store at {obj.db}")
    with reading(engine) as conn:
        ids = listing.resolve_refs(conn, sessions_)
        plan = deletion.plan_delete(conn, ids, keep_children=keep_children)
    echo = say if dry_run else (lambda text: say(text, err=True))
    if not obj.as_json:
        for label, group in (("segment", plan.segments), ("child", plan.children)):
            for sid in group:
                r = plan.rows[sid]
                fate = "detached" if label == "child" and keep_children else "deleted"
                echo(f"  {label:<8} {sid}  {r.messages} msgs  {when(r.last_active)}  "
                     f"{'PINNED ' if r.pinned else ''}{r.title or ''}  -> {fate}")
    if plan.pinned:
        obj.note(f"warning: {len(plan.pinned)} pinned: {', '.join(plan.pinned)}")
    payload = {"dry_run": dry_run, **plan.to_dict(), "spared": _nothing_spared()}
    if dry_run:
        obj.emit("delete", {**payload, "changed": 0},
                 f"would delete {count(len(plan.doomed), 'session')}, "
                 f"{count(plan.messages, 'message')}")
        return
    plan.check(force=force)
    obj.confirm(f"delete {count(len(plan.doomed), 'session')} and "
                f"{count(plan.messages, 'message')} "
                "permanently?", yes=yes)
    changed = run_write(open_write(obj),
                        lambda conn: deletion.delete_as_planned(conn, ids, plan, force=force),
                        what="delete")
    obj.emit("delete", {**payload, "changed": changed}, f"deleted {count(changed, 'session')}")
