"""``import_sessions`` on ``SessionDB``: the agent's in-process restore of exported dicts
(repository: repo/imports.py). Not the CLI's file import, which lives in transfer/.

The caps are the class attributes ``_IMPORT_MAX_*`` (bound in session_db.py), read at call
time so that a caller or a test can lower them on one instance.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_store.facade.units import SessionDB, write
from hermes_store.repo import imports

MAX_SESSIONS = imports.MAX_SESSIONS
MAX_MESSAGES_PER_SESSION = imports.MAX_MESSAGES_PER_SESSION
MAX_TOTAL_MESSAGES = imports.MAX_TOTAL_MESSAGES
MAX_SESSION_BYTES = imports.MAX_SESSION_BYTES
MAX_TOTAL_BYTES = imports.MAX_TOTAL_BYTES


def _limits(db: SessionDB) -> imports.Limits:
    return imports.Limits(
        sessions=getattr(db, "_IMPORT_MAX_SESSIONS", MAX_SESSIONS),
        messages_per_session=getattr(db, "_IMPORT_MAX_MESSAGES_PER_SESSION",
                                     MAX_MESSAGES_PER_SESSION),
        total_messages=getattr(db, "_IMPORT_MAX_TOTAL_MESSAGES", MAX_TOTAL_MESSAGES),
        session_bytes=getattr(db, "_IMPORT_MAX_SESSION_BYTES", MAX_SESSION_BYTES),
        total_bytes=getattr(db, "_IMPORT_MAX_TOTAL_BYTES", MAX_TOTAL_BYTES))


def import_sessions(db: SessionDB, sessions: list[dict[str, Any]]) -> imports.ImportReport:
    """Validate every entry, then write the valid batch as one unit (or nothing at all)."""
    if not isinstance(sessions, list):
        # The agent's contract names ValueError for every rejected payload shape.
        raise ValueError(  # noqa: TRY004
            f"sessions must be a list, not {type(sessions).__name__}")
    limits = _limits(db)
    if len(sessions) > limits.sessions:
        raise ValueError(f"sessions holds {len(sessions)} entries; the import limit is "
                         f"{limits.sessions}")
    plan = imports.validate(sessions, limits, time.time())
    if plan.errors:
        return imports.failure(plan.errors)
    return write(db, lambda c: imports.run(c, plan), what="import_sessions")
