"""The shared session filter set's values (docs/cli.md#filters): AGE/TIME parsing, the
resolved time window and the :class:`SessionFilter` the commands build from their flags.

No SQLAlchemy here: a reading command builds its filter before it knows whether it will run
SQLAlchemy's statements or the stdlib path's (:mod:`db.raw`). The clause a filter stands for
is built by :mod:`repo.filters`.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime

from hermes_store.errors import UsageError

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
                    raise FilterError(f"--{flag_of(name)}: expected a number >= 0, got {v!r}")
            if lo is not None and hi is not None and lo > hi:
                raise FilterError(
                    f"--{flag_of(low)} {lo} is above --{flag_of(high)} {hi}: nothing can match")
        self.window()

    # ---------------------------------------------------------------- resolution
    def window(self) -> TimeWindow:
        """Resolve the four time flags; raise :class:`EmptyWindowError` for an empty window."""
        now = self.now

        def resolve(value: str | float | datetime | None, flag: str) -> float | None:
            if value is None:
                return None
            return parse_time(value, now=now, flag=flag)

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
    def moment(self) -> float:
        """The time the relative flags are measured from (``now``, set at construction)."""
        if self.now is None:
            raise FilterError("the filter's reference time (now) was cleared after construction")
        return self.now

    @property
    def is_empty(self) -> bool:
        """True when no filter flag is set (prune then applies its retention default)."""
        return not any(
            getattr(self, f) not in (None, ()) for f in self.__dataclass_fields__ if f != "now"
        )

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


def flag_of(attr: str) -> str:
    """The command-line flag of a filter field (``min_messages`` → ``min-messages``)."""
    return attr.replace("_", "-")
