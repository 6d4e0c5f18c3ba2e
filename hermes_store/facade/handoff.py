"""v21 API (docs/v21.md#handoff): NULL → pending → running → completed | failed."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from hermes_store.errors import HermesStoreError
from hermes_store.facade import arguments as args
from hermes_store.facade.units import SessionDB, read, write
from hermes_store.repo import handoff as repo

log = logging.getLogger("hermes_store.facade")

# The two readers answer "nothing known" on a read error: the gateway polls them and treats a
# missing answer as "try later" (the contract's rule for these two only).
_READ_ERRORS = (sqlite3.Error, SQLAlchemyError, HermesStoreError)


def request_handoff(db: SessionDB, session_id: str, platform: str) -> bool:
    """Ask for a handoff; False unless the session exists and none is under way."""
    target = args.text("platform", platform)
    sid = args.session_id(session_id)
    if sid is None:
        return False
    return write(db, lambda c: repo.request(c, sid, target), what="request_handoff")


def claim_handoff(db: SessionDB, session_id: str) -> bool:
    """True for exactly one caller per request: the one that moved it to ``running``."""
    sid = args.session_id(session_id)
    if sid is None:
        return False
    return write(db, lambda c: repo.claim(c, sid), what="claim_handoff")


def complete_handoff(db: SessionDB, session_id: str) -> None:
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: repo.complete(c, sid), what="complete_handoff")


def fail_handoff(db: SessionDB, session_id: str, error: str) -> None:
    message = args.message_text("error", error)
    if message is None:
        raise TypeError("error must be a str, not NoneType")
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: repo.fail(c, sid, message), what="fail_handoff")


def get_handoff_state(db: SessionDB, session_id: str) -> repo.HandoffState | None:
    sid = args.session_id(session_id)
    if sid is None:
        return None
    try:
        return read(db, lambda c: repo.state(c, sid))
    except _READ_ERRORS as exc:
        log.warning("get_handoff_state failed, answering None: %s", exc)
        return None


def list_pending_handoffs(db: SessionDB) -> list[dict[str, Any]]:
    try:
        return read(db, repo.pending)
    except _READ_ERRORS as exc:
        log.warning("list_pending_handoffs failed, answering []: %s", exc)
        return []
