"""The stored-message format: how a message's cells are written to the store and read back.

This module is the one owner of that format, and touches no database:

* ``content`` holds text as is, or multimodal parts (a list or dict) as :data:`MULTIMODAL_PREFIX`
  plus their JSON. SQL that must tell the two apart compares bytes with :data:`MARKER_BLOB_SQL`.
  Migration revisions keep their own literal copy: revisions never import the package.
* ``tool_calls`` and the other JSON columns hold JSON text; :func:`tool_calls_added` is the one
  rule for what a message adds to its session's ``tool_call_count``.
* :func:`text_of` is the plain text of a stored ``content``: what the search indexes hold, or
  what a reader is shown.
* :func:`sane_time` and :func:`iso_utc` keep garbage times out of listings and exports.
"""

from __future__ import annotations

import json
import logging
import math
import time
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

MULTIMODAL_PREFIX = "\x00json:"
MARKER_BYTES = MULTIMODAL_PREFIX.encode()
#: The flag of the one text part a str starting with the marker is stored as (encode_content).
MARKED_STR_KEY = "hermes_marked_str"
#: The marker as an SQLite blob literal. It starts with NUL, where SQLite's text functions stop,
#: so SQL compares it with the first ``len(MARKER_BYTES)`` bytes of ``CAST(content AS BLOB)``.
MARKER_BLOB_SQL = f"X'{MARKER_BYTES.hex().upper()}'"

# The characters that make text CJK (docs/search.md#cjk-bigrams): CJK symbols and punctuation,
# kana, ideographs (extension A, unified, compatibility, extensions B-F), hangul syllables. A
# bracket expression body that Python's ``re`` and SQLite's GLOB (which compares code points)
# read alike.
CJK_CLASS = ("\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
             "\U00020000-\U0002a6df\U0002a700-\U0002ebef")
# Times outside this window are garbage (one 5e+246 made a session look recent forever).
SANE_MIN_TS = 946684800.0  # 2000-01-01T00:00:00Z
SANE_FUTURE_S = 86400.0

# Both backends store integers as 64-bit signed; a larger Python int would fail inside the write
# (OverflowError on SQLite, NumericValueOutOfRange on PostgreSQL) instead of as bad input.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# A key (a session id, a platform message id) is indexed: PostgreSQL refuses an index row above
# about 2.7 kB, and two keys share one row in idx_messages_platform_msg_id. One limit on both
# backends, so a store moves between them with its ids.
MAX_KEY_BYTES = 1024

# Parts whose text the search indexes hold (db/derived.py's view reads the same three in SQL).
_TEXT_PART_TYPES = frozenset(("text", "input_text", "output_text"))


def marker_sql(column: str, op: str = "=") -> str:
    """SQL true when *column* holds multimodal parts (``=``) or anything else (``<>``)."""
    return f"substr(CAST({column} AS BLOB), 1, {len(MARKER_BYTES)}) {op} {MARKER_BLOB_SQL}"


# --------------------------------------------------------------------------- text and JSON


def check_text(what: str, value: str | None) -> None:
    """SQLite stores UTF-8; a lone surrogate cannot be encoded, so it is refused up front."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{what} contains a lone surrogate at position {err.start}; "
                         "it cannot be stored as text") from None


def check_integer(what: str, value: int | None) -> None:
    """An int both backends can store (64-bit signed), else ``ValueError``."""
    if value is not None and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{what} is out of range: {value} does not fit a 64-bit integer")


def check_key(what: str, value: str | None) -> None:
    """Text that names something (an id, a key) and is indexed: storable and at most
    :data:`MAX_KEY_BYTES` bytes of UTF-8, else ``ValueError``."""
    check_text(what, value)
    if value is not None and len(value) * 4 > MAX_KEY_BYTES \
            and len(value.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"{what} is too long ({len(value.encode('utf-8'))} bytes of UTF-8; "
                         f"at most {MAX_KEY_BYTES})")


def _loads(text: str) -> Any:
    """``json.loads``; JSON nested deeper than Python can parse is ``ValueError`` like any
    other unreadable JSON (not the ``RecursionError`` the parser raises)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def dump_json(value: Any, *, what: str | None = None) -> str:
    """JSON text with non-ASCII kept as is.

    A lone surrogate cannot be stored as UTF-8: by default the value is then written with
    ``\\uXXXX`` escapes (lossless, reads back identical). With ``what`` set it is refused
    instead, for JSON that SQL decodes (SQLite's json functions turn such an escape into
    invalid UTF-8 that no reader can decode).
    """
    try:
        text = json.dumps(value, ensure_ascii=False)
    except RecursionError:
        raise ValueError(f"{what or 'value'} is nested too deeply to store as JSON") from None
    except (TypeError, ValueError) as err:
        raise TypeError(f"value is not JSON-serialisable: {err}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        if what is not None:
            raise ValueError(f"{what} contains a lone surrogate; it cannot be stored as text") \
                from None
        text = json.dumps(value, ensure_ascii=True)
    return text


def encode_json(value: Any) -> str | None:
    """A JSON column's stored text; an empty value is stored as NULL."""
    return dump_json(value) if value else None


def decode_json(stored: str | None, *, broken: Any) -> Any:
    """Stored JSON text decoded; ``broken`` stands in for text that is not JSON."""
    if stored is None:
        return None
    try:
        return _loads(stored)
    except ValueError:
        return broken


# --------------------------------------------------------------------------- content


def encode_content(content: object) -> str | None:
    """Text as is; multimodal parts (list/dict) as the marker plus JSON.

    A str that itself starts with the marker is stored as the marker plus one text part holding
    the rest of the str and the flag :data:`MARKED_STR_KEY`: it reads back unchanged instead of
    being mistaken for multimodal parts, and its words are searchable, since every search index
    takes its text from text parts (a JSON string holding the marker's NUL was read as empty text
    by both backends' JSON functions). A dict carrying that flag itself is refused, so that no
    stored value has two readings.
    """
    if content is None:
        return None
    if isinstance(content, str):
        check_text("content", content)
        if not content.startswith(MULTIMODAL_PREFIX):
            return content
        part = {"type": "text", "text": content[len(MULTIMODAL_PREFIX):], MARKED_STR_KEY: True}
        return MULTIMODAL_PREFIX + dump_json(part, what="content")
    if isinstance(content, (list, dict)):
        if isinstance(content, dict) and MARKED_STR_KEY in content:
            raise ValueError(f"content dict may not carry the key {MARKED_STR_KEY!r} (it marks "
                             "stored text that starts with the multimodal marker)")
        # The search view extracts text parts with SQL json functions: no escaped surrogates.
        return MULTIMODAL_PREFIX + dump_json(content, what="content")
    raise TypeError(f"content must be str, list, dict or None, not {type(content).__name__}")


def _marked_str(value: Any) -> str | None:
    """The str :func:`encode_content` wrapped as a flagged text part, else None."""
    if not isinstance(value, dict) or value.get(MARKED_STR_KEY) is not True:
        return None
    text = value.get("text")
    return MULTIMODAL_PREFIX + text if isinstance(text, str) else None


def decode_content(stored: str | None) -> Any:
    """What :func:`encode_content` was given; a broken payload comes back as the stored text.
    A marker-prefixed str stored by older versions (the marker plus a JSON string) reads back
    the same way."""
    if stored is None or not stored.startswith(MULTIMODAL_PREFIX):
        return stored
    try:
        value = _loads(stored[len(MULTIMODAL_PREFIX):])
    except ValueError:
        log.warning("undecodable multimodal content; returning the stored text")
        return stored
    marked = _marked_str(value)
    return value if marked is None else marked


def text_of(stored: object, *, display: bool = False, image_text: str = "[image]") -> str:
    """Plain text of a stored ``content`` cell; never the marker.

    By default it is the text the search indexes hold for the cell, as db/derived.py's view
    computes it in SQL: the text parts (``text``, ``input_text``, ``output_text``) joined by a
    space; images and a payload that is not JSON give nothing.

    ``display=True`` is what a reader is shown (exports, ``show``): every part that carries
    text, an image as *image_text*, one part a line, and a payload that is not JSON as its raw
    text, so nothing a person could read is hidden. A cell that is not valid UTF-8 (read as
    ``bytes``) is decoded with replacement characters.
    """
    if stored is None:
        return ""
    if isinstance(stored, bytes):
        stored = stored.decode("utf-8", errors="replace")
    elif not isinstance(stored, str):
        return str(stored)
    if not stored.startswith(MULTIMODAL_PREFIX):
        return stored
    payload = stored[len(MULTIMODAL_PREFIX):]
    try:
        parts = _loads(payload)
    except ValueError:
        return payload if display else ""
    if display and (marked := _marked_str(parts)) is not None:
        return marked
    if not isinstance(parts, list):
        parts = [parts]
    if display:
        shown = (_shown_text(part, image_text) for part in parts)
        return "\n".join(t for t in shown if t is not None)
    indexed = (_indexed_text(part) for part in parts)
    return " ".join(t for t in indexed if t)


def _indexed_text(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type", "text") in _TEXT_PART_TYPES:
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


def _shown_text(part: object, image_text: str) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        if "image" in str(part.get("type", "")):
            return image_text
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


# --------------------------------------------------------------------------- tool calls


def _calls_value(tool_calls: object) -> Any:
    """The calls a value holds (a JSON str parsed first), or None when it holds none."""
    if tool_calls is None or tool_calls == "" or tool_calls == []:
        return None
    if not isinstance(tool_calls, str):
        return tool_calls
    try:
        value = json.loads(tool_calls)
    except RecursionError:
        raise ValueError("tool_calls is nested too deeply to store as JSON") from None
    except ValueError:
        return tool_calls  # stored as a JSON string literal: kept, never dropped
    return None if value is None or value == [] else value


def _calls_in(value: Any) -> int:
    return 0 if value is None else len(value) if isinstance(value, list) else 1


def encode_tool_calls(tool_calls: object) -> tuple[str | None, int]:
    """``(stored JSON or None, number of calls)``; a JSON str is parsed first."""
    value = _calls_value(tool_calls)
    return (None, 0) if value is None else (dump_json(value), _calls_in(value))


def decode_tool_calls(stored: str | None) -> Any:
    value = decode_json(stored, broken=_BROKEN)
    if value is _BROKEN:
        log.warning("undecodable tool_calls JSON; returning []")
        return []
    return value


_BROKEN = object()


def tool_calls_added(role: object, tool_calls: object) -> int:
    """What a message adds to its session's ``tool_call_count`` (*tool_calls* stored or not).

    A list counts its items and any other value one call; a tool result carries the id of the
    call it answers, never new calls of its own.
    """
    return 0 if role == "tool" else _calls_in(_calls_value(tool_calls))


def calls_of(stored: Any) -> list[dict[str, Any]]:
    """A stored ``tool_calls`` cell as ``[{id, name, arguments}]`` for display, whatever its
    shape (OpenAI ``function`` objects, bare ``{name, input}``, one object); text that is not
    JSON becomes one call named ``unknown`` carrying that text."""
    if stored in (None, "", b""):
        return []
    try:
        calls = _loads(stored) if isinstance(stored, str) else stored
    except ValueError:
        return [{"id": None, "name": "unknown", "arguments": stored}]
    if isinstance(calls, dict):
        calls = [calls]
    out = []
    for c in calls if isinstance(calls, list) else []:
        if not isinstance(c, dict):
            continue
        function = c.get("function")
        fn = function if isinstance(function, dict) else c
        out.append({"id": c.get("id") or c.get("call_id"), "name": fn.get("name") or "unknown",
                    "arguments": fn.get("arguments", fn.get("input"))})
    return out


# --------------------------------------------------------------------------- times


def sane_time(value: Any) -> float | None:
    """The value as an epoch if it is a plausible time (2000-01-01 to a day ahead), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    if not math.isfinite(v) or v < SANE_MIN_TS or v > time.time() + SANE_FUTURE_S:
        return None
    return v


def iso_utc(value: Any, *, millis: bool = False) -> str | None:
    """ISO 8601 UTC with ``Z`` for a sane epoch; None otherwise (callers show the raw value)."""
    v = sane_time(value)
    if v is None:
        return None
    dt = datetime.fromtimestamp(v, UTC)
    if millis:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
