"""The agent's in-process import: ``export_session``/``export_all`` dicts restored as history.

Two steps. ``validate`` (no database) checks every entry, collecting one error per bad entry,
and prepares each session row and message row, so the write unit only runs SQL and a retried
unit writes the same values. ``run`` (one unit) skips ids the store already has, inserts the
rest with their messages through the one append path (``messages.append_many``: counters and
the CJK index move with the rows), then attaches parents once every session exists.

What an import keeps is the history: times, tokens, costs, title, model, prompt, workspace and
billing fields, ``archived``. Runtime state (gateway chat fields, handoff, compression cooldown
and streak, ``rewind_count``, expiry, pins) starts fresh, as for a new session.

The caps bound how long the unit holds the write lock; the facade may lower them per instance.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from sqlalchemy import Connection, insert, select, update

from hermes_store.content import dump_json
from hermes_store.db.models import SESSIONS
from hermes_store.repo import lineage, prompts
from hermes_store.repo import messages as message_repo
from hermes_store.repo.messages import PreparedMessage
from hermes_store.repo.titles import sanitize_title

sessions = SESSIONS

MAX_SESSIONS = 500
MAX_MESSAGES_PER_SESSION = 10_000
MAX_TOTAL_MESSAGES = 50_000
MAX_SESSION_BYTES = 5 * 1024 * 1024
MAX_TOTAL_BYTES = 25 * 1024 * 1024

IMPORT_SOURCE = "import"
SESSION_TEXT_FIELDS = ("source", "user_id", "model", "system_prompt", "end_reason", "cwd",
                       "git_branch", "git_repo_root", "billing_provider", "billing_base_url",
                       "billing_mode", "cost_status", "cost_source", "pricing_version", "title",
                       "parent_session_id")
MESSAGE_TEXT_FIELDS = ("tool_call_id", "tool_name", "effect_disposition", "finish_reason",
                       "reasoning", "reasoning_content", "platform_message_id", "message_id")
COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
            "reasoning_tokens", "api_call_count")
COSTS = ("estimated_cost_usd", "actual_cost_usd")
# Copied as given once checked to be text (title and source are cleaned first).
_KEPT_TEXT = ("user_id", "model", "system_prompt", "end_reason", "cwd", "git_branch",
              "git_repo_root", "billing_provider", "billing_base_url", "billing_mode",
              "cost_status", "cost_source", "pricing_version")
_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")
_JSON_TEXT = ("reasoning_details", "codex_reasoning_items", "codex_message_items")
_CLOCK_STEP = 1e-6
_MAX_PARAMS = 900
TITLE_TAKEN = "title already in use by another session"


@dataclass(frozen=True)
class Limits:
    sessions: int = MAX_SESSIONS
    messages_per_session: int = MAX_MESSAGES_PER_SESSION
    total_messages: int = MAX_TOTAL_MESSAGES
    session_bytes: int = MAX_SESSION_BYTES
    total_bytes: int = MAX_TOTAL_BYTES


@dataclass
class Entry:
    """One valid payload session, ready to insert (its parent attaches after every insert)."""

    index: int
    session_id: str
    row: dict[str, Any]
    parent_id: str | None
    messages: list[PreparedMessage]


class EntryError(TypedDict):
    """Why one payload entry was refused (``index`` into the payload; its id once known)."""

    index: int
    session_id: NotRequired[str]
    error: str


class ImportReport(TypedDict):
    """``import_sessions``' answer; the id lists only when the import ran."""

    ok: bool
    imported: int
    skipped: int
    detached: int
    imported_ids: NotRequired[list[str]]
    skipped_ids: NotRequired[list[str]]
    errors: list[EntryError]


@dataclass
class Plan:
    entries: list[Entry] = field(default_factory=list)
    errors: list[EntryError] = field(default_factory=list)


class _Invalid(Exception):
    pass


@dataclass
class _Totals:
    size: int = 0
    messages: int = 0
    seen: set[str] = field(default_factory=set)


def failure(errors: list[EntryError]) -> ImportReport:
    return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}


# --------------------------------------------------------------------------- validation


def validate(payload: list[Any], limits: Limits, now: float) -> Plan:
    """Check every entry before anything is written; each bad entry reports its first error."""
    plan, totals = Plan(), _Totals()
    for index, raw in enumerate(payload):
        holder: dict[str, str] = {}
        try:
            plan.entries.append(_entry(index, raw, holder, totals, limits, now))
        except _Invalid as err:
            sid = holder.get("session_id")
            plan.errors.append({"index": index, "error": str(err)} if sid is None
                               else {"index": index, "session_id": sid, "error": str(err)})
    return plan


def _entry(index: int, raw: object, holder: dict[str, str], totals: _Totals, limits: Limits,
           now: float) -> Entry:
    if not isinstance(raw, dict):
        raise _Invalid("session must be an object")
    raw_id = raw.get("id")
    session_id = raw_id.strip() if isinstance(raw_id, str) else ""
    if not session_id:
        raise _Invalid("session id is required")
    holder["session_id"] = session_id
    if session_id in totals.seen:
        raise _Invalid("duplicate session id")
    totals.seen.add(session_id)
    msgs = raw.get("messages", [])
    if not isinstance(msgs, list):
        raise _Invalid("messages must be a list")
    if len(msgs) > limits.messages_per_session:
        raise _Invalid("messages exceeds the per-session import limit")
    if not all(isinstance(m, dict) for m in msgs):
        raise _Invalid("messages must contain only objects")
    try:
        size = len(json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        raise _Invalid("session must be JSON serializable") from None
    if size > limits.session_bytes:
        raise _Invalid("session exceeds the import size limit")
    totals.size += size
    if totals.size > limits.total_bytes:
        raise _Invalid("import exceeds the total size limit")
    model_config = _model_config(raw.get("model_config"))
    for name in SESSION_TEXT_FIELDS:
        _text(name, raw.get(name))
    row = _session_row(session_id, raw, model_config, now)
    prepared = _messages(session_id, msgs, now)
    totals.messages += len(msgs)
    if totals.messages > limits.total_messages:
        raise _Invalid("messages exceeds the total import limit")
    parent = raw.get("parent_session_id")
    parent = parent.strip() if isinstance(parent, str) and parent.strip() else None
    return Entry(index, session_id, row, parent, prepared)


def _text(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Invalid(f"{name} must be a string")
    return value


def _model_config(value: object) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            raise _Invalid("model_config must be valid JSON") from None
        if not isinstance(decoded, dict):
            raise _Invalid("model_config must be a JSON object")
        return value
    if not isinstance(value, dict):
        raise _Invalid("model_config must be a JSON object")
    try:
        return dump_json(value)
    except (TypeError, ValueError):
        raise _Invalid("model_config must be JSON serializable") from None


def _time(value: object) -> float | None:
    """Epoch seconds from a number, a numeric string or an ISO 8601 string; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                return None
            # A time without an offset is read as UTC, as the file importers read theirs.
            return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
        return number if math.isfinite(number) else None
    return None


def _counter(name: str, value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(f"{name} must be an integer")
    return value


def _cost(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise _Invalid(f"{name} must be a number")
    return float(value)


def _session_row(session_id: str, raw: dict[str, Any], model_config: str | None,
                 now: float) -> dict[str, Any]:
    source = raw.get("source")
    try:
        title = sanitize_title(raw.get("title"))
    except ValueError as err:
        raise _Invalid(str(err)) from None
    ended_at = raw.get("ended_at")
    ended = _time(ended_at)
    if ended_at is not None and ended is None:
        raise _Invalid("ended_at must be a time")
    started = _time(raw.get("started_at"))
    row: dict[str, Any] = {
        "id": session_id,
        "source": source if isinstance(source, str) and source.strip() else IMPORT_SOURCE,
        "model_config": model_config, "title": title,
        "started_at": now if started is None else started, "ended_at": ended,
        "archived": 1 if raw.get("archived") else 0,
        "root_session_id": session_id,  # a root until _attach links it
        "message_count": 0, "tool_call_count": 0,  # the appends count the rows in
    }
    for name in _KEPT_TEXT:
        row[name] = raw.get(name)
    for name in COUNTERS:
        row[name] = _counter(name, raw.get(name))
    for name in COSTS:
        row[name] = _cost(name, raw.get(name))
    return row


def _json_text(value: object) -> object:
    """A str holding JSON is stored as that JSON, not as a quoted string of it."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _messages(session_id: str, msgs: list[dict[str, Any]],
              now: float) -> list[PreparedMessage]:
    """Check each message, then prepare it (as ``replace_messages`` would store it).

    Timestamps: given ones are kept; missing ones come from a clock that starts at ``now`` and
    always moves past the previous row, so replayed order and time order agree."""
    given = [_checked_time(j, m) for j, m in enumerate(msgs)]
    clock, prepared = now, []
    for j, (raw, stamp) in enumerate(zip(msgs, given, strict=True)):
        stamp = clock if stamp is None else stamp
        clock = max(clock, stamp) + _CLOCK_STEP
        prepared.append(_prepare(session_id, j, raw, stamp))
    return prepared


def _checked_time(j: int, raw: dict[str, Any]) -> float | None:
    where = f"messages[{j}]"
    for name in MESSAGE_TEXT_FIELDS:
        _text(f"{where}.{name}", raw.get(name))
    role = raw.get("role")
    if not isinstance(role, str) or not role:
        raise _Invalid(f"{where}.role must be a non-empty string")
    token_count = raw.get("token_count")
    if token_count is not None and (not isinstance(token_count, int)
                                    or isinstance(token_count, bool)):
        raise _Invalid(f"{where}.token_count must be an integer")
    return _time(raw.get("timestamp"))


def _prepare(session_id: str, j: int, raw: dict[str, Any], stamp: float) -> PreparedMessage:
    role = raw["role"]
    extra: dict[str, Any] = {k: (_json_text(raw.get(k)) if k in _JSON_TEXT else raw.get(k))
             for k in _ASSISTANT_ONLY} if role == "assistant" else {}
    try:
        prepared = message_repo.prepare_message(
            session_id, role, content=raw.get("content"), tool_name=raw.get("tool_name"),
            tool_calls=raw.get("tool_calls"), tool_call_id=raw.get("tool_call_id"),
            token_count=raw.get("token_count"), finish_reason=raw.get("finish_reason"),
            timestamp=stamp, **extra)
    except (TypeError, ValueError) as err:
        raise _Invalid(f"messages[{j}]: {err}") from None
    platform_id = raw.get("platform_message_id")
    if platform_id is None:
        platform_id = raw.get("message_id")
    # The v21 columns the single append does not take yet; the row is inserted as given.
    return PreparedMessage({**prepared.row, "active": 1, "compacted": 0,
                            "platform_message_id": platform_id,
                            "effect_disposition": raw.get("effect_disposition"),
                            "observed": 1 if raw.get("observed") else 0},
                           prepared.tool_call_delta)


# --------------------------------------------------------------------------- write


def _present(conn: Connection, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), _MAX_PARAMS):
        chunk = ids[start:start + _MAX_PARAMS]
        found.update(conn.execute(select(sessions.c.id).where(sessions.c.id.in_(chunk))).scalars())
    return found


def _title_clashes(conn: Connection, fresh: list[Entry]) -> list[EntryError]:
    """Titles are unique in the store: a fresh session may not take one held by another."""
    titled = [e for e in fresh if e.row["title"] is not None]
    wanted = list({e.row["title"] for e in titled})
    held: set[str] = set()
    for start in range(0, len(wanted), _MAX_PARAMS):
        chunk = wanted[start:start + _MAX_PARAMS]
        held.update(conn.execute(select(sessions.c.title)
                                 .where(sessions.c.title.in_(chunk))).scalars())
    clashes: list[EntryError] = []
    for entry in titled:
        if entry.row["title"] in held:
            clashes.append({"index": entry.index, "session_id": entry.session_id,
                            "error": TITLE_TAKEN})
        held.add(entry.row["title"])
    return clashes


def _attach(conn: Connection, fresh: list[Entry], existing: set[str]) -> int:
    """Link each fresh child to its parent when that exists; where the payload's links form a
    cycle, the link of the cycle's first session in import order is left off (so a walk up
    from any of them ends). Returns how many children stayed roots."""
    fresh_ids = {e.session_id for e in fresh}
    wanted = [e for e in fresh if e.parent_id is not None]
    parents = {e.parent_id for e in fresh if e.parent_id is not None}
    outside = sorted(parents - fresh_ids - existing)
    known = fresh_ids | existing | _present(conn, outside)
    parent_of = {e.session_id: e.parent_id for e in wanted if e.parent_id in known}
    detached = len(wanted) - len(parent_of)
    for start in _cycle_starts([e.session_id for e in fresh], parent_of):
        del parent_of[start]
        detached += 1
    for child, parent in parent_of.items():
        below = lineage.subtree(conn, child)
        conn.execute(update(sessions).where(sessions.c.id == child)
                     .values(parent_session_id=parent))
        lineage.reroot(conn, child, below)
    return detached


def _cycle_starts(order: list[str], parent_of: dict[str, str]) -> list[str]:
    """The first session, in ``order``, of each cycle of ``parent_of`` (every id has one
    parent at most, so each cycle is found once, by the walk that first enters it). Stored
    rows never point at ids that did not exist, so only this import's links can close one."""
    rank = {sid: i for i, sid in enumerate(order)}
    done: set[str] = set()
    starts: list[str] = []
    for sid in order:
        path: dict[str, int] = {}  # id -> its place on this walk
        node: str | None = sid
        while node is not None and node not in done and node not in path:
            path[node] = len(path)
            node = parent_of.get(node)
        if node is not None and node in path:
            cycle = list(path)[path[node]:]
            starts.append(min(cycle, key=rank.__getitem__))
        done.update(path)
    return starts


def run(conn: Connection, plan: Plan) -> ImportReport:
    """Write a validated plan in the caller's transaction; returns the import's report."""
    existing = _present(conn, [e.session_id for e in plan.entries])
    fresh = [e for e in plan.entries if e.session_id not in existing]
    clashes = _title_clashes(conn, fresh)
    if clashes:
        return failure(clashes)
    if fresh:
        conn.execute(insert(sessions), [e.row for e in fresh])
        prompts.move(conn, [e.session_id for e in fresh])
    message_repo.append_many(conn, [m for entry in fresh for m in entry.messages])
    detached = _attach(conn, fresh, existing)
    skipped = [e.session_id for e in plan.entries if e.session_id in existing]
    return {"ok": True, "imported": len(fresh), "skipped": len(skipped), "detached": detached,
            "imported_ids": [e.session_id for e in fresh], "skipped_ids": skipped, "errors": []}
