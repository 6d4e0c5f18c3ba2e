"""How the command line writes for people: times, sizes, counts, the session item, and text
made safe for a terminal. Nothing here touches the store."""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

# The session item of docs/cli.md#json-output, in order.
ITEM_KEYS = ("id", "title", "source", "created_source", "started_at", "ended_at", "last_active",
             "end_reason", "message_count", "tool_call_count", "model", "cwd", "git_branch",
             "pinned", "archived", "parent_session_id", "lineage_tip_id")
_TIME_KEYS = ("started_at", "ended_at", "last_active")



# Control characters except newline and tab: message text comes from models and tool output,
# and an ESC sequence in it would recolour, retitle or clear the reader's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` safe for a terminal: each control character as its escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def say(text: str, *, err: bool = False) -> None:
    """Human output (stdout, or stderr with ``err``), control characters neutralised."""
    click.echo(visible(text), err=err)


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class SafeConsole(Console):
        """A rich console whose plain-string arguments are neutralised like :func:`say`."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            super().print(*(visible(o) if isinstance(o, str) else o for o in objects),
                          **kwargs)

        def on_broken_pipe(self) -> None:
            # rich's own answer is SystemExit(1); the command's handler makes a reader that
            # closed the pipe (`| head -1`) exit 0, whichever way the output was written.
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    return SafeConsole


def out_console() -> Console:
    stream = sys.stdout  # read at call time: CliRunner swaps it
    return _console_class()(file=stream, width=None if stream.isatty() else 120,
                            highlight=False, soft_wrap=True)



# --------------------------------------------------------------------------- rendering


# The sane window of repo.lineage (2000-01-01, now + 1 day), kept here so that rendering a
# time never loads the query layer; tests/test_cli_help.py holds the two equal.
SANE_MIN_TS = 946684800.0
SANE_FUTURE_S = 86400.0


def iso(ts: Any) -> str | None:
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) \
            or not SANE_MIN_TS <= ts <= time.time() + SANE_FUTURE_S:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def when(ts: Any, *, short: bool = False) -> str:
    """Local time and age ("2026-09-15 07:49 (2h ago)"); ``short``: the age alone, for
    narrow terminals."""
    if iso(ts) is None:
        return "?"
    if short:
        return age(max(0.0, time.time() - ts))
    local = datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    return f"{local} ({age(max(0.0, time.time() - ts))})"


_COMMAND = re.compile(r"hermes-store [^,;()`]*[^,;()`\s]")


def commands_marked(hint: str) -> str:
    """A fix or advice with each ``hermes-store …`` command in backticks and the prose around
    it left as prose: "stop idle readers, then `hermes-store compact`"."""
    return _COMMAND.sub(lambda m: f"`{m.group()}`", hint)


def count(n: int, noun: str) -> str:
    """``1 session``, ``2 sessions``, ``12,000 messages``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


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
    """The session item of docs/cli.md#json-output: times in ISO UTC (null plus ``<key>_raw`` when insane)."""
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
