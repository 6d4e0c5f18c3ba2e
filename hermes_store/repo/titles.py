"""Session titles: cleaning, and the ``<base> #<N>`` numbering of a title lineage.

Pure functions only; the repository in ``sessions.py`` feeds them the titles it reads.
Numbered variants are ``<base> #`` followed by ASCII digits exactly, compared case-sensitively:
the old store's ``LIKE '<base> #%'`` also matched ``<base> #draft`` and other letter cases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hermes_store.errors import UsageError

MAX_TITLE_LENGTH = 100

_SURROGATES_RE = re.compile("[\ud800-\udfff]")
# ASCII controls except tab, LF and CR, which are whitespace and collapse to a space below.
_CONTROLS_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Zero-width and bidi-control characters: invisible in a listing, yet they make titles differ.
_INVISIBLE_RE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]")
_WHITESPACE_RE = re.compile(r"\s+")
_NUMBERED_RE = re.compile(r"^(?P<base>.*) #(?P<n>[0-9]+)$", re.DOTALL)
# What a title typed by a person may not hold (``rename``): any control or line separator.
_TYPED_CONTROLS_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def sanitize_title(title: str | None) -> str | None:
    """The cleaned title, ``None`` when nothing visible is left.

    Raises ``TypeError`` for a non-str and ``ValueError`` when the cleaned title is longer than
    :data:`MAX_TITLE_LENGTH` characters.
    """
    cleaned = clean_unbounded(title)
    if cleaned is not None and len(cleaned) > MAX_TITLE_LENGTH:
        raise ValueError(f"Title too long ({len(cleaned)} chars, max {MAX_TITLE_LENGTH})")
    return cleaned


def clean_unbounded(title: str | None) -> str | None:
    """Cleaning steps 1–5 of :func:`sanitize_title`, without the length check."""
    if title is None:
        return None
    if not isinstance(title, str):
        raise TypeError(f"a title must be a str or None, not {type(title).__name__}")
    cleaned = _SURROGATES_RE.sub("", title)
    cleaned = _CONTROLS_RE.sub("", cleaned)
    cleaned = _INVISIBLE_RE.sub("", cleaned)
    cleaned = _WHITESPACE_RE.sub(" ", cleaned).strip()
    return cleaned or None


def title_from_words(words: Iterable[str]) -> str:
    """A title typed as words (``rename ID TITLE…``), joined by spaces and cleaned. Empty,
    newlines or control characters, and more than 100 characters are refused (UsageError),
    not silently cleaned away."""
    title = " ".join(words).strip()
    if not title:
        raise UsageError("the title is empty")
    if _TYPED_CONTROLS_RE.search(title):
        raise UsageError("the title may not contain newlines or control characters")
    if len(title) > MAX_TITLE_LENGTH:
        raise UsageError(f"the title has {len(title)} characters; the limit is "
                         f"{MAX_TITLE_LENGTH}")
    cleaned = sanitize_title(title)
    if cleaned is None:
        raise UsageError("the title has no visible characters")
    return cleaned


def clean_lookup_title(title: object) -> str | None:
    """Cleaning for lookups: never raises; anything that could not be a stored title → None."""
    if not isinstance(title, str):
        return None
    try:
        return sanitize_title(title)
    except ValueError:
        return None


def split_numbered(title: str) -> tuple[str, int | None]:
    """``"x #3"`` → ``("x", 3)``; an unnumbered title → ``(title, None)``."""
    match = _NUMBERED_RE.match(title)
    if match is None:
        return title, None
    return match.group("base"), int(match.group("n"))


def variant_number(title: str, base: str) -> int | None:
    """N when ``title`` is exactly ``<base> #<N>``, else None."""
    found_base, n = split_numbered(title)
    return n if n is not None and found_base == base else None


def variant_prefix(base: str) -> str:
    """What every numbered variant of ``base`` starts with (for an index-friendly lookup)."""
    return f"{base} #"


def next_title(base_title: str, existing: Iterable[str]) -> str:
    """The next free title of ``base_title``'s lineage, given the titles that already exist.

    ``existing`` may hold unrelated titles; only the base itself and its exact numbered variants
    count. The unnumbered original counts as #1. A result over the length limit has its base cut
    from the right (then right-trimmed) so that the whole title fits.
    """
    base, _ = split_numbered(base_title)
    highest = 0
    for title in existing:
        if title == base:
            highest = max(highest, 1)
            continue
        n = variant_number(title, base)
        if n is not None:
            highest = max(highest, n)
    suffix = f" #{max(1, highest) + 1}" if highest else ""
    if len(base) + len(suffix) > MAX_TITLE_LENGTH:
        base = base[: MAX_TITLE_LENGTH - len(suffix)].rstrip()
    return base + suffix
