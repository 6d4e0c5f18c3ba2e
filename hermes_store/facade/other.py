"""v21 API (docs/v21.md#other): resume target, id search, cron runs, workspace and settings updates, and
the lineage export."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from hermes_store.errors import HermesStoreError
from hermes_store.facade import arguments as args
from hermes_store.facade import compression
from hermes_store.facade.units import SessionDB, absent, read, write
from hermes_store.repo import lookup, settings, workspace

log = logging.getLogger("hermes_store.facade")


class _Exporting(SessionDB, Protocol):
    def export_session(self, session_id: str) -> dict[str, Any] | None: ...


def _page(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- finding sessions


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


# --------------------------------------------------------------------------- workspace


def distinct_session_cwds(db: SessionDB, include_archived: bool = False) -> list[dict[str, Any]]:
    return read(db, lambda c: workspace.distinct_cwds(c, include_archived=bool(include_archived)))


def backfill_repo_roots(db: SessionDB, cwd_to_root: Mapping[str, str]) -> None:
    if not isinstance(cwd_to_root, Mapping):
        raise TypeError(f"cwd_to_root must be a mapping, not {type(cwd_to_root).__name__}")
    pairs = {args.required("cwd", cwd): args.required("git_repo_root", root)
             for cwd, root in cwd_to_root.items() if cwd and root}
    if pairs:
        write(db, lambda c: workspace.backfill_repo_roots(c, pairs), what="backfill_repo_roots")


def update_session_cwd(db: SessionDB, session_id: str, cwd: str, git_branch: str | None = None,
                       git_repo_root: str | None = None) -> None:
    """Set ``cwd``; the git columns only when they hold something (stored stripped), so a
    turn outside a repository keeps what an earlier turn learnt."""
    sid = args.session_id(session_id)
    where = None if absent(cwd) else args.required("cwd", cwd)
    git = {name: value.strip() for name, value in (
        ("git_branch", args.text("git_branch", git_branch)),
        ("git_repo_root", args.text("git_repo_root", git_repo_root))) if value and value.strip()}
    if sid is None or where is None:
        return
    write(db, lambda c: workspace.update_cwd(c, sid, where, git), what="update_session_cwd")


# --------------------------------------------------------------------------- settings


def update_session_model(db: SessionDB, session_id: str, model: str | None) -> None:
    name = args.text("model", model)
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: settings.update_model(c, sid, name), what="update_session_model")


def update_session_billing_route(db: SessionDB, session_id: str, *, provider: str | None,
                                 base_url: str | None, billing_mode: str | None = None) -> None:
    route = {"provider": args.text("provider", provider),
             "base_url": args.text("base_url", base_url),
             "billing_mode": args.text("billing_mode", billing_mode)}
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: settings.update_billing_route(c, sid, **route),
              what="update_session_billing_route")


def update_session_meta(db: SessionDB, session_id: str, model_config_json: str | None,
                        model: str | None = None) -> None:
    config = args.text("model_config_json", model_config_json)
    name = args.text("model", model)
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: settings.update_meta(c, sid, config, name),
              what="update_session_meta")


# --------------------------------------------------------------------------- export


def export_session_lineage(db: _Exporting, session_id: str) -> dict[str, Any] | None:
    """The tip's ``export_session`` dict, plus every segment's export root → tip and their
    messages concatenated: a compressed conversation as one document."""
    ids = compression.get_compression_lineage(db, session_id)
    segments = [found for sid in ids if (found := db.export_session(sid)) is not None]
    if not segments:
        return None
    combined = dict(segments[-1])
    combined["segments"] = segments
    combined["lineage_session_ids"] = [segment["id"] for segment in segments]
    combined["messages"] = [m for segment in segments for m in segment.get("messages", [])]
    combined["message_count"] = len(combined["messages"])
    return combined
