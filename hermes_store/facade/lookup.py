"""v21 API (docs/v21.md#other), finding a session: the resume target, search by id, a cron
job's runs."""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from hermes_store.errors import HermesStoreError
from hermes_store.facade import arguments as args
from hermes_store.facade import compression
from hermes_store.facade.units import SessionDB, absent, read
from hermes_store.repo import lookup

log = logging.getLogger("hermes_store.facade")


def _page(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def resolve_resume_session_id(db: SessionDB, session_id: str) -> str:
    """The session a resume of ``session_id`` should load: its compression tip, then down to
    the deepest newer child holding messages. Falsy input comes back as is; unknown ids too."""
    if absent(session_id):
        return session_id
    sid = args.session_id(session_id)
    if sid is None:
        return session_id
    try:
        start = compression.get_compression_tip(db, sid) or sid
    except (sqlite3.Error, SQLAlchemyError, HermesStoreError) as exc:
        log.warning("compression tip of %s unreadable, resuming from the id itself: %s", sid, exc)
        start = sid
    return read(db, lambda c: lookup.resume_target(c, start))


def search_sessions_by_id(db: SessionDB, query: str | None, limit: int = 20,
                          include_archived: bool = True) -> list[dict[str, Any]]:
    """Sessions whose id (or a segment of whose lineage) contains ``query``, ignoring case:
    exact matches first, then prefixes, then the rest, as listed (projected to their tips)."""
    if query is None:
        return []
    needle = args.required("query", query).strip().lower()
    count = _page("limit", limit)
    if not needle or count <= 0:
        return []
    return read(db, lambda c: lookup.search_by_id(
        c, needle, limit=count, include_archived=bool(include_archived), now=time.time()))


def list_cron_job_runs(db: SessionDB, job_id: str, limit: int = 20,
                       offset: int = 0) -> list[dict[str, Any]]:
    job = args.required("job_id", job_id)
    count, skip = _page("limit", limit), _page("offset", offset)
    if count < 0 or skip < 0:
        raise ValueError(f"limit and offset must be >= 0, not {count} and {skip}")
    return read(db, lambda c: lookup.cron_runs(c, job, limit=count, offset=skip,
                                               now=time.time()))
