"""A stored cell inside a JSON document, and back: the jsonl backup's rule for values JSON cannot
hold.

A BLOB, or text that is not valid UTF-8, travels as ``{"$b64": ...}``; NaN and infinities as
``{"$float": "nan"}``. On the way back, decoded JSON (``hermes sessions export`` writes a
message's content and tool calls decoded) is stored the way the agent stores it.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from hermes_store.content import dump_json, encode_content

__all__ = ["jsonable", "stored_cell"]


def jsonable(value: Any) -> Any:
    """A stored cell as JSON: BLOBs (and undecodable text) as ``{"$b64"}``, NaN/inf as
    ``{"$float"}``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def stored_cell(value: Any, *, column: str) -> Any:
    """The stored form of a value :func:`jsonable` wrote (or the agent's export decoded)."""
    if isinstance(value, dict):
        if set(value) == {"$b64"} and isinstance(value["$b64"], str):
            return base64.b64decode(value["$b64"])
        if set(value) == {"$float"}:
            return float(value["$float"])
    if isinstance(value, (dict, list)):
        return encode_content(value) if column == "content" else dump_json(value)
    return value
