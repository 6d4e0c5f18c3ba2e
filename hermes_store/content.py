"""The stored-message format: the multimodal marker and the text a stored cell holds."""

from __future__ import annotations

import json

MULTIMODAL_PREFIX = "\x00json:"

_TEXT_PART_TYPES = frozenset(("text", "input_text", "output_text"))


def _part_text(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type", "text") in _TEXT_PART_TYPES:
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


def text_of_content(content: str | None) -> str:
    """Plain text of a stored ``content``: multimodal parts reduced to their text parts."""
    if content is None:
        return ""
    if not content.startswith(MULTIMODAL_PREFIX):
        return content
    try:
        parts = json.loads(content[len(MULTIMODAL_PREFIX) :])
    except ValueError:
        return ""  # never show the sentinel or a broken payload
    if not isinstance(parts, list):
        parts = [parts]
    texts = (_part_text(part) for part in parts)
    return " ".join(t for t in texts if t)


