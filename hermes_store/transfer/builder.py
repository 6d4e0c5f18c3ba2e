"""A parsed foreign log before it is stored: :class:`ImportedSession`, and the
:class:`SessionBuilder` the Claude Code and Codex parsers fill while they walk a file.

Stdlib only and database-free. The builder settles what both formats share: timestamps (only
timezone-aware source times are trusted), wrapper stripping, attachments by hash, the synthetic
first user turn, title, identity (:func:`native_session_id`) and provenance.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermes_store.transfer.lines import ReadStats
from hermes_store.transfer.wrappers import strip_injected

__all__ = [
    "IMPORTER_VERSION", "SOURCE_CLAUDE", "SOURCE_CODEX", "SYNTHETIC_USER_TEXT", "ImportedSession",
    "SessionBuilder", "native_session_id", "parse_timestamp", "title_from_text",
]

SOURCE_CLAUDE = "claude-code"
SOURCE_CODEX = "codex-cli"
IMPORTER_VERSION = "1"
TITLE_CHARS = 60
SYNTHETIC_USER_TEXT = "[imported: the log opens with an assistant message]"


@dataclass
class ImportedSession:
    """One foreign session, parsed but not stored.

    ``messages`` rows carry the ``messages`` table columns (role, content, tool_call_id,
    tool_calls, tool_name, timestamp, reasoning, finish_reason, active, compacted) plus
    ``meta`` (flags: summary, synthetic, orphan, is_error, timestamp_borrowed, line…) and
    ``attachments`` (``[{sha256, media_type}]`` referring to :attr:`attachments`).
    """

    source: str
    path: str
    foreign_session_id: str | None = None
    native_id: str | None = None
    title: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    end_reason: str = "imported"
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: Deduplicated by hash: ``{sha256, media_type, bytes, size}``.
    attachments: list[dict[str, Any]] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    dropped_wrappers: int = 0
    malformed_lines: int = 0
    unknown_types: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    file_sha256: str = ""
    file_size: int = 0
    lines_read: int = 0
    lines_skipped: int = 0
    #: True when the file holds no JSON lines at all (skip it with a note).
    empty: bool = False

    @property
    def tool(self) -> str:
        """The identity namespace: same value as :attr:`source`."""
        return self.source

    @property
    def tool_call_count(self) -> int:
        return sum(len(m["tool_calls"] or ()) for m in self.messages)


# --------------------------------------------------------------------------- timestamps

_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_timestamp(value: Any) -> tuple[float | None, bool]:
    """Return ``(epoch, trusted)``; only timezone-aware ISO strings and epoch numbers are trusted.

    A naive ISO string still yields its value read as UTC, so a caller with nothing better can
    use it, but ``trusted`` is False.
    """
    if isinstance(value, bool) or value is None:
        return None, False
    if isinstance(value, (int, float)):
        epoch = float(value) / (1000.0 if value > 1e11 else 1.0)
        return (epoch, True) if epoch == epoch and abs(epoch) != float("inf") else (None, False)
    if not isinstance(value, str) or not value.strip():
        return None, False
    text = _LONG_FRACTION.sub(r"\1", value.strip())
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None, False
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC).timestamp(), False
    return dt.timestamp(), True


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


# --------------------------------------------------------------------------- identity

def native_session_id(tool: str, foreign_id: str, started_at: float) -> str:
    """``YYYYMMDD_HHMMSS_`` of the source start (UTC) + 8 hex of SHA-256(``tool:foreign_id``)."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(started_at))
    return f"{stamp}_{hashlib.sha256(f'{tool}:{foreign_id}'.encode()).hexdigest()[:8]}"


def _empty_row(role: str) -> dict[str, Any]:
    return {
        "role": role, "content": None, "tool_call_id": None, "tool_calls": None,
        "tool_name": None, "timestamp": None, "reasoning": None, "finish_reason": None,
        "active": 1, "compacted": 0, "meta": {}, "attachments": [],
    }


def title_from_text(text: str | None) -> str | None:
    """Whitespace-collapsed, cut to 60 characters; None when nothing is left."""
    if not text:
        return None
    flat = " ".join(text.split())
    return flat[:TITLE_CHARS].rstrip() or None


# --------------------------------------------------------------------------- builder

class _NaiveTime(float):
    """A time read from a string without a timezone: usable only as a last resort."""


class SessionBuilder:
    """Accumulates rows while a parser walks a file, then settles times, identity and provenance."""

    def __init__(self, source: str, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.session = ImportedSession(source=source, path=str(self.path.absolute()))
        self.rows = self.session.messages
        self.stats = ReadStats()
        self.calls: dict[str, str] = {}
        self.compactions = 0
        self._line_times: list[float] = []
        self._naive_times: list[float] = []
        self._attachment_index: dict[str, dict[str, Any]] = {}
        self.extra_provenance: dict[str, Any] = {}

    # ---------------------------------------------------------------- small facts
    def line_time(self, raw: Any) -> float | None:
        """Epoch of a source line, recorded for started/ended.

        A naive time comes back as :class:`_NaiveTime`: rows keep it only if the whole file
        has no tz-aware time, otherwise it is replaced by a neighbour's (see ``finish``).
        """
        epoch, trusted = parse_timestamp(raw)
        if epoch is None:
            return None
        if trusted:
            self._line_times.append(epoch)
            return epoch
        self._naive_times.append(epoch)
        return _NaiveTime(epoch)

    def unknown(self, kind: str) -> None:
        self.session.unknown_types[kind] = self.session.unknown_types.get(kind, 0) + 1

    def note(self, text: str) -> None:
        if text not in self.session.notes:
            self.session.notes.append(text)

    # ---------------------------------------------------------------- rows
    def add(self, role: str, content: str | None, timestamp: float | None, line: int,
            **fields: Any) -> dict[str, Any]:
        row = _empty_row(role)
        row["content"] = content
        row["timestamp"] = timestamp
        row["meta"]["line"] = line
        meta = fields.pop("meta", None)
        if meta:
            row["meta"].update(meta)
        row.update(fields)
        self.rows.append(row)
        return row

    def add_user_text(self, text: str, timestamp: float | None, line: int,
                      attachments: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """A user row after wrapper stripping; None (and counted) when only wrappers remained."""
        rest, removed = strip_injected(text)
        if not rest.strip() and not attachments:
            if removed:
                self.session.dropped_wrappers += 1
            else:
                self.note("empty user messages were skipped")
            return None
        return self.add("user", rest, timestamp, line, attachments=list(attachments or []))

    def add_tool_call(self, row: dict[str, Any], call_id: str | None, name: str | None,
                      arguments: Any) -> None:
        """Append an OpenAI-shaped call; ``arguments`` is always a JSON string."""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
        call_id = call_id or f"call_import_{len(self.rows)}_{len(row['tool_calls'] or ())}"
        name = name or "unknown"
        row["tool_calls"] = (row["tool_calls"] or []) + [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ]
        self.calls[call_id] = name

    def add_tool_result(self, call_id: str | None, content: str, timestamp: float | None,
                        line: int, meta: dict[str, Any] | None = None,
                        attachments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A ``tool`` row paired by ID; a result whose call never appeared is kept and marked."""
        meta = dict(meta or {})
        name = self.calls.get(call_id) if call_id else None
        if name is None:
            meta["orphan"] = True
        return self.add("tool", content, timestamp, line, tool_call_id=call_id, tool_name=name,
                        meta=meta, attachments=list(attachments or []))

    def compact(self) -> None:
        """A compaction boundary: every row so far leaves the active context but is kept."""
        self.compactions += 1
        for row in self.rows:
            row["active"], row["compacted"] = 0, 1

    def add_summary(self, text: str, timestamp: float | None, line: int,
                    meta: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.add("system", text, timestamp, line, meta={"summary": True, **(meta or {})})

    # ---------------------------------------------------------------- attachments
    def add_image(self, data_b64: str | None, media_type: str | None) -> dict[str, Any] | None:
        """Store decoded bytes once by SHA-256; return the row reference, or None if undecodable."""
        if not isinstance(data_b64, str) or not data_b64:
            return None
        try:
            data = base64.b64decode(data_b64, validate=False)
        except (binascii.Error, ValueError):
            self.note("an image could not be decoded and was kept as [image] only")
            return None
        digest = hashlib.sha256(data).hexdigest()
        media_type = media_type or "application/octet-stream"
        if digest not in self._attachment_index:
            record = {"sha256": digest, "media_type": media_type, "bytes": data, "size": len(data)}
            self._attachment_index[digest] = record
            self.session.attachments.append(record)
        return {"sha256": digest, "media_type": media_type}

    def add_image_url(self, url: Any) -> dict[str, Any] | None:
        """``data:`` URLs become attachments; remote URLs are noted, never fetched."""
        if not isinstance(url, str):
            return None
        m = re.match(r"data:([\w.+\-/]+)?(?:;[\w=\-]+)*;base64,", url)
        if m:
            return self.add_image(url[m.end():], m.group(1))
        self.note("remote image URLs were not fetched; their rows keep [image]")
        return None

    # ---------------------------------------------------------------- settle
    def finish(self, foreign_id: str | None, title: str | None) -> ImportedSession:
        s, st = self.session, self.stats
        s.foreign_session_id = foreign_id
        s.file_sha256, s.file_size = st.sha256, st.size
        s.lines_read, s.lines_skipped, s.malformed_lines = st.lines_read, st.skipped, st.malformed
        s.empty = st.lines_read == 0
        if s.empty:
            self.note("empty file")
        self._drop_empty_assistant_rows()
        self._insert_synthetic_user()
        policy = self._settle_times()
        s.title = title_from_text(title) or self._first_user_title()
        if foreign_id and s.started_at is not None:
            s.native_id = native_session_id(s.source, foreign_id, s.started_at)
        s.provenance = self._provenance(policy)
        return s

    def _drop_empty_assistant_rows(self) -> None:
        self.rows[:] = [
            r for r in self.rows
            if not (r["role"] == "assistant" and not r["content"] and not r["tool_calls"]
                    and not r["reasoning"])
        ]

    def _insert_synthetic_user(self) -> None:
        # Providers need a user turn first; a log that opens mid-conversation gets one, flagged.
        first = next((i for i, r in enumerate(self.rows) if r["role"] != "system"), None)
        if first is None or self.rows[first]["role"] == "user":
            return
        follower = self.rows[first]
        row = _empty_row("user")
        row.update(content=SYNTHETIC_USER_TEXT, timestamp=follower["timestamp"],
                   active=follower["active"], compacted=follower["compacted"])
        row["meta"] = {"synthetic": True, "line": follower["meta"].get("line")}
        self.rows.insert(first, row)

    def _settle_times(self) -> dict[str, Any]:
        s = self.session
        policy: dict[str, Any] = {"rule": "tz-aware source times only; others borrow a neighbour's"}
        line_times = self._line_times
        if not line_times and self._naive_times:
            line_times = self._naive_times
            policy["fallback"] = "no tz-aware time in the file: naive times read as UTC"
            self.note(policy["fallback"])
        if line_times:
            s.started_at, s.ended_at = min(line_times), max(line_times)
        elif s.lines_read:
            s.started_at = s.ended_at = self.path.stat().st_mtime
            policy["fallback"] = "no source times: file mtime used"
            self.note(policy["fallback"])
        for row in self.rows:
            if isinstance(row["timestamp"], _NaiveTime):
                row["timestamp"] = (float(row["timestamp"]) if line_times is self._naive_times
                                    else None)
        borrowed = 0
        prev: float | None = None
        for row in self.rows:
            if row["timestamp"] is None:
                row["timestamp"] = prev
                row["meta"]["timestamp_borrowed"] = True
                borrowed += 1
            prev = row["timestamp"] if row["timestamp"] is not None else prev
        nxt: float | None = s.ended_at
        for row in reversed(self.rows):  # leading rows with no earlier neighbour take the next one
            if row["timestamp"] is None:
                row["timestamp"] = nxt
            nxt = row["timestamp"]
        policy["borrowed"] = borrowed
        if borrowed:
            self.note(f"{borrowed} message(s) had no tz-aware time and borrowed a neighbour's")
        return policy

    def _first_user_title(self) -> str | None:
        for row in self.rows:
            if row["role"] == "user" and not row["meta"].get("synthetic") and row["content"]:
                return title_from_text(row["content"])
        return None

    def _provenance(self, policy: dict[str, Any]) -> dict[str, Any]:
        s, st = self.session, self.stats
        return {
            "tool": s.source, "path": s.path, "foreign_session_id": s.foreign_session_id,
            "file_sha256": st.sha256, "file_size": st.size, "consumed_bytes": st.consumed_bytes,
            "lines_read": st.lines_read, "lines_skipped": st.skipped,
            "malformed_lines": st.malformed, "oversize_lines": st.oversize,
            "bad_utf8_lines": st.bad_utf8, "incomplete_tail": st.incomplete_tail,
            "imported_at": _iso(time.time()), "importer_version": IMPORTER_VERSION,
            "source_started_at": _iso(s.started_at), "source_ended_at": _iso(s.ended_at),
            "timestamp_policy": policy, "compactions": self.compactions,
            "dropped_wrappers": s.dropped_wrappers, "unknown_types": dict(s.unknown_types),
            **self.extra_provenance,
        }
