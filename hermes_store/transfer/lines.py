"""Reading a JSONL file line by line: bounded memory, bad lines counted, never fatal.

Every importer reads through :func:`iter_json_lines`: our own jsonl backups and the Claude Code
and Codex logs alike. :func:`sha256_prefix` tells a log that grew by appending from one that was
rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LINE_BYTES", "ReadStats", "iter_json_lines", "sha256_prefix"]

#: A single JSONL line above this is skipped (and counted) instead of being held in memory.
MAX_LINE_BYTES = 64 * 1024 * 1024


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


def field_object(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is a JSON object, else an empty one: a field of the wrong shape
    reads as absent rather than failing the line."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


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
