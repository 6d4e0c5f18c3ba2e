"""The database side of ``import`` (docs/formats.md#import): our jsonl, Claude Code and Codex logs.

Parsing is :mod:`hermes_store.transfer.parse`' job; this module decides and writes.

* **jsonl** (our docs/formats.md#jsonl backup, and ``hermes sessions export``): each line is its own
  transaction, so one bad line never costs the others. An existing id is skipped and counted
  (``replace`` overwrites it), live state (routing keys, leases, ``last_read_at``) is reset,
  message ids are kept when free so a round trip is exact, and parent links are restored after
  the whole file is in (skipped records included, so a rerun repairs an interrupted import;
  a link already set is never overwritten), detached when the parent is missing or would close
  a cycle.
* **claude / codex**: one transaction per file through :func:`engine.run_write`. Identity is
  (tool, foreign session id) recorded in ``sessions.origin_json.imported_from`` with the file's
  SHA-256: unchanged → "already imported" and nothing written; grown by appending → only the new
  messages are added; otherwise changed → skipped with a note unless ``replace``.

Messages are written through :func:`hermes_store.repo.messages.append_many`, the append path
every message takes: counters and the CJK index change in the same transaction as the rows.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, insert, or_, select, update

from hermes_store.content import encode_content, encode_tool_calls
from hermes_store.db import catalog
from hermes_store.db.engine import APPEND_BUDGET_S, reading, run_write
from hermes_store.db.models import SESSIONS
from hermes_store.errors import (
    SchemaMismatchError,
    StoreBusyError,
    StoreDamagedError,
    StoreFullError,
    StoreReplacedError,
    UsageError,
)
from hermes_store.repo import lineage, prompts
from hermes_store.repo import messages as message_repo
from hermes_store.repo.titles import MAX_TITLE_LENGTH, sanitize_title
from hermes_store.transfer.builder import ImportedSession
from hermes_store.transfer.cells import stored_cell
from hermes_store.transfer.lines import ReadStats, iter_json_lines, sha256_prefix
from hermes_store.transfer.parse import detect_format, parse_claude, parse_codex

__all__ = ["FileImportSummary", "ImportResult", "LIVE_STATE_COLUMNS", "import_paths"]

#: Columns describing a live process (routing, leases, read markers): meaningless in another store.
LIVE_STATE_COLUMNS = frozenset({
    "session_key", "thread_id", "last_read_at", "handoff_state", "handoff_platform",
    "handoff_error", "expiry_finalized", "lease_owner", "lease_expires_at", "lease_token",
    "compression_failure_cooldown_until",
})
_RECORD_KEYS = frozenset({"messages", "attachments", "timings", "_export"})
_COUNTERS = ("message_count", "tool_call_count")
#: Failures of the store itself, not of one file or line: every later write would fail the same
#: way, so they stop the import instead of being recorded against each remaining input.
_STORE_FAILURES = (StoreFullError, StoreDamagedError, StoreReplacedError, StoreBusyError,
                   SchemaMismatchError)

Progress = Callable[[str, "FileImportSummary"], None]


@dataclass
class FileImportSummary:
    """What happened to one file.

    ``status``: imported, appended, replaced, already_imported, skipped (changed, or every
    session already present), empty, failed, or with ``dry_run`` the same words the real run
    would produce.
    """

    path: str
    format: str | None = None
    status: str = "failed"
    session_ids: list[str] = field(default_factory=list)
    sessions_imported: int = 0
    sessions_skipped: int = 0
    sessions_failed: int = 0
    messages_imported: int = 0
    malformed_lines: int = 0
    dropped_wrappers: int = 0
    parents_detached: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class ImportResult:
    files: list[FileImportSummary] = field(default_factory=list)
    dry_run: bool = False

    def _sum(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.files)

    @property
    def sessions_imported(self) -> int:
        return self._sum("sessions_imported")

    @property
    def sessions_skipped(self) -> int:
        return self._sum("sessions_skipped")

    @property
    def messages_imported(self) -> int:
        return self._sum("messages_imported")

    @property
    def malformed_lines(self) -> int:
        return self._sum("malformed_lines")

    @property
    def dropped_wrappers(self) -> int:
        return self._sum("dropped_wrappers")

    @property
    def failed(self) -> list[FileImportSummary]:
        return [f for f in self.files if f.status == "failed" or f.sessions_failed]

    @property
    def exit_code(self) -> int:
        """0, or 8 (partial success) when some file or line failed."""
        return 8 if self.failed else 0


def import_paths(engine: Engine, paths: Iterable[str | os.PathLike[str]], *,
                 kind: str | None = None, replace: bool = False, dry_run: bool = False,
                 progress: Progress | None = None) -> ImportResult:
    """Import each file (format *kind*, else detected); one file's failure never stops the batch.

    A failure of the store itself (full, damaged, replaced, busy past the budget, wrong schema)
    is raised: it is not the file's fault and would fail every remaining file too.
    """
    if kind not in (None, "jsonl", "claude", "codex"):
        raise UsageError(f"--from {kind!r}: use claude, codex or jsonl")
    result = ImportResult(dry_run=dry_run)
    for raw in paths:
        path = Path(raw)
        summary = FileImportSummary(path=str(path))
        try:
            fmt = kind or detect_format(path)
            summary.format = fmt
            if not path.is_file():
                summary.error = "no such file"
            elif fmt is None:
                summary.error = "cannot tell the format of this file; use --from claude|codex|jsonl"
            elif fmt == "jsonl":
                _import_jsonl(engine, path, summary, replace=replace, dry_run=dry_run)
            else:
                _import_foreign(engine, path, fmt, summary, replace=replace, dry_run=dry_run)
        except _STORE_FAILURES:
            raise
        except Exception as err:  # noqa: BLE001 - isolate per file, reported in the summary
            summary.status, summary.error = "failed", f"{type(err).__name__}: {err}"
        if summary.error and summary.status != "failed":
            summary.status = "failed"
        result.files.append(summary)
        if progress is not None:
            progress(str(path), summary)
    return result


# --------------------------------------------------------------------------- shared writes

def _reflect(conn: Connection) -> tuple[Table, Table]:
    return catalog.reflect(conn, "sessions"), catalog.reflect(conn, "messages")


def _append(conn: Connection, messages: Table, rows: list[dict[str, Any]],
            keep_ids: bool) -> None:
    message_repo.append_many(conn, [message_repo.stored_message(r) for r in rows],
                             into=messages, keep_ids=keep_ids)


def _unique_title(conn: Connection, sessions: Table, title: Any, sid: str) -> Any:
    """A title held by another session gets `` (2)``, `` (3)``… (titles are unique)."""
    if not isinstance(title, str):
        return title
    try:
        title = sanitize_title(title)
    except ValueError:
        title = title[:MAX_TITLE_LENGTH]
    if title is None:
        return None
    candidate, n = title, 1
    while conn.scalar(select(sessions.c.id).where(sessions.c.title == candidate,
                                                  sessions.c.id != sid).limit(1)) is not None:
        n += 1
        suffix = f" ({n})"
        candidate = title[:MAX_TITLE_LENGTH - len(suffix)] + suffix
    return candidate


# --------------------------------------------------------------------------- jsonl

def _import_jsonl(engine: Engine, path: Path, summary: FileImportSummary, *, replace: bool,
                  dry_run: bool) -> None:
    stats = ReadStats()
    with reading(engine) as conn:
        sessions, messages = _reflect(conn)
    dropped_cols: set[str] = set()
    links: list[tuple[str, str]] = []
    for lineno, record in iter_json_lines(path, stats):
        sid = record.get("id")
        if not isinstance(sid, str) or not sid or not isinstance(record.get("messages"), list):
            summary.sessions_failed += 1
            summary.notes.append(f"line {lineno}: not a session record (needs id and messages)")
            continue
        try:
            if dry_run:
                with reading(engine) as conn:
                    exists = conn.scalar(select(sessions.c.id).where(sessions.c.id == sid))
                outcome = "skipped" if exists and not replace else "imported"
            else:
                outcome = run_write(
                    engine, functools.partial(_write_record, sessions=sessions, messages=messages,
                                              record=record, replace=replace,
                                              dropped_cols=dropped_cols),
                    budget=APPEND_BUDGET_S, what=f"import {sid}")
        except _STORE_FAILURES:
            raise
        except Exception as err:  # noqa: BLE001 - one line never costs the others
            summary.sessions_failed += 1
            summary.notes.append(f"line {lineno} ({sid}): {type(err).__name__}: {err}")
            continue
        # A skipped record's link is collected too: a run killed between its per-record commits
        # and the link pass left its sessions unlinked, and only a rerun can restore them.
        parent = record.get("parent_session_id")
        if isinstance(parent, str) and parent:
            links.append((sid, parent))
        if outcome == "skipped":
            summary.sessions_skipped += 1
            continue
        summary.sessions_imported += 1
        summary.session_ids.append(sid)
        summary.messages_imported += len(record["messages"])
    summary.malformed_lines = stats.malformed + stats.oversize
    if links and not dry_run:
        summary.parents_detached = run_write(
            engine, lambda conn: _link_parents(conn, sessions, links), what="import parent links")
    if dropped_cols:
        summary.notes.append("columns this store does not have were left out: "
                             + ", ".join(sorted(dropped_cols)))
    if summary.parents_detached:
        summary.notes.append(f"{summary.parents_detached} session(s) detached: parent missing "
                             "or part of a cycle")
    if stats.lines_read == 0:
        summary.status = "empty"
        summary.notes.append("empty file")
    elif summary.sessions_imported:
        summary.status = "imported"
    elif summary.sessions_failed and not summary.sessions_skipped:
        summary.status = "failed"
        summary.error = "no line could be imported"
    else:
        summary.status = "skipped"


def _write_record(conn: Connection, sessions: Table, messages: Table, record: dict[str, Any],
                  replace: bool, dropped_cols: set[str]) -> str:
    sid = record["id"]
    exists = conn.scalar(select(sessions.c.id).where(sessions.c.id == sid)) is not None
    if exists and not replace:
        return "skipped"
    row: dict[str, Any] = {}
    for key, value in record.items():
        if key in _RECORD_KEYS or key in LIVE_STATE_COLUMNS:
            continue
        if key not in sessions.c:
            dropped_cols.add(f"sessions.{key}")
            continue
        row[key] = stored_cell(value, column=key)
    # A backup restores what the store held (the agent's own stores carry counters that do not
    # match a recount, and adoption keeps them too); only a counter the record lacks is counted.
    held = {k: row[k] for k in _COUNTERS if _is_count(row.get(k))}
    row.update(dict.fromkeys(_COUNTERS, 0))
    # Parents are linked once the whole file is in: a continuation may precede its parent.
    row["parent_session_id"] = None
    if "root_session_id" in sessions.c:
        row["root_session_id"] = sid  # a root until linked (the record's may be stale)
    row["title"] = _unique_title(conn, sessions, row.get("title"), sid)
    if exists:
        message_repo.clear(conn, sid)
        conn.execute(update(sessions).where(sessions.c.id == sid).values(
            **{k: v for k, v in row.items() if k != "id"}))
    else:
        conn.execute(insert(sessions).values(**row))
    rows = []
    for msg in record["messages"]:
        if not isinstance(msg, dict):
            raise ValueError("a message is not an object")
        out: dict[str, Any] = {}
        for key, value in msg.items():
            if key not in messages.c:
                dropped_cols.add(f"messages.{key}")
            elif key not in LIVE_STATE_COLUMNS:
                out[key] = stored_cell(value, column=key)
        out["session_id"] = sid
        rows.append(out)
    _append(conn, messages, rows, keep_ids=True)
    if held:
        conn.execute(update(sessions).where(sessions.c.id == sid).values(**held))
    prompts.move(conn, [sid])
    return "replaced" if exists else "imported"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _link_parents(conn: Connection, sessions: Table, links: list[tuple[str, str]]) -> int:
    """Link each session still without a parent; an existing link is never overwritten."""
    detached = 0
    for sid, parent in links:
        linked = conn.execute(select(sessions.c.parent_session_id)
                              .where(sessions.c.id == sid)).first()
        if linked is None or linked.parent_session_id is not None:
            continue
        seen = {sid}
        current: str | None = parent
        ok = conn.scalar(select(sessions.c.id).where(sessions.c.id == parent)) is not None
        while ok and current is not None:
            if current in seen:
                ok = False
                break
            seen.add(current)
            current = conn.scalar(select(sessions.c.parent_session_id)
                                  .where(sessions.c.id == current))
        if ok:
            rooted = "root_session_id" in sessions.c
            below = lineage.subtree(conn, sid) if rooted else []
            conn.execute(update(sessions).where(sessions.c.id == sid,
                                                sessions.c.parent_session_id.is_(None))
                         .values(parent_session_id=parent))
            if rooted:
                lineage.reroot(conn, sid, below)
        else:
            detached += 1
    return detached


# --------------------------------------------------------------------------- claude / codex

def _provenance_of(origin: Any) -> dict[str, Any] | None:
    try:
        data = json.loads(origin) if isinstance(origin, str) else None
    except ValueError:
        return None
    prov = data.get("imported_from") if isinstance(data, dict) else None
    return prov if isinstance(prov, dict) else None


def _find_imported(conn: Connection, parsed: ImportedSession) -> tuple[str, dict[str, Any]] | None:
    """The session already imported from (tool, foreign id), with its provenance."""
    s = SESSIONS.c
    row = conn.execute(select(s.id, s.origin_json).where(s.id == parsed.native_id)).first()
    prov = _provenance_of(row.origin_json) if row else None
    if row and prov and prov.get("foreign_session_id") == parsed.foreign_session_id:
        return row.id, prov
    # The native id embeds the start time; look the key up by value in case that moved. The
    # JSON is read here, not in SQL: the backends share no JSON function that tolerates a
    # cell which is not JSON. Its text narrows the scan, spelt as either encoder writes it.
    foreign = parsed.foreign_session_id
    if foreign is None:  # as SQL's NULL, matches nothing
        return None
    spellings = {json.dumps(foreign), json.dumps(foreign, ensure_ascii=False)}
    for sid, origin in conn.execute(
        select(s.id, s.origin_json).where(
            s.source == parsed.source,
            or_(*(s.origin_json.contains(spelt, autoescape=True) for spelt in spellings)),
        )
    ):
        prov = _provenance_of(origin)
        if prov and prov.get("tool") == parsed.tool \
                and prov.get("foreign_session_id") == foreign:
            return sid, prov
    return None


def _message_rows(parsed: ImportedSession, sid: str, start: int = 0) -> list[dict[str, Any]]:
    keys = ("role", "content", "tool_call_id", "tool_name", "timestamp", "reasoning",
            "finish_reason", "active", "compacted")
    out = []
    for m in parsed.messages[start:]:
        row = {k: m.get(k) for k in keys}
        row["session_id"] = sid
        row["content"] = encode_content(m.get("content"))
        row["tool_calls"], _ = encode_tool_calls(m.get("tool_calls"))
        out.append(row)
    return out


def _origin(parsed: ImportedSession) -> str:
    prov = dict(parsed.provenance)
    prov["messages_imported"] = len(parsed.messages)
    prov["attachments"] = [{k: a[k] for k in ("sha256", "media_type", "size") if k in a}
                           for a in parsed.attachments]
    prov["notes"] = list(parsed.notes)
    return json.dumps({"imported_from": prov}, ensure_ascii=False)


def _session_values(parsed: ImportedSession) -> dict[str, Any]:
    return {
        "source": parsed.source, "cwd": parsed.cwd, "git_branch": parsed.git_branch,
        "model": parsed.model, "system_prompt": parsed.system_prompt,
        "started_at": parsed.started_at, "ended_at": parsed.ended_at,
        "end_reason": parsed.end_reason, "input_tokens": parsed.input_tokens,
        "output_tokens": parsed.output_tokens, "cache_read_tokens": parsed.cache_read_tokens,
        "cache_write_tokens": parsed.cache_write_tokens, "reasoning_tokens": parsed.reasoning_tokens,
        "origin_json": _origin(parsed),
    }


def _import_foreign(engine: Engine, path: Path, fmt: str, summary: FileImportSummary, *,
                    replace: bool, dry_run: bool) -> None:
    parsed = parse_claude(path) if fmt == "claude" else parse_codex(path)
    summary.malformed_lines = parsed.lines_skipped  # malformed plus over-long lines
    summary.dropped_wrappers = parsed.dropped_wrappers
    summary.notes.extend(parsed.notes)
    if parsed.empty:
        summary.status = "empty"
        return
    if not parsed.native_id or parsed.started_at is None:
        summary.error = "no session id or time found in the file"
        return
    with reading(engine) as conn:
        found = _find_imported(conn, parsed)
    plan = "insert"
    if found is not None:
        sid, prov = found
        prev_n = int(prov.get("messages_imported") or 0)
        prev_size = int(prov.get("file_size") or 0)
        if prov.get("file_sha256") == parsed.file_sha256:
            plan = "already_imported"
        elif (parsed.file_size > prev_size and len(parsed.messages) >= prev_n
              and sha256_prefix(path, prev_size) == prov.get("file_sha256")):
            plan = "append"
        elif replace:
            plan = "replace"
        else:
            plan = "skip_changed"
    target = found[0] if found else parsed.native_id
    summary.session_ids = [target]
    if plan == "already_imported":
        summary.status, summary.sessions_skipped = "already_imported", 1
        summary.notes.append("already imported")
        return
    if plan == "skip_changed":
        summary.status, summary.sessions_skipped = "skipped", 1
        summary.notes.append("the file changed since it was imported (not by appending); "
                             "use --replace to rewrite that session")
        return
    expected = found[1].get("file_sha256") if found else None
    if dry_run:
        already = int(found[1].get("messages_imported") or 0) if found and plan == "append" else 0
        summary.messages_imported = len(parsed.messages) - already
    else:
        summary.messages_imported = run_write(
            engine, lambda conn: _write_foreign(conn, parsed, target, plan, expected),
            budget=APPEND_BUDGET_S, what=f"import {path.name}")
    summary.sessions_imported = 1
    summary.status = {"insert": "imported", "append": "appended", "replace": "replaced"}[plan]


def _write_foreign(conn: Connection, parsed: ImportedSession, sid: str, plan: str,
                   expected_sha: str | None) -> int:
    _, messages = _reflect(conn)
    s = SESSIONS.c
    values = _session_values(parsed)
    if plan == "insert":
        if conn.scalar(select(s.id).where(s.id == sid)) is not None:
            raise ValueError(f"session {sid} already exists and was not imported from this log")
        values["title"] = _unique_title(conn, SESSIONS, parsed.title, sid)
        rows = _message_rows(parsed, sid)
        conn.execute(insert(SESSIONS).values(id=sid, message_count=0, tool_call_count=0,
                                             **values))
        prompts.move(conn, [sid])
        _append(conn, messages, rows, keep_ids=False)
        return len(rows)
    current = _provenance_of(conn.scalar(select(s.origin_json).where(s.id == sid)))
    if current is None or current.get("file_sha256") != expected_sha:
        raise ValueError("the session changed while this file was being read; run the import again")
    if plan == "replace":
        message_repo.clear(conn, sid)
        rows = _message_rows(parsed, sid)
        values["title"] = _unique_title(conn, SESSIONS, parsed.title, sid)
        conn.execute(update(SESSIONS).where(s.id == sid).values(**values))
        prompts.move(conn, [sid])
        _append(conn, messages, rows, keep_ids=False)
        return len(rows)
    prev_n = int(current.get("messages_imported") or 0)
    _refresh_flags(conn, messages, sid, parsed, prev_n)
    rows = _message_rows(parsed, sid, prev_n)
    conn.execute(update(SESSIONS).where(s.id == sid).values(
        **{k: v for k, v in values.items() if k not in ("started_at", "system_prompt")}))
    _append(conn, messages, rows, keep_ids=False)
    # After the append the rows are exactly the parsed ones, so the parsed total is the count
    # (it also covers a call merged into the previously last row).
    conn.execute(update(SESSIONS).where(s.id == sid)
                 .values(tool_call_count=parsed.tool_call_count))
    return len(rows)


def _refresh_flags(conn: Connection, messages: Table, sid: str, parsed: ImportedSession,
                   prev_n: int) -> None:
    """A compaction in the appended part retires earlier rows: carry their new flags over."""
    m = messages.c
    existing = conn.execute(select(m.id, m.active, m.compacted).where(m.session_id == sid)
                            .order_by(m.id).limit(prev_n)).all()
    # The store and the log need not hold equally many of the first prev_n rows.
    for (mid, active, compacted), new in zip(existing, parsed.messages[:prev_n], strict=False):
        if (active, compacted) != (new["active"], new["compacted"]):
            conn.execute(update(messages).where(m.id == mid)
                         .values(active=new["active"], compacted=new["compacted"]))
    if existing and len(existing) == prev_n:
        # A streamed assistant message split across the append boundary grew its last row.
        last_id = existing[-1][0]
        (fresh,) = _message_rows(parsed, sid, prev_n - 1)[:1] or (None,)
        if fresh is not None:
            stored = conn.execute(select(m.content, m.tool_calls, m.reasoning)
                                  .where(m.id == last_id)).one()
            if tuple(stored) != (fresh["content"], fresh["tool_calls"], fresh["reasoning"]):
                conn.execute(update(messages).where(m.id == last_id).values(
                    content=fresh["content"], tool_calls=fresh["tool_calls"],
                    reasoning=fresh["reasoning"]))
