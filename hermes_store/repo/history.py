"""A session's message history beyond append (docs/v21.md#messages): windows around a message,
the anchored view, rewind and restore, whole-history replacement, in-place compaction, and the
small lookups the agent makes per turn.

Rows are never rewritten to change state: a rewind flips ``active`` to 0, compaction flips
``active`` to 0 and ``compacted`` to 1, and restore flips rewound rows back. Neither flag is a
column of the search indexes, so a flip never re-indexes a row. Rows are inserted only through
:func:`hermes_store.repo.messages.append_many`, so counters and the CJK index move with them.

Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypedDict

from sqlalchemy import ColumnElement, Select, and_, delete, exists, func, select, update

from hermes_store.content import decode_content, text_of
from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.repo import messages as message_repo
from hermes_store.repo.executor import rowcount
from hermes_store.repo.messages import MessageRow, PreparedMessage
from hermes_store.repo.sessions import Executor

sessions = SESSIONS
messages = MESSAGES

MULTIMODAL_PREVIEW = "[multimodal content]"
PREVIEW_CHARS = 80
_WHITESPACE = re.compile(r"\s+")


def _live() -> ColumnElement[bool]:
    return func.coalesce(messages.c.active, 1) == 1


def _rewound() -> ColumnElement[bool]:
    return and_(messages.c.active == 0, func.coalesce(messages.c.compacted, 0) == 0)


def _rows(conn: Executor, query: Select[*tuple[Any, ...]]) -> list[MessageRow]:
    return [message_repo.message_dict(row) for row in conn.execute(query).mappings()]


def _all() -> Select[*tuple[Any, ...]]:
    return message_repo.all_columns()


# --------------------------------------------------------------------------- windows


Rows = list[MessageRow]


class MessageWindow(TypedDict):
    """:func:`messages_around`: the rows, and how many of them lie each side of the anchor."""

    window: Rows
    messages_before: int
    messages_after: int


class AnchoredView(MessageWindow):
    """:func:`anchored_view`: the filtered window plus the session's opening and closing rows."""

    bookend_start: Rows
    bookend_end: Rows


class UserMessagePreview(TypedDict):
    id: int
    timestamp: float
    preview: str


class Rewind(TypedDict):
    """:func:`rewind`: rows made inactive, the target row (``content`` decoded), the new head."""

    rewound_count: int
    target_message: dict[str, Any]
    new_head_id: int | None


def _around(conn: Executor, session_id: str, anchor_id: int,
            window: int) -> tuple[Rows, MessageRow, Rows] | None:
    of_session = messages.c.session_id == session_id
    anchor = _rows(conn, _all().where(of_session, messages.c.id == anchor_id))
    if not anchor:
        return None
    before = _rows(conn, _all().where(of_session, messages.c.id < anchor_id)
                   .order_by(messages.c.id.desc()).limit(window))
    after = _rows(conn, _all().where(of_session, messages.c.id > anchor_id)
                  .order_by(messages.c.id).limit(window))
    return list(reversed(before)), anchor[0], after


def messages_around(conn: Executor, session_id: str, anchor_id: int,
                    window: int) -> MessageWindow:
    """Up to ``window`` rows each side of the anchor (any state), id ascending; the counts are
    the rows taken each side (fewer than ``window``: the session ends there)."""
    found = _around(conn, session_id, anchor_id, window)
    if found is None:
        return {"window": [], "messages_before": 0, "messages_after": 0}
    before, anchor, after = found
    return {"window": [*before, anchor, *after], "messages_before": len(before),
            "messages_after": len(after)}


def _bookend(conn: Executor, session_id: str, *, below: int | None, above: int | None,
             count: int, roles: Sequence[str] | None) -> Rows:
    query = _all().where(messages.c.session_id == session_id, messages.c.content.is_not(None),
                         messages.c.content != "")
    if roles is not None:
        query = query.where(messages.c.role.in_(list(roles)))
    if below is not None:
        query = query.where(messages.c.id < below).order_by(messages.c.id).limit(count)
        return _rows(conn, query)
    query = query.where(messages.c.id > above).order_by(messages.c.id.desc()).limit(count)
    return list(reversed(_rows(conn, query)))


def anchored_view(conn: Executor, session_id: str, anchor_id: int, *, window: int,
                  bookend: int, keep_roles: Sequence[str] | None) -> AnchoredView:
    """The window around the anchor keeping ``keep_roles`` rows (and always the anchor), with
    the session's opening and closing rows beyond it as bookends; counts stay unfiltered."""
    found = _around(conn, session_id, anchor_id, window)
    if found is None:
        return {"window": [], "messages_before": 0, "messages_after": 0, "bookend_start": [],
                "bookend_end": []}
    before, anchor, after = found
    keep = set(keep_roles) if keep_roles is not None else None
    shown = [row for row in (*before, anchor, *after)
             if keep is None or row is anchor or row["role"] in keep]
    first = before[0]["id"] if before else anchor["id"]
    last = after[-1]["id"] if after else anchor["id"]
    start = _bookend(conn, session_id, below=first, above=None, count=bookend,
                     roles=keep_roles) if bookend else []
    end = _bookend(conn, session_id, below=None, above=last, count=bookend,
                   roles=keep_roles) if bookend else []
    return {"window": shown, "messages_before": len(before), "messages_after": len(after),
            "bookend_start": start, "bookend_end": end}


def _preview(stored: str | None) -> str:
    decoded = decode_content(stored)
    if isinstance(decoded, (list, dict)):
        text = text_of(stored) or MULTIMODAL_PREVIEW
    elif isinstance(decoded, str):
        text = decoded
    else:
        text = ""
    text = _WHITESPACE.sub(" ", text).strip()
    return text[:PREVIEW_CHARS - 3] + "..." if len(text) > PREVIEW_CHARS else text


def recent_user_messages(conn: Executor, session_id: str, *, limit: int,
                         include_inactive: bool) -> list[UserMessagePreview]:
    """``{id, timestamp, preview}`` of the session's user rows, newest id first."""
    query = select(messages.c.id, messages.c.timestamp, messages.c.content).where(
        messages.c.session_id == session_id, messages.c.role == "user")
    if not include_inactive:
        query = query.where(_live())
    rows = conn.execute(query.order_by(messages.c.id.desc()).limit(limit))
    return [{"id": r.id, "timestamp": r.timestamp, "preview": _preview(r.content)} for r in rows]


def has_platform_message_id(conn: Executor, session_id: str, platform_message_id: str) -> bool:
    return conn.execute(select(exists().where(
        messages.c.session_id == session_id,
        messages.c.platform_message_id == platform_message_id))).scalar() is True


def has_inactive(conn: Executor, session_id: str) -> bool:
    """Any compacted or rewound row (``active = 0``)."""
    return conn.execute(select(exists().where(messages.c.session_id == session_id,
                                              messages.c.active == 0))).scalar() is True


# --------------------------------------------------------------------------- rewind


def rewind(conn: Executor, session_id: str, target_id: int) -> Rewind:
    """Take the conversation back to before the target user message: live rows from the
    target on become inactive (the target too: the client pre-fills it), and
    ``rewind_count`` goes up even if nothing changed. ``ValueError`` when the target is not
    a user message of the session (nothing written)."""
    target = conn.execute(_all().where(messages.c.session_id == session_id,
                                       messages.c.id == target_id)).mappings().first()
    if target is None or target["role"] != "user":
        raise ValueError(f"message {target_id} is not a user message of session {session_id}")
    flipped = rowcount(conn.execute(update(messages).where(
        messages.c.session_id == session_id, messages.c.id >= target_id, _live())
        .values(active=0)))
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(
        rewind_count=func.coalesce(sessions.c.rewind_count, 0) + 1))
    head = conn.execute(select(func.max(messages.c.id)).where(
        messages.c.session_id == session_id, _live())).scalar()
    row = dict(target)
    row["content"] = decode_content(row["content"])
    return {"rewound_count": int(flipped), "target_message": row,
            "new_head_id": int(head) if head is not None else None}


def restore_rewound(conn: Executor, session_id: str, since_id: int) -> int:
    """Rewound rows from ``since_id`` on become live again; compacted rows stay summarised."""
    result = conn.execute(update(messages).where(
        messages.c.session_id == session_id, messages.c.id >= since_id, _rewound())
        .values(active=1))
    return rowcount(result)


# --------------------------------------------------------------------------- rewrite


def _insert_as_live(conn: Executor, session_id: str, batch: Sequence[PreparedMessage]) -> int:
    """The counters become the batch's own; the rows go in through the one append path."""
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(message_count=0, tool_call_count=0))
    return len(message_repo.append_many(conn, batch))


def replace(conn: Executor, session_id: str, batch: Sequence[PreparedMessage], *,
            active_only: bool) -> int:
    """Delete the session's rows (only the live ones with ``active_only``), insert ``batch`` as
    live rows and set both counters from it. An unknown session with rows → IntegrityError."""
    doomed = delete(messages).where(messages.c.session_id == session_id)
    conn.execute(doomed.where(_live()) if active_only else doomed)
    return _insert_as_live(conn, session_id, batch)


def archive_and_compact(conn: Executor, session_id: str,
                        batch: Sequence[PreparedMessage]) -> int:
    """Compaction in place: the live rows are kept as the record (``active = 0, compacted =
    1``) and ``batch`` (the summary) becomes the live context; counters follow the batch."""
    conn.execute(update(messages).where(messages.c.session_id == session_id, _live())
                 .values(active=0, compacted=1))
    return _insert_as_live(conn, session_id, batch)
