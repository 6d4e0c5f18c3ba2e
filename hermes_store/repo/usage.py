"""Token usage: the session counters ``update_token_counts`` moves, the billing route they are
charged to, and the per-model roll-up in ``session_model_usage`` (docs/v21.md#behaviour-changes).

A call is *accounted* when it carries a non-zero token count, API call count or cost. Only
accounted calls fill the billing route: a metadata-only call (the agent reports the route it
*asked* for when it creates a session) must not fix a route no request was charged to. For the
same reason the first accounted call replaces the requested route when it differs.

Functions take a caller-owned ``Connection`` and never commit; each is meant to run inside the
one write unit of the facade call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from sqlalchemy import and_, bindparam, exists, func, insert, literal, select, update
from sqlalchemy.exc import IntegrityError

from hermes_store.db.models import MODEL_USAGE, SESSIONS
from hermes_store.repo import sessions as sessions_repo
from hermes_store.repo.executor import rowcount
from hermes_store.repo.sessions import Executor

sessions = SESSIONS
usage = MODEL_USAGE

TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                 "reasoning_tokens")
ROUTE_COLUMNS = ("billing_provider", "billing_base_url", "billing_mode")
UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True)
class UsageCall:
    """One ``update_token_counts`` call, validated by the facade."""

    session_id: str
    now: float
    model: str | None = None
    tokens: Mapping[str, int] = field(default_factory=dict)
    estimated_cost_usd: float | None = None
    actual_cost_usd: float | None = None
    cost_status: str | None = None
    cost_source: str | None = None
    pricing_version: str | None = None
    route: Mapping[str, str | None] = field(default_factory=dict)
    api_call_count: int | None = None
    absolute: bool = False

    @property
    def accounted(self) -> bool:
        return (any(self.tokens.values()) or bool(self.api_call_count)
                or bool(self.estimated_cost_usd) or bool(self.actual_cost_usd))

    @property
    def rolls_up(self) -> bool:
        """Whether the call adds a per-model usage row (the actual cost alone does not)."""
        return not self.absolute and (any(self.tokens.values()) or bool(self.api_call_count)
                                      or bool(self.estimated_cost_usd))


def record(conn: Executor, call: UsageCall) -> None:
    """``update_token_counts``: settle the route, move the counters (the counter update
    ensures the row, with the call's model), roll up."""
    if call.accounted:
        _replace_requested_route(conn, call)
    sessions_repo.update_token_counts(
        conn, call.session_id, now=call.now, absolute=call.absolute, model=call.model,
        tokens=call.tokens, estimated_cost_usd=call.estimated_cost_usd,
        actual_cost_usd=call.actual_cost_usd,
        replace={"cost_status": call.cost_status, "cost_source": call.cost_source,
                 "pricing_version": call.pricing_version},
        first_wins=dict(call.route) if call.accounted else {},
        api_call_count=call.api_call_count)
    if call.rolls_up:
        _roll_up(conn, call)


def _replace_requested_route(conn: Executor, call: UsageCall) -> None:
    """Before any request was accounted, the stored route is the one the session asked for;
    the first accounted call names the route really charged, so it replaces it. (A row still
    to be created takes the call's route from the counter update.)"""
    provider = call.route.get("billing_provider")
    if not call.model or not provider:
        return
    row = conn.execute(_ROUTE_OF, {"sid": call.session_id}).first()
    if row is None or (row.api_call_count or 0) != 0:
        return
    if row.model == call.model and row.billing_provider == provider:
        return
    conn.execute(update(sessions).where(sessions.c.id == call.session_id).values(
        model=call.model, **{name: call.route.get(name) for name in ROUTE_COLUMNS}))


# Built once: update_token_counts runs after every API call, and building a statement over
# the wide sessions table costs more than running it.
_ROUTE_OF = select(sessions.c.api_call_count, sessions.c.model, sessions.c.billing_provider,
                   *(sessions.c[n] for n in ROUTE_COLUMNS[1:])).where(
    sessions.c.id == bindparam("sid"))
_KEY = ("session_id", "model", *ROUTE_COLUMNS)
_AMOUNTS = ("api_call_count", *TOKEN_COLUMNS, "estimated_cost_usd", "actual_cost_usd")
_BUMP = (update(usage).where(*(usage.c[k] == bindparam(f"k_{k}") for k in _KEY))
         .values(last_seen=bindparam("now"),
                 cost_status=func.coalesce(bindparam("cost_status"), usage.c.cost_status),
                 cost_source=func.coalesce(bindparam("cost_source"), usage.c.cost_source),
                 **{n: usage.c[n] + bindparam(f"d_{n}") for n in _AMOUNTS}))
_INSERT = insert(usage)


def _roll_up(conn: Executor, call: UsageCall) -> None:
    """Add the call to its (session, model, route) row: the key comes from the call, else from
    the session row as just updated, else ``'unknown'`` / ``''``."""
    row = conn.execute(_ROUTE_OF, {"sid": call.session_id}).mappings().one()
    key = {"session_id": call.session_id,
           "model": call.model or row["model"] or UNKNOWN_MODEL}
    for name in ROUTE_COLUMNS:
        key[name] = call.route.get(name) or row[name] or ""
    amounts: dict[str, Any] = {name: int(call.tokens.get(name) or 0) for name in TOKEN_COLUMNS}
    amounts["api_call_count"] = int(call.api_call_count or 0)
    amounts["estimated_cost_usd"] = float(call.estimated_cost_usd or 0.0)
    amounts["actual_cost_usd"] = float(call.actual_cost_usd or 0.0)
    labels = {"cost_status": call.cost_status, "cost_source": call.cost_source}
    bump = {"now": call.now, **labels, **{f"k_{k}": v for k, v in key.items()},
            **{f"d_{n}": v for n, v in amounts.items()}}
    if rowcount(conn.execute(_BUMP, bump)):
        return
    try:
        # SQLite's write lock serialises writers; where two transactions can both miss the
        # row, the primary key lets one insert and the other adds to what it inserted.
        with conn.begin_nested():
            conn.execute(_INSERT, {**key, **amounts, **labels, "first_seen": call.now,
                                   "last_seen": call.now})
    except IntegrityError:
        conn.execute(_BUMP, bump)


def seed_from_sessions(conn: Executor) -> int:
    """The v21 agent's one-time usage seed (files stamped below 20): each session with tokens
    and no usage row yet gets one row from its own totals. Returns the rows inserted."""
    s = sessions.c
    total = sum((func.coalesce(s[name], 0) for name in TOKEN_COLUMNS), literal(0))
    model = func.coalesce(s.model, UNKNOWN_MODEL)
    routes = [func.coalesce(s[name], "") for name in ROUTE_COLUMNS]
    present = exists(select(usage.c.session_id).where(
        usage.c.session_id == s.id, usage.c.model == model,
        and_(*(usage.c[name] == value for name, value in zip(ROUTE_COLUMNS, routes, strict=True)))))
    source = select(
        s.id, model, *routes, func.coalesce(s.api_call_count, 0),
        *(func.coalesce(s[name], 0) for name in TOKEN_COLUMNS),
        func.coalesce(s.estimated_cost_usd, 0.0), func.coalesce(s.actual_cost_usd, 0.0),
        s.cost_status, s.cost_source, s.started_at, func.coalesce(s.ended_at, s.started_at),
    ).where(total > 0, ~present)
    columns = ["session_id", "model", *ROUTE_COLUMNS, "api_call_count", *TOKEN_COLUMNS,
               "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
               "first_seen", "last_seen"]
    result = conn.execute(insert(usage).from_select(columns, source))
    return rowcount(result)


class UsageRow(TypedDict):
    """One ``session_model_usage`` row: a (session, model, route) key and its totals."""

    session_id: str
    model: str
    billing_provider: str
    billing_base_url: str
    billing_mode: str
    api_call_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    estimated_cost_usd: float
    actual_cost_usd: float
    cost_status: str | None
    cost_source: str | None
    first_seen: float | None
    last_seen: float | None


def usage_rows(conn: Executor, session_id: str) -> list[UsageRow]:
    """The session's per-model rows, by first use."""
    # select(usage) names exactly the model's columns, UsageRow's keys.
    return [cast(UsageRow, dict(r)) for r in conn.execute(
        select(usage).where(usage.c.session_id == session_id)
        .order_by(usage.c.first_seen, usage.c.model)).mappings()]
