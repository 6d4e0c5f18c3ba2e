"""The agent's one-time data migrations, run when a file's stamp says they are missing.

The agent's v21 store runs three data steps when a file's ``schema_version`` is below the
release that introduced them: delegate tagging (below 16), the gateway backfill from
``sessions/sessions.json`` (below 18) and the per-model usage seed (below 20). They run whenever
the stamp says they are missing (on adoption, or on a file whose stamp was lowered by hand), and
the caller raises ``schema_version`` in the same transaction, so that they run once per lowering
(docs/v21.md#open-time-behaviour). A step that fails is logged and skipped, in a savepoint, so
the open goes on with the rest.

Every function takes the caller's ``Connection`` inside its transaction and never commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, and_, exists, func, insert, literal, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from hermes_store.db.models import MESSAGES, MODEL_USAGE, SESSIONS
from hermes_store.repo.markers import BRANCHED_FROM, DELEGATE_FROM

log = logging.getLogger(__name__)

sessions = SESSIONS
messages = MESSAGES
usage = MODEL_USAGE

ORPHANED = "__orphaned__"
# A root this small, untitled and childless that ran tools was a subagent whose parent is gone.
ORPHAN_MAX_MESSAGES = 25
DELEGATE_TAGGING_BELOW = 16
GATEWAY_BACKFILL_BELOW = 18
USAGE_SEED_BELOW = 20
# Where the gateway keeps its session index, under the agent's home.
GATEWAY_INDEX = Path("sessions") / "sessions.json"
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "reasoning_tokens")
_ROUTE = ("billing_provider", "billing_base_url", "billing_mode")


# --------------------------------------------------------------------------- active rows


def has_null_active(conn: Connection) -> bool:
    """Rows whose ``active`` lost its default (found through ``idx_messages_active_null``)."""
    return conn.execute(select(messages.c.id).where(messages.c.active.is_(None))
                        .limit(1)).first() is not None


def heal_null_active(conn: Connection) -> int:
    """``active = 1`` where it is NULL (such rows are hidden from every active-only reader)."""
    return conn.execute(update(messages).where(messages.c.active.is_(None))
                        .values(active=1)).rowcount or 0


# --------------------------------------------------------------------------- delegate tagging


def _config(text: str | None) -> dict[str, Any] | None:
    """The ``model_config`` object (NULL → ``{}``); None when it is not a JSON object."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _set_config(conn: Connection, session_id: str, config: dict[str, Any]) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(model_config=json.dumps(config)))


def tag_delegates(conn: Connection) -> int:
    """Mark subagent sessions the agent wrote before it tagged them; returns rows tagged.

    1. A child that is neither a branch (``_branched_from``, or started at or after its
       parent's ``'branched'`` end) nor a child of a compression-ended parent gets
       ``_delegate_from`` = its parent.
    2. Then an untitled, childless root with neither marker, at most 25 messages and a tool
       message gets ``_delegate_from = "__orphaned__"`` (hidden from lists from then on).

    Markers are merged into the existing object; a row whose ``model_config`` is not a JSON
    object is skipped (the agent abandoned the whole step on one such row).
    """
    parent = sessions.alias("parent")
    children = conn.execute(
        select(sessions.c.id, sessions.c.model_config, sessions.c.started_at,
               sessions.c.parent_session_id, parent.c.end_reason.label("parent_end"),
               parent.c.ended_at.label("parent_ended"))
        .join(parent, parent.c.id == sessions.c.parent_session_id)
        .order_by(sessions.c.id)).all()
    tagged = 0
    for row in children:
        config = _config(row.model_config)
        if config is None or DELEGATE_FROM in config or BRANCHED_FROM in config:
            continue
        if row.parent_end == "compression":
            continue
        if (row.parent_end == "branched" and row.parent_ended is not None
                and row.started_at is not None and row.started_at >= row.parent_ended):
            continue
        config[DELEGATE_FROM] = row.parent_session_id
        _set_config(conn, row.id, config)
        tagged += 1

    child = sessions.alias("child")
    roots = conn.execute(
        select(sessions.c.id, sessions.c.model_config)
        .where(sessions.c.parent_session_id.is_(None),
               or_(sessions.c.title.is_(None), sessions.c.title == ""),
               func.coalesce(sessions.c.message_count, 0) <= ORPHAN_MAX_MESSAGES,
               exists().where(messages.c.session_id == sessions.c.id, messages.c.role == "tool"),
               ~exists().where(child.c.parent_session_id == sessions.c.id))
        .order_by(sessions.c.id)).all()
    for root in roots:
        config = _config(root.model_config)
        if config is None or DELEGATE_FROM in config or BRANCHED_FROM in config:
            continue
        config[DELEGATE_FROM] = ORPHANED
        _set_config(conn, root.id, config)
        tagged += 1
    return tagged


# --------------------------------------------------------------------------- gateway backfill


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _read_gateway_index(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise TypeError(f"{path} holds a {type(data).__name__}, not an object")
    return data


def backfill_gateway(conn: Connection, sessions_json: Path) -> int:
    """Fill the gateway peer columns the agent kept in ``sessions.json``; returns rows changed.

    Per entry (a key not starting with ``_`` whose value has a ``session_id``) only NULL columns
    of that session are filled: ``session_key`` (the entry's, else its key), ``chat_id`` and
    ``thread_id`` from its ``origin``, ``chat_type``, ``display_name``, ``origin_json``; the
    expiry flag is set when the entry says it was finalized (or its memory flushed).
    """
    changed = 0
    for key, entry in _read_gateway_index(sessions_json).items():
        if str(key).startswith("_") or not isinstance(entry, Mapping):
            continue
        session_id = _text(entry.get("session_id"))
        if session_id is None:
            continue
        origin = entry.get("origin")
        origin = origin if isinstance(origin, Mapping) else {}
        fill = {
            "session_key": _text(entry.get("session_key")) or str(key),
            "chat_id": _text(origin.get("chat_id")),
            "thread_id": _text(origin.get("thread_id")),
            "chat_type": _text(entry.get("chat_type")),
            "display_name": _text(entry.get("display_name")),
            "origin_json": json.dumps(origin) if origin else None,
        }
        values: dict[str, Any] = {name: func.coalesce(sessions.c[name], value)
                                  for name, value in fill.items() if value is not None}
        if entry.get("expiry_finalized") or entry.get("memory_flushed"):
            values["expiry_finalized"] = 1
        if values:
            changed += conn.execute(update(sessions).where(sessions.c.id == session_id)
                                    .values(**values)).rowcount or 0
    return changed


# --------------------------------------------------------------------------- usage seed


def seed_usage(conn: Connection) -> int:
    """One ``session_model_usage`` row per session with tokens, from its own totals, unless a
    row with that key exists; returns rows inserted."""
    token_sum = sum((func.coalesce(sessions.c[name], 0) for name in _TOKENS), literal(0))
    model = func.coalesce(sessions.c.model, "unknown")
    route = [func.coalesce(sessions.c[name], "") for name in _ROUTE]
    already = exists().where(usage.c.session_id == sessions.c.id, usage.c.model == model,
                             *(usage.c[name] == value for name, value in zip(_ROUTE, route, strict=True)))
    source = select(
        sessions.c.id, model, *route,
        func.coalesce(sessions.c.api_call_count, 0),
        *(func.coalesce(sessions.c[name], 0) for name in _TOKENS),
        func.coalesce(sessions.c.estimated_cost_usd, 0.0),
        func.coalesce(sessions.c.actual_cost_usd, 0.0),
        sessions.c.cost_status, sessions.c.cost_source, sessions.c.started_at,
        func.coalesce(sessions.c.ended_at, sessions.c.started_at),
    ).where(and_(token_sum > 0, ~already))
    columns = ["session_id", "model", *_ROUTE, "api_call_count", *_TOKENS, "estimated_cost_usd",
               "actual_cost_usd", "cost_status", "cost_source", "first_seen", "last_seen"]
    return conn.execute(insert(usage).from_select(columns, source)).rowcount or 0


# --------------------------------------------------------------------------- all of them


def run_data_steps(conn: Connection, version: int, home: Path) -> list[str]:
    """The steps a file at agent ``version`` has not had, each in a savepoint; returns what
    ran. ``home`` is the directory holding the agent's ``sessions/`` folder."""
    steps: list[tuple[int, str, Callable[[], int]]] = [
        (DELEGATE_TAGGING_BELOW, "delegate tagging", lambda: tag_delegates(conn)),
        (GATEWAY_BACKFILL_BELOW, "gateway backfill",
         lambda: backfill_gateway(conn, home / GATEWAY_INDEX)),
        (USAGE_SEED_BELOW, "usage seed", lambda: seed_usage(conn)),
    ]
    done = []
    for below, name, step in steps:
        if version >= below:
            continue
        try:
            with conn.begin_nested():
                rows = step()
        except (SQLAlchemyError, OSError, ValueError, TypeError) as err:
            log.warning("%s skipped while adopting a schema_version %d store: %s",
                        name, version, err)
            continue
        done.append(f"{name}: {rows} rows")
    return done
