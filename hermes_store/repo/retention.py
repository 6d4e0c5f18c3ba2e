"""Retention: prune, archive/unarchive, pin/unpin, close idle sessions, delete, and the plan each
of them reports.

**The lineage is the unit.** A compression chain (``lineage.lineage_map``) is one logical
conversation: it is selected by its **tip** (the ``where`` clause is evaluated on the tip row)
with last activity taken over **all** its segments, and every segment moves with it. An
ancestor never qualifies on its own age (it is counted in ``spared.lineage`` instead). One
pinned segment spares the whole lineage; so does an open one for prune. Other children
(branches, subagents) are separate lineages; deleting a parent detaches them
(``parent_session_id = NULL``), never deletes them.

Every verb takes a caller-owned ``Connection`` or ORM ``Session``, never commits, and accepts
``dry_run``: the same plan is computed and nothing is written. Results carry ``matched``
(sessions the action applies to), ``changed`` (sessions actually written; 0 on a dry run),
``ids`` (oldest activity first) and ``spared`` counts with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from sqlalchemy import ColumnElement, Connection, Row, delete, select, update

from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.repo import compression, lineage
from hermes_store.repo.executor import Executor, rowcount
from hermes_store.repo.filters import SessionFilter, matching

sessions = SESSIONS
messages = MESSAGES

CLOSED_IDLE = "closed_idle"
# Which parent links make one lineage: the v11 chain, or the v21 continuations.
V11, V21 = "v11", "v21"
DEFAULT_BUSY_WINDOW_S = 60.0
_CHUNK = 900  # bound parameters per statement


class SessionSummary(TypedDict):  # one session as list_prune_candidates reports it
    id: str
    source: str
    title: str | None
    model: str | None
    started_at: float | None
    ended_at: float | None
    message_count: int | None
    archived: int | None


@dataclass
class Spared:
    pinned: int = 0
    archived: int = 0
    open: int = 0
    busy: int = 0
    lineage: int = 0

    def total(self) -> int:
        return self.pinned + self.archived + self.open + self.busy + self.lineage


@dataclass
class Candidate:
    """One lineage an action applies to: its segments root → tip and its last activity."""

    root_id: str
    tip_id: str
    ids: list[str]
    last_active: float | None


@dataclass
class RetentionResult:
    action: str
    dry_run: bool
    matched: int = 0
    changed: int = 0
    ids: list[str] = field(default_factory=list)
    spared: Spared = field(default_factory=Spared)
    candidates: list[Candidate] = field(default_factory=list)
    unarchived: list[str] = field(default_factory=list)
    open_sessions: int = 0  # of the segments spared as open, those that never ended

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of mutating CLI commands (docs/cli.md#json-output)."""
        return {"dry_run": self.dry_run, "matched": self.matched, "changed": self.changed,
                "ids": list(self.ids), "spared": asdict(self.spared),
                "open_sessions": self.open_sessions}


# --------------------------------------------------------------------------- lineages


@dataclass
class Segment:
    id: str
    ended_at: float | None
    pinned: bool
    archived: bool
    last_active: float | None
    depth: int


@dataclass
class Lineage:
    root_id: str
    segments: list[Segment]

    @property
    def tip(self) -> Segment:
        return self.segments[-1]

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.segments]

    @property
    def last_active(self) -> float | None:
        values = [s.last_active for s in self.segments if s.last_active is not None]
        return max(values) if values else None

    @property
    def pinned(self) -> bool:
        return any(s.pinned for s in self.segments)

    @property
    def archived(self) -> bool:
        return any(s.archived for s in self.segments)

    @property
    def open(self) -> bool:
        return any(s.ended_at is None for s in self.segments)


def load_lineages(conn: Executor, *, now: float | None = None,
                  rule: str = V11) -> list[Lineage]:
    """Every session grouped into its compression lineage (cycles: each session alone).

    ``rule`` picks the relation: ``"v11"`` the chain of ``lineage.lineage_map``, ``"v21"`` the
    continuations of docs/v21.md#bulk, the tip being the compression tip step's."""
    now = time.time() if now is None else now
    if rule == V21:
        return _continuation_lineages(conn, now)
    lmap = lineage.lineage_map(conn).subquery("lmap")
    rows = conn.execute(
        select(sessions.c.id, sessions.c.ended_at, sessions.c.pinned, sessions.c.archived,
               lineage.last_activity(sessions, now).label("last_active"),
               lmap.c.root_id, lmap.c.depth)
        .select_from(sessions.outerjoin(lmap, lmap.c.id == sessions.c.id)))
    groups: dict[str, list[Segment]] = {}
    for r in rows:
        seg = Segment(r.id, r.ended_at, bool(r.pinned), bool(r.archived), r.last_active,
                      r.depth or 0)
        groups.setdefault(r.root_id if r.root_id is not None else r.id, []).append(seg)
    return [Lineage(root, sorted(segs, key=lambda s: s.depth)) for root, segs in groups.items()]


def _continuation_lineages(conn: Executor, now: float) -> list[Lineage]:
    roots = compression.lineage_roots(conn)
    rows = conn.execute(select(sessions.c.id, sessions.c.ended_at, sessions.c.pinned,
                               sessions.c.archived,
                               lineage.last_activity(sessions, now).label("last_active")))
    groups: dict[str, list[Segment]] = {}
    for r in rows:
        root, depth = roots.get(r.id, (r.id, 0))
        groups.setdefault(root, []).append(
            Segment(r.id, r.ended_at, bool(r.pinned), bool(r.archived), r.last_active, depth))
    units = []
    for root, segs in groups.items():
        segs.sort(key=lambda s: (s.depth, s.id))
        if len(segs) > 1:
            # Judged by its tip: the segment the conversation went on in, moved last.
            tip = compression.compression_tip(conn, root, now=now)
            segs.sort(key=lambda s: s.id == tip)
        units.append(Lineage(root, segs))
    return units


def lineage_of(conn: Executor, session_id: str) -> list[str]:
    """The ids of the compression lineage holding ``session_id``, root → tip."""
    tree_root = lineage.root_of(conn, session_id)
    found = lineage.run_walk(conn, "compression_root", session_id, root=tree_root) \
        if tree_root is not None else []
    if not found:
        return []
    return [r.id for r in lineage.run_walk(conn, "compression_chain", found[0].id,
                                           root=tree_root)]


def _matching_ids(conn: Executor, where: ColumnElement[bool] | None) -> set[str] | None:
    if where is None:
        return None
    return set(conn.execute(select(sessions.c.id).where(where)).scalars())


@dataclass
class _Selection:
    chosen: list[Lineage]
    rest: list[Lineage]


def _select(conn: Executor, *, where: ColumnElement[bool] | None, ids: Iterable[str] | None,
            older_than: float | None, newer_than: float | None, now: float,
            rule: str = V11) -> tuple[_Selection, set[str] | None]:
    """Lineages whose tip passes ``where``, that hold one of ``ids``, and whose last activity
    (over all segments) lies in ``[newer_than, older_than)``."""
    wanted = _matching_ids(conn, where)
    id_set = set(ids) if ids is not None else None
    chosen: list[Lineage] = []
    rest: list[Lineage] = []
    for unit in load_lineages(conn, now=now, rule=rule):
        ok = wanted is None or unit.tip.id in wanted
        ok = ok and (id_set is None or bool(id_set.intersection(unit.ids)))
        last = unit.last_active
        if older_than is not None:
            ok = ok and last is not None and last < older_than
        if newer_than is not None:
            ok = ok and last is not None and last >= newer_than
        (chosen if ok else rest).append(unit)
    return _Selection(chosen, rest), wanted


def _would_match_alone(seg: Segment, wanted: set[str] | None, ids: set[str] | None,
                       older_than: float | None) -> bool:
    if wanted is not None and seg.id not in wanted:
        return False
    if ids is not None and seg.id not in ids:
        return False
    return older_than is None or (seg.last_active is not None and seg.last_active < older_than)


def _count_lineage_spared(units: Iterable[Lineage], wanted: set[str] | None,
                          older_than: float | None, *, ended_only: bool,
                          ids: Iterable[str] | None = None) -> int:
    """Segments that would qualify on their own (by the filter, among the ``ids`` asked
    for) but whose lineage did not."""
    id_set = set(ids) if ids is not None else None
    count = 0
    for unit in units:
        for seg in unit.segments[:-1]:
            if ended_only and seg.ended_at is None:
                continue
            if _would_match_alone(seg, wanted, id_set, older_than):
                count += 1
    return count


def _spare_open(result: RetentionResult, unit: Lineage) -> None:
    """An open lineage is spared whole (``spared.open`` counts its segments, like every spared
    group); ``open_sessions`` counts the segments that never ended, as ``stats`` counts open
    sessions."""
    result.spared.open += len(unit.segments)
    result.open_sessions += sum(1 for s in unit.segments if s.ended_at is None)


def _finish(result: RetentionResult, units: list[Lineage]) -> RetentionResult:
    units.sort(key=lambda u: (u.last_active is None, u.last_active or 0.0, u.root_id))
    result.candidates = [Candidate(u.root_id, u.tip.id, u.ids, u.last_active) for u in units]
    result.ids = [sid for u in units for sid in u.ids]
    result.matched = len(result.ids)
    return result


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield list(ids[start:start + _CHUNK])


# --------------------------------------------------------------------------- delete


def delete_sessions(conn: Executor, ids: Sequence[str]) -> int:
    """Detach the children, delete the messages (triggers drop index rows), delete the rows."""
    deleted = 0
    doomed = set(ids)
    detached: dict[str, list[str]] = {}
    for chunk in _chunks(ids):
        for sid in conn.execute(select(sessions.c.id)
                                .where(sessions.c.parent_session_id.in_(chunk))).scalars():
            if sid not in doomed:
                detached[sid] = lineage.subtree(conn, sid)
        conn.execute(update(sessions).where(sessions.c.parent_session_id.in_(chunk))
                     .values(parent_session_id=None))
    # Each detached child heads its own tree now: it and its subtree take its id as root.
    for sid, below in detached.items():
        lineage.reroot(conn, sid, below)
    for chunk in _chunks(ids):
        conn.execute(delete(messages).where(messages.c.session_id.in_(chunk)))
        deleted += rowcount(conn.execute(delete(sessions).where(sessions.c.id.in_(chunk))))
    return deleted


def delete_session(conn: Executor, session_id: str) -> bool:
    """Delete one session, open or not; its children are orphaned, not deleted."""
    exists = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
    if exists is None:
        return False
    delete_sessions(conn, [session_id])
    return True


# --------------------------------------------------------------------------- prune


def prune(conn: Executor, *, older_than: float | None = None, newer_than: float | None = None,
          where: ColumnElement[bool] | None = None, ids: Iterable[str] | None = None,
          include_pinned: bool = False, include_archived: bool = False,
          busy_window_s: float = DEFAULT_BUSY_WINDOW_S, now: float | None = None,
          dry_run: bool = False, rule: str = V11) -> RetentionResult:
    """Delete ended lineages whose last activity is before ``older_than`` (epoch seconds).

    Spared, and counted: lineages with an open segment, pinned ones (unless
    ``include_pinned``), archived ones (unless ``include_archived``), and ones active within
    the last ``busy_window_s`` seconds (``busy``; 0 disables the check).
    """
    now = time.time() if now is None else now
    selection, wanted = _select(conn, where=where, ids=ids, older_than=older_than,
                                newer_than=newer_than, now=now, rule=rule)
    result = RetentionResult("prune", dry_run)
    doomed: list[Lineage] = []
    for unit in selection.chosen:
        n = len(unit.segments)
        last = unit.last_active
        if unit.open:
            _spare_open(result, unit)
        elif unit.pinned and not include_pinned:
            result.spared.pinned += n
        elif unit.archived and not include_archived:
            result.spared.archived += n
        elif busy_window_s > 0 and last is not None and last > now - busy_window_s:
            result.spared.busy += n
        else:
            doomed.append(unit)
    result.spared.lineage = _count_lineage_spared(selection.rest, wanted, older_than,
                                                  ended_only=True, ids=ids)
    _finish(result, doomed)
    if not dry_run and result.ids:
        result.changed = delete_sessions(conn, result.ids)
    return result


# --------------------------------------------------------------------------- archive


def _set_archived(conn: Executor, ids: Sequence[str], value: int) -> int:
    changed = 0
    for chunk in _chunks(ids):
        changed += rowcount(conn.execute(update(sessions).values(archived=value).where(
            sessions.c.id.in_(chunk), sessions.c.archived != value)))
    return changed


def archive(conn: Executor, *, older_than: float | None = None,
            newer_than: float | None = None, where: ColumnElement[bool] | None = None,
            ids: Iterable[str] | None = None, include_open: bool = False,
            now: float | None = None, dry_run: bool = False,
            rule: str = V11) -> RetentionResult:
    """Set ``archived=1`` on whole lineages selected by their tip. Pinned lineages are always
    spared; open ones unless ``include_open``; already archived ones count as ``archived``."""
    now = time.time() if now is None else now
    selection, wanted = _select(conn, where=where, ids=ids, older_than=older_than,
                                newer_than=newer_than, now=now, rule=rule)
    result = RetentionResult("archive", dry_run)
    chosen: list[Lineage] = []
    for unit in selection.chosen:
        n = len(unit.segments)
        if unit.pinned:
            result.spared.pinned += n
        elif unit.open and not include_open:
            _spare_open(result, unit)
        elif all(s.archived for s in unit.segments):
            result.spared.archived += n
        else:
            chosen.append(unit)
    result.spared.lineage = _count_lineage_spared(selection.rest, wanted, older_than,
                                                  ended_only=not include_open, ids=ids)
    _finish(result, chosen)
    if not dry_run and result.ids:
        result.changed = _set_archived(conn, result.ids, 1)
    return result


def unarchive(conn: Executor, *, older_than: float | None = None,
              newer_than: float | None = None, where: ColumnElement[bool] | None = None,
              ids: Iterable[str] | None = None, now: float | None = None,
              dry_run: bool = False) -> RetentionResult:
    """Clear ``archived`` on whole lineages holding an archived segment."""
    now = time.time() if now is None else now
    selection, _ = _select(conn, where=where, ids=ids, older_than=older_than,
                           newer_than=newer_than, now=now)
    result = RetentionResult("unarchive", dry_run)
    _finish(result, [u for u in selection.chosen if u.archived])
    if not dry_run and result.ids:
        result.changed = _set_archived(conn, result.ids, 0)
    return result


# --------------------------------------------------------------------------- pin


def pin(conn: Executor, ids: Iterable[str], *, dry_run: bool = False) -> RetentionResult:
    """Set the keep flag. Pinning an archived session unarchives its whole lineage
    (reported in ``unarchived``)."""
    wanted = list(dict.fromkeys(ids))
    result = RetentionResult("pin", dry_run)
    rows = conn.execute(select(sessions.c.id, sessions.c.pinned)
                        .where(sessions.c.id.in_(wanted))).all() if wanted else []
    present = {r.id for r in rows}
    result.ids = [sid for sid in wanted if sid in present]
    result.matched = len(result.ids)
    to_unarchive: list[str] = []
    for sid in result.ids:
        to_unarchive.extend(lineage_of(conn, sid))
    archived = set(conn.execute(select(sessions.c.id).where(
        sessions.c.id.in_(to_unarchive), sessions.c.archived != 0)).scalars()) \
        if to_unarchive else set()
    result.unarchived = [sid for sid in dict.fromkeys(to_unarchive) if sid in archived]
    result.spared.pinned = sum(1 for r in rows if r.pinned)  # already pinned
    if not dry_run and result.ids:
        for chunk in _chunks(result.ids):
            result.changed += rowcount(conn.execute(
                update(sessions).where(sessions.c.id.in_(chunk), sessions.c.pinned == 0)
                .values(pinned=1)))
        _set_archived(conn, result.unarchived, 0)
    return result


def unpin(conn: Executor, ids: Iterable[str], *, dry_run: bool = False) -> RetentionResult:
    wanted = list(dict.fromkeys(ids))
    result = RetentionResult("unpin", dry_run)
    rows = conn.execute(select(sessions.c.id, sessions.c.pinned)
                        .where(sessions.c.id.in_(wanted))).all() if wanted else []
    result.ids = [r.id for r in rows if r.pinned]
    result.matched = len(result.ids)
    if not dry_run and result.ids:
        for chunk in _chunks(result.ids):
            result.changed += rowcount(conn.execute(
                update(sessions).where(sessions.c.id.in_(chunk), sessions.c.pinned != 0)
                .values(pinned=0)))
    return result


# --------------------------------------------------------------------------- close


def close_idle(conn: Executor, *, older_than: float, newer_than: float | None = None,
               where: ColumnElement[bool] | None = None, ids: Iterable[str] | None = None,
               end_reason: str = CLOSED_IDLE, busy_window_s: float = DEFAULT_BUSY_WINDOW_S,
               now: float | None = None, dry_run: bool = False) -> RetentionResult:
    """End the open segments of lineages idle since before ``older_than`` (sessions left
    open by hard kills), so prune and archive see them. Pinned and busy lineages are spared;
    ``ended_at`` becomes now and ``end_reason`` is recorded. They stay resumable."""
    now = time.time() if now is None else now
    selection, _ = _select(conn, where=where, ids=ids, older_than=older_than,
                           newer_than=newer_than, now=now)
    result = RetentionResult("close", dry_run)
    chosen: list[Lineage] = []
    for unit in selection.chosen:
        if not unit.open:
            continue
        open_ids = [s for s in unit.segments if s.ended_at is None]
        last = unit.last_active
        if unit.pinned:
            result.spared.pinned += len(open_ids)
        elif busy_window_s > 0 and last is not None and last > now - busy_window_s:
            result.spared.busy += len(open_ids)
        else:
            chosen.append(Lineage(unit.root_id, open_ids))
    _finish(result, chosen)
    if not dry_run and result.ids:
        for chunk in _chunks(result.ids):
            result.changed += rowcount(conn.execute(
                update(sessions).where(sessions.c.id.in_(chunk), sessions.c.ended_at.is_(None))
                .values(ended_at=now, end_reason=end_reason)))
    return result


# --------------------------------------------------------------------------- by filter

ACTIONS = ("prune", "archive", "unarchive", "close")


def apply_filter(conn: Connection, action: str, flt: SessionFilter, *,
                 ids: Iterable[str] | None = None, dry_run: bool = False,
                 **options: Any) -> RetentionResult:
    """Run one verb over the shared filter set (docs/cli.md#filters): the activity bounds
    apply to the whole lineage, every other flag to its tip row. ``options`` are the verb's
    own (``include_pinned``, ``include_archived``, ``include_open``); ``close`` needs
    ``flt.older_than``."""
    window = flt.window()
    rest = dataclasses.replace(flt, older_than=None, newer_than=None)
    common: dict[str, Any] = dict(older_than=window.active_before,
                                  newer_than=window.active_after, where=matching(conn, rest),
                                  ids=ids, now=flt.now, dry_run=dry_run, **options)
    if action == "prune":
        return prune(conn, **common)
    if action == "archive":
        return archive(conn, **common)
    if action == "unarchive":
        return unarchive(conn, **common)
    if action == "close":
        if window.active_before is None:
            raise ValueError("close needs an --older-than bound")
        return close_idle(conn, **common)
    raise ValueError(f"unknown retention action {action!r}; expected one of {ACTIONS}")


def candidate_rows(conn: Executor, result: RetentionResult) -> list[dict[str, Any]]:
    """One preview row per candidate lineage, read from its tip: ``id`` (the tip),
    ``segments``, ``last_active``, ``source``, ``model``, ``messages`` (over every segment),
    ``title``; in the result's order (oldest activity first)."""
    tips = [c.tip_id for c in result.candidates]
    found: dict[str, Row[str, str | None, str | None, str | None]] = {}
    for chunk in _chunks(tips):
        found.update((r.id, r) for r in conn.execute(select(
            sessions.c.id, sessions.c.source, sessions.c.model, sessions.c.title)
            .where(sessions.c.id.in_(chunk))))
    counts: dict[str, int] = {}
    for chunk in _chunks([sid for c in result.candidates for sid in c.ids]):
        for r in conn.execute(select(sessions.c.id, sessions.c.message_count)
                              .where(sessions.c.id.in_(chunk))):
            counts[r.id] = r.message_count or 0
    rows: list[dict[str, Any]] = []
    for c in result.candidates:
        _, source, model, title = found.get(c.tip_id) or (None, None, None, None)
        rows.append({"id": c.tip_id, "segments": c.ids, "last_active": c.last_active,
                     "source": source, "model": model,
                     "messages": sum(counts.get(sid, 0) for sid in c.ids), "title": title})
    return rows


# --------------------------------------------------------------------------- the v21 verbs


@dataclass
class ArchiveOutcome:
    """``set_session_archived``: whether the session exists, whether a pin refused the
    archive, and how many segments changed."""

    found: bool
    refused: bool = False
    changed: int = 0


def set_lineage_archived(conn: Executor, session_id: str, archived: bool) -> ArchiveOutcome:
    """Set ``archived`` on the session's whole lineage (docs/v21.md#bulk), so no unarchived
    segment resurrects a projected entry; a lineage with a pinned segment is not archived
    (unarchiving always proceeds)."""
    members = compression.lineage_members(conn, session_id)
    if not members:
        return ArchiveOutcome(found=False)
    if archived and conn.execute(select(sessions.c.id).where(
            sessions.c.id.in_(members), sessions.c.pinned != 0).limit(1)).first():
        return ArchiveOutcome(found=True, refused=True)
    return ArchiveOutcome(found=True, changed=_set_archived(conn, members, 1 if archived else 0))


def session_summaries(conn: Executor, ids: Sequence[str]) -> list[SessionSummary]:
    """``{id, source, title, model, started_at, ended_at, message_count, archived}`` of each
    session, ``started_at`` ascending (``list_prune_candidates``)."""
    c = sessions.c
    rows: list[SessionSummary] = []
    for chunk in _chunks(ids):
        rows += [SessionSummary(id=r.id, source=r.source, title=r.title, model=r.model,
                                started_at=r.started_at, ended_at=r.ended_at,
                                message_count=r.message_count, archived=r.archived)
                 for r in conn.execute(
            select(c.id, c.source, c.title, c.model, c.started_at, c.ended_at, c.message_count,
                   c.archived).where(c.id.in_(chunk)))]
    return sorted(rows, key=lambda r: (r["started_at"] is None, r["started_at"] or 0.0, r["id"]))
