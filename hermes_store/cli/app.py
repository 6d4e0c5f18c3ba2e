"""The ``hermes-store`` group and what every command shares: the JSON envelope, errors mapped to
exit codes, progress, confirmation, session ids by unique prefix, the filter flags.

Exit codes (docs/cli.md#exit-codes): 0 ok, 1 failure, 2 usage, 3 not found, 4 ambiguous id,
5 busy/held, 6 schema mismatch, 7 damage, 8 partial, 9 database server unavailable,
10 the server refused our login, 130 interrupted.

Results go to stdout (one JSON document with ``--json``); notes, warnings, progress and prompts
go to stderr. Reading commands open the store read-only and never migrate it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hermes_store.cli.render import iso, say, visible, when
from hermes_store.errors import (
    BackendNotSupportedError,
    HermesStoreError,
    SchemaMismatchError,
    StoreNotFoundError,
    UsageError,
)
from hermes_store.paths import (
    StoreLocation,
    require_parent,
    resolve_location,
    resolve_read_location,
)

if TYPE_CHECKING:
    from hermes_store.db.schema_state import SchemaStatus

# This module and every command module import the library (and rich) inside the functions
# that use it: `--version`, `--help` and shell completion load click and nothing heavier.
# --------------------------------------------------------------------------- context


def stdin_is_tty() -> bool:
    """Whether a person can answer a prompt (tests replace this)."""
    return sys.stdin.isatty()


@dataclass
class Ctx:
    # The store: its file, or (on a database server) its location, which prints without the
    # password. File-only commands take ``store`` as a Path.
    store: Path | StoreLocation
    as_json: bool
    quiet: bool
    records: str | None = None  # nl, csv or tsv: one record a row, for scripts
    headers: bool = True
    # A replica that serves the reading commands (--read-db, $HERMES_STORE_READ_URL).
    read_store: StoreLocation | None = None
    snapshot: bool = False  # read a legacy or older store through an upgraded temporary copy

    @property
    def db(self) -> Path | StoreLocation:
        """The store's path (a mistyped directory is not found, exit 3, never created), or a
        server's location."""
        if isinstance(self.store, Path):
            require_parent(self.store)
        return self.store

    def emit(self, command: str, payload: dict[str, Any], human: str | Callable[[], None],
             *, ok: bool = True,
             records: tuple[Sequence[str], Sequence[dict[str, Any]]] | None = None) -> None:
        """One JSON document on stdout with --json; the ``records`` (columns, rows) with
        --nl/--csv/--tsv; else the human text (or renderer)."""
        if self.as_json and self.records:
            raise UsageError(f"--json and --{self.records} both choose the output: give one")
        if self.as_json:
            click.echo(json.dumps({"ok": ok, "command": command, "format": 1, **payload},
                                  ensure_ascii=False, default=str))
        elif self.records and records is not None:
            from hermes_store.cli import formats

            formats.write_records(self.records, records[0], records[1], headers=self.headers)
        elif callable(human):
            human()
        else:
            say(human)

    def note(self, text: str) -> None:
        if not self.quiet:
            say(text, err=True)

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
        if not click.confirm(visible(question), default=False, err=True):
            click.echo("Nothing changed.", err=True)
            sys.exit(1)

    @contextlib.contextmanager
    def progress(self) -> Iterator[Callable[[str, int, int], None]]:
        """``update(label, done, total)``: a rich bar on a TTY; without one, a note per tenth
        ("messages: 120,000/212,455") so logs still show progress; nothing with -q."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
        )

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


def _fail(ctx: click.Context, err: HermesStoreError) -> NoReturn:
    obj: Ctx | None = ctx.find_object(Ctx)
    command = ctx.invoked_subcommand or ctx.info_name
    rows = [{"id": r["id"], "title": r.get("title"), "last_active": iso(r.get("last_active")),
             "last_active_raw": r.get("last_active")}
            for r in getattr(err, "candidate_rows", None) or []]
    if obj is not None and obj.as_json:
        error: dict[str, Any] = {"code": err.code, "message": str(err)}
        for attr in ("candidates", "holders", "state", "reason", "total"):
            if getattr(err, attr, None):
                error[attr] = getattr(err, attr)
        if rows:
            error["candidates"] = rows
        click.echo(json.dumps({"ok": False, "command": command, "error": error},
                              ensure_ascii=False, default=str))
    else:
        say(f"error: {err}", err=True)
        for row in rows or []:
            say(f"  {row['id']}  {when(row.get('last_active_raw'))}  {row.get('title') or ''}",
                 err=True)
    ctx.exit(err.exit_code)


def _set_on_ctx(attr: str) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        obj = ctx.find_object(Ctx)
        if value and obj is not None:
            setattr(obj, attr, True)

    return callback


def _set_records(fmt: str) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        obj = ctx.find_object(Ctx)
        if value and obj is not None:
            if obj.records not in (None, fmt):
                raise click.UsageError(f"--{obj.records} and --{fmt} both choose the output")
            obj.records = fmt

    return callback


def _no_headers(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    obj = ctx.find_object(Ctx)
    if value and obj is not None:
        obj.headers = False


def record_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--nl``, ``--csv``, ``--tsv`` and ``--no-headers`` for the reading commands."""
    for flag, text in (("--no-headers", "No header line (tables, CSV, TSV)."),
                       ("--tsv", "Tab-separated, one record a line."),
                       ("--csv", "CSV, one record a row."),
                       ("--nl", "Newline-delimited JSON, one object a line.")):
        callback = _no_headers if flag == "--no-headers" else _set_records(flag[2:])
        fn = click.option(flag, is_flag=True, expose_value=False, callback=callback,
                          help=text)(fn)
    return fn


class StoreCommand(click.Command):
    """Every command also takes the output options after its name (``current --json``),
    as well as before it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params += [
            click.Option(["--json", "as_json"], is_flag=True, expose_value=False,
                         callback=_set_on_ctx("as_json"),
                         help="Exactly one JSON document on stdout."),
            click.Option(["-q", "--quiet"], is_flag=True, expose_value=False,
                         callback=_set_on_ctx("quiet"), help="No notes or progress on stderr."),
        ]


# Every command: the module under hermes_store.cli that defines it, and its line in --help
# (tests/test_cli_help.py holds each equal to the command's own). A module is imported only
# when one of its commands is resolved: to run, for its --help, or to complete its options.
COMMANDS: dict[str, tuple[str, str]] = {
    "archive": ("retention", "Hide whole lineages from list and pickers; they stay searchable "
                "and exportable."),
    "check": ("schema", "Schema check: exit 0 when the store is at head and matches the models, "
              "1 otherwise."),
    "close": ("retention", "End sessions left open (hard kills, abandoned chats) idle longer "
              "than --older-than."),
    "compact": ("health", "Whole-store upkeep: merge FTS segments, refresh planner statistics, "
                "VACUUM, empty the WAL."),
    "copy": ("copy", "Copy the whole store (--db) into another one, SQLite or PostgreSQL, "
             "either way."),
    "current": ("schema", "Print the store's schema revision and state; exit 0 at head, 6 "
                "otherwise."),
    "delete": ("metadata", "Permanently delete sessions: each whole compression lineage, and its "
               "children unless --keep-children."),
    "doctor": ("health", "Read-only health report: schema, integrity, FTS indexes, WAL, holders, "
               "SQLite version."),
    "export": ("transfer", "Export sessions as jsonl, md/qmd, html or trace; streams, never loads "
               "a whole session."),
    "import": ("transfer", "Import our jsonl backups, Claude Code or Codex logs; re-importing "
               "never duplicates."),
    "list": ("browse", "Sessions, pinned first, then by last activity; lineage tips only, full "
             "ids."),
    "optimize-storage": ("health", "Move the search indexes to the current layout: backfill, "
                         "teardown, vacuum, done."),
    "pin": ("metadata", "Keep sessions: pinned lineages are never pruned or archived and always "
            "listed."),
    "prune": ("retention", "Delete ended sessions, whole compression lineages at a time."),
    "recover": ("repair", "Offline salvage of a damaged store into a NEW file; the source is "
                "never modified."),
    "rename": ("metadata", "Set a session's title (the words are joined; titles are unique)."),
    "repair": ("repair", "Probe the store for damage and fix what can be fixed in place."),
    "search": ("browse", "Full-text search over messages; results grouped by session."),
    "show": ("browse", "One session: a header, then its messages with role and time."),
    "stats": ("health", "Totals and space: sessions, messages, sources, WAL state, per-table "
              "bytes, advice."),
    "unarchive": ("retention", "Bring archived lineages back into list and pickers (IDs or "
                  "filters)."),
    "unpin": ("metadata", "Clear the keep flag."),
    "upgrade": ("schema", "Create the store, or bring it (legacy stores included) to the newest "
                "schema."),
    "verify": ("transfer", "Check a Markdown export against its manifest: every listed file "
               "present, unchanged."),
}
# Old names kept for scripts, left out of --help and completion.
HIDDEN_COMMANDS = {"optimize": "health"}


class StoreGroup(click.Group):
    """Loads each command's module on demand, and turns our errors into their documented exit
    codes instead of tracebacks."""

    command_class = StoreCommand

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS[cmd_name][0] if cmd_name in COMMANDS else HIDDEN_COMMANDS.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            importlib.import_module(f"hermes_store.cli.{module}")
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        argv = list(args)  # click's parser consumes the list it is given
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as err:
            _usage_as_json(argv, err)
            raise
        ctx.meta["hermes_argv"] = argv
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            _usage_as_json(ctx.meta.get("hermes_argv", []), err)
            raise
        except HermesStoreError as err:
            if isinstance(err.__cause__, BrokenPipeError):  # `export - | head`
                _stdout_failed(ctx, err.__cause__)
            _fail(ctx, err)
        except OSError as err:
            if err.errno == errno.EPIPE or (err.filename is None and not _stdout_writable()):
                _stdout_failed(ctx, err)
            _fail(ctx, HermesStoreError(f"{err.filename}: {err.strerror or err}"
                                        if err.filename is not None else str(err)))
        except KeyboardInterrupt:
            _fail(ctx, Interrupted())


def _usage_as_json(argv: Sequence[str], err: click.UsageError) -> None:
    """With ``--json`` anywhere among the options, a usage error click found (a bad flag, an
    out-of-range value, a missing argument) is the one JSON document on stdout, exit 2."""
    options = list(argv)[:list(argv).index("--")] if "--" in argv else list(argv)
    if "--json" not in options:
        return
    command = next((a for a in options if a in COMMANDS or a in HIDDEN_COMMANDS), None)
    click.echo(json.dumps({"ok": False, "command": command,
                           "error": {"code": "usage", "message": err.format_message()}},
                          ensure_ascii=False))
    sys.exit(err.exit_code)


class Interrupted(HermesStoreError):
    """Ctrl-C: what was committed before stays; with --json, still one JSON document."""

    exit_code = 130
    code = "interrupted"

    def __init__(self) -> None:
        super().__init__("interrupted; everything committed before stays valid")


def _stdout_writable() -> bool:
    try:
        sys.stdout.flush()
    except OSError:
        return False
    return True


def stdout_to_devnull() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush of what a closed
    pipe or a full disk refused does not fail again on the way out."""
    # Not a real file descriptor (a test runner's buffer): nothing will flush it.
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stdout_failed(ctx: click.Context, err: OSError) -> NoReturn:
    """Standard output cannot take more (a full disk, a closed pipe): say so on stderr and
    point stdout at /dev/null so the interpreter's last flush does not fail again. A closed
    pipe is the reader's choice (``| head``): exit 0, nothing said."""
    stdout_to_devnull()
    if err.errno == errno.EPIPE:
        ctx.exit(0)  # as `git log | head`: the reader has all it wanted
    click.echo(f"error: cannot write to standard output: {err.strerror or err}", err=True)
    ctx.exit(1)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from hermes_store.db.revisions import head
    from hermes_store.version import __version__

    click.echo(f"hermes-store {__version__} (schema head {head()})")
    ctx.exit(0)


# --------------------------------------------------------------------------- store access


def open_read(obj: Ctx, *, stdlib: bool = False) -> Any:
    """The store's engine opened read-only at head, or None (with a note) for a store file
    that exists and holds nothing yet. A missing one is exit 3: a mistyped ``--db`` must not
    read as an empty store. ``stdlib``: for a store file, its path instead of an engine, to
    read through ``db.raw`` (a command whose statements need no SQLAlchemy)."""
    from hermes_store.db import schema_state

    target = obj.read_store or obj.db
    st = schema_state.status(target)
    if st.state == "missing":
        raise StoreNotFoundError(f"no store at {target} (check the path; `hermes-store "
                                 "upgrade` creates one)")
    if st.state == "empty":
        obj.note(f"note: the store at {target} is empty (`hermes-store upgrade` sets it up)")
        return None
    if obj.snapshot and st.state in ("legacy", "behind"):
        target = _snapshot(obj, st)
    else:
        require_head(obj, st, target, reading=True)
    if stdlib and isinstance(target, Path):
        return target
    from hermes_store.db.engine import open_engine

    return open_engine(target, readonly=True)


def _snapshot(obj: Ctx, st: SchemaStatus) -> Path:
    """An upgraded temporary copy of the store to read, removed when the command ends."""
    from hermes_store.ops.snapshot import upgraded_snapshot

    path = file_only(obj, "--snapshot", "upgrade the database, or read it with a "
                     "hermes_store that knows its revision")
    obj.note(f"note: {path} is {st.describe()}; reading an upgraded temporary copy "
             "(the store itself is not changed)")
    return click.get_current_context().with_resource(upgraded_snapshot(path))


def require_head(obj: Ctx, st: SchemaStatus | None = None,
                 where: Path | StoreLocation | None = None, *, reading: bool = False) -> None:
    """Exit 6 unless the store is at head; for a reading command on a file that an upgrade
    would bring to head, the message also offers ``--snapshot``."""
    from hermes_store.db import schema_state

    where = where or obj.db
    st = st or schema_state.status(where)
    if not st.at_head:
        offer = ""
        if reading and isinstance(where, Path) and st.state in ("legacy", "behind"):
            offer = (", or read it unchanged through an upgraded temporary copy: "
                     "`hermes-store --snapshot --db PATH COMMAND …`")
        raise SchemaMismatchError(
            f"{where} is {st.describe()}: reading it needs the current schema; run "
            f"`hermes-store upgrade`{offer}", state=st.state, current=st.current, head=st.head)


def open_write(obj: Ctx) -> Any:
    """The store's engine opened for short writes; it must exist and be at head."""
    from hermes_store.db.engine import open_engine

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
        from hermes_store.repo.filter_values import SessionFilter

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
@click.option("--profile", default=None, metavar="NAME",
              help="Use $HERMES_HOME/profiles/NAME/state.db (not with --db).")
@click.option("--read-db", default=None, metavar="URL",
              help="A PostgreSQL replica of the store that serves the reading commands "
                   "(default: $HERMES_STORE_READ_URL).")
@click.option("--json", "as_json", is_flag=True, help="Exactly one JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No notes or progress on stderr.")
@click.option("--snapshot", is_flag=True,
              help="Reading commands on a legacy or older SQLite store read an upgraded "
                   "temporary copy; the store itself is never changed.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print the version and the head schema revision.")
@click.pass_context
def main(ctx: click.Context, db: str | None, profile: str | None, read_db: str | None,
         as_json: bool, quiet: bool, snapshot: bool) -> None:
    """Maintain the Hermes agent's session store.

    Exit codes: 0 ok, 1 failure or declined, 2 usage, 3 not found, 4 ambiguous id,
    5 busy or held, 6 schema mismatch, 7 damage, 8 partial, 9 server unavailable,
    10 server refused the login, 130 interrupted.

    \b
    Example:
      hermes-store --db ~/.hermes/state.db upgrade
      hermes-store --db postgresql://hermes@db.example/hermes check
      hermes-store --json stats
    """
    ctx.obj = Ctx(store=Path(), as_json=as_json, quiet=quiet, snapshot=snapshot)
    location = resolve_location(db, profile)  # an unusable URL is exit 2, with --json too
    ctx.obj.store = location.path or location
    ctx.obj.read_store = resolve_read_location(read_db, location)
