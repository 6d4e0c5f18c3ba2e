"""v21 API (docs/v21.md#compression): failure cooldown, fallback streak, locks, orphaned
continuations, and the compression tip and lineage.

Cooldown, lock and streak state is advisory: its writers are best effort (a failure is logged
and the agent compresses later), except ``set_compression_fallback_streak``, whose caller
counts on the value. Lock expiry is judged against the clock when the unit runs (a retried
unit reads the clock again).
"""

from __future__ import annotations

import logging
import time
from typing import TypedDict

from hermes_store.facade import arguments as args
from hermes_store.facade.units import SessionDB, best_effort, read, write
from hermes_store.repo import compression as repo

log = logging.getLogger("hermes_store.facade")

DEFAULT_LOCK_TTL_S = 300.0


class CompressionCooldown(TypedDict):
    """An active compression-failure cooldown (docs/v21.md#compression)."""

    cooldown_until: float
    remaining_seconds: float
    error: str | None


# --------------------------------------------------------------------------- cooldown, streak


def record_compression_failure_cooldown(db: SessionDB, session_id: str, cooldown_until: float,
                                        error: str | None = None) -> None:
    sid = args.session_id(session_id)
    until = args.finite("cooldown_until", cooldown_until)
    message = args.message_text("error", error)
    if sid is None:
        return
    best_effort(db, lambda c: repo.record_cooldown(c, sid, until, message), default=None,
                what="record_compression_failure_cooldown")


def get_compression_failure_cooldown(db: SessionDB,
                                     session_id: str) -> CompressionCooldown | None:
    """The active cooldown, or None (unknown id, none set, or expired: expired values stay
    stored, the agent's own record of its last failure)."""
    sid = args.session_id(session_id)
    if sid is None:
        return None
    stored = read(db, lambda c: repo.cooldown(c, sid))
    if stored is None or stored[0] is None:
        return None
    try:
        until = float(stored[0])
    except (TypeError, ValueError):
        return None
    now = time.time()
    if until <= now:
        return None
    return {"cooldown_until": until, "remaining_seconds": until - now, "error": stored[1]}


def clear_compression_failure_cooldown(db: SessionDB, session_id: str) -> None:
    sid = args.session_id(session_id)
    if sid is not None:
        best_effort(db, lambda c: repo.clear_cooldown(c, sid), default=None,
                    what="clear_compression_failure_cooldown")


def get_compression_fallback_streak(db: SessionDB, session_id: str) -> int:
    """``max(0, int(value))``; 0 for anything else, and never an exception (after ``close()``
    too): the agent asks on every turn and must not fail on advisory state."""
    try:
        sid = args.session_id(session_id)
        if sid is None:
            return 0
        value = read(db, lambda c: repo.fallback_streak(c, sid))
        return max(0, int(value)) if value is not None else 0
    except Exception as exc:  # noqa: BLE001 - the contract's "never raises"
        log.debug("compression fallback streak unreadable, taking 0: %s", exc)
        return 0


def set_compression_fallback_streak(db: SessionDB, session_id: str, streak: int) -> None:
    if isinstance(streak, bool) or not isinstance(streak, (int, float, str)):
        raise TypeError(f"streak must be a number, not {type(streak).__name__}")
    try:
        value = max(0, int(streak))  # ValueError for non-numeric text, before any write
    except OverflowError:
        raise ValueError(f"streak must be a finite number, not {streak!r}") from None
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: repo.set_fallback_streak(c, sid, value),
              what="set_compression_fallback_streak")


# --------------------------------------------------------------------------- locks


def _lock_args(session_id: object, holder: object,
               ttl_seconds: object = DEFAULT_LOCK_TTL_S) -> tuple[str, str, float] | None:
    ttl = args.finite("ttl_seconds", ttl_seconds)
    sid = args.session_id(session_id)
    who = args.session_id(holder, "holder")
    if sid is None or who is None:
        return None
    return sid, who, ttl


def try_acquire_compression_lock(db: SessionDB, session_id: str, holder: str,
                                 ttl_seconds: float = DEFAULT_LOCK_TTL_S) -> bool:
    """True when ``holder`` holds the lock afterwards; False (skip compressing) when another
    holder does, or when the store cannot say."""
    checked = _lock_args(session_id, holder, ttl_seconds)
    if checked is None:
        return False
    sid, who, ttl = checked
    return best_effort(db, lambda c: repo.try_acquire_lock(c, sid, who, ttl, now=time.time()),
                       default=False, what="try_acquire_compression_lock")


def refresh_compression_lock(db: SessionDB, session_id: str, holder: str,
                             ttl_seconds: float = DEFAULT_LOCK_TTL_S) -> bool:
    checked = _lock_args(session_id, holder, ttl_seconds)
    if checked is None:
        return False
    sid, who, ttl = checked
    return best_effort(db, lambda c: repo.refresh_lock(c, sid, who, ttl, now=time.time()),
                       default=False, what="refresh_compression_lock")


def release_compression_lock(db: SessionDB, session_id: str, holder: str) -> None:
    checked = _lock_args(session_id, holder)
    if checked is not None:
        sid, who, _ = checked
        best_effort(db, lambda c: repo.release_lock(c, sid, who), default=None,
                    what="release_compression_lock")


def get_compression_lock_holder(db: SessionDB, session_id: str) -> str | None:
    sid = args.session_id(session_id)
    if sid is None:
        return None
    return read(db, lambda c: repo.lock_holder(c, sid, now=time.time()))


# --------------------------------------------------------------------------- lineage


def finalize_orphaned_compression_sessions(db: SessionDB) -> int:
    return write(db, lambda c: repo.finalize_orphaned(c, now=time.time()),
                 what="finalize_orphaned_compression_sessions")


def get_compression_tip(db: SessionDB, session_id: str) -> str | None:
    """The newest segment by the v21 step rule; the id itself when it has no continuation
    (unknown ids included); None only for None. The v11 ``get_lineage_tip`` keeps its rules."""
    if session_id is None:
        return None
    sid = args.session_id(session_id)
    if sid is None:
        return session_id
    return read(db, lambda c: repo.compression_tip(c, sid, now=time.time()))


def get_compression_lineage(db: SessionDB, session_id: str) -> list[str]:
    sid = args.session_id(session_id)
    if sid is None:
        return []
    return read(db, lambda c: repo.compression_lineage(c, sid, now=time.time()))
