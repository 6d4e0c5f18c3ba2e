"""Exports (docs/formats.md#export): jsonl, md/qmd, html, trace and ``--only user-prompts``.

:func:`export_sessions` is the one entry point the CLI wraps. It reads through a caller-owned
connection (a read transaction the caller opened), streams session by session and message by
message, writes every file under a temporary name and renames it only when complete, never
overwrites without ``force``, and treats ``-`` as stdout. With redaction on, every value that
reaches an output (bodies, tool arguments, reasoning, metadata, front matter, ``<title>``,
manifest, file names) has been through one :class:`~hermes_store.transfer.redact.Redactor`.

The Markdown and HTML writers live in :mod:`hermes_store.transfer.documents`, what both share
(options, result, redaction, output files) in :mod:`hermes_store.transfer.output`; the reading
side in :mod:`hermes_store.transfer.reader`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import Connection, Engine

from hermes_store.content import calls_of, iso_utc, sane_time, text_of
from hermes_store.db.engine import store_file_mode
from hermes_store.errors import OutputExistsError, SessionNotFoundError, UsageError
from hermes_store.transfer import documents
from hermes_store.transfer.builder import SYNTHETIC_USER_TEXT
from hermes_store.transfer.cells import jsonable
from hermes_store.transfer.output import (
    EXPORTER,
    FORMATS,
    ExportOptions,
    ExportResult,
    Progress,
    Scrub,
    dumps,
    is_dir_target,
    open_output,
    tick,
)
from hermes_store.transfer.reader import StoreReader
from hermes_store.transfer.wrappers import strip_injected

__all__ = [
    "EXPORT_FORMAT", "FORMATS", "TRACE_NAMESPACE", "ExportOptions", "ExportResult",
    "export_sessions", "plan_export",
]

EXPORT_FORMAT = "hermes-store/jsonl"
EXPORT_VERSION = 1
#: Trace uuids are UUIDv5(TRACE_NAMESPACE, "<session id>:<message id>"): stable across re-exports.
TRACE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://hermes-store/trace")


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
    if options.file_mode is None:  # an export is as private as the store it came from
        engine = source if isinstance(source, Engine) else source.engine
        options = dataclasses.replace(options, file_mode=store_file_mode(engine))
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
        with open_output(target, force=options.force, mode=options.file_mode) as out:
            for sid in ids:
                with reader.scope():
                    result.messages += _write_jsonl_session(reader, sid, out, options, scrub)
                result.sessions += 1
                tick(progress, sid, result.sessions)
        result.files.append("-" if target is None else str(target))
    elif options.format == "trace":
        _export_traces(reader, ids, output, stdout, options, scrub, result, progress)
    else:
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
    text = text_of(msg.get("content"), display=True)
    if not text.strip() or text == SYNTHETIC_USER_TEXT:
        return None
    rest, _ = strip_injected(text)
    return rest if rest.strip() else None


def iter_user_prompts(reader: StoreReader, sid: str, scrub: Scrub) -> Iterator[dict[str, Any]]:
    """The docs/formats.md#user-prompts records of a session: real user messages, from 1."""
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
    with open_output(target, force=options.force, mode=options.file_mode) as out:
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
            with (open_output(target, force=options.force, mode=options.file_mode) as out,
                  reader.scope()):
                n, b = _write_trace(reader, sid, out, options, scrub)
            result.messages, borrowed = result.messages + n, borrowed + b
            result.sessions += 1
            result.files.append(str(target))
            tick(progress, sid, result.sessions)
    if borrowed:
        result.notes.append(f"{borrowed} message(s) had no usable time and reuse the previous one")


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
    text = text_of(msg.get("content"), display=True, image_text="[image omitted]")
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
    for call in calls_of(msg.get("tool_calls")):
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
