"""The v21 session list (docs/v21.md#behaviour-changes, docs/v21.md#parameters): which sessions
a listing shows, the filters it takes, the id and title needles, its order and the projection of
a compressed conversation onto its tip; and the count that matches its pages.

* **Visibility**: roots (no parent, or a parent row that is gone) and branch children, minus
  any row carrying ``_delegate_from`` (subagents, orphaned ones included).
* **Projection** walks by the compression tip step (:mod:`hermes_store.repo.compression`): the
  row shows its tip, keeping the root's ``started_at`` and ``archived``.
* **Activity** (``order_by_last_active``) is the newest over the row and its continuation
  chain, computed before ``LIMIT``.

The v11 listing the command line shows (``listing.list_sessions_rich``) keeps its own rules.
Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVarTuple

from sqlalchemy import (
    CTE,
    ColumnClause,
    ColumnElement,
    FromClause,
    Row,
    RowMapping,
    Select,
    Text,
    and_,
    column,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
)

from hermes_store.db.models import SESSIONS
from hermes_store.repo import compression, lineage, listing, markers
from hermes_store.repo.filters import cwd_prefix_clause
from hermes_store.repo.sessions import Executor, full_row

sessions = SESSIONS

# A needle's test of one segment (a sessions alias, or a walk's row source).
Matcher = Callable[[FromClause], ColumnElement[bool]]
_Ts = TypeVarTuple("_Ts")

# A projected row shows where its conversation is now.
TIP_COLUMNS = (*listing.TIP_COLUMNS, "cwd", "git_branch", "git_repo_root")
COMPACT_OMITS = "system_prompt"
# What a title's compact form drops, and what a needle's drops (docs/v21.md#parameters).
_TITLE_PUNCTUATION = ("-", "_", ".", " ")
_NON_WORD = re.compile(r"[\W_]+")
# Built once (an alias of the wide sessions table is slow to build; see compression.py).
_VIS_PARENT = sessions.alias("vis_parent")
_NEEDLE_SEED, _NEEDLE_PARENT = sessions.alias("idq_seed"), sessions.alias("idq_parent")
_NEEDLE_SEG = sessions.alias("idq_seg")


# --------------------------------------------------------------------------- clauses


def visible_clause(table: FromClause = sessions) -> ColumnElement[bool]:
    """Roots (no parent, or a parent row that is gone) and branch children (``_branched_from``,
    or started at or after a parent's ``'branched'`` end), minus any ``_delegate_from`` row."""
    parent = _VIS_PARENT
    # A parent shares its child's root: the lookups stay on the child's shard.
    same_tree = parent.c.root_session_id == table.c.root_session_id
    parent_gone = ~exists(select(parent.c.id).where(
        same_tree, parent.c.id == table.c.parent_session_id))
    branched_parent = exists(select(parent.c.id).where(
        same_tree, parent.c.id == table.c.parent_session_id,
        parent.c.end_reason == compression.BRANCHED,
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


@dataclass(frozen=True)
class Filters:
    """The list's filters (docs/v21.md#parameters), shared by the list and its count."""

    source: str | None = None
    exclude_sources: Sequence[str] | None = None
    cwd_prefix: str | None = None
    min_message_count: int = 0
    include_archived: bool = False
    archived_only: bool = False
    visible_only: bool = True
    include_hidden: bool = False

    def clauses(self) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = []
        if self.source is not None:
            found.append(sessions.c.source == self.source)
        if self.exclude_sources:
            found.append(func.coalesce(sessions.c.source, "").not_in(list(self.exclude_sources)))
        if self.cwd_prefix:
            found.append(cwd_prefix_clause(self.cwd_prefix))
        if self.min_message_count > 0:
            found.append(func.coalesce(sessions.c.message_count, 0) >= self.min_message_count)
        archived = archived_clause(include_archived=self.include_archived,
                                   archived_only=self.archived_only)
        if archived is not None:
            found.append(archived)
        if self.visible_only:
            found.append(visible_clause())
        return found

    def clauses_on(self, conn: Executor) -> list[ColumnElement[bool]]:
        """:meth:`clauses`, plus the agent's ``hidden`` flag where the store has one."""
        hidden = None if self.include_hidden else listing.not_hidden(conn)
        return [*self.clauses(), *([hidden] if hidden is not None else [])]


# --------------------------------------------------------------------------- needles


def _lower(column: ColumnElement[str | None]) -> ColumnElement[str]:
    return func.lower(column, type_=Text)


def id_matches(needle: str) -> Matcher:
    """A segment whose id contains the (lower-cased) needle, literally."""
    return lambda seg: _lower(seg.c.id).contains(needle, autoescape=True)


def compact_title(title: ColumnElement[str | None]) -> ColumnElement[str]:
    for mark in _TITLE_PUNCTUATION:
        title = func.replace(title, mark, "")
    return _lower(title)


def search_matches(needle: str) -> Matcher:
    """A segment whose id or title contains the needle, or whose title without ``-``, ``_``,
    ``.`` and spaces contains the needle without non-word characters (``an94`` finds
    ``AN-94``)."""
    compact = _NON_WORD.sub("", needle)

    def matches(seg: FromClause) -> ColumnElement[bool]:
        title = func.coalesce(seg.c.title, "")
        found = [_lower(seg.c.id).contains(needle, autoescape=True),
                 _lower(title).contains(needle, autoescape=True)]
        if compact:
            found.append(compact_title(title).contains(compact, autoescape=True))
        return or_(*found)

    return matches


def needle_anchors(matches: Matcher, *, where: Sequence[ColumnElement[bool]] = (),
                   conn: Executor | None = None) -> Select[str, str]:
    """Ids of the rows passing ``where`` whose continuation chain may hold a matching segment:
    the matching segments and the continuation ancestors a chain could reach them from.
    Seeding the walk with these makes its cost follow the matches, not the store. Given
    ``conn`` on a distributed store, the walk goes up one step per query (Citus runs a
    recursive CTE only with a constant filter on the distribution column)."""
    if conn is not None and lineage.distributed_store(conn):
        return _anchors_stepwise(conn, matches, where)
    seed = _NEEDLE_SEED
    up = (select(seed.c.id, seed.c.parent_session_id, seed.c.root_session_id,
                 seed.c.model_config, seed.c.source, literal(0).label("depth"))
          .where(matches(seed)).cte("idq_up", recursive=True))
    parent = _NEEDLE_PARENT
    up = up.union_all(
        select(parent.c.id, parent.c.parent_session_id, parent.c.root_session_id,
               parent.c.model_config, parent.c.source, up.c.depth + 1)
        .join_from(up, parent, and_(parent.c.root_session_id == up.c.root_session_id,
                                    parent.c.id == up.c.parent_session_id))
        .where(parent.c.end_reason == compression.COMPRESSION, compression.may_continue(up),
               up.c.depth < compression.MAX_TIP_STEPS))
    return select(sessions.c.id, sessions.c.root_session_id).where(
        sessions.c.id.in_(select(up.c.id)), *where)


_UP = ("id", "parent_session_id", "root_session_id", "model_config", "source")


def _anchors_stepwise(conn: Executor, matches: Matcher,
                      where: Sequence[ColumnElement[bool]]) -> Select[str, str]:
    seed, parent = _NEEDLE_SEED, _NEEDLE_PARENT
    frontier: Sequence[Row[*tuple[Any, ...]]] = conn.execute(select(*(seed.c[n] for n in _UP)).where(matches(seed))).all()
    found = {row[0] for row in frontier}
    for _ in range(compression.MAX_TIP_STEPS):
        if not frontier:
            break
        up = lineage.walked_rows("idq_up", (*_UP, "depth"),
                                 [(*row, 0) for row in frontier]).subquery("idq_step")
        frontier = conn.execute(
            select(*(parent.c[n] for n in _UP))
            .join_from(up, parent, and_(parent.c.root_session_id == up.c.root_session_id,
                                        parent.c.id == up.c.parent_session_id))
            .where(parent.c.end_reason == compression.COMPRESSION,
                   compression.may_continue(up))).all()
        frontier = [row for row in frontier if row[0] not in found]
        found.update(row[0] for row in frontier)
    return select(sessions.c.id, sessions.c.root_session_id).where(
        sessions.c.id.in_(sorted(found)), *where)


def needle_roots(chain: CTE, matches: Matcher) -> Select[str]:
    """The anchors of ``chain`` (:func:`compression.chain_map`) holding a matching segment."""
    seg = _NEEDLE_SEG
    return (select(chain.c.root_id)
            .join_from(chain, seg, seg.c.id == chain.c.id)
            .where(matches(seg)).distinct())


def id_query_anchors(needle: str, *,
                     where: ColumnElement[bool] | None = None) -> Select[str, str]:
    """:func:`needle_anchors` for an id needle, over visible rows (and ``where``)."""
    return needle_anchors(id_matches(needle),
                          where=[visible_clause(), *([where] if where is not None else [])])


def id_query_roots(chain: CTE, needle: str) -> Select[str]:
    return needle_roots(chain, id_matches(needle))


# --------------------------------------------------------------------------- order, rows


def ordered_by_chain_activity(query: Select[*_Ts], chain: CTE, *, now: float) -> Select[*_Ts]:
    """``query`` (over ``sessions``) ordered by the newest activity over each row's chain, then
    ``started_at`` and ``id``, all descending; computed before any ``LIMIT``. A row ``chain``
    is not anchored at has no continuation: its own activity counts."""
    act = compression.chain_activity(chain, now=now).subquery("chain_act")
    chain_active = select(act.c.last_active).where(act.c.root_id == sessions.c.id)
    newest = func.coalesce(chain_active.scalar_subquery(), compression.activity(sessions, now))
    return query.order_by(newest.desc(), sessions.c.started_at.desc(), sessions.c.id.desc())


def live_columns(conn: Executor, *,
                 compact: bool = False) -> list[ColumnClause[Any]] | None:
    """The live table's columns (adopted stores may carry more than the model) less
    ``system_prompt`` for compact rows; None means every column (``*``)."""
    if not compact:
        return None
    names = conn.execute(select(literal_column("*")).select_from(sessions).limit(0)).keys()
    return [column(name) for name in names if name != COMPACT_OMITS]


def row_query(now: float,
              columns: list[ColumnClause[Any]] | None = None) -> Select[*tuple[Any, ...]]:
    return select(*(columns if columns is not None else [literal_column("*")]),
                  listing.preview_source(sessions.c.id, sessions.c.root_session_id)
                  .label("preview"),
                  lineage.last_activity(sessions, now).label("last_active")).select_from(sessions)


def finish_row(row: RowMapping, *, compact: bool = False) -> dict[str, Any]:
    item = full_row(row)
    item["preview"] = listing.make_preview(item.get("preview"))
    if compact:
        item.pop(COMPACT_OMITS, None)
    return item


def project_to_tip(conn: Executor, row: dict[str, Any], *, now: float,
                   columns: list[ColumnClause[Any]] | None = None) -> dict[str, Any]:
    """A compression-ended row shows its tip (by the tip step), keeping the root's
    ``started_at`` and ``archived``, and gains ``_lineage_root_id``."""
    if row.get("end_reason") != compression.COMPRESSION:
        return row
    tip_id = compression.compression_tip(conn, row["id"], now=now)
    if tip_id == row["id"]:
        return row
    tip = conn.execute(row_query(now, columns).where(sessions.c.id == tip_id)).mappings().first()
    if tip is None:
        return row
    tip_row = finish_row(tip, compact=columns is not None)
    if columns is None:
        listing.with_prompts(conn, [tip_row])
    projected = dict(row)
    for key in TIP_COLUMNS:
        if key in tip_row:
            projected[key] = tip_row[key]
    projected["_lineage_root_id"] = row["id"]
    return projected


# --------------------------------------------------------------------------- list, count


def list_sessions(conn: Executor, filters: Filters, *, now: float, limit: int = 20,
                  offset: int = 0, project_compression_tips: bool = True,
                  order_by_last_active: bool = False, id_query: str | None = None,
                  search_query: str | None = None,
                  compact_rows: bool = False) -> list[dict[str, Any]]:
    """``list_sessions_rich`` (docs/v21.md#parameters): session rows plus ``preview`` and
    ``last_active``; the needles apply only with ``order_by_last_active``."""
    columns = live_columns(conn, compact=compact_rows)
    where = filters.clauses_on(conn)
    query = row_query(now, columns).where(*where)
    if order_by_last_active:
        needles = [id_matches(id_query)] if id_query else []
        needles += [search_matches(search_query)] if search_query else []
        if needles:
            anchors = needle_anchors(lambda seg: or_(*(m(seg) for m in needles)), where=where,
                                     conn=conn)
            chain = compression.chain_map(anchors, now=now, conn=conn)
            for matches in needles:
                query = query.where(sessions.c.id.in_(needle_roots(chain, matches)))
        else:
            # Only a compression-ended row continues anywhere: the others are their own chain.
            anchors = select(sessions.c.id, sessions.c.root_session_id).where(
                *where, sessions.c.end_reason == compression.COMPRESSION)
            chain = compression.chain_map(anchors, now=now, conn=conn)
        query = ordered_by_chain_activity(query, chain, now=now)
    else:
        query = query.order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
    rows = [finish_row(r, compact=compact_rows)
            for r in conn.execute(query.limit(limit).offset(offset)).mappings()]
    if not compact_rows:
        listing.with_prompts(conn, rows)
    if project_compression_tips and filters.visible_only:
        rows = [project_to_tip(conn, row, now=now, columns=columns) for row in rows]
    return rows


def count_sessions(conn: Executor, filters: Filters) -> int:
    """``session_count``: the sessions the list's filters pass (every row is counted; with
    ``visible_only`` the rows a default list pages through)."""
    query = select(func.count()).select_from(sessions).where(*filters.clauses_on(conn))
    return int(conn.execute(query).scalar() or 0)
