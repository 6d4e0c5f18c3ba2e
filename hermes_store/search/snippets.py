"""Snippets cut from stored text around the first literal hit."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from hermes_store.content import text_of

# The markers every route puts around a hit in a snippet (FTS5's snippet() is given the same).
MARK_OPEN, MARK_CLOSE = ">>>", "<<<"
_MARKED = re.compile(re.escape(MARK_OPEN) + "(.*?)" + re.escape(MARK_CLOSE), re.DOTALL)


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
    # Every later hit inside the window is marked too, not only the first.
    rest = match.re.sub(lambda m: f"{MARK_OPEN}{m.group()}{MARK_CLOSE}", text[hit_end:end])
    body = f"{text[start : match.start()]}{MARK_OPEN}{hit}{MARK_CLOSE}{rest}"
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



def unmark(snippet: str | None) -> tuple[str, list[tuple[int, int]]]:
    """A marked snippet as plain text plus the ``(start, end)`` character offsets of each hit
    in it: what a script or a terminal renders its own way instead of the markers."""
    plain: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    length = 0
    text = snippet or ""
    for match in _MARKED.finditer(text):
        before = text[at:match.start()]
        plain.append(before)
        length += len(before)
        spans.append((length, length + len(match.group(1))))
        plain.append(match.group(1))
        length += len(match.group(1))
        at = match.end()
    plain.append(text[at:])
    return "".join(plain), spans
