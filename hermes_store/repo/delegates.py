"""Delegate (subagent) sessions: the ``_delegate_from`` marker in ``model_config``, the cascade
that deletes a session's subagents with it, and the v21 agent's one-time tagging of
subagents written before the marker existed (docs/v21.md#bulk, docs/v21.md#behaviour-changes).

The marker's value is the parent id, or ``"__orphaned__"`` for a subagent whose parent is not
known. It is decoded in Python (one bad ``model_config`` must not break a delete, and the SQL
stays the same on both backends); which rows carry it is found by the textual test of
:mod:`hermes_store.repo.markers`.

Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy import and_, exists, func, or_, select, update

from hermes_store.content import dump_json
from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.repo import markers
from hermes_store.repo.executor import Executor

sessions = SESSIONS
messages = MESSAGES

ORPHANED = "__orphaned__"
COMPRESSION = "compression"
BRANCHED = "branched"
# Tagging step 2: a root this small, untitled and childless that ran tools was a subagent.
ORPHAN_MAX_MESSAGES = 25
_PARENT = sessions.alias("tag_parent")
_CHILD = sessions.alias("tag_child")


def _config(text: str | None) -> object:
    """The parsed JSON (any shape: callers look for an object), None when it does not parse."""
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return None


def delegate_from(model_config: str | None) -> str | None:
    """The marker's value, when ``model_config`` is a JSON object holding it as text."""
    config = _config(model_config)
    value = config.get(markers.DELEGATE_FROM) if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------------- the cascade


def cascade(conn: Executor, doomed: Iterable[str]) -> list[str]:
    """The delegate rows that go with ``doomed``: repeatedly, rows whose ``_delegate_from`` is
    a doomed or collected id, or that carry the marker and whose parent is one. Doomed ids are
    never collected, so marker cycles end. Untagged children are not collected."""
    doomed_ids = set(doomed)
    tagged = conn.execute(select(sessions.c.id, sessions.c.parent_session_id,
                                 sessions.c.model_config)
                          .where(markers.carries_clause(sessions.c.model_config,
                                                        markers.DELEGATE_FROM))).all()
    links = [(row.id, row.parent_session_id, delegate_from(row.model_config)) for row in tagged]
    collected: list[str] = []
    seen = set(doomed_ids)
    frontier = set(doomed_ids)
    while frontier:
        found = [sid for sid, parent, source in links
                 if sid not in seen and (source in frontier or parent in frontier)]
        collected += found
        seen.update(found)
        frontier = set(found)
    return collected


# --------------------------------------------------------------------------- v16 tagging


def _merge(conn: Executor, session_id: str, model_config: str | None, value: str) -> bool:
    config = _config(model_config)
    if not isinstance(config, dict):
        return False  # not an object: left alone (the agent gave up the whole step here)
    config[markers.DELEGATE_FROM] = value
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(model_config=dump_json(config)))
    return True


def tag_delegates(conn: Executor) -> int:
    """The v21 agent's tagging for files stamped below 16; returns the rows tagged.

    1. A child that is neither a branch child nor a child of a ``'compression'``-ended parent
       is a subagent of its parent.
    2. A root with neither marker, no title, at most 25 messages, a tool message and no
       children is an orphaned subagent (hidden from lists from then on).
    """
    unmarked = ~markers.carries_clause(sessions.c.model_config, markers.DELEGATE_FROM)
    parent = _PARENT
    branch_or_continued = exists(select(parent.c.id).where(
        parent.c.id == sessions.c.parent_session_id,
        or_(parent.c.end_reason == COMPRESSION,
            and_(parent.c.end_reason == BRANCHED, parent.c.ended_at.is_not(None),
                 sessions.c.started_at >= parent.c.ended_at))))
    children = conn.execute(
        select(sessions.c.id, sessions.c.parent_session_id, sessions.c.model_config)
        .where(sessions.c.parent_session_id.is_not(None), unmarked,
               ~markers.carries_clause(sessions.c.model_config, markers.BRANCHED_FROM),
               ~branch_or_continued)
        .order_by(sessions.c.id)).all()
    tagged = sum(_merge(conn, row.id, row.model_config, row.parent_session_id)
                 for row in children)
    child = _CHILD
    orphans = conn.execute(
        select(sessions.c.id, sessions.c.model_config)
        .where(sessions.c.parent_session_id.is_(None),
               ~markers.carries_any_clause(sessions.c.model_config),
               sessions.c.title.is_(None),
               func.coalesce(sessions.c.message_count, 0) <= ORPHAN_MAX_MESSAGES,
               exists(select(messages.c.id).where(messages.c.session_id == sessions.c.id,
                                                  messages.c.role == "tool")),
               ~exists(select(child.c.id).where(child.c.parent_session_id == sessions.c.id)))
        .order_by(sessions.c.id)).all()
    tagged += sum(_merge(conn, row.id, row.model_config, ORPHANED) for row in orphans)
    return tagged
