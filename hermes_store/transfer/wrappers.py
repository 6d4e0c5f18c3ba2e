"""Blocks a coding agent injects into a user turn (instructions, environment, reminders).

They are the tool's scaffolding, not what the person typed: imports drop them from user rows and
the ``user-prompts`` export leaves them out.
"""

from __future__ import annotations

import re

__all__ = ["WRAPPER_TAGS", "strip_injected"]

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
