"""``copy``: the whole store into another backend (docs/cli.md#copy)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from hermes_store.cli.app import Ctx, main
from hermes_store.cli.render import out_console
from hermes_store.errors import CopyMismatchError
from hermes_store.paths import resolve_location

if TYPE_CHECKING:
    from hermes_store.ops.copy import CopyReport

# ops.copy.DEFAULT_BATCH, kept here so that --help never loads the library;
# tests/test_cli_help.py holds the two equal.
COPY_BATCH = 1000


@main.command("copy")
@click.option("--to", "dest", required=True, metavar="PATH|URL",
              help="The target store: empty, or a copy in progress of this source.")
@click.option("--batch-size", type=click.IntRange(min=1), default=COPY_BATCH,
              show_default=True, help="Rows per read and per target transaction.")
@click.pass_obj
def copy_cmd(obj: Ctx, dest: str, batch_size: int) -> None:
    """Copy the whole store (--db) into another one, SQLite or PostgreSQL, either way.

    Streams each table in key order; a copy that was killed resumes where it stopped when
    rerun with the same source and target, and a rerun after it finished copies nothing and
    verifies again. Ends by comparing each table's row count and checksum on both sides (exit
    1 when they differ). Refuses a target that holds anything else.
    Stop the agent's writers first: rows written to the source during the copy show up as a
    difference.

    \b
    Example:
      hermes-store --db ~/.hermes/state.db copy --to postgresql://hermes@db.example/hermes
      hermes-store --db postgresql://hermes@db.example/hermes copy --to /tmp/state.db
    """
    from hermes_store.ops import copy as copying

    target = resolve_location(dest)
    with obj.progress() as update:
        try:
            report = copying.copy_store(resolve_location(obj.db), target, batch=batch_size,
                                        progress=update)
        except CopyMismatchError as err:
            if isinstance(err.report, copying.CopyReport):
                _render(err.report)
            raise
    obj.emit("copy", report.to_dict(), lambda: _render(report))
    if not report.verified:  # copy_store raises first; kept so exit 0 always means verified
        sys.exit(1)


def _render(report: CopyReport) -> None:
    con = out_console()
    if report.already_copied:
        con.print(f"already copied: {report.target} is a finished copy of {report.source}; "
                  "nothing copied, verifying it again", markup=False)
    else:
        verb = "resumed copy" if report.resumed else "copy"
        con.print(f"{verb} {report.source} -> {report.target}", markup=False)
    for name, t in report.tables.items():
        mark = "ok" if t.matches else "DIFFERS"
        con.print(f"  {name}: {t.target_count:,}/{t.source_count:,} rows, checksum "
                  f"{t.target_checksum}/{t.source_checksum} {mark}", markup=False)
    for name in report.created_tables:
        con.print(f"  created table {name}", markup=False)
    for name in report.added_columns:
        con.print(f"  added column {name}", markup=False)
    for name in report.not_copied:
        con.print(f"  not copied: {name}", markup=False)
    if report.detached_parents:
        con.print(f"  {len(report.detached_parents)} sessions name a parent the source does "
                  f"not have; copied without it: {', '.join(report.detached_parents[:5])}",
                  markup=False)
    if report.sequence:
        con.print(f"  message ids continue after {report.sequence}", markup=False)
    con.print("verified" if report.verified else "verification FAILED", markup=False)
