"""Finding a session: the resume target, search by id, and a cron job's runs.

The id search is the v21 listing (:mod:`hermes_store.repo.session_list`) with an ``id_query``:
visible rows whose chain holds a matching id, newest chain activity first, projected.

Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select

from hermes_store.db.dialect import starts_with
from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.repo import compression, session_list
from hermes_store.repo.sessions import Executor

sessions = SESSIONS
messages = MESSAGES

RESUME_MAX_NODES = 32
CRON_SOURCE = "cron"
# Built once (an alias of the wide sessions table is slow to build; see compression.py).
_RESUME_CHILD = sessions.alias("resume_child")


# --------------------------------------------------------------------------- resume


def resume_target(conn: Executor, start: str) -> str:
    """From ``start`` (a compression tip), follow the newest unmarked non-tool child while one
    exists (≤ 32 nodes, cycle-safe) and return the deepest node holding a message, else
    ``start``: a tip created just before a crash may be empty while its own child is not."""
    child = _RESUME_CHILD
    path, seen = [start], {start}
    while len(path) < RESUME_MAX_NODES:
        nxt = conn.execute(select(child.c.id)
                           .where(child.c.parent_session_id == path[-1],
                                  compression.may_continue(child))
                           .order_by(child.c.started_at.desc(), child.c.id.desc())
                           .limit(1)).scalar()
        if nxt is None or nxt in seen:
            break
        path.append(nxt)
        seen.add(nxt)
    with_messages = set(conn.execute(select(messages.c.session_id).distinct()
                                     .where(messages.c.session_id.in_(path))).scalars())
    return next((sid for sid in reversed(path) if sid in with_messages), start)


# --------------------------------------------------------------------------- id search


def id_candidates(conn: Executor, needle: str, *, limit: int, include_archived: bool,
                  now: float) -> list[dict[str, Any]]:
    """The rows ``list_sessions_rich(order_by_last_active=True, id_query=needle)`` pages:
    visible, matching through their chain, newest chain activity first, projected."""
    return session_list.list_sessions(
        conn, session_list.Filters(include_archived=include_archived), now=now, limit=limit,
        order_by_last_active=True, id_query=needle)


def _rank(row: dict[str, Any], needle: str) -> int:
    ids = [str(row["id"]).lower()]
    if row.get("_lineage_root_id") is not None:
        ids.append(str(row["_lineage_root_id"]).lower())
    if needle in ids:
        return 0
    return 1 if any(i.startswith(needle) for i in ids) else 2


def search_by_id(conn: Executor, needle: str, *, limit: int, include_archived: bool,
                 now: float) -> list[dict[str, Any]]:
    """Exact id (or lineage root id) first, then prefix, then substring; stable otherwise."""
    rows = id_candidates(conn, needle, limit=4 * limit, include_archived=include_archived,
                         now=now)
    return sorted(rows, key=lambda row: _rank(row, needle))[:limit]


# --------------------------------------------------------------------------- cron runs


def cron_runs_query(job_id: str, *, limit: int, offset: int,
                    now: float) -> Select[*tuple[Any, ...]]:
    """Sessions of one cron job (ids ``cron_<job_id>_…``, case-sensitive), newest first.

    The id prefix is a range on ``idx_sessions_source_id`` (never a scan of all cron rows);
    the prefix test keeps it exact where collation and range disagree, and holds for a job id
    with NUL (``starts_with``: SQLite's substr stops at NUL, PostgreSQL stores it escaped)."""
    prefix = f"cron_{job_id}_"
    # The prefix ends with "_", so the first string past its range ends with "`".
    upper = prefix[:-1] + "`"
    return (session_list.row_query(now)
            .where(sessions.c.source == CRON_SOURCE, sessions.c.id >= prefix,
                   sessions.c.id < upper, starts_with(sessions.c.id, prefix))
            .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
            .limit(limit).offset(offset))


def cron_runs(conn: Executor, job_id: str, *, limit: int, offset: int,
              now: float) -> list[dict[str, Any]]:
    query = cron_runs_query(job_id, limit=limit, offset=offset, now=now)
    return [session_list.finish_row(r) for r in conn.execute(query).mappings()]
