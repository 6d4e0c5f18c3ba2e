"""Exports (cli-and-formats.md §4): jsonl, md/qmd, html, trace and ``--only user-prompts``.

:func:`export_sessions` is the one entry point the CLI wraps. It reads through a caller-owned
connection (a read transaction the caller opened), streams session by session and message by
message, writes every file under a temporary name and renames it only when complete, never
overwrites without ``force``, and treats ``-`` as stdout. With redaction on, every value that
reaches an output (bodies, tool arguments, reasoning, metadata, front matter, ``<title>``,
manifest, file names) has been through one :class:`~hermes_store.transfer.redact.Redactor`.

The Markdown and HTML writers live in :mod:`hermes_store.transfer.documents`; the reading side in
:mod:`hermes_store.transfer.reader`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import Connection, Engine

from hermes_store.errors import (
    HermesStoreError,
    OutputExistsError,
    SessionNotFoundError,
    UsageError,
)
from hermes_store.paths import default_db_path
from hermes_store.transfer.parse import SYNTHETIC_USER_TEXT, strip_injected
from hermes_store.transfer.reader import StoreReader, content_text, iso_utc, sane_time
from hermes_store.transfer.redact import Redactor
from hermes_store.transfer.targets import cannot_write, open_in_place, plan_target
from hermes_store.version import __version__

__all__ = [
    "EXPORT_FORMAT", "FORMATS", "ExportOptions", "ExportResult", "TRACE_NAMESPACE",
    "export_sessions", "jsonable", "open_output", "plan_export",
]

FORMATS = ("jsonl", "md", "qmd", "html", "trace")
EXPORT_FORMAT = "hermes-store/jsonl"
EXPORT_VERSION = 1
EXPORTER = f"hermes-store {__version__}"
#: Trace uuids are UUIDv5(TRACE_NAMESPACE, "<session id>:<message id>"): stable across re-exports.
TRACE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://hermes-store/trace")
# Session columns that identify rather than describe; redaction leaves them alone.
_SESSION_KEYS = frozenset({"id", "parent_session_id"})
_DUMPS = {"ensure_ascii": False, "separators": (",", ":")}


@dataclass
class ExportOptions:
    """The flags of ``export`` that shape the output (selection is the caller's)."""

    format: str = "jsonl"
    #: ``"user-prompts"`` or None.
    only: str | None = None
    #: None = the format's default (on for ``trace`` only).
    redact: bool | None = None
    known_secrets: Sequence[str] = ()
    #: ``single`` or ``logical`` (md/qmd: one file per compression lineage).
    lineage: str = "single"
    force: bool = False
    reasoning: bool = True
    #: jsonl: False omits the ``attachments`` key (``--no-attachments``).
    attachments: bool = True
    #: Fixed export time (tests, reproducible bundles); default now.
    exported_at: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise UsageError(f"unknown export format {self.format!r} (use {', '.join(FORMATS)})")
        if self.only not in (None, "user-prompts"):
            raise UsageError(f"--only {self.only!r}: only 'user-prompts' is supported")
        if self.only and self.format not in ("jsonl", "md"):
            raise UsageError("--only user-prompts writes jsonl or md")
        if self.lineage not in ("single", "logical"):
            raise UsageError(f"--lineage {self.lineage!r}: use single or logical")
        if self.exported_at is None:
            self.exported_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    @property
    def redacting(self) -> bool:
        return self.format == "trace" if self.redact is None else self.redact


@dataclass
class ExportResult:
    """What was written: files (or ``-``), counts, and notes for stderr."""

    format: str
    sessions: int = 0
    messages: int = 0
    files: list[str] = field(default_factory=list)
    redacted: bool = False
    #: Per-category redaction counts (never the values).
    redaction_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    manifest: str | None = None


Progress = Callable[[str, int], None]


# --------------------------------------------------------------------------- values

def jsonable(value: Any) -> Any:
    """A stored cell as JSON: BLOBs (and undecodable text) as ``{"$b64"}``, NaN/inf as ``{"$float"}``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def dumps(obj: Any) -> str:
    return json.dumps(obj, **_DUMPS)  # type: ignore[arg-type]


class Scrub:
    """Applies the export's redaction policy to rows (a pass-through when redaction is off)."""

    def __init__(self, options: ExportOptions) -> None:
        self.on = options.redacting
        self.redactor = Redactor(options.known_secrets) if self.on else None

    @staticmethod
    def _scannable(row: dict[str, Any]) -> dict[str, Any]:
        # A raw (undecodable) cell would travel as base64 and hide a secret from the scan:
        # when redacting, it is read as text (bad bytes replaced) like everything else.
        return {k: v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v
                for k, v in row.items()}

    def session(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.redactor is None:
            return row
        out = self.redactor.redact_session_metadata(self._scannable(row))
        for key, value in out.items():
            if key not in _SESSION_KEYS and isinstance(value, str):
                out[key] = self.redactor.redact_value(value, key)
        return out

    def message(self, row: dict[str, Any]) -> dict[str, Any]:
        return row if self.redactor is None else self.redactor.redact_message(self._scannable(row))

    def text(self, value: str) -> str:
        return value if self.redactor is None else self.redactor.redact_text(value)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.redactor.counts) if self.redactor else {}


# --------------------------------------------------------------------------- output files

@contextlib.contextmanager
def open_output(path: Path | None, *, force: bool = False) -> Iterator[TextIO]:
    """Write to *path* through a temporary sibling renamed into place on success; None = stdout.

    An existing *path* is refused unless *force*; a special file (FIFO, device, socket) is
    written in place instead of replaced (:mod:`hermes_store.transfer.targets`). On any error the temporary file is
    removed and *path* is left as it was; a failed write is an OutputError naming *path*.
    """
    if path is None:
        try:
            yield sys.stdout
            sys.stdout.flush()
        except OSError as err:
            raise cannot_write("to standard output", err) from err
        return
    path, in_place = plan_target(path, force=force)
    if in_place:
        with open_in_place(path) as f:
            try:
                yield f
                f.flush()
            except OSError as err:
                raise cannot_write(path, err) from err
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, "w", encoding="utf-8", newline="\n")
    except OSError as err:
        raise cannot_write(path, err) from err
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException as err:
        f.close()
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and not isinstance(err, HermesStoreError):
            raise cannot_write(path, err) from err
        raise


def default_export_dir() -> Path:
    """``$HERMES_HOME/session-exports`` (beside the default store)."""
    return default_db_path().parent / "session-exports"


def is_dir_target(output: str | os.PathLike[str]) -> bool:
    text = os.fspath(output)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def slug(title: str | None, limit: int = 60) -> str:
    """File-name slug of a (redacted) title: lowercase words joined by ``-``."""
    if not title:
        return ""
    return re.sub(r"[^\w]+", "-", title.lower()).strip("-_")[:limit].strip("-_")


# --------------------------------------------------------------------------- entry point

def export_sessions(source: Connection | Engine, output: str | os.PathLike[str] | None,
                    session_ids: Sequence[str] | None = None,
                    options: ExportOptions | None = None, *,
                    progress: Progress | None = None) -> ExportResult:
    """Export the given sessions (None = every session, oldest start first) to *output*.

    *source* is the caller's connection (one read transaction for the whole export, a consistent
    snapshot) or an engine (one short read transaction per session, kinder to a live store).

    *output* is a file, a directory (existing, or a path ending in ``/``), or ``-`` for stdout
    (jsonl, trace and user-prompts only); None means the default directory for md/qmd.
    Raises :class:`UsageError` for an impossible target, :class:`OutputExistsError` for an
    existing file without ``force``, :class:`SessionNotFoundError` for an unknown id.
    """
    options = options or ExportOptions()
    reader = StoreReader.reflect(source)
    if session_ids is None:
        with reader.scope():
            ids = reader.session_ids()
    else:
        ids = list(dict.fromkeys(session_ids))
        with reader.scope():
            known = set(reader.existing_ids(ids))
        for sid in ids:
            if sid not in known:
                raise SessionNotFoundError(sid)
    scrub = Scrub(options)
    result = ExportResult(format=options.format, redacted=scrub.on)
    stdout = output is not None and os.fspath(output) == "-"
    if options.only == "user-prompts":
        _export_user_prompts(reader, ids, output, stdout, options, scrub, result, progress)
    elif options.format == "jsonl":
        target = _single_target(output, stdout, ids, "jsonl")
        with open_output(target, force=options.force) as out:
            for sid in ids:
                with reader.scope():
                    result.messages += _write_jsonl_session(reader, sid, out, options, scrub)
                result.sessions += 1
                tick(progress, sid, result.sessions)
        result.files.append("-" if target is None else str(target))
    elif options.format == "trace":
        _export_traces(reader, ids, output, stdout, options, scrub, result, progress)
    else:
        from hermes_store.transfer import documents

        if stdout:
            raise UsageError(f"{options.format} export needs a file or directory, not '-'")
        if options.format == "html":
            target = _single_target(output, False, ids, "html")
            assert target is not None
            documents.write_html(reader, ids, target, options, scrub, result, progress)
        else:
            documents.write_markdown(reader, ids, output, options, scrub, result, progress)
    result.redaction_counts = scrub.counts
    return result


def plan_export(source: Connection | Engine,
                session_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """What an export would cover (``--dry-run``): id, title, source, start and message count."""
    reader = StoreReader.reflect(source)
    with reader.scope():
        ids = reader.session_ids() if session_ids is None else reader.existing_ids(
            list(dict.fromkeys(session_ids)))
        plan = []
        for sid in ids:
            row = reader.session(sid) or {}
            count, _ = reader.message_stats(sid)
            plan.append({"id": sid, "title": row.get("title"), "source": row.get("source"),
                         "started_at": iso_utc(row.get("started_at")), "messages": count})
    return plan


def tick(progress: Progress | None, sid: str, n: int) -> None:
    if progress is not None:
        progress(sid, n)


def _single_target(output: str | os.PathLike[str] | None, stdout: bool, ids: Sequence[str],
                   ext: str, stem: str = "hermes_session") -> Path | None:
    if stdout:
        return None
    if output is None:
        raise UsageError(f"{ext} export needs an OUTPUT file or directory (or '-' for stdout)")
    if is_dir_target(output):
        name = f"{stem}_{ids[0]}.{ext}" if len(ids) == 1 else f"{stem}s.{ext}"
        return Path(output) / name
    return Path(output)


# --------------------------------------------------------------------------- jsonl

def _write_jsonl_session(reader: StoreReader, sid: str, out: TextIO, options: ExportOptions,
                         scrub: Scrub) -> int:
    """One line: the session's columns, then its messages streamed one by one, then the trailer."""
    row = reader.session(sid)
    if row is None:  # deleted since selection
        return 0
    lineage = reader.lineage_ids(sid)
    head = {k: jsonable(v) for k, v in scrub.session(row).items()}
    opening = dumps(head)
    out.write(opening[:-1] + ("," if len(opening) > 2 else "") + '"messages":[')
    count = 0
    first: float | None = None
    last: float | None = None
    for msg in reader.iter_messages(sid):
        ts = sane_time(msg.get("timestamp"))
        if ts is not None:
            first = ts if first is None else min(first, ts)
            last = ts if last is None else max(last, ts)
        cells = {k: jsonable(v) for k, v in scrub.message(msg).items()}
        out.write(("," if count else "") + dumps(cells))
        count += 1
    started = sane_time(row.get("started_at"))
    ended = sane_time(row.get("ended_at")) or last
    timings = {
        "first_message_at": iso_utc(first), "last_message_at": iso_utc(last),
        "wall_clock_ms": (round((ended - started) * 1000)
                          if started and ended and ended >= started else None),
    }
    # No attachment table exists yet, so the list is empty; the key keeps the format stable.
    trailer: dict[str, Any] = {"attachments": []} if options.attachments else {}
    trailer.update({
        "timings": timings,
        "_export": {"format": EXPORT_FORMAT, "version": EXPORT_VERSION,
                    "exported_at": options.exported_at, "exporter": EXPORTER,
                    "lineage_session_ids": lineage, "redacted": scrub.on},
    })
    out.write("]," + dumps(trailer)[1:] + "\n")
    return count


# --------------------------------------------------------------------------- user prompts

def _is_real_prompt(msg: dict[str, Any]) -> str | None:
    if msg.get("role") != "user":
        return None
    text = content_text(msg.get("content"))
    if not text.strip() or text == SYNTHETIC_USER_TEXT:
        return None
    rest, _ = strip_injected(text)
    return rest if rest.strip() else None


def iter_user_prompts(reader: StoreReader, sid: str, scrub: Scrub) -> Iterator[dict[str, Any]]:
    """§4.5 records of one session: real user messages only, numbered from 1."""
    index = 0
    for msg in reader.iter_messages(sid):
        text = _is_real_prompt(msg)
        if text is None:
            continue
        index += 1
        yield {"session_id": sid, "index": index, "created_at": iso_utc(msg.get("timestamp")),
               "role": "user", "text": scrub.text(text), "message_id": msg.get("id")}


def _export_user_prompts(reader: StoreReader, ids: Sequence[str], output: Any, stdout: bool,
                         options: ExportOptions, scrub: Scrub, result: ExportResult,
                         progress: Progress | None) -> None:
    ext = options.format
    if ext == "md" and stdout:
        raise UsageError("user-prompts as md needs a file or directory, not '-'")
    target = _single_target(output, stdout, ids, ext, stem="hermes_user_prompts")
    with open_output(target, force=options.force) as out:
        for sid in ids:
            with reader.scope():
                if ext == "md":
                    row = reader.session(sid) or {"id": sid}
                    title = scrub.session(row).get("title") or sid
                    out.write(f"## {title}\n\n`{sid}`\n\n")
                for rec in iter_user_prompts(reader, sid, scrub):
                    result.messages += 1
                    if ext == "md":
                        when = rec["created_at"] or "?"
                        out.write(f"### {rec['index']}. {when}\n\n{rec['text']}\n\n")
                    else:
                        out.write(dumps(rec) + "\n")
            result.sessions += 1
            tick(progress, sid, result.sessions)
    result.files.append("-" if target is None else str(target))


# --------------------------------------------------------------------------- trace

def _export_traces(reader: StoreReader, ids: Sequence[str], output: Any, stdout: bool,
                   options: ExportOptions, scrub: Scrub, result: ExportResult,
                   progress: Progress | None) -> None:
    if stdout:
        targets: list[tuple[str, Path | None]] = [(sid, None) for sid in ids]
    elif output is None:
        raise UsageError("trace export needs an OUTPUT file, directory or '-'")
    elif is_dir_target(output):
        targets = [(sid, Path(output) / f"{sid}.trace.jsonl") for sid in ids]
    elif len(ids) == 1:
        targets = [(ids[0], Path(output))]
    else:
        raise UsageError(f"trace of {len(ids)} sessions needs a directory (end OUTPUT with '/')")
    for _, target in targets:
        if target is not None and target.exists() and not options.force:
            raise OutputExistsError(str(target))
    borrowed = 0
    if stdout:
        with open_output(None) as out:
            for sid, _ in targets:
                with reader.scope():
                    n, b = _write_trace(reader, sid, out, options, scrub)
                result.messages, borrowed = result.messages + n, borrowed + b
                result.sessions += 1
                tick(progress, sid, result.sessions)
        result.files.append("-")
    else:
        for sid, target in targets:
            with open_output(target, force=options.force) as out, reader.scope():
                n, b = _write_trace(reader, sid, out, options, scrub)
            result.messages, borrowed = result.messages + n, borrowed + b
            result.sessions += 1
            result.files.append(str(target))
            tick(progress, sid, result.sessions)
    if borrowed:
        result.notes.append(f"{borrowed} message(s) had no usable time and reuse the previous one")


def parse_tool_calls(raw: Any) -> list[dict[str, Any]]:
    if raw in (None, "", b""):
        return []
    try:
        calls = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return [{"id": None, "name": "unknown", "arguments": raw}]
    if isinstance(calls, dict):
        calls = [calls]
    out = []
    for c in calls if isinstance(calls, list) else []:
        if not isinstance(c, dict):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else c
        out.append({"id": c.get("id") or c.get("call_id"), "name": fn.get("name") or "unknown",
                    "arguments": fn.get("arguments", fn.get("input"))})
    return out


def _tool_input(arguments: Any) -> Any:
    if isinstance(arguments, (dict, list)):
        return arguments
    if arguments is None:
        return {}
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return {"raw": arguments if isinstance(arguments, str) else str(arguments)}
    return parsed if isinstance(parsed, dict) else {"raw": arguments}


def _trace_message(msg: dict[str, Any], model: Any, reasoning: bool) -> dict[str, Any] | None:
    role = msg.get("role")
    text = content_text(msg.get("content"), image_text="[image omitted]")
    if role == "user":
        return {"role": "user", "content": text}
    if role == "tool":
        return {"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": msg.get("tool_call_id"), "content": text,
            "is_error": False}]}
    if role != "assistant":
        return None
    blocks: list[dict[str, Any]] = []
    thinking = msg.get("reasoning") or msg.get("reasoning_content")
    if reasoning and isinstance(thinking, str) and thinking.strip():
        blocks.append({"type": "thinking", "thinking": thinking})
    if text:
        blocks.append({"type": "text", "text": text})
    for call in parse_tool_calls(msg.get("tool_calls")):
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"],
                       "input": _tool_input(call["arguments"])})
    body: dict[str, Any] = {"role": "assistant"}
    if model:
        body["model"] = model
    body["content"] = blocks
    return body


def _write_trace(reader: StoreReader, sid: str, out: TextIO, options: ExportOptions,
                 scrub: Scrub) -> tuple[int, int]:
    """Claude Code JSONL lines of one session; returns (lines, rows that borrowed a time)."""
    row = reader.session(sid)
    if row is None:
        return 0, 0
    meta = scrub.session(row)
    envelope = {"isSidechain": False, "userType": "external", "cwd": meta.get("cwd"),
                "sessionId": sid, "version": EXPORTER, "gitBranch": meta.get("git_branch")}
    parent: str | None = None
    previous = sane_time(row.get("started_at"))
    lines = borrowed = 0
    for msg in reader.iter_messages(sid):
        body = _trace_message(scrub.message(msg), meta.get("model"), options.reasoning)
        if body is None:
            continue
        ts = sane_time(msg.get("timestamp"))
        if ts is None:
            ts, borrowed = previous, borrowed + 1
        previous = ts if ts is not None else previous
        uid = str(uuid.uuid5(TRACE_NAMESPACE, f"{sid}:{msg.get('id')}"))
        line = {"parentUuid": parent, **envelope, "uuid": uid,
                "timestamp": iso_utc(ts, millis=True),
                "type": "user" if body["role"] == "user" else "assistant",
                "message": body}
        out.write(dumps(line) + "\n")
        parent = uid
        lines += 1
    return lines, borrowed
