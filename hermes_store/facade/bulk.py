"""v21 API (docs/v21.md#bulk): deletes with the delegate cascade, the empty and ghost sweeps,
prune / candidates / archive over the ``**filters`` set, and the automatic prune.

Selection judges a compression lineage by its tip and moves it whole; a lineage with an open
segment is never pruned, and bulk sweeps skip lineages with a pinned segment (explicit deletes
of named ids do not). The agent's per-session files go after commit, for every session deleted.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

from sqlalchemy import ColumnElement, and_

from hermes_store.facade import arguments as args
from hermes_store.facade.units import SessionDB, read, write
from hermes_store.repo import deletion, retention
from hermes_store.repo import sessions as sessions_repo
from hermes_store.repo.filters import BULK_FILTERS, bulk_clauses

log = logging.getLogger("hermes_store.facade")

PathArg = str | os.PathLike[str] | None
LAST_AUTO_PRUNE = "last_auto_prune"
_DAY_S = 86400.0


class _Vacuuming(SessionDB, Protocol):
    def vacuum(self) -> Any: ...


# --------------------------------------------------------------------------- files


def remove_session_files(sessions_dir: PathArg, ids: Sequence[str]) -> None:
    """After commit: the agent's per-session files (``<id>.json``, ``<id>.jsonl``,
    ``request_dump_<id>_*.json``). Missing files and OS errors are ignored."""
    if sessions_dir is None or not ids:
        return
    root = Path(sessions_dir)
    for sid in ids:
        targets = [root / f"{sid}.json", root / f"{sid}.jsonl"]
        with contextlib.suppress(OSError, ValueError):
            targets.extend(p for p in root.glob(f"request_dump_{_glob_escape(sid)}_*.json"))
        for target in targets:
            with contextlib.suppress(OSError):
                target.unlink()


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


# --------------------------------------------------------------------------- deletes


def delete_session(db: SessionDB, session_id: str, sessions_dir: PathArg = None) -> bool:
    """Delete one session, open or not, with its subagents; other children are orphaned."""
    if not args.known_id(session_id):
        return False
    result = write(db, lambda c: deletion.delete_with_delegates(c, [session_id]),
                   what="delete_session")
    remove_session_files(sessions_dir, result.ids)
    return bool(result.listed)


def delete_sessions(db: SessionDB, session_ids: Iterable[str] | None,
                    sessions_dir: PathArg = None) -> int:
    """One unit over the listed ids that exist (open, archived and pinned ones too), with the
    delegate cascade; returns how many listed ids existed."""
    if not session_ids:
        return 0
    ids = [sid for sid in dict.fromkeys(session_ids)
           if isinstance(sid, str) and sid and args.storable(sid)]
    if not ids:
        return 0
    result = write(db, lambda c: deletion.delete_with_delegates(c, ids), what="delete_sessions")
    remove_session_files(sessions_dir, result.ids)
    return len(result.listed)


def delete_session_if_empty(db: SessionDB, session_id: str, sessions_dir: PathArg = None) -> bool:
    sid = args.session_id(session_id)
    if sid is None:
        return False
    deleted = write(db, lambda c: deletion.delete_if_empty(c, sid),
                    what="delete_session_if_empty")
    if deleted:
        remove_session_files(sessions_dir, [sid])
    return deleted


def count_empty_sessions(db: SessionDB) -> int:
    return len(read(db, deletion.empty_sessions))


def delete_empty_sessions(db: SessionDB, sessions_dir: PathArg = None) -> int:
    ids = write(db, lambda c: deletion.sweep(c, deletion.empty_sessions(c)),
                what="delete_empty_sessions")
    remove_session_files(sessions_dir, ids)
    return len(ids)


def prune_empty_ghost_sessions(db: SessionDB, sessions_dir: PathArg = None) -> int:
    ids = write(db, lambda c: deletion.sweep(c, deletion.ghost_sessions(c, now=time.time())),
                what="prune_empty_ghost_sessions")
    remove_session_files(sessions_dir, ids)
    return len(ids)


# --------------------------------------------------------------------------- selection


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, not NaN")
    return value


def _checked_filters(values: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(values) - set(BULK_FILTERS))
    if unknown:
        raise TypeError("unexpected filter(s): " + ", ".join(unknown))
    checked: dict[str, Any] = {}
    for name, value in values.items():
        kind = BULK_FILTERS[name]
        if kind == "text":
            checked[name] = (args.stringified(name, value) if name in ("chat_id", "user_id")
                             else args.text(name, value))
        elif kind == "number":
            checked[name] = None if value is None else _number(name, value)
        else:
            checked[name] = None if value is None else bool(value)
    return checked


def _cutoff(older_than_days: object, now: float) -> float | None:
    """The last-activity bound of ``older_than_days`` (the prune rule of
    docs/contracts.md#export-and-maintenance); None = no age bound."""
    if older_than_days is None:
        return None
    days = _number("older_than_days", older_than_days)
    if days < 0:
        raise ValueError(f"older_than_days must be >= 0, not {older_than_days}")
    return now - days * _DAY_S


def _where(source: object, filters: dict[str, Any]) -> ColumnElement[bool] | None:
    """The tip's clause: ended (bulk verbs act on ended sessions only), the source, filters."""
    clauses = bulk_clauses(_checked_filters(filters))
    if source is not None:
        clauses.append(retention.sessions.c.source == args.required("source", source))
    clauses.append(retention.sessions.c.ended_at.is_not(None))
    return and_(*clauses)


def prune_sessions(db: SessionDB, older_than_days: float | None = 90, source: str | None = None,
                   sessions_dir: PathArg = None, **filters: Any) -> int:
    """Delete ended lineages idle since before the cutoff (over every segment) whose tip
    passes ``source`` and the filters; children are orphaned. Returns the sessions deleted."""
    now = time.time()
    cutoff, where = _cutoff(older_than_days, now), _where(source, filters)
    result = write(db, lambda c: retention.prune(
        c, older_than=cutoff, where=where, include_archived=True, busy_window_s=0, now=now,
        rule=retention.V21), what="prune_sessions")
    remove_session_files(sessions_dir, result.ids)
    return result.changed


def list_prune_candidates(db: SessionDB, older_than_days: float | None = None,
                          source: str | None = None,
                          **filters: Any) -> list[retention.SessionSummary]:
    """What the matching prune would delete, writing nothing: one summary per session,
    ``started_at`` ascending."""
    now = time.time()
    cutoff, where = _cutoff(older_than_days, now), _where(source, filters)

    def plan(conn: Any) -> list[retention.SessionSummary]:
        result = retention.prune(conn, older_than=cutoff, where=where, include_archived=True,
                                 busy_window_s=0, now=now, dry_run=True, rule=retention.V21)
        return retention.session_summaries(conn, result.ids)

    return read(db, plan)


def archive_sessions(db: SessionDB, older_than_days: float | None = None,
                     source: str | None = None, **filters: Any) -> int:
    """Archive each selected lineage (unarchived ones unless ``archived`` says otherwise) in
    its own unit, as ``set_session_archived``; returns the sessions archived."""
    filters.setdefault("archived", False)
    now = time.time()
    cutoff, where = _cutoff(older_than_days, now), _where(source, filters)
    selected = read(db, lambda c: retention.archive(
        c, older_than=cutoff, where=where, now=now, dry_run=True, rule=retention.V21))
    archived = 0
    for lineage in selected.candidates:
        outcome = write(db, functools.partial(retention.set_lineage_archived,
                                              session_id=lineage.tip_id, archived=True),
                        what="archive_sessions")
        archived += outcome.changed
    return archived


def set_session_archived(db: SessionDB, session_id: str, archived: bool) -> bool:
    """Archive or unarchive the session's whole lineage in one unit; False for an unknown id,
    and for archiving a lineage with a pinned segment."""
    sid = args.session_id(session_id)
    if sid is None:
        return False
    outcome = write(db, lambda c: retention.set_lineage_archived(c, sid, bool(archived)),
                    what="set_session_archived")
    return outcome.found and not outcome.refused


# --------------------------------------------------------------------------- automatic prune


def _last_auto_prune(db: SessionDB) -> float | None:
    stored = read(db, lambda c: sessions_repo.get_meta(c, LAST_AUTO_PRUNE))
    try:
        value = float(stored) if stored is not None else None
    except ValueError:
        return None  # an unparsable marker counts as no prior run
    return value if value is not None and math.isfinite(value) else None


class AutoMaintenance(TypedDict):
    """What ``maybe_auto_prune_and_vacuum`` did (docs/v21.md#bulk); ``error`` only on failure."""

    skipped: bool
    pruned: int
    vacuumed: bool
    error: NotRequired[str]


def maybe_auto_prune_and_vacuum(db: _Vacuuming, retention_days: int = 90,
                                min_interval_hours: int = 24, vacuum: bool = True,
                                sessions_dir: PathArg = None) -> AutoMaintenance:
    """Prune at most once per interval, then vacuum if anything went; never raises. A failure
    adds ``"error"``; a failed prune leaves the marker as it was, so the next start retries."""
    started = time.time()
    outcome: AutoMaintenance = {"skipped": False, "pruned": 0, "vacuumed": False}
    try:
        last = _last_auto_prune(db)
        if last is not None and started - last < float(min_interval_hours) * 3600:
            return {"skipped": True, "pruned": 0, "vacuumed": False}
        outcome["pruned"] = prune_sessions(db, older_than_days=retention_days,
                                           sessions_dir=sessions_dir)
        if vacuum and outcome["pruned"] > 0:
            try:
                db.vacuum()
                outcome["vacuumed"] = True
            except Exception as exc:  # noqa: BLE001 - a failed vacuum must not undo the prune
                log.warning("automatic vacuum after pruning failed: %s", exc)
        write(db, lambda c: sessions_repo.set_meta(c, LAST_AUTO_PRUNE, repr(started)),
              what="maybe_auto_prune_and_vacuum")
    except Exception as exc:  # noqa: BLE001 - the contract's "never raises"
        log.warning("automatic prune failed: %s", exc)
        outcome["error"] = str(exc)
    return outcome
