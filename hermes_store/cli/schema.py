"""Schema commands: ``upgrade``, ``current`` and ``check`` (docs/cli.md#schema)."""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

import click

from hermes_store.cli.app import Ctx, main, on_server, size
from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading
from hermes_store.ops import server, stats
from hermes_store.ops.backup import backup_store, require_free_space
from hermes_store.ops.holders import ensure_not_held


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
    pending = migrate.pending_revisions(before, revision)
    base = {"path": str(obj.db), "before": before.state, "revision": before.current,
            "head": before.head, "pending": pending}
    if dry_run:
        obj.emit("upgrade", {**base, "dry_run": True},
                 f"{obj.db}: {before.describe()}; would apply {len(pending)} revision(s)"
                 + "".join(f"\n  {r}" for r in pending))
        return
    backup_file = None
    if pending and before.state not in ("missing", "empty") and on_server(obj):
        obj.note("note: the upgrade runs in one transaction; take a pg_dump first if you "
                 "want a copy from before it")
    elif pending and before.state not in ("missing", "empty"):
        ensure_not_held(obj.db, force=force, what="upgrade")
        if no_backup:
            require_free_space(obj.db.parent, obj.db.stat().st_size, "upgrade")
        else:
            backup_file = backup_store(obj.db, label="pre-upgrade")
            obj.note(f"backup: {backup_file.path} ({size(backup_file.bytes)})")
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
            caps = (server.capabilities(conn) if on_server(obj)
                    else stats.capabilities(conn))
    lines = [str(obj.db), f"revision: {st.current or '-'}", f"head:     {st.head}",
             f"state:    {st.describe()}", f"sqlite:   {sqlite3.sqlite_version}"]
    if caps:
        backfill = caps["backfill"] or {}
        lines += [f"journal:  {caps['journal_mode']}",
                  f"layout:   {caps['layout_version']}"
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

