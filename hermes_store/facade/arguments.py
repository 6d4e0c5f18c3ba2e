"""Argument checks the v21 methods share, done before any transaction starts.

The v21 contract's neutral input: ``None`` and ``""`` as an id mean "nothing to do" (the method
returns its neutral value); another non-str raises ``TypeError``. An id that cannot be stored
(a lone surrogate) cannot name a session either, so it is neutral too.
"""

from __future__ import annotations

import math
from typing import Any

from hermes_store.facade.units import absent


def session_id(value: object, what: str = "a session id") -> str | None:
    """The id to act on, or None when the call is a no-op."""
    if absent(value):
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value if storable(value) else None


def storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text(name: str, value: object) -> str | None:
    """A str or None, else ``TypeError``; a lone surrogate → ``ValueError``."""
    return None if value is None else required(name, value)


def required(name: str, value: object) -> str:
    """A str, else ``TypeError``; a lone surrogate → ``ValueError``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not storable(value):
        raise ValueError(f"{name} contains a lone surrogate; it cannot be stored as text")
    return value


def message_text(name: str, value: object) -> str | None:
    """Error text for advisory columns: a str or None (else ``TypeError``). Lone surrogates
    (file names decoded with ``surrogateescape`` end up in exception messages) are escaped
    rather than refused, so recording a failure never fails on its own message."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    return value if storable(value) else value.encode("utf-8", "backslashreplace").decode()


def stringified(name: str, value: object) -> str | None:
    """Chat, thread and user ids arrive as ints from some platforms: numbers become their
    text (what SQLite's TEXT affinity stored for the agent), so comparisons stay text to text."""
    if value is None or isinstance(value, str):
        return text(name, value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"{name} must be a str, a number or None, not {type(value).__name__}")


def finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, not {value!r}")
    return float(value)


def known_id(value: object) -> bool:
    """The v11 methods' id check (docs/contracts.md#session-api): a non-str is a ``TypeError``;
    ``""`` or an id that cannot be stored names no session (the caller answers neutrally)."""
    if not isinstance(value, str):
        raise TypeError(f"a session id must be a str, not {type(value).__name__}")
    return value != "" and storable(value)


def page(limit: object, offset: object, *, limit_may_be_none: bool = False) -> None:
    """``limit``/``offset`` as ints (``TypeError``) that are not negative (``ValueError``)."""
    for name, value in (("limit", limit), ("offset", offset)):
        if value is None and name == "limit" and limit_may_be_none:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}")
