"""Foreign agent logs → :class:`~hermes_store.transfer.builder.ImportedSession`
(docs/formats.md#import).

Stdlib only and database-free: this module tells which format a file is in, finds the logs a
tool keeps, and hands each file to its parser (:mod:`hermes_store.transfer.parse_claude`,
:mod:`hermes_store.transfer.parse_codex`). Writing the result is
:mod:`hermes_store.transfer.load`'s job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from hermes_store.transfer.builder import ImportedSession
from hermes_store.transfer.lines import MAX_LINE_BYTES, ReadStats, iter_json_lines
from hermes_store.transfer.parse_claude import parse_claude_file
from hermes_store.transfer.parse_codex import parse_codex_file

__all__ = [
    "default_root", "detect_format", "discover", "parse_claude", "parse_codex", "parse_file",
]

Format = Literal["claude", "codex", "jsonl"]


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
    return parse_claude_file(path, max_line_bytes=max_line_bytes)


def parse_codex(path: str | os.PathLike[str], *,
                session_index: str | os.PathLike[str] | None = None,
                max_line_bytes: int = MAX_LINE_BYTES) -> ImportedSession:
    """Parse a Codex rollout (docs/formats.md#codex); *session_index* overrides the thread names."""
    return parse_codex_file(path, session_index=session_index, max_line_bytes=max_line_bytes)


def parse_file(path: str | os.PathLike[str], kind: str | None = None) -> ImportedSession:
    """Detect (unless *kind* is given) and parse a Claude or Codex log."""
    kind = kind or detect_format(path)
    if kind == "claude":
        return parse_claude(path)
    if kind == "codex":
        return parse_codex(path)
    raise ValueError(f"{os.fspath(path)}: not a Claude Code or Codex log (format {kind!r}); "
                     "use --from")
