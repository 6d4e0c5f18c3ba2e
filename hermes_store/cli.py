"""hermes-store: the operator's command line. Each command is a thin layer over one library call.

Exit codes (cli-and-formats.md §1.2): 0 ok, 1 failure, 2 usage, 3 not found, 4 ambiguous id,
5 busy/held, 6 schema mismatch, 7 damage, 8 partial, 130 interrupted.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from . import __version__, migrate
from .errors import HermesStoreError
from .paths import resolve_db_path


@dataclass
class Ctx:
    db: Path
    as_json: bool
    quiet: bool

    def emit(self, command: str, payload: dict[str, Any], human: str) -> None:
        """One JSON document on stdout with --json, else the human text."""
        if self.as_json:
            click.echo(json.dumps({"ok": True, "command": command, "format": 1, **payload},
                                  ensure_ascii=False, default=str))
        else:
            click.echo(human)

    def note(self, text: str) -> None:
        if not self.quiet:
            click.echo(text, err=True)


def _fail(ctx: click.Context, err: HermesStoreError) -> None:
    obj: Ctx | None = ctx.find_object(Ctx)
    if obj is not None and obj.as_json:
        click.echo(json.dumps({"ok": False, "command": ctx.info_name,
                               "error": {"code": err.code, "message": str(err)}}))
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


@click.group(cls=StoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The store (default: $HERMES_HOME/state.db, else ~/.hermes/state.db).")
@click.option("--profile", default=None, help="Use ~/.hermes/profiles/NAME/state.db.")
@click.option("--json", "as_json", is_flag=True, help="Exactly one JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No notes or progress on stderr.")
@click.version_option(__version__, message=f"hermes-store %(version)s")
@click.pass_context
def main(ctx: click.Context, db: Path | None, profile: str | None, as_json: bool,
         quiet: bool) -> None:
    """Maintain the Hermes agent's session store.

    \b
    Example:
      hermes-store --db ~/.hermes/state.db upgrade
    """
    ctx.obj = Ctx(db=resolve_db_path(db, profile), as_json=as_json, quiet=quiet)


@main.command()
@click.pass_obj
def upgrade(obj: Ctx) -> None:
    """Create the store, or bring it (legacy stores included) to the newest schema.

    \b
    Example:
      hermes-store upgrade
      hermes-store --db /backup/state.db upgrade
    """
    before = migrate.status(obj.db)
    after = migrate.upgrade(obj.db)
    human = (f"{obj.db}: already at {after.head}" if before.state == "up-to-date"
             else f"{obj.db}: {before.describe()} -> {after.current}")
    obj.emit("upgrade", {"path": str(obj.db), "before": before.state,
                         "revision": after.current, "head": after.head}, human)


@main.command()
@click.pass_obj
def current(obj: Ctx) -> None:
    """Print the store's schema revision and state; exit 0 at head, 6 otherwise.

    \b
    Example:
      hermes-store current --json
    """
    st = migrate.status(obj.db)
    obj.emit("current", {"path": str(obj.db), "state": st.state, "revision": st.current,
                         "head": st.head, "pending": st.pending,
                         "legacy_version": st.legacy_version},
             f"{obj.db}\nrevision: {st.current or '-'}\nhead:     {st.head}\nstate:    "
             f"{st.describe()}")
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


if __name__ == "__main__":  # pragma: no cover
    main()
