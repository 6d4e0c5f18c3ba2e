"""Schema commands: ``upgrade``, ``current`` and ``check`` (docs/cli.md#schema)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_store.cli.app import Ctx, main
from hermes_store.cli.render import size

if TYPE_CHECKING:
    from hermes_store.ops import stats, upgrade_estimate


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
    from hermes_store.db import migrate, schema_state
    from hermes_store.db.engine import checkpoint, open_engine, reading
    from hermes_store.ops import stats
    from hermes_store.ops.backup import backup_store, remove_stale_partials, require_free_space
    from hermes_store.ops.holders import ensure_not_held

    before = schema_state.status(obj.db)
    if before.state in ("ahead", "unknown"):
        migrate.upgrade(obj.db)  # raises the explanatory SchemaMismatchError
    pending = migrate.pending_revisions(before, revision)
    base = {"path": str(obj.db), "before": before.state, "revision": before.current,
            "head": before.head, "pending": pending}
    if dry_run:
        cost = None
        if pending and before.state not in ("missing", "empty"):
            from hermes_store.ops import upgrade_estimate

            with reading(open_engine(obj.db, readonly=True)) as conn:
                cost = upgrade_estimate.estimate(conn, pending)
        obj.emit("upgrade", {**base, "dry_run": True,
                             "estimate": cost.as_dict() if cost else None},
                 f"{obj.db}: {before.describe()}; would apply {len(pending)} revision(s)"
                 + "".join(f"\n  {r}" for r in pending) + _estimate_lines(cost))
        return
    backup_file = None
    # A server has no file to hold, copy or checkpoint: its backups are pg_dump's.
    db_file = obj.db if isinstance(obj.db, Path) else None
    if db_file is not None and db_file.parent.is_dir():
        # Backups of upgrades killed midway: each is a store-sized file nobody will finish.
        stale = remove_stale_partials(db_file, db_file.parent)
        if stale:
            obj.note(f"removed {len(stale)} unfinished backup(s) left by an interrupted run: "
                     + ", ".join(p.name for p in stale))
    if pending and before.state not in ("missing", "empty") and db_file is not None:
        ensure_not_held(db_file, force=force, what="upgrade")
        if no_backup:
            require_free_space(db_file.parent, db_file.stat().st_size, "upgrade")
        else:
            backup_file = backup_store(db_file, label="pre-upgrade")
            obj.note(f"backup: {backup_file.path} ({size(backup_file.bytes)})")
    elif pending and before.state not in ("missing", "empty"):
        obj.note("note: the upgrade runs in one transaction; take a pg_dump first if you "
                 "want a copy from before it")
    after = migrate.upgrade(obj.db, revision)
    advice: list[stats.Advice] = []
    if pending and before.state not in ("missing", "empty") and db_file is not None:
        engine = open_engine(obj.db)
        # The migration wrote through the WAL; leave a file, not a file plus a WAL its size.
        checkpoint(engine, "TRUNCATE")
        with reading(engine) as conn:
            advice = stats.upkeep_advice(conn)
    human = (f"{obj.db}: already at {after.head}" if not pending
             else f"{obj.db}: {before.describe()} -> {after.current}")
    human += "".join(f"\nnext: {a.message}: run `{a.command}`" for a in advice[:1])
    obj.emit("upgrade", {**base, "dry_run": False, "revision": after.current,
                         "applied": pending,
                         "backup": str(backup_file.path) if backup_file else None,
                         "next": [a.command for a in advice[:1]],
                         "advice": [{"message": a.message, "command": a.command}
                                    for a in advice]}, human)


def _estimate_lines(cost: upgrade_estimate.UpgradeEstimate | None) -> str:
    if cost is None:
        return ""
    lines = (f"\nestimate ({cost.messages} messages, {size(cost.indexed_text_bytes)} of text "
             f"to index): the upgrade about {cost.upgrade_seconds:g} s and "
             f"+{size(cost.upgrade_bytes)} of file")
    if cost.backfill_seconds or cost.backfill_bytes:
        lines += (f"; then `hermes-store optimize-storage` about {cost.backfill_seconds:g} s "
                  f"and +{size(cost.backfill_bytes)} (search scans the rows not indexed yet "
                  "until it has run)")
    return lines + "\n  (" + cost.basis + "; the backup before the upgrade needs the "\
        "store's size again)"


@main.command()
@click.pass_obj
def current(obj: Ctx) -> None:
    """Print the store's schema revision and state; exit 0 at head, 6 otherwise.

    \b
    Example:
      hermes-store current --json
    """
    from hermes_store.db import schema_state

    st = schema_state.status(obj.db)
    caps: dict[str, Any] = {}
    if st.state not in ("missing", "empty"):
        if isinstance(obj.db, Path):  # a file: through the standard library (db.raw)
            from hermes_store.db import raw
            from hermes_store.ops.layout_state import capabilities

            with raw.reading(obj.db) as conn:
                caps = capabilities(conn)
        else:
            from hermes_store.db.engine import open_engine, reading
            from hermes_store.ops import server

            with reading(open_engine(obj.db, readonly=True)) as conn:
                caps = server.capabilities(conn)
    # The engine's version: a server's own (its journal is not ours to report), else SQLite's.
    engine_line = (f"server:   PostgreSQL {caps.get('server_version') or '?'}"
                   if not isinstance(obj.db, Path) else f"sqlite:   {sqlite3.sqlite_version}")
    lines = [str(obj.db), f"revision: {st.current or '-'}", f"head:     {st.head}",
             f"state:    {st.describe()}", engine_line]
    if caps:
        backfill = caps["backfill"] or {}
        lines += [f"journal:  {caps['journal_mode']}"] if caps["journal_mode"] else []
        lines += [f"layout:   {caps['layout_version']}"
                  + (" (backfill pending)" if backfill.get("pending") else ""),
                  f"fts5:     {'yes' if caps['fts5'] else 'no'}, trigram: "
                  f"{'yes' if caps['trigram'] else 'no'}"]
    obj.emit("current", {"path": str(obj.db), "state": st.state, "revision": st.current,
                         "head": st.head, "pending": st.pending,
                         "legacy_version": st.legacy_version,
                         "sqlite_version": sqlite3.sqlite_version, **caps}, "\n".join(lines))
    if not st.at_head:
        sys.exit(6)


SCHEMA_ONLY = ("(a schema check only: `hermes-store doctor` checks integrity and the search "
               "indexes)")


@main.command()
@click.pass_obj
def check(obj: Ctx) -> None:
    """Schema check: exit 0 when the store is at head and matches the models, 1 otherwise.

    It reads the schema only; `hermes-store doctor` checks the store's health (integrity,
    search indexes).

    \b
    Example:
      hermes-store --db state.db check && echo current
    """
    from hermes_store.db import migrate, schema_state

    st = schema_state.status(obj.db)
    drift = [describe_drift(d) for d in migrate.check(obj.db)] if st.state != "missing" else []
    ok = st.at_head and not drift
    human = "ok: schema at head, no drift" if ok else (
        f"not current: {st.describe()}" + "".join(f"\n  drift: {d}" for d in drift))
    human += f"\n{SCHEMA_ONLY}"
    warnings = _locale_warnings(obj) if st.state != "missing" else []
    human += "".join(f"\nwarning: {w}" for w in warnings)
    obj.emit("check", {"path": str(obj.db), "state": st.state, "at_head": st.at_head,
                       "drift": drift, "ok_schema": ok, "warnings": warnings,
                       "checked": "schema", "note": SCHEMA_ONLY}, human)
    if not ok:
        sys.exit(1)



def _locale_warnings(obj: Ctx) -> list[str]:
    from hermes_store.db.engine import open_engine, reading
    from hermes_store.ops import stats

    with reading(open_engine(obj.db, readonly=True)) as conn:
        found = stats.trigram_locale(conn)
    if found is None or found.status != "warn":
        return []
    return [f"{found.detail} ({found.fix})" if found.fix else found.detail]


# --------------------------------------------------------------------------- drift, in words


def _default(column: Any) -> str:
    default = getattr(column, "server_default", None)
    arg = getattr(default, "arg", default)
    text = getattr(arg, "text", arg)
    return "" if text is None else f" DEFAULT {text}"


def _name(obj: Any) -> str:
    """A schema object as the DDL names it: tables and indexes by name, columns with type,
    NULL-ability and default, anything else as its string."""
    table = getattr(obj, "table", None)
    if hasattr(obj, "type") and table is not None:  # a column
        null = "" if getattr(obj, "nullable", True) else " NOT NULL"
        return f"{table.name}.{obj.name} {obj.type}{null}{_default(obj)}"
    if hasattr(obj, "columns") and table is not None:  # an index or a constraint
        cols = ", ".join(c.name for c in obj.columns)
        return f"{obj.name or 'unnamed'} on {table.name} ({cols})"
    if hasattr(obj, "columns") and hasattr(obj, "name"):  # a table
        return str(obj.name)
    text = getattr(obj, "text", None)
    return str(text if text is not None else obj)


def describe_drift(diff: Any) -> str:
    """One difference reported by Alembic's compare, in words instead of object reprs:
    ``add column sessions.pinned INTEGER NOT NULL DEFAULT 0`` (what the models have and the
    store lacks), ``modify type messages.x: TEXT -> REAL``."""
    if isinstance(diff, list):  # the modify_* changes of one column come grouped
        return "; ".join(describe_drift(d) for d in diff)
    kind, *rest = diff
    verb = str(kind).replace("_", " ")
    if kind.startswith("modify_") and len(rest) >= 6:
        _schema, table, column, _kw, old, new = rest[:6]
        return f"{verb} {table}.{column}: {_name(old)} -> {_name(new)}"
    target = rest[-1] if rest else ""
    return f"{verb} {_name(target)}"
