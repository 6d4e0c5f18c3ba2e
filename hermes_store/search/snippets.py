"""Snippets cut from stored text around the first literal hit."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from hermes_store.content import text_of


@functools.lru_cache(maxsize=256)
def _pattern(terms: tuple[str, ...]) -> re.Pattern[str] | None:
    # Longest alternative first, so at a shared start the whole of the longer term is marked.
    alternatives = sorted({t for t in terms if t}, key=len, reverse=True)
    if not alternatives:
        return None
    return re.compile("|".join(map(re.escape, alternatives)), re.IGNORECASE)


def _find_first(text: str, terms: Sequence[str]) -> re.Match[str] | None:
    # Compiled once per set of terms: a page cuts up to three texts a hit with the same terms.
    pattern = _pattern(tuple(terms))
    if not text or pattern is None:
        return None
    return pattern.search(text)


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
    plain = []
    for stored in texts:
        text = text_of(stored)
        match = _find_first(text, terms)
        if match is not None:
            return _mark(text, match, width, before)
        plain.append(text)
    return next((t[:width] for t in plain if t), "")
