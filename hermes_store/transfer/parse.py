"""Foreign agent logs → neutral session records (docs/formats.md#import).

Stdlib only and database-free: this module reads Claude Code and Codex CLI JSONL files and returns
:class:`ImportedSession` objects whose ``messages`` match the columns of our ``messages`` table.
Writing them (one transaction per file, dedup on (tool, foreign session id) + file hash) is the
repository layer's job.

The shared pieces live here: robust line reading, timestamps, wrapper stripping, detection,
discovery, identity and the :class:`SessionBuilder` both format parsers fill. The per-format rules
live in :mod:`hermes_store.transfer.parse_claude` and :mod:`hermes_store.transfer.parse_codex`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "IMPORTER_VERSION", "MAX_LINE_BYTES", "SOURCE_CLAUDE", "SOURCE_CODEX", "WRAPPER_TAGS",
    "ImportedSession", "ReadStats", "SessionBuilder", "default_root", "detect_format", "discover",
    "iter_json_lines", "native_session_id", "parse_claude", "parse_codex", "parse_file",
    "parse_timestamp", "sha256_prefix", "strip_injected",
]

SOURCE_CLAUDE = "claude-code"
SOURCE_CODEX = "codex-cli"
IMPORTER_VERSION = "1"
#: A single JSONL line above this is skipped (and counted) instead of being held in memory.
MAX_LINE_BYTES = 64 * 1024 * 1024
TITLE_CHARS = 60
SYNTHETIC_USER_TEXT = "[imported: the log opens with an assistant message]"

Format = Literal["claude", "codex", "jsonl"]


# --------------------------------------------------------------------------- records

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


@dataclass
class ReadStats:
    """What :func:`iter_json_lines` saw; ``sha256`` is final once the iterator is exhausted."""

    lines_read: int = 0
    malformed: int = 0
    oversize: int = 0
    bad_utf8: int = 0
    incomplete_tail: bool = False
    size: int = 0
    consumed_bytes: int = 0
    sha256: str = ""

    @property
    def skipped(self) -> int:
        return self.malformed + self.oversize


# --------------------------------------------------------------------------- reading

def _decode(raw: bytes, stats: ReadStats) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.bad_utf8 += 1
        text = raw.decode("utf-8", errors="replace")
    return text.lstrip("\ufeff")


def _loads(raw: bytes, stats: ReadStats) -> dict[str, Any] | None:
    try:
        obj = json.loads(_decode(raw, stats))
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def iter_json_lines(
    path: str | os.PathLike[str], stats: ReadStats, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each JSON-object line, never loading the whole file.

    Bad UTF-8 is replaced, malformed lines are counted and skipped, over-long lines are drained
    and counted, and an unterminated final line that does not parse is treated as a write in
    progress: ignored, not malformed.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        lineno = 0
        while raw := f.readline(max_line_bytes + 1):
            digest.update(raw)
            stats.size += len(raw)
            lineno += 1
            terminated = raw.endswith(b"\n")
            if not terminated and len(raw) > max_line_bytes:
                stats.oversize += 1
                _drain_line(f, digest, stats)
                continue
            if not raw.strip():
                continue
            obj = _loads(raw, stats)
            if obj is None and not terminated:
                stats.incomplete_tail = True
                continue
            stats.lines_read += 1
            if obj is None:
                stats.malformed += 1
                continue
            stats.consumed_bytes = stats.size
            yield lineno, obj
    stats.sha256 = digest.hexdigest()


def _drain_line(f: Any, digest: Any, stats: ReadStats) -> None:
    while chunk := f.readline(1 << 20):
        digest.update(chunk)
        stats.size += len(chunk)
        if chunk.endswith(b"\n"):
            return


def sha256_prefix(path: str | os.PathLike[str], size: int) -> str:
    """SHA-256 of the first *size* bytes: tells an appended-to file from a rewritten one."""
    digest = hashlib.sha256()
    remaining = size
    with open(path, "rb") as f:
        while remaining > 0 and (chunk := f.read(min(remaining, 1 << 20))):
            digest.update(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


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
        return dt.replace(tzinfo=timezone.utc).timestamp(), False
    return dt.timestamp(), True


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


# --------------------------------------------------------------------------- injected wrappers

WRAPPER_TAGS: tuple[str, ...] = (
    "user_instructions", "environment_context", "recommended_plugins", "skills_instructions",
    "permissions instructions", "permissions_instructions", "turn_context", "INSTRUCTIONS",
    "command-name", "command-message", "command-args", "local-command-stdout",
    "local-command-stderr", "system-reminder", "task-notification",
)
# Longest first, so "permissions instructions" wins over a shorter prefix.
_OPEN_TAG = re.compile(
    r"<(?P<tag>" + "|".join(map(re.escape, sorted(WRAPPER_TAGS, key=len, reverse=True)))
    + r")(?:\s[^<>]*)?>"
)
_CLOSE_TAG = {tag: re.compile(rf"</{re.escape(tag)}\s*>") for tag in WRAPPER_TAGS}
# Codex prepends the AGENTS.md file as a user message; the agent's own importer missed this form.
_AGENTS_MD_RE = re.compile(
    r"\A\s*# AGENTS\.md instructions for [^\n]*\n\s*<INSTRUCTIONS>[\s\S]*?(?:</INSTRUCTIONS>|\Z)"
)

_TRAILING_BLANKS = re.compile(r"[ \t]+(?=\n)")
_BLANK_RUNS = re.compile(r"\n{3,}")


def strip_injected(text: str) -> tuple[str, int]:
    """Remove injected wrapper blocks; return ``(rest, blocks_removed)``.

    Untouched text comes back verbatim; otherwise the rest is trimmed, and ``""`` means the
    message was nothing but wrappers and should be dropped.
    """
    rest, n_agents = _AGENTS_MD_RE.subn("", text)
    rest, n_tags = _remove_tag_blocks(rest)
    removed = n_agents + n_tags
    if not removed:
        return text, 0
    # Tidy only the seams the removal left: trailing blanks and runs of empty lines.
    rest = _BLANK_RUNS.sub("\n\n", _TRAILING_BLANKS.sub("", rest))
    return rest.strip(), removed


def _remove_tag_blocks(text: str) -> tuple[str, int]:
    # A scan rather than one lazy regex: with a lazy regex every unclosed opening tag rescans
    # to the end of the text, which is quadratic on hostile or truncated input.
    kept: list[str] = []
    pos = removed = 0
    unclosed: set[str] = set()
    for m in _OPEN_TAG.finditer(text):
        tag = m.group("tag")
        if m.start() < pos or tag in unclosed:
            continue
        close = _CLOSE_TAG[tag].search(text, m.end())
        if close is None:
            unclosed.add(tag)  # no later opening of this tag can close either
            continue
        kept.append(text[pos:m.start()])
        pos = close.end()
        removed += 1
    kept.append(text[pos:])
    return "".join(kept), removed


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
                row["timestamp"] = float(row["timestamp"]) if line_times is self._naive_times else None
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


# --------------------------------------------------------------------------- detection

_DETECT_LINES = 20


def detect_format(path: str | os.PathLike[str]) -> Format | None:
    """``claude``/``codex``/``jsonl`` by path, else by content; None means "ask for --from".

    Content detection looks at the first few parseable lines, not only the first: Claude files
    often open with bookkeeping lines (file-history-snapshot) that name no format.
    """
    p = Path(path)
    posix = "/" + p.absolute().as_posix().lstrip("/")
    if "/.codex/" in posix or p.name.startswith("rollout-"):
        return "codex"
    if "/.claude/" in posix:
        return "claude"
    try:
        for n, (_, obj) in enumerate(iter_json_lines(p, ReadStats())):
            kind = _detect_object(obj)
            if kind or n + 1 >= _DETECT_LINES:
                return kind
    except OSError:
        return None
    return None


def _detect_object(obj: dict[str, Any]) -> Format | None:
    kind = obj.get("type")
    if kind == "session_meta":
        return "codex"
    if kind in ("user", "assistant", "summary") and "sessionId" in obj:
        return "claude"
    if kind == "summary" and "leafUuid" in obj:
        return "claude"
    if "id" in obj and isinstance(obj.get("messages"), list):
        return "jsonl"
    return None


# --------------------------------------------------------------------------- discovery

def default_root(kind: str) -> Path:
    """Where a tool keeps its logs: ``$CLAUDE_CONFIG_DIR/projects``, ``$CODEX_HOME/sessions``…"""
    if kind == "claude":
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(base) if base else Path.home() / ".claude") / "projects"
    if kind == "codex":
        base = os.environ.get("CODEX_HOME")
        return (Path(base) if base else Path.home() / ".codex") / "sessions"
    raise ValueError(f"unknown import kind {kind!r} (expected 'claude' or 'codex')")


def discover(kind: str, root: str | os.PathLike[str] | None = None, *,
             include_subagents: bool = False) -> list[Path]:
    """Candidate log files, newest mtime first; symlinks that leave the root are skipped."""
    base = Path(root) if root is not None else default_root(kind)
    if not base.is_dir():
        return []
    real_root = base.resolve()
    if kind == "claude":
        candidates = [p for p in base.glob("*/*.jsonl")
                      if include_subagents or not p.name.startswith("agent-")]
    else:
        candidates = [Path(d) / name for d, _, names in os.walk(base, followlinks=False)
                      for name in names if name.startswith("rollout-") and name.endswith(".jsonl")]
    found: list[tuple[float, Path]] = []
    seen: set[Path] = set()
    # Real files before links to them, so a link inside the root never duplicates its target.
    for p in sorted(candidates, key=lambda c: (c.is_symlink(), str(c))):
        try:
            real = p.resolve(strict=True)
            if real in seen or not real.is_relative_to(real_root) or not real.is_file():
                continue
            seen.add(real)
            found.append((real.stat().st_mtime, p))
        except OSError:
            continue
    found.sort(key=lambda item: (-item[0], str(item[1])))
    return [p for _, p in found]


# --------------------------------------------------------------------------- entry points

def parse_claude(path: str | os.PathLike[str], *,
                 max_line_bytes: int = MAX_LINE_BYTES) -> ImportedSession:
    """Parse a Claude Code session log (docs/formats.md#claude-code)."""
    from hermes_store.transfer.parse_claude import parse_claude_file  # format rules live there

    return parse_claude_file(path, max_line_bytes=max_line_bytes)


def parse_codex(path: str | os.PathLike[str], *, session_index: str | os.PathLike[str] | None = None,
                max_line_bytes: int = MAX_LINE_BYTES) -> ImportedSession:
    """Parse a Codex rollout (docs/formats.md#codex); *session_index* overrides the thread names."""
    from hermes_store.transfer.parse_codex import parse_codex_file

    return parse_codex_file(path, session_index=session_index, max_line_bytes=max_line_bytes)


def parse_file(path: str | os.PathLike[str], kind: str | None = None) -> ImportedSession:
    """Detect (unless *kind* is given) and parse a Claude or Codex log."""
    kind = kind or detect_format(path)
    if kind == "claude":
        return parse_claude(path)
    if kind == "codex":
        return parse_codex(path)
    raise ValueError(f"{os.fspath(path)}: not a Claude Code or Codex log (format {kind!r}); use --from")
