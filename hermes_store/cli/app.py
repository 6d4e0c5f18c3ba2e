"""The ``hermes-store`` group and what every command shares: the JSON envelope, errors mapped to
exit codes, progress, confirmation, session ids by unique prefix, the filter flags.

Exit codes (docs/cli.md#exit-codes): 0 ok, 1 failure, 2 usage, 3 not found, 4 ambiguous id,
5 busy/held, 6 schema mismatch, 7 damage, 8 partial, 9 database server unavailable,
130 interrupted.

Results go to stdout (one JSON document with ``--json``); notes, warnings, progress and prompts
go to stderr. Reading commands open the store read-only and never migrate it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine
from hermes_store.errors import (
    BackendNotSupportedError,
    HermesStoreError,
    SchemaMismatchError,
    StoreNotFoundError,
    UsageError,
)
from hermes_store.paths import StoreLocation, resolve_location
from hermes_store.repo import lineage
from hermes_store.repo.filters import SessionFilter
from hermes_store.version import __version__

SANE_MIN, SANE_FUTURE = lineage.SANE_MIN_TS, lineage.SANE_FUTURE_S
# The session item of docs/cli.md#json-output, in order.
ITEM_KEYS = ("id", "title", "source", "created_source", "started_at", "ended_at", "last_active",
             "end_reason", "message_count", "tool_call_count", "model", "cwd", "git_branch",
             "pinned", "archived", "parent_session_id", "lineage_tip_id")
_TIME_KEYS = ("started_at", "ended_at", "last_active")


# --------------------------------------------------------------------------- context


def stdin_is_tty() -> bool:
    """Whether a person can answer a prompt (tests replace this)."""
    return sys.stdin.isatty()


@dataclass
class Ctx:
    # The store: its file, or (on a database server) its location, which prints without the
    # password. File-only commands take ``db`` as a Path.
    db: Path | StoreLocation
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

    @staticmethod
    def interactive() -> bool:
        return stdin_is_tty()

    def confirm(self, question: str, *, yes: bool) -> None:
        """Ask ``[y/N]`` on stderr. Without a TTY and without ``--yes``: exit 2, never block.
        Declined: "Nothing changed." and exit 1."""
        if yes:
            return
        if not stdin_is_tty():
            raise UsageError("stdin is not a terminal: pass --yes to confirm "
                             "(or --dry-run to preview)")
        if not click.confirm(question, default=False, err=True):
            click.echo("Nothing changed.", err=True)
            sys.exit(1)

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
    rows = [{"id": r["id"], "title": r.get("title"), "last_active": iso(r.get("last_active")),
             "last_active_raw": r.get("last_active")}
            for r in getattr(err, "candidate_rows", None) or []]
    if obj is not None and obj.as_json:
        error: dict[str, Any] = {"code": err.code, "message": str(err)}
        for attr in ("candidates", "holders", "state"):
            if getattr(err, attr, None):
                error[attr] = getattr(err, attr)
        if rows:
            error["candidates"] = rows
        click.echo(json.dumps({"ok": False, "command": command, "error": error},
                              ensure_ascii=False, default=str))
    else:
        click.echo(f"error: {err}", err=True)
        for row in rows or []:
            click.echo(f"  {row['id']}  {when(row.get('last_active_raw'))}  "
                       f"{row.get('title') or ''}", err=True)
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


# --------------------------------------------------------------------------- rendering


def iso(ts: Any) -> str | None:
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) \
            or not SANE_MIN <= ts <= time.time() + SANE_FUTURE:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def when(ts: Any) -> str:
    if iso(ts) is None:
        return "?"
    local = datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    return f"{local} ({age(max(0.0, time.time() - ts))})"


def size(n: int | None) -> str:
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


def session_item(row: dict[str, Any], tip_id: str | None = None) -> dict[str, Any]:
    """The item of docs/cli.md#json-output: ISO UTC times (null + ``<key>_raw`` if insane)."""
    item = {key: row.get(key) for key in ITEM_KEYS}
    item["created_source"] = row.get("created_source") or row.get("source")
    item["lineage_tip_id"] = tip_id or row.get("lineage_tip_id") or row.get("id")
    for key in _TIME_KEYS:
        raw = row.get(key)
        item[key] = iso(raw)
        if item[key] is None and raw is not None:
            item[f"{key}_raw"] = raw
    for key in ("pinned", "archived"):
        item[key] = bool(row.get(key))
    return item


def source_label(row: dict[str, Any]) -> str:
    created, current = row.get("created_source"), row.get("source")
    return f"{created}→{current}" if created and created != current else str(current)


# --------------------------------------------------------------------------- store access


def open_read(obj: Ctx) -> Any:
    """The store's engine opened read-only at head, or None (with a note) when there is none."""
    st = migrate.status(obj.db)
    if st.state in ("missing", "empty"):
        obj.note(f"note: no store at {obj.db} yet (`hermes-store upgrade` creates one)")
        return None
    require_head(obj, st)
    return open_engine(obj.db, readonly=True)


def require_head(obj: Ctx, st: migrate.SchemaStatus | None = None) -> None:
    st = st or migrate.status(obj.db)
    if not st.at_head:
        raise SchemaMismatchError(f"{obj.db} is {st.describe()}: run `hermes-store upgrade`",
                                  state=st.state, current=st.current, head=st.head)


def open_write(obj: Ctx) -> Any:
    """The store's engine opened for short writes; it must exist and be at head."""
    need_store(obj.db)
    require_head(obj)
    return open_engine(obj.db)


def on_server(obj: Ctx) -> bool:
    return not isinstance(obj.db, Path)


def file_only(obj: Ctx, command: str, instead: str) -> Path:
    """The store's file; on a server, exit 2 saying the command is SQLite-only and what to
    use instead."""
    if isinstance(obj.db, Path):
        return obj.db
    raise BackendNotSupportedError(
        f"`{command}` works on a SQLite file only; {obj.db} is a PostgreSQL database "
        f"({instead})")


def need_store(path: Path | StoreLocation) -> None:
    # A server's database is there or the connection says why not (exit 3 or 9).
    if isinstance(path, Path) and not path.exists():
        raise StoreNotFoundError(f"no store at {path}")


# --------------------------------------------------------------------------- filters

_FILTER_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--older-than", "older_than", str, "Last activity before AGE/TIME (90, 2w, 36h, 2026-07-05)."),
    ("--newer-than", "newer_than", str, "Last activity at or after AGE/TIME."),
    ("--before", "before", str, "Started before AGE/TIME."),
    ("--after", "after", str, "Started at or after AGE/TIME."),
    ("--title", "title", str, "Title contains (case-insensitive)."),
    ("--model", "model", str, "Model contains (case-insensitive)."),
    ("--branch", "branch", str, "Git branch contains (case-insensitive)."),
    ("--provider", "provider", str, "Billing provider (exact, case-insensitive)."),
    ("--end-reason", "end_reason", str, "End reason (exact)."),
    ("--user", "user", str, "User id (exact)."),
    ("--chat-id", "chat_id", str, "Chat id (exact)."),
    ("--chat-type", "chat_type", str, "Chat type (exact)."),
    ("--cwd", "cwd", str, "Working directory under PATH (component boundaries)."),
    ("--workspace", "workspace", str, "Git root, else cwd: substring or basename."),
    ("--min-messages", "min_messages", click.IntRange(min=0), "At least N messages."),
    ("--max-messages", "max_messages", click.IntRange(min=0), "At most N messages."),
    ("--min-tokens", "min_tokens", click.IntRange(min=0), "At least N tokens (input+output)."),
    ("--max-tokens", "max_tokens", click.IntRange(min=0), "At most N tokens."),
    ("--min-cost", "min_cost", click.FloatRange(min=0), "At least this cost (USD)."),
    ("--max-cost", "max_cost", click.FloatRange(min=0), "At most this cost (USD)."),
    ("--min-tool-calls", "min_tool_calls", click.IntRange(min=0), "At least N tool calls."),
    ("--max-tool-calls", "max_tool_calls", click.IntRange(min=0), "At most N tool calls."),
)
_METAVARS = {"older_than": "AGE", "newer_than": "AGE", "before": "TIME", "after": "TIME",
             "cwd": "PATH", "workspace": "NEEDLE"}
FILTER_KEYS = tuple(key for _, key, _, _ in _FILTER_FLAGS) + ("sources",)


def filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the flags of docs/cli.md#filters; the command gets them as one ``flt: SessionFilter``
    (bad AGE/TIME and empty windows are exit 2 before anything is opened)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {key: kwargs.pop(key) for key in FILTER_KEYS}
        values["sources"] = tuple(values["sources"] or ())
        kwargs["flt"] = SessionFilter(**values)
        return fn(*args, **kwargs)

    for flag, key, kind, text in reversed(_FILTER_FLAGS):
        metavar = _METAVARS.get(key) or ("N" if kind is not str else "TEXT")
        wrapper = click.option(flag, key, type=kind, default=None, metavar=metavar,
                               help=text)(wrapper)
    return click.option("--source", "sources", multiple=True, metavar="SOURCE",
                        help="Source (exact); repeat for several.")(wrapper)


# --------------------------------------------------------------------------- group


@click.group(cls=StoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", default=None, metavar="PATH|URL",
              help="The store: a SQLite file or a URL such as postgresql://USER@HOST/DB "
                   "(default: $HERMES_STORE_URL, else $HERMES_HOME/state.db, "
                   "else ~/.hermes/state.db).")
@click.option("--profile", default=None, help="Use ~/.hermes/profiles/NAME/state.db.")
@click.option("--json", "as_json", is_flag=True, help="Exactly one JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No notes or progress on stderr.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print the version and the head schema revision.")
@click.pass_context
def main(ctx: click.Context, db: str | None, profile: str | None, as_json: bool,
         quiet: bool) -> None:
    """Maintain the Hermes agent's session store.

    Exit codes: 0 ok, 1 failure or declined, 2 usage, 3 not found, 4 ambiguous id,
    5 busy or held, 6 schema mismatch, 7 damage, 8 partial, 9 server unavailable,
    130 interrupted.

    \b
    Example:
      hermes-store --db ~/.hermes/state.db upgrade
      hermes-store --db postgresql://hermes@db.example/hermes check
      hermes-store --json stats
    """
    ctx.obj = Ctx(db=Path(), as_json=as_json, quiet=quiet)
    location = resolve_location(db, profile)  # an unusable URL is exit 2, with --json too
    ctx.obj.db = location.path or location
