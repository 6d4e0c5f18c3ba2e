"""The message repository: append, read, replay as a conversation, clear, count.

Functions take a caller-owned ``Connection`` or ORM ``Session`` and never commit.
``prepare_message`` does all validation and serialisation before a transaction starts, so a
retried write unit only runs SQL. Every message enters the store through :func:`append` (one, the
agent's hot path) or :func:`append_many` (a batch, for imports): both count with the same rule
and statement and keep the CJK index in the same transaction. Cells are encoded and decoded by
:mod:`hermes_store.content`.
"""

from __future__ import annotations

import functools
import math
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, cast

from sqlalchemy import (
    ColumnElement,
    RowMapping,
    Select,
    Table,
    TableClause,
    bindparam,
    column,
    delete,
    func,
    insert,
    literal_column,
    select,
    table,
    update,
)
from sqlalchemy.dialects.postgresql.psycopg import dialect as pg_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

from hermes_store.content import (
    check_integer,
    check_key,
    check_text,
    decode_content,
    decode_json,
    decode_tool_calls,
    encode_content,
    encode_json,
    encode_tool_calls,
    tool_calls_added,
)
from hermes_store.db import dialect, distribution
from hermes_store.db.catalog import is_derived_name
from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.db.sqlite_driver import dbapi_of
from hermes_store.repo import bigrams, lineage
from hermes_store.repo.executor import rowcount
from hermes_store.repo.sessions import Executor, connection_of

sessions = SESSIONS
messages = MESSAGES

# The v11 keys of a message dict, in the v11 order; every other live column follows them.
MESSAGE_KEYS = ("id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
                "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
                "reasoning_details", "codex_reasoning_items", "codex_message_items")
# The agent's background-review prompts (docs/v21.md#behaviour-changes), case-sensitive.
REVIEW_HARNESS_PROMPTS = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)
_MAX_PARAMS = 900
_BATCH = 500

_MEMORY_BLOCK_RE = re.compile(r"<\s*memory-context\b[^>]*>.*?<\s*/\s*memory-context\s*>",
                              re.IGNORECASE | re.DOTALL)
_MEMORY_NOTE_RE = re.compile(
    r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.[^\]]*\]",
    re.IGNORECASE)
_MEMORY_TAG_RE = re.compile(r"<\s*/?\s*memory-context\b[^>]*>", re.IGNORECASE)


class MessageRow(TypedDict):
    """A message dict (:func:`get_messages`): the columns the models declare, ``content`` and
    ``tool_calls`` decoded (JSON: a string, a list of parts, …). A store adopted from a newer
    agent may carry more columns; they follow these, untyped."""

    id: int
    session_id: str
    role: str
    content: Any
    tool_call_id: str | None
    tool_calls: Any
    tool_name: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    active: int | None  # NULL where the column lost its default: live
    compacted: int | None
    effect_disposition: str | None
    platform_message_id: str | None
    observed: int | None


class ChatTurn(TypedDict):
    """One OpenAI-style chat turn (:func:`conversation`); the optional keys appear only when
    they hold something."""

    role: str
    content: Any
    timestamp: NotRequired[float]
    tool_call_id: NotRequired[str]
    tool_name: NotRequired[str]
    effect_disposition: NotRequired[str]
    tool_calls: NotRequired[Any]
    message_id: NotRequired[str]
    observed: NotRequired[bool]
    finish_reason: NotRequired[str]
    reasoning: NotRequired[str]
    reasoning_content: NotRequired[str]
    reasoning_details: NotRequired[Any]
    codex_reasoning_items: NotRequired[Any]
    codex_message_items: NotRequired[Any]


# --------------------------------------------------------------------------- append


@dataclass(frozen=True)
class PreparedMessage:
    """A validated, serialised message row plus the number of tool calls it adds."""

    row: dict[str, Any]
    tool_call_delta: int


def prepare_message(session_id: str, role: object, *, content: object = None,
                    tool_name: str | None = None, tool_calls: object = None,
                    tool_call_id: str | None = None, token_count: int | None = None,
                    finish_reason: str | None = None, reasoning: str | None = None,
                    reasoning_content: str | None = None, reasoning_details: Any = None,
                    codex_reasoning_items: Any = None, codex_message_items: Any = None,
                    platform_message_id: str | None = None, observed: bool = False,
                    effect_disposition: str | None = None,
                    timestamp: float) -> PreparedMessage:
    if not isinstance(role, str):
        raise TypeError(f"role must be a str, not {type(role).__name__}")
    if not role:
        raise ValueError("role must not be empty")
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) \
            or not math.isfinite(timestamp):
        raise ValueError(f"timestamp must be a finite number, not {timestamp!r}")
    for name, value in (("role", role), ("tool_name", tool_name), ("tool_call_id", tool_call_id),
                        ("finish_reason", finish_reason), ("reasoning", reasoning),
                        ("reasoning_content", reasoning_content),
                        ("platform_message_id", platform_message_id),
                        ("effect_disposition", effect_disposition)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
        check_text(name, value)
    if token_count is not None and (not isinstance(token_count, int)
                                    or isinstance(token_count, bool)):
        raise TypeError(f"token_count must be an int or None, not {type(token_count).__name__}")
    check_integer("token_count", token_count)
    check_key("platform_message_id", platform_message_id)
    stored_calls, n_calls = encode_tool_calls(tool_calls)
    row = {
        "session_id": session_id, "role": role, "content": encode_content(content),
        "tool_call_id": tool_call_id, "tool_calls": stored_calls, "tool_name": tool_name,
        "timestamp": float(timestamp), "token_count": token_count,
        "finish_reason": finish_reason, "reasoning": reasoning,
        "reasoning_content": reasoning_content,
        "reasoning_details": encode_json(reasoning_details),
        "codex_reasoning_items": encode_json(codex_reasoning_items),
        "codex_message_items": encode_json(codex_message_items),
        "platform_message_id": platform_message_id, "observed": 1 if observed else 0,
        "effect_disposition": effect_disposition, "active": 1, "compacted": 0,
    }
    # Tool results carry the id of the call they answer, never new calls of their own
    # (content.tool_calls_added, without parsing the calls a second time).
    return PreparedMessage(row, 0 if role == "tool" else n_calls)


def stored_message(row: Mapping[str, Any]) -> PreparedMessage:
    """A row whose cells are already in stored form (a backup's, an import's), ready to append.

    It may carry ``id``, ``timestamp``, ``active``, ``compacted`` or any column the live table
    has; it is counted by the rule every append uses.
    """
    return PreparedMessage(dict(row), tool_calls_added(row.get("role"), row.get("tool_calls")))


# Built once: appends are the hot path, and a constant statement's cache key is memoized, so
# SQLAlchemy does not rebuild and re-key the statement on every message.
_BUMP_COUNTERS = update(sessions).where(sessions.c.id == bindparam("sid")).values(
    message_count=func.coalesce(sessions.c.message_count, 0) + bindparam("rows"),
    tool_call_count=func.coalesce(sessions.c.tool_call_count, 0) + bindparam("delta"),
)
# On SQLite the same two statements, compiled once, run on the driver cursor: SQLAlchemy's
# per-statement execution cost more than the statements themselves (benchmarks/
# test_bench_append.py). The message id is the cursor's lastrowid, which triggers do not move.
_SQLITE = sqlite_dialect(paramstyle="named")
_BUMP_COMPILED = _BUMP_COUNTERS.compile(dialect=_SQLITE)
_BUMP_SQLITE = _BUMP_COMPILED.string
_BUMP_SQLITE_PARAMS = dict(_BUMP_COMPILED.params)  # the constants 0 and 1 (a property: rebuilt)


@functools.cache
def _insert_sqlite(columns: tuple[str, ...]) -> str:
    # Keyed by the row's own columns, so a column added to the row is never left out.
    return insert(messages).compile(dialect=_SQLITE, column_keys=list(columns)).string


# PostgreSQL the same way (psycopg's named placeholders): SQLAlchemy's execution was a third of
# the client's time per append (benchmarks/bench_writers.py, library beside the raw floor).
_PG = pg_dialect(paramstyle="pyformat")  # type: ignore[no-untyped-call]  # unannotated upstream
_BUMP_PG_COMPILED = _BUMP_COUNTERS.compile(dialect=_PG)
_BUMP_PG = _BUMP_PG_COMPILED.string
_BUMP_PG_PARAMS = dict(_BUMP_PG_COMPILED.params)


# A distributed store's messages carry their lineage root (the distribution column,
# db/distribution.py); a single-server store's do not have the column at all.
_PG_ROOTED = table("messages", *(column(c.name, c.type) for c in bigrams.PG_MESSAGES.columns),
                   column("root_session_id"))


@functools.cache
def _insert_pg(columns: tuple[str, ...]) -> str:
    target = _PG_ROOTED if "root_session_id" in columns else bigrams.PG_MESSAGES
    statement = insert(target).returning(target.c.id)
    compiled = statement.compile(dialect=_PG, column_keys=list(columns))
    # Every placeholder must be the column's own name: the row dict is bound as it is.
    assert all(compiled.bind_names[b] == b.key for b in compiled.binds.values())
    return compiled.string


def append(conn: Executor, message: PreparedMessage) -> int:
    """Insert the row, bump the session's counters and keep the CJK index, all in ``conn``'s
    transaction. An unknown session fails with ``IntegrityError`` (foreign key)."""
    conn = connection_of(conn)
    row = message.row
    bump = {"sid": row["session_id"], "rows": 1, "delta": message.tool_call_delta}
    if conn.dialect.name == "sqlite":
        cursor = dbapi_of(conn.connection).cursor()
        try:
            new_id = cursor.execute(_insert_sqlite(tuple(row)), row).lastrowid
            if new_id is None:  # sqlite3 sets it on every INSERT: None means nothing ran
                raise sqlite3.DatabaseError("the message insert reported no row id")
            cursor.execute(_BUMP_SQLITE, {**_BUMP_SQLITE_PARAMS, **bump})
        finally:
            cursor.close()
    else:
        if bigrams.writes_vector(conn):  # PostgreSQL: the CJK tokens ride along
            row = bigrams.with_vector(row)
        if distribution.distributed(conn):
            sid = row["session_id"]
            row = {**row, "root_session_id": roots_of(conn, [sid]).get(sid, sid)}
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]  # None only once closed
        try:
            new_id = cursor.execute(_insert_pg(tuple(row)), row).fetchone()[0]
            cursor.execute(_BUMP_PG, {**_BUMP_PG_PARAMS, **bump})
        finally:
            cursor.close()
    bigrams.sync_messages(conn, [new_id])
    return int(new_id)


def append_many(conn: Executor, batch: Sequence[PreparedMessage], *, into: Table = messages,
                keep_ids: bool = False) -> list[int]:
    """:func:`append` for a batch, in order: rows, counters and CJK index in ``conn``'s
    transaction; returns the ids.

    With ``keep_ids`` every row keeps its own ``id`` when all are free (a restore stays exact);
    otherwise the batch takes consecutive ids above any ever used. ``into`` is the live
    (reflected) table when rows carry columns the models do not know.
    """
    if not batch:
        return []
    rows = [dict(m.row) for m in batch]
    given = [i for r in rows if isinstance(i := r.get("id"), int) and not isinstance(i, bool)]
    db = connection_of(conn)
    if keep_ids and len(given) == len(rows) and len(set(given)) == len(given) \
            and _free_ids(db, into, given):
        dialect.ids_taken(db, into, max(given))
    else:
        for r, new_id in zip(rows, dialect.next_ids(db, into, len(rows)), strict=True):
            r["id"] = new_id
    target: TableClause = into
    if bigrams.writes_vector(db, into):
        target = bigrams.PG_MESSAGES if into is messages else into
        rows = [bigrams.with_vector(r) for r in rows]
    if distribution.distributed(db) and "root_session_id" not in into.c:
        target = _PG_ROOTED
        roots = roots_of(db, {r["session_id"] for r in rows})
        rows = [{**r, "root_session_id": roots.get(r["session_id"], r["session_id"])}
                for r in rows]
    # executemany needs one key set per statement: group rows by their keys, ids fix the order.
    groups: dict[frozenset[str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(frozenset(r), []).append(r)
    for group in groups.values():
        for i in range(0, len(group), _BATCH):
            db.execute(insert(target), group[i:i + _BATCH])
    bumps: dict[str, list[int]] = {}
    for r, m in zip(rows, batch, strict=True):
        bump = bumps.setdefault(r["session_id"], [0, 0])
        bump[0] += 1
        bump[1] += m.tool_call_delta
    db.execute(_BUMP_COUNTERS, [{"sid": sid, "rows": n, "delta": delta}
                                for sid, (n, delta) in bumps.items()])
    ids = [int(r["id"]) for r in rows]
    for i in range(0, len(ids), _BATCH):
        bigrams.sync_messages(db, ids[i:i + _BATCH])
    return ids


def roots_of(conn: Executor, session_ids: Iterable[str]) -> dict[str, str]:
    """Each known session's root (what a distributed store's message rows carry). Callers give
    an unknown session its own id as root: its row then fails the foreign key onto
    ``(root_session_id, id)`` with ``IntegrityError``, as on one server (a NULL root would be
    Citus's own DataError)."""
    wanted = list(session_ids)
    found: dict[str, str] = {}
    for i in range(0, len(wanted), _BATCH):
        found.update(conn.execute(select(sessions.c.id, sessions.c.root_session_id)
                                  .where(sessions.c.id.in_(wanted[i:i + _BATCH]))).all())
    return found


def _free_ids(conn: Executor, into: Table, ids: Sequence[int]) -> bool:
    for i in range(0, len(ids), _BATCH):
        if conn.execute(select(func.count()).where(into.c.id.in_(ids[i:i + _BATCH]))).scalar():
            return False
    return True


# --------------------------------------------------------------------------- read


def visible(include_inactive: bool) -> ColumnElement[bool] | None:
    """Rows a reader sees: the live context (``active = 1``) unless inactive ones are asked
    for. NULL ``active`` (a file whose column lost its default) counts as live."""
    return None if include_inactive else func.coalesce(messages.c.active, 1) == 1


def all_columns() -> Select[*tuple[Any, ...]]:
    # Every column of the live table: adopted stores may carry more than the models declare.
    return select(literal_column("*")).select_from(messages)


def message_dict(row: Mapping[str, Any] | RowMapping) -> MessageRow:
    """A message dict: every column (the v11 keys first), ``content`` and ``tool_calls``
    decoded."""
    item = {key: row[key] for key in MESSAGE_KEYS if key in row}
    item.update((k, v) for k, v in row.items() if not is_derived_name(k))
    item["content"] = decode_content(item["content"])
    item["tool_calls"] = decode_tool_calls(item["tool_calls"])
    # Rows come from all_columns() (SELECT * of messages), so every model column is a key.
    return cast(MessageRow, item)


def get_messages(conn: Executor, session_id: str, *, include_inactive: bool = True,
                 limit: int | None = None, offset: int = 0) -> list[MessageRow]:
    """Rows in insertion order (paged after the ``active`` filter), decoded."""
    query = all_columns().where(messages.c.session_id == session_id)
    if (clause := visible(include_inactive)) is not None:
        query = query.where(clause)
    query = query.order_by(messages.c.id)
    if limit is not None:
        query = query.limit(limit)
    if offset:
        query = query.offset(offset)
    return [message_dict(row) for row in conn.execute(query).mappings()]


def _raw_rows(conn: Executor, session_ids: list[str], *,
              include_inactive: bool) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {sid: [] for sid in session_ids}
    clause = visible(include_inactive)
    for start in range(0, len(session_ids), _MAX_PARAMS):
        chunk = session_ids[start:start + _MAX_PARAMS]
        query = all_columns().where(messages.c.session_id.in_(chunk))
        if clause is not None:
            query = query.where(clause)
        for row in conn.execute(query.order_by(messages.c.id)).mappings():
            grouped[row["session_id"]].append(dict(row))
    return grouped


def messages_of(conn: Executor, session_ids: Iterable[str], *,
                include_inactive: bool = False) -> dict[str, list[MessageRow]]:
    """``get_messages`` for many sessions, in batches of bound parameters (for exports, which
    carry the live context: active rows only unless asked)."""
    grouped = _raw_rows(conn, list(dict.fromkeys(session_ids)),
                        include_inactive=include_inactive)
    return {sid: [message_dict(row) for row in rows] for sid, rows in grouped.items()}


def strip_memory_context(text: str) -> str:
    """Remove recalled-memory blocks the agent injected into a turn (never part of the chat)."""
    text = _MEMORY_BLOCK_RE.sub("", text)
    text = _MEMORY_NOTE_RE.sub("", text)
    text = _MEMORY_TAG_RE.sub("", text)
    return text.strip()


def _as_turn(row: dict[str, Any]) -> ChatTurn:
    """One chat turn (docs/v21.md#behaviour-changes): role, content, timestamp, then the
    provenance keys that hold something, then the assistant's own keys."""
    role = row["role"]
    content = decode_content(row["content"])
    if role in ("user", "assistant") and isinstance(content, str):
        content = strip_memory_context(content)
    turn: ChatTurn = {"role": role, "content": content}
    if row.get("timestamp"):
        turn["timestamp"] = float(row["timestamp"])
    if row.get("tool_call_id"):
        turn["tool_call_id"] = row["tool_call_id"]
    if row.get("tool_name"):
        turn["tool_name"] = row["tool_name"]
    if row.get("effect_disposition"):
        turn["effect_disposition"] = row["effect_disposition"]
    calls = decode_tool_calls(row["tool_calls"]) if row["tool_calls"] is not None else None
    if calls:
        turn["tool_calls"] = calls
    if row.get("platform_message_id"):
        turn["message_id"] = row["platform_message_id"]
    if row.get("observed"):
        turn["observed"] = True
    if role == "assistant":
        if row["finish_reason"]:
            turn["finish_reason"] = row["finish_reason"]
        if row["reasoning"]:
            turn["reasoning"] = row["reasoning"]
        if row["reasoning_content"] is not None:
            turn["reasoning_content"] = row["reasoning_content"]
        # The JSON extras, each spelled out as the key ChatTurn declares.
        if row["reasoning_details"] is not None:
            turn["reasoning_details"] = decode_json(row["reasoning_details"], broken=None)
        if row["codex_reasoning_items"] is not None:
            turn["codex_reasoning_items"] = decode_json(row["codex_reasoning_items"], broken=None)
        if row["codex_message_items"] is not None:
            turn["codex_message_items"] = decode_json(row["codex_message_items"], broken=None)
    return turn


def _is_review_harness(turn: ChatTurn) -> bool:
    content = turn["content"]
    return (turn["role"] in ("user", "system") and isinstance(content, str)
            and content.lstrip().startswith(REVIEW_HARNESS_PROMPTS))


def drop_review_harness(turns: list[ChatTurn]) -> list[ChatTurn]:
    """The agent's background review runs as a prompt appended to the conversation; the prompt
    and the assistant's answer to it are bookkeeping, never part of the chat to replay."""
    kept: list[ChatTurn] = []
    skip_answer = False
    for turn in turns:
        if skip_answer and turn["role"] == "assistant":
            skip_answer = False
            continue
        skip_answer = False
        if _is_review_harness(turn):
            skip_answer = True
            continue
        kept.append(turn)
    return kept


def conversation(conn: Executor, session_id: str, *, include_ancestors: bool = False,
                 include_inactive: bool = False,
                 max_depth: int = lineage.DEFAULT_MAX_DEPTH) -> list[ChatTurn]:
    """The session as OpenAI-style chat turns, optionally replayed from its root ancestor."""
    if include_ancestors:
        chain = lineage.ancestors_of(conn, session_id, max_depth=max_depth)
        order = [r.id for r in sorted(chain, key=lambda r: r.depth, reverse=True)]
    else:
        order = [session_id]
    by_session = _raw_rows(conn, order, include_inactive=include_inactive)
    turns: list[ChatTurn] = []
    last_user: Any = None
    answered = True
    for sid in order:
        for row in by_session.get(sid, []):
            turn = _as_turn(row)
            if include_ancestors and turn["role"] == "user":
                # A resent prompt with nothing answered in between is one turn, not two.
                if not answered and turn["content"] == last_user:
                    continue
                last_user, answered = turn["content"], False
            elif turn["role"] == "assistant" and (turn["content"] or turn.get("tool_calls")):
                answered = True
            turns.append(turn)
    return drop_review_harness(turns)


# --------------------------------------------------------------------------- clear / count


def clear(conn: Executor, session_id: str) -> int:
    """Delete the session's messages (triggers drop their index rows) and zero its counters."""
    deleted = rowcount(conn.execute(delete(messages).where(messages.c.session_id == session_id)))
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(message_count=0, tool_call_count=0))
    return deleted


def count(conn: Executor, session_id: str | None = None) -> int:
    query = select(func.count()).select_from(messages)
    if session_id is not None:
        query = query.where(messages.c.session_id == session_id)
    return int(conn.execute(query).scalar() or 0)
