"""The v11 message methods with their v21 parameters (docs/v21.md#parameters): append with
provenance, paged reads of the live context, the conversation replay, clear and count.

Readers return the live context (``active = 1``) unless ``include_inactive``: rewound and
compacted rows stay in the store, part of the record, but not of what the agent replays
(docs/v21.md#behaviour-changes). ``message_count`` and ``clear_messages`` cover every row.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_store.facade import arguments as args
from hermes_store.facade.units import SessionDB, append, read, write
from hermes_store.repo import messages as repo
from hermes_store.repo.sessions import check_session_id


def stamp(value: Any) -> Any:
    """Now for None; a datetime-like value's ``.timestamp()``; a number as is (the repository
    refuses anything else, and non-finite numbers)."""
    if value is None:
        return time.time()
    convert = getattr(value, "timestamp", None)
    if callable(convert) and not isinstance(value, (int, float)):
        return convert()
    return value


def append_message(db: SessionDB, session_id: str, role: str, content: Any = None,
                   tool_name: str | None = None, tool_calls: Any = None,
                   tool_call_id: str | None = None, token_count: int | None = None,
                   finish_reason: str | None = None, reasoning: str | None = None,
                   reasoning_content: str | None = None, reasoning_details: Any = None,
                   codex_reasoning_items: Any = None, codex_message_items: Any = None,
                   platform_message_id: str | None = None, observed: bool = False,
                   effect_disposition: str | None = None, timestamp: Any = None) -> int:
    """Append one live row; returns its id. Platform message ids may arrive as numbers and are
    stored as their text, so the duplicate check compares text with text."""
    check_session_id(session_id)
    prepared = repo.prepare_message(
        session_id, role, content=content, tool_name=tool_name, tool_calls=tool_calls,
        tool_call_id=tool_call_id, token_count=token_count, finish_reason=finish_reason,
        reasoning=reasoning, reasoning_content=reasoning_content,
        reasoning_details=reasoning_details, codex_reasoning_items=codex_reasoning_items,
        codex_message_items=codex_message_items,
        platform_message_id=args.stringified("platform_message_id", platform_message_id),
        observed=bool(observed), effect_disposition=effect_disposition,
        timestamp=stamp(timestamp))
    return append(db, lambda c: repo.append(c, prepared), what="append_message")


def get_messages(db: SessionDB, session_id: str, include_inactive: bool = False,
                 limit: int | None = None, offset: int = 0) -> list[repo.MessageRow]:
    """Message dicts in id order, active rows unless ``include_inactive``, paged after that
    filter (``offset`` alone pages too)."""
    args.page(limit, offset, limit_may_be_none=True)
    if not args.known_id(session_id):
        return []
    return read(db, lambda c: repo.get_messages(c, session_id,
                                                include_inactive=bool(include_inactive),
                                                limit=limit, offset=offset))


def get_messages_as_conversation(db: SessionDB, session_id: str, include_ancestors: bool = False,
                                 include_inactive: bool = False) -> list[repo.ChatTurn]:
    if not args.known_id(session_id):
        return []
    return read(db, lambda c: repo.conversation(c, session_id,
                                                include_ancestors=bool(include_ancestors),
                                                include_inactive=bool(include_inactive)))


def clear_messages(db: SessionDB, session_id: str) -> None:
    if args.known_id(session_id):
        write(db, lambda c: repo.clear(c, session_id), what="clear_messages")


def message_count(db: SessionDB, session_id: str | None = None) -> int:
    """Rows of every state (the record, not the live context); only None means "all"."""
    if session_id is not None and not args.known_id(session_id):
        return 0
    return read(db, lambda c: repo.count(c, session_id))
