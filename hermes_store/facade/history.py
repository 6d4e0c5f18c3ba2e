"""v21 API (docs/v21.md#messages, docs/v21.md#bulk): windows around a message, the anchored
view, rewind and restore, ``replace_messages``, in-place compaction, recent user messages and
the platform message id check.

History is never destroyed by a state change: rewind and compaction flip flags, so a rewind
can be restored and a compaction keeps what it summarised. ``replace_messages`` is the one
destructive call, and callers that share a session with compaction pass ``active_only=True``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_store.facade import arguments as args
from hermes_store.facade.messages import stamp
from hermes_store.facade.units import SessionDB, read, write
from hermes_store.repo import history as repo
from hermes_store.repo.messages import PreparedMessage, prepare_message

DEFAULT_KEEP_ROLES = ("user", "assistant")
# Later rows without a timestamp are spaced by this, so replay order and timestamps agree.
_CLOCK_STEP_S = 1e-6
_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def _non_negative(name: str, value: object) -> int:
    return max(0, _int(name, value))


# --------------------------------------------------------------------------- windows


def get_messages_around(db: SessionDB, session_id: str, around_message_id: int,
                        window: int = 5) -> repo.MessageWindow:
    anchor, size = _int("around_message_id", around_message_id), _non_negative("window", window)
    sid = args.session_id(session_id)
    if sid is None:
        return {"window": [], "messages_before": 0, "messages_after": 0}
    return read(db, lambda c: repo.messages_around(c, sid, anchor, size))


def get_anchored_view(db: SessionDB, session_id: str, around_message_id: int, window: int = 5,
                      bookend: int = 3,
                      keep_roles: Sequence[str] | None = DEFAULT_KEEP_ROLES
                      ) -> repo.AnchoredView:
    anchor, size = _int("around_message_id", around_message_id), _non_negative("window", window)
    ends = _non_negative("bookend", bookend)
    roles = None if keep_roles is None else [args.required("keep_roles", r) for r in keep_roles]
    sid = args.session_id(session_id)
    if sid is None:
        return {"window": [], "messages_before": 0, "messages_after": 0, "bookend_start": [],
                "bookend_end": []}
    return read(db, lambda c: repo.anchored_view(c, sid, anchor, window=size, bookend=ends,
                                                 keep_roles=roles))


def list_recent_user_messages(db: SessionDB, session_id: str, limit: int = 20,
                              include_inactive: bool = False) -> list[repo.UserMessagePreview]:
    count = _int("limit", limit)
    if count < 0:
        raise ValueError(f"limit must be >= 0, not {count}")
    sid = args.session_id(session_id)
    if sid is None or count == 0:
        return []
    return read(db, lambda c: repo.recent_user_messages(
        c, sid, limit=count, include_inactive=bool(include_inactive)))


def has_platform_message_id(db: SessionDB, session_id: str,
                            platform_message_id: str | int | None) -> bool:
    wanted = args.stringified("platform_message_id", platform_message_id)
    sid = args.session_id(session_id)
    if sid is None or not wanted:
        return False
    return read(db, lambda c: repo.has_platform_message_id(c, sid, wanted))


def has_archived_messages(db: SessionDB, session_id: str) -> bool:
    sid = args.session_id(session_id)
    if sid is None:
        return False
    return read(db, lambda c: repo.has_inactive(c, sid))


# --------------------------------------------------------------------------- rewind


def rewind_to_message(db: SessionDB, session_id: str, target_message_id: int) -> repo.Rewind:
    """``ValueError`` unless the target is a user message of the session; see
    :func:`hermes_store.repo.history.rewind`."""
    target = _int("target_message_id", target_message_id)
    sid = args.session_id(session_id)
    if sid is None:
        raise ValueError(f"message {target} is not a user message of session {session_id!r}")
    return write(db, lambda c: repo.rewind(c, sid, target), what="rewind_to_message")


def restore_rewound(db: SessionDB, session_id: str, since_message_id: int) -> int:
    since = _int("since_message_id", since_message_id)
    sid = args.session_id(session_id)
    if sid is None:
        return 0
    return write(db, lambda c: repo.restore_rewound(c, sid, since), what="restore_rewound")


# --------------------------------------------------------------------------- rewrite


def prepared_batch(session_id: str, items: object) -> list[PreparedMessage]:
    """Message dicts as live rows: keys as ``append_message``'s; ``platform_message_id`` else
    ``message_id``; reasoning and codex items on assistant rows only. Rows without a timestamp
    take a clock that starts now and stays after every row before them."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise TypeError(f"messages must be a list of dicts, not {type(items).__name__}")
    clock = time.time()
    batch = []
    for item in items:
        if not isinstance(item, Mapping):
            raise TypeError(f"each message must be a dict, not {type(item).__name__}")
        role = item.get("role") or "unknown"
        given = item.get("timestamp")
        when = clock if given is None else stamp(given)
        platform_id = item.get("platform_message_id")
        if platform_id is None:
            platform_id = item.get("message_id")
        extras = {key: item.get(key) for key in _ASSISTANT_ONLY} if role == "assistant" else {}
        batch.append(prepare_message(
            session_id, role, content=item.get("content"), tool_name=item.get("tool_name"),
            tool_calls=item.get("tool_calls"), tool_call_id=item.get("tool_call_id"),
            token_count=item.get("token_count"), finish_reason=item.get("finish_reason"),
            platform_message_id=args.stringified("platform_message_id", platform_id),
            observed=bool(item.get("observed")),
            effect_disposition=item.get("effect_disposition"), timestamp=when, **extras))
        clock = max(clock, float(when)) + _CLOCK_STEP_S
    return batch


def replace_messages(db: SessionDB, session_id: str, messages: Sequence[Mapping[str, Any]],
                     active_only: bool = False) -> None:
    """Replace the session's rows (only the live ones with ``active_only``) by ``messages`` in
    one unit. An unknown session with messages raises ``sqlite3.IntegrityError``."""
    sid = args.session_id(session_id)
    if sid is None:
        return
    batch = prepared_batch(sid, messages)
    write(db, lambda c: repo.replace(c, sid, batch, active_only=bool(active_only)),
          what="replace_messages")


def archive_and_compact(db: SessionDB, session_id: str,
                        compacted_messages: Sequence[Mapping[str, Any]]) -> int:
    """Keep the live rows as the record and make ``compacted_messages`` the live context, in one
    unit; returns how many were inserted. Unknown session: ``[]`` → 0, else IntegrityError."""
    sid = args.session_id(session_id)
    if sid is None:
        return 0
    batch = prepared_batch(sid, compacted_messages)
    return write(db, lambda c: repo.archive_and_compact(c, sid, batch),
                 what="archive_and_compact")
