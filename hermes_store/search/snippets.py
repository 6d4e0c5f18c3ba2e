"""Snippets cut from stored text around the first literal hit."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hermes_store.content import text_of


def _find_first(text: str, terms: Sequence[str]) -> re.Match[str] | None:
    # Longest alternative first, so at a shared start the whole of the longer term is marked.
    alternatives = sorted({t for t in terms if t}, key=len, reverse=True)
    if not text or not alternatives:
        return None
    pattern = "|".join(map(re.escape, alternatives))
    return re.search(pattern, text, re.IGNORECASE)


def _mark(text: str, match: re.Match[str], width: int, before: int) -> str:
    start = max(0, match.start() - before)
    end = start + width
    hit_end = min(match.end(), end)  # a hit longer than the window is cut, not the window grown
    hit = text[match.start() : hit_end]
    body = f"{text[start : match.start()]}>>>{hit}<<<{text[hit_end:end]}"
    return ("..." if start > 0 else "") + body + ("..." if end < len(text) else "")


def snippet_from_text(
    texts: Sequence[str | None], terms: Sequence[str], width: int = 120, before: int = 40
) -> str:
    """Bigram/LIKE snippet: the first literal hit in content, then tool_name, then tool_calls."""
    plain = [text_of(t) for t in texts]
    for text in plain:
        match = _find_first(text, terms)
        if match is not None:
            return _mark(text, match, width, before)
    return next((t[:width] for t in plain if t), "")
