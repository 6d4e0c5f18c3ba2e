"""The shared session filter set (docs/cli.md#filters): AGE/TIME parsing and one WHERE clause.

``list``, ``export``, ``prune``, ``archive``, ``unarchive`` and ``close`` all select sessions with the
same flags, so the flags live in one :class:`SessionFilter` whose :meth:`SessionFilter.where` builds
a SQLAlchemy Core clause over the ``sessions`` table. Every user value travels as a bound parameter;
LIKE needles have ``%``/``_`` escaped. The "last activity" expression is passed in by the caller so
that listing order and prune share the one expression defined by the session API.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    func,
    literal,
    or_,
    select,
    true,
)

from hermes_store.db import catalog
from hermes_store.db.dialect import json_values
from hermes_store.db.models import ChatSession
from hermes_store.errors import UsageError
from hermes_store.repo import lineage

__all__ = [
    "BULK_FILTERS", "EmptyWindowError", "FilterError", "SessionFilter", "TimeSyntaxError",
    "bulk_clauses", "cwd_prefix_clause", "escape_like", "matching", "parse_time",
]

LIKE_ESCAPE = "\\"

_UNIT_SECONDS = {
    "s": 1, "sec": 1, "secs": 1,
    "m": 60, "min": 60, "mins": 60,
    "h": 3600, "hr": 3600, "hrs": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "wk": 604800, "wks": 604800, "week": 604800, "weeks": 604800,
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_BARE_DAYS = re.compile(rf"^{_NUMBER}$")
_DURATION = re.compile(rf"^(?P<n>{_NUMBER})\s*(?P<unit>[a-z]+)$", re.IGNORECASE)


class FilterError(UsageError):
    """A filter value is unusable (exit 2)."""


class TimeSyntaxError(FilterError):
    """An AGE/TIME value is neither a number, a duration nor ISO 8601."""


class EmptyWindowError(FilterError):
    """The lower bound of a time window is not before its upper bound."""


def parse_time(value: str | float | datetime, *, now: float | None = None,
               flag: str = "time") -> float:
    """Turn an AGE/TIME value into an epoch (seconds, UTC).

    ``90`` is 90 days ago; ``1.5h``, ``30min``, ``2 weeks`` are durations before *now*; anything
    else must be ISO 8601, read as local time when it carries no offset. A ``datetime`` or number
    given by a library caller is taken as an absolute point in time.
    """
    now = time.time() if now is None else now
    if isinstance(value, datetime):
        return value.astimezone().timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise TimeSyntaxError(f"{flag}: {value!r} is not a finite time")
        return float(value)
    if not isinstance(value, str):
        raise TimeSyntaxError(f"{flag}: expected an age or a time, got {type(value).__name__}")
    text = value.strip()
    if not text:
        raise TimeSyntaxError(f"{flag}: empty value; use e.g. 90, 12h, 2w or 2026-07-05T14:30")
    if _BARE_DAYS.match(text):
        return _ago(now, float(text) * 86400, value, flag)
    m = _DURATION.match(text)
    if m:
        unit = m.group("unit").lower()
        if unit not in _UNIT_SECONDS:
            raise TimeSyntaxError(
                f"{flag}: unknown unit {m.group('unit')!r} in {value!r}; use s, min, h, d or w "
                "(m means minutes; there are no months or years)"
            )
        return _ago(now, float(m.group("n")) * _UNIT_SECONDS[unit], value, flag)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise TimeSyntaxError(
            f"{flag}: {value!r} is not an age (90, 12h, 30min, 2w) or an ISO 8601 time "
            "(2026-07-05, 2026-07-05T14:30, 2026-07-05T14:30+02:00)"
        ) from None
    # A naive value is local wall time: astimezone() on a naive datetime assumes exactly that.
    return dt.astimezone().timestamp()


def _ago(now: float, seconds: float, raw: str, flag: str) -> float:
    if not math.isfinite(seconds) or seconds > now:
        raise TimeSyntaxError(f"{flag}: {raw!r} reaches back before 1970")
    return now - seconds


def escape_like(needle: str) -> str:
    """Escape LIKE wildcards so *needle* matches literally (pair with ``escape=LIKE_ESCAPE``)."""
    return (needle.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
            .replace("%", LIKE_ESCAPE + "%").replace("_", LIKE_ESCAPE + "_"))


def _fmt(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


@dataclass(frozen=True)
class TimeWindow:
    """Resolved bounds: activity in ``[active_after, active_before)``, start in ``[after, before)``."""

    active_after: float | None = None
    active_before: float | None = None
    started_after: float | None = None
    started_before: float | None = None


@dataclass
class SessionFilter:
    """The flags of docs/cli.md#filters, ANDed when set; an empty filter matches every session.

    Times (``older_than``, ``newer_than``, ``before``, ``after``) accept the AGE/TIME syntax of
    :func:`parse_time`. They are validated at construction, relative to ``now`` (default: the
    moment of construction), so a bad value fails before any query runs.
    """

    older_than: str | float | datetime | None = None
    newer_than: str | float | datetime | None = None
    before: str | float | datetime | None = None
    after: str | float | datetime | None = None
    sources: tuple[str, ...] = ()
    title: str | None = None
    model: str | None = None
    branch: str | None = None
    provider: str | None = None
    end_reason: str | None = None
    user: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    cwd: str | None = None
    workspace: str | None = None
    min_messages: int | None = None
    max_messages: int | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    min_cost: float | None = None
    max_cost: float | None = None
    min_tool_calls: int | None = None
    max_tool_calls: int | None = None
    now: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.now is None:
            self.now = time.time()
        if isinstance(self.sources, str):
            self.sources = (self.sources,)
        self.sources = tuple(self.sources)
        for low, high in (("min_messages", "max_messages"), ("min_tokens", "max_tokens"),
                          ("min_cost", "max_cost"), ("min_tool_calls", "max_tool_calls")):
            lo, hi = getattr(self, low), getattr(self, high)
            for name, v in ((low, lo), (high, hi)):
                if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                                      or not math.isfinite(v) or v < 0):
                    raise FilterError(f"--{_flag(name)}: expected a number >= 0, got {v!r}")
            if lo is not None and hi is not None and lo > hi:
                raise FilterError(
                    f"--{_flag(low)} {lo} is above --{_flag(high)} {hi}: nothing can match")
        self.window()

    # ---------------------------------------------------------------- resolution
    def window(self) -> TimeWindow:
        """Resolve the four time flags; raise :class:`EmptyWindowError` for an empty window."""
        now = self.now

        def resolve(value: object, flag: str) -> float | None:
            if value is None:
                return None
            return parse_time(value, now=now, flag=flag)  # type: ignore[arg-type]

        w = TimeWindow(
            active_after=resolve(self.newer_than, "--newer-than"),
            active_before=resolve(self.older_than, "--older-than"),
            started_after=resolve(self.after, "--after"),
            started_before=resolve(self.before, "--before"),
        )
        if (w.active_after is not None and w.active_before is not None
                and w.active_after >= w.active_before):
            raise EmptyWindowError(
                f"empty time window: --newer-than {self.newer_than} ({_fmt(w.active_after)}) is not "
                f"before --older-than {self.older_than} ({_fmt(w.active_before)})"
            )
        if (w.started_after is not None and w.started_before is not None
                and w.started_after >= w.started_before):
            raise EmptyWindowError(
                f"empty time window: --after {self.after} ({_fmt(w.started_after)}) is not "
                f"before --before {self.before} ({_fmt(w.started_before)})"
            )
        return w

    @property
    def is_empty(self) -> bool:
        """True when no filter flag is set (prune then applies its retention default)."""
        return not any(
            getattr(self, f) not in (None, ()) for f in self.__dataclass_fields__ if f != "now"
        )

    # ---------------------------------------------------------------- SQL
    def where(self, last_activity: ColumnElement, table: Table | None = None) -> ColumnElement[bool]:
        """The ANDed clause over *table* (default: the modelled ``sessions`` table).

        *last_activity* is the shared sanitised "last activity" column expression. Pass a
        reflected *table* to filter on upstream-only columns (``chat_id``, ``chat_type``).
        """
        t = table if table is not None else ChatSession.__table__
        c = t.c
        w = self.window()
        clauses: list[ColumnElement[bool]] = []
        if w.active_after is not None:
            clauses.append(last_activity >= w.active_after)
        if w.active_before is not None:
            clauses.append(last_activity < w.active_before)
        if w.started_after is not None:
            clauses.append(c.started_at >= w.started_after)
        if w.started_before is not None:
            clauses.append(c.started_at < w.started_before)
        if self.sources:
            clauses.append(c.source.in_(list(self.sources)))
        for attr, column in (("title", c.title), ("model", c.model), ("branch", c.git_branch)):
            needle = getattr(self, attr)
            if needle is not None:
                clauses.append(column.ilike(f"%{escape_like(needle)}%", escape=LIKE_ESCAPE))
        if self.provider is not None:
            clauses.append(func.lower(c.billing_provider) == func.lower(literal(self.provider)))
        for attr, name in (("end_reason", "end_reason"), ("user", "user_id"),
                           ("chat_id", "chat_id"), ("chat_type", "chat_type")):
            value = getattr(self, attr)
            if value is not None:
                if name not in c:
                    raise FilterError(f"--{_flag(attr)}: this store has no {name} column")
                clauses.append(c[name] == value)
        if self.cwd is not None:
            clauses.append(_path_prefix(c.cwd, self.cwd))
        if self.workspace is not None:
            clauses.append(_workspace(c.git_repo_root, c.cwd, self.workspace))
        tokens = func.coalesce(c.input_tokens, 0) + func.coalesce(c.output_tokens, 0)
        cost = func.coalesce(c.actual_cost_usd, c.estimated_cost_usd, 0.0)
        for expr, lo, hi in (
            (func.coalesce(c.message_count, 0), self.min_messages, self.max_messages),
            (tokens, self.min_tokens, self.max_tokens),
            (cost, self.min_cost, self.max_cost),
            (func.coalesce(c.tool_call_count, 0), self.min_tool_calls, self.max_tool_calls),
        ):
            if lo is not None:
                clauses.append(expr >= lo)
            if hi is not None:
                clauses.append(expr <= hi)
        return and_(*clauses) if clauses else true()

    def describe(self) -> str:
        """Human description for previews, e.g. "last active before 2026-07-05 14:30, source 'cli'"."""
        w = self.window()
        parts: list[str] = []
        if w.active_before is not None:
            parts.append(f"last active before {_fmt(w.active_before)}")
        if w.active_after is not None:
            parts.append(f"last active since {_fmt(w.active_after)}")
        if w.started_before is not None:
            parts.append(f"started before {_fmt(w.started_before)}")
        if w.started_after is not None:
            parts.append(f"started since {_fmt(w.started_after)}")
        if self.sources:
            parts.append("source " + " or ".join(repr(s) for s in self.sources))
        for attr in ("title", "model", "branch"):
            if getattr(self, attr) is not None:
                parts.append(f"{attr} contains {getattr(self, attr)!r}")
        for attr in ("provider", "end_reason", "user", "chat_id", "chat_type"):
            if getattr(self, attr) is not None:
                parts.append(f"{attr.replace('_', ' ')} {getattr(self, attr)!r}")
        if self.cwd is not None:
            parts.append(f"cwd under {self.cwd!r}")
        if self.workspace is not None:
            parts.append(f"workspace {self.workspace!r}")
        for what in ("messages", "tokens", "cost", "tool_calls"):
            lo, hi = getattr(self, f"min_{what}"), getattr(self, f"max_{what}")
            label = what.replace("_", " ")
            if lo is not None:
                parts.append(f"{label} >= {lo}")
            if hi is not None:
                parts.append(f"{label} <= {hi}")
        return ", ".join(parts) if parts else "any session"


def matching(conn: Connection, flt: SessionFilter, *,
             by_lineage: bool = False) -> ColumnElement[bool] | None:
    """``sessions.id IN (…)`` for the filter, or None for an empty filter.

    Evaluated on the live table, since adopted stores may carry ``chat_id``/``chat_type``
    columns the model does not declare, with the shared last-activity expression.
    ``by_lineage``: a lineage root's activity is the newest over all its segments (``list``
    shows roots projected onto their tips)."""
    if flt.is_empty:
        return None
    live = catalog.reflect(conn, "sessions").alias("flt")
    activity = lineage.last_activity(live, flt.now)
    if by_lineage:
        chain = lineage.lineage_activity(conn, now=flt.now, compressed_only=True).subquery("chain")
        activity = func.coalesce(select(chain.c.last_active)
                                 .where(chain.c.root_id == live.c.id).scalar_subquery(),
                                 activity)
    matched = select(live.c.id).where(flt.where(activity, table=live))  # type: ignore[arg-type]
    if by_lineage:
        # The listing query has its own lineage CTE of the same name: resolve the ids first
        # and pass them as one JSON parameter.
        ids = json.dumps(list(conn.execute(matched).scalars()))
        matched = json_values(conn, ids)
    return lineage.sessions.c.id.in_(matched)


def _flag(attr: str) -> str:
    return attr.replace("_", "-")


def _path_prefix(column: ColumnElement, prefix: str) -> ColumnElement[bool]:
    # Component boundaries: /a/b matches /a/b and /a/b/c, never /a/bc. substr() compares
    # literally, so no LIKE wildcard in a path can widen the match.
    base = prefix.rstrip("/") if prefix.strip("/") else "/"
    if base == "/":
        return func.substr(column, 1, 1) == "/"
    below = base + "/"
    return or_(column == base, func.substr(column, 1, len(below)) == below)


def _workspace(repo_root: ColumnElement, cwd: ColumnElement, needle: str) -> ColumnElement[bool]:
    # The git root names the workspace when known; the cwd stands in otherwise. A substring
    # match (case-insensitive) also covers the exact basename.
    place = func.coalesce(func.nullif(repo_root, ""), cwd)
    return place.ilike(f"%{escape_like(needle)}%", escape=LIKE_ESCAPE)


# --------------------------------------------------------------------------- the v21 set

# The v21 bulk verbs' ``**filters`` (docs/v21.md#bulk): name → kind ("text" applies when
# truthy, "number" when not None, "flag" is the archived tri-state).
BULK_FILTERS = {
    "started_before": "number", "started_after": "number",
    "title_like": "text", "model_like": "text", "branch_like": "text", "provider": "text",
    "end_reason": "text", "user_id": "text", "chat_id": "text", "chat_type": "text",
    "cwd_prefix": "text",
    "min_messages": "number", "max_messages": "number",
    "min_tool_calls": "number", "max_tool_calls": "number",
    "min_tokens": "number", "max_tokens": "number",
    "min_cost": "number", "max_cost": "number",
    "archived": "flag",
}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_PATH_SEPARATORS = "/\\"


def cwd_prefix_clause(prefix: str, table: Table | None = None) -> ColumnElement[bool]:
    """``cwd`` equal to the prefix or below it with either separator (``/repo`` matches
    ``/repo/x`` and ``/repo\\x``, never ``/repo-wt``); compared literally, no wildcard."""
    cwd = (table if table is not None else ChatSession.__table__).c.cwd
    base = prefix.rstrip(_PATH_SEPARATORS) or prefix
    if base[-1] in _PATH_SEPARATORS:  # a root ("/", "C:\\"): everything below it
        return func.substr(cwd, 1, len(base)) == base
    return or_(cwd == base, *(func.substr(cwd, 1, len(base) + 1) == base + sep
                              for sep in _PATH_SEPARATORS))


def _contains_ascii_ci(column: ColumnElement, needle: str) -> ColumnElement[bool]:
    # ASCII case only, as the agent's LIKE did; NULL reads as "" (so it never matches).
    return func.lower(func.coalesce(column, "")).contains(needle.translate(_ASCII_LOWER),
                                                          autoescape=True)


def bulk_clauses(values: dict[str, object], table: Table | None = None) -> list[ColumnElement]:
    """The clauses of validated v21 filters over ``sessions`` (ANDed by the caller); the
    substring and prefix filters are literal (no LIKE wildcard)."""
    c = (table if table is not None else ChatSession.__table__).c
    numbers = {
        "messages": func.coalesce(c.message_count, 0),
        "tool_calls": func.coalesce(c.tool_call_count, 0),
        "tokens": func.coalesce(c.input_tokens, 0) + func.coalesce(c.output_tokens, 0),
        "cost": func.coalesce(c.actual_cost_usd, c.estimated_cost_usd, 0.0),
    }
    found: list[ColumnElement] = []
    for name, value in values.items():
        kind = BULK_FILTERS[name]
        if (kind == "text" and not value) or (kind != "text" and value is None):
            continue
        if name == "started_before":
            found.append(c.started_at < value)
        elif name == "started_after":
            found.append(c.started_at >= value)
        elif name in ("title_like", "model_like", "branch_like"):
            column = {"title_like": c.title, "model_like": c.model,
                      "branch_like": c.git_branch}[name]
            found.append(_contains_ascii_ci(column, str(value)))
        elif name == "provider":
            found.append(func.lower(c.billing_provider) == str(value).translate(_ASCII_LOWER))
        elif name == "cwd_prefix":
            found.append(cwd_prefix_clause(str(value), table))
        elif name == "archived":
            flag = func.coalesce(c.archived, 0)
            found.append(flag != 0 if value else flag == 0)
        elif name.startswith(("min_", "max_")):
            expr = numbers[name[4:]]
            found.append(expr >= value if name.startswith("min_") else expr <= value)
        else:
            found.append(c[name] == value)
    return found
