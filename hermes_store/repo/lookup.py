"""Finding a session: the resume target, search by id, and a cron job's runs.

The id search is built from pieces the v21 listing (``list_sessions_rich`` with ``id_query``)
shares: :func:`visible_clause` (the default visibility of docs/v21.md#behaviour-changes),
:func:`id_query_anchors` and :func:`id_query_roots` (visible rows whose chain holds a
matching id),
:func:`ordered_by_chain_activity` and :func:`project_to_tip`.

Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    Select,
    Text,
    and_,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
)

from hermes_store.db.dialect import starts_with
from hermes_store.db.models import ChatSession, Message
from hermes_store.repo import compression, lineage, listing, markers
from hermes_store.repo.sessions import Executor, full_row

sessions = ChatSession.__table__
messages = Message.__table__

RESUME_MAX_NODES = 32
CRON_SOURCE = "cron"
# A projected row shows where its conversation is now (docs/v21.md#behaviour-changes).
TIP_COLUMNS = (*listing.TIP_COLUMNS, "cwd", "git_branch", "git_repo_root")
# Built once (an alias of the wide sessions table is slow to build; see compression.py).
_RESUME_CHILD, _VIS_PARENT = sessions.alias("resume_child"), sessions.alias("vis_parent")
_IDQ_SEED, _IDQ_PARENT = sessions.alias("idq_seed"), sessions.alias("idq_parent")


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


# --------------------------------------------------------------------------- listing pieces


def visible_clause(table: Any = sessions) -> ColumnElement[bool]:
    """Roots (no parent, or a parent row that is gone) and branch children (``_branched_from``,
    or started at or after a parent's ``'branched'`` end), minus any ``_delegate_from`` row."""
    parent = _VIS_PARENT
    parent_gone = ~exists(select(parent.c.id).where(parent.c.id == table.c.parent_session_id))
    branched_parent = exists(select(parent.c.id).where(
        parent.c.id == table.c.parent_session_id, parent.c.end_reason == compression.BRANCHED,
        parent.c.ended_at.is_not(None), table.c.started_at >= parent.c.ended_at))
    return and_(
        or_(table.c.parent_session_id.is_(None), parent_gone,
            markers.carries_clause(table.c.model_config, markers.BRANCHED_FROM),
            branched_parent),
        ~markers.carries_clause(table.c.model_config, markers.DELEGATE_FROM))


def archived_clause(*, include_archived: bool = False,
                    archived_only: bool = False) -> ColumnElement[bool] | None:
    flag = func.coalesce(sessions.c.archived, 0)
    if archived_only:
        return flag != 0
    return None if include_archived else flag == 0


def _id_matches(column: Any, needle: str) -> ColumnElement[bool]:
    return func.lower(column, type_=Text).contains(needle, autoescape=True)


def id_query_anchors(needle: str, *, where: Any = None) -> Select:
    """Ids of the visible rows (and ``where``) whose chain may hold an id containing
    ``needle`` (stripped and lower-cased; matched literally): the matching segments themselves
    and the continuation ancestors a chain could reach them from. Seeding the walk only with
    these makes its cost follow the matches, not the store."""
    seed = _IDQ_SEED
    up = (select(seed.c.id, seed.c.parent_session_id, seed.c.model_config, seed.c.source,
                 literal(0).label("depth"))
          .where(_id_matches(seed.c.id, needle)).cte("idq_up", recursive=True))
    parent = _IDQ_PARENT
    up = up.union_all(
        select(parent.c.id, parent.c.parent_session_id, parent.c.model_config, parent.c.source,
               up.c.depth + 1)
        .join_from(up, parent, parent.c.id == up.c.parent_session_id)
        .where(parent.c.end_reason == compression.COMPRESSION, compression.may_continue(up),
               up.c.depth < compression.MAX_TIP_STEPS))
    anchors = select(sessions.c.id).where(sessions.c.id.in_(select(up.c.id)), visible_clause())
    return anchors.where(where) if where is not None else anchors


def id_query_roots(chain: CTE, needle: str) -> Select:
    """The anchors of ``chain`` (:func:`compression.chain_map`) whose own id or a later
    segment's id contains ``needle``."""
    return select(chain.c.root_id).where(_id_matches(chain.c.id, needle)).distinct()


def ordered_by_chain_activity(query: Select, chain: CTE, *, now: float) -> Select:
    """``query`` (over ``sessions``) ordered by the newest activity over each row's chain, then
    ``started_at`` and ``id``, all descending; computed before any ``LIMIT``. ``chain`` must be
    anchored at least at the rows ``query`` can return."""
    act = compression.chain_activity(chain, now=now).subquery("chain_act")
    chain_active = select(act.c.last_active).where(act.c.root_id == sessions.c.id)
    return query.order_by(chain_active.scalar_subquery().desc(), sessions.c.started_at.desc(),
                          sessions.c.id.desc())


def _row_query(now: float) -> Select:
    return select(literal_column("*"), listing.preview_source(sessions.c.id).label("preview"),
                  lineage.last_activity(sessions, now).label("last_active")).select_from(sessions)


def _finish(row: Any) -> dict[str, Any]:
    item = full_row(row)
    item["preview"] = listing.make_preview(item.get("preview"))
    return item


def project_to_tip(conn: Executor, row: dict[str, Any], *, now: float) -> dict[str, Any]:
    """A compression-ended row shows its tip (by the tip step), keeping the root's
    ``started_at`` and ``archived``, and gains ``_lineage_root_id``."""
    if row.get("end_reason") != compression.COMPRESSION:
        return row
    tip_id = compression.compression_tip(conn, row["id"], now=now)
    if tip_id == row["id"]:
        return row
    tip = conn.execute(_row_query(now).where(sessions.c.id == tip_id)).mappings().first()
    if tip is None:
        return row
    tip_row = _finish(tip)
    projected = dict(row)
    for key in TIP_COLUMNS:
        projected[key] = tip_row.get(key)
    projected["_lineage_root_id"] = row["id"]
    return projected


# --------------------------------------------------------------------------- id search


def id_candidates(conn: Executor, needle: str, *, limit: int, include_archived: bool,
                  now: float) -> list[dict[str, Any]]:
    """The rows ``list_sessions_rich(order_by_last_active=True, id_query=needle)`` pages:
    visible, matching through their chain, newest chain activity first, projected."""
    anchors = id_query_anchors(needle, where=archived_clause(include_archived=include_archived))
    chain = compression.chain_map(anchors, now=now)
    query = _row_query(now).where(sessions.c.id.in_(id_query_roots(chain, needle)))
    query = ordered_by_chain_activity(query, chain, now=now).limit(limit)
    rows = [_finish(r) for r in conn.execute(query).mappings()]
    return [project_to_tip(conn, row, now=now) for row in rows]


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


def cron_runs_query(job_id: str, *, limit: int, offset: int, now: float) -> Select:
    """Sessions of one cron job (ids ``cron_<job_id>_…``, case-sensitive), newest first.

    The id prefix is a range on ``idx_sessions_source_id`` (never a scan of all cron rows);
    the prefix test keeps it exact where collation and range disagree, and holds for a job id
    with NUL (``starts_with``: SQLite's substr stops at NUL, PostgreSQL stores it escaped)."""
    prefix = f"cron_{job_id}_"
    # The prefix ends with "_", so the first string past its range ends with "`".
    upper = prefix[:-1] + "`"
    return (_row_query(now)
            .where(sessions.c.source == CRON_SOURCE, sessions.c.id >= prefix,
                   sessions.c.id < upper, starts_with(sessions.c.id, prefix))
            .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
            .limit(limit).offset(offset))


def cron_runs(conn: Executor, job_id: str, *, limit: int, offset: int,
              now: float) -> list[dict[str, Any]]:
    query = cron_runs_query(job_id, limit=limit, offset=offset, now=now)
    return [_finish(r) for r in conn.execute(query).mappings()]
