"""The shared session filter set (docs/cli.md#filters) as one WHERE clause.

``list``, ``export``, ``prune``, ``archive``, ``unarchive`` and ``close`` all select sessions with the
same flags, so the flags live in one :class:`SessionFilter` (its values and AGE/TIME parsing are
:mod:`repo.filter_values`, re-exported here) and :func:`filter_clause` builds
a SQLAlchemy Core clause over the ``sessions`` table. Every user value travels as a bound parameter;
LIKE needles have ``%``/``_`` escaped. The "last activity" expression is passed in by the caller so
that listing order and prune share the one expression defined by the session API.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    FromClause,
    and_,
    func,
    literal,
    or_,
    select,
    true,
)

from hermes_store.db import catalog
from hermes_store.db.dialect import json_values
from hermes_store.db.models import SESSIONS
from hermes_store.repo import lineage
from hermes_store.repo.filter_values import (
    LIKE_ESCAPE,
    EmptyWindowError,
    FilterError,
    SessionFilter,
    TimeSyntaxError,
    TimeWindow,
    escape_like,
    flag_of,
    parse_time,
)

__all__ = [
    "BULK_FILTERS", "EmptyWindowError", "FilterError", "SessionFilter", "TimeSyntaxError",
    "TimeWindow", "bulk_clauses", "cwd_prefix_clause", "escape_like", "filter_clause", "matching",
    "parse_time",
]


def filter_clause(flt: SessionFilter, last_activity: ColumnElement[Any],
                  table: FromClause | None = None) -> ColumnElement[bool]:
    """The ANDed clause over *table* (default: the modelled ``sessions`` table).

    *last_activity* is the shared sanitised "last activity" column expression. Pass a
    reflected *table* to filter on upstream-only columns (``chat_id``, ``chat_type``).
    """
    t = table if table is not None else SESSIONS
    c = t.c
    w = flt.window()
    clauses: list[ColumnElement[bool]] = []
    if w.active_after is not None:
        clauses.append(last_activity >= w.active_after)
    if w.active_before is not None:
        clauses.append(last_activity < w.active_before)
    if w.started_after is not None:
        clauses.append(c.started_at >= w.started_after)
    if w.started_before is not None:
        clauses.append(c.started_at < w.started_before)
    if flt.sources:
        clauses.append(c.source.in_(list(flt.sources)))
    for attr, column in (("title", c.title), ("model", c.model), ("branch", c.git_branch)):
        needle = getattr(flt, attr)
        if needle is not None:
            clauses.append(column.ilike(f"%{escape_like(needle)}%", escape=LIKE_ESCAPE))
    if flt.provider is not None:
        clauses.append(func.lower(c.billing_provider) == func.lower(literal(flt.provider)))
    for attr, name in (("end_reason", "end_reason"), ("user", "user_id"),
                       ("chat_id", "chat_id"), ("chat_type", "chat_type")):
        value = getattr(flt, attr)
        if value is not None:
            if name not in c:
                raise FilterError(f"--{flag_of(attr)}: this store has no {name} column")
            clauses.append(c[name] == value)
    if flt.cwd is not None:
        clauses.append(_path_prefix(c.cwd, flt.cwd))
    if flt.workspace is not None:
        clauses.append(_workspace(c.git_repo_root, c.cwd, flt.workspace))
    tokens = func.coalesce(c.input_tokens, 0) + func.coalesce(c.output_tokens, 0)
    cost = func.coalesce(c.actual_cost_usd, c.estimated_cost_usd, 0.0)
    for expr, lo, hi in (
        (func.coalesce(c.message_count, 0), flt.min_messages, flt.max_messages),
        (tokens, flt.min_tokens, flt.max_tokens),
        (cost, flt.min_cost, flt.max_cost),
        (func.coalesce(c.tool_call_count, 0), flt.min_tool_calls, flt.max_tool_calls),
    ):
        if lo is not None:
            clauses.append(expr >= lo)
        if hi is not None:
            clauses.append(expr <= hi)
    return and_(*clauses) if clauses else true()


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
    matched = select(live.c.id).where(filter_clause(flt, activity, table=live))
    if by_lineage:
        # The listing query has its own lineage CTE of the same name: resolve the ids first
        # and pass them as one JSON parameter.
        ids = json.dumps(list(conn.execute(matched).scalars()))
        matched = json_values(conn, ids)
    return lineage.sessions.c.id.in_(matched)


def _path_prefix(column: ColumnElement[Any], prefix: str) -> ColumnElement[bool]:
    # Component boundaries: /a/b matches /a/b and /a/b/c, never /a/bc. substr() compares
    # literally, so no LIKE wildcard in a path can widen the match.
    base = prefix.rstrip("/") if prefix.strip("/") else "/"
    if base == "/":
        return func.substr(column, 1, 1) == "/"
    below = base + "/"
    return or_(column == base, func.substr(column, 1, len(below)) == below)


def _workspace(repo_root: ColumnElement[Any], cwd: ColumnElement[Any],
               needle: str) -> ColumnElement[bool]:
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


def cwd_prefix_clause(prefix: str, table: FromClause | None = None) -> ColumnElement[bool]:
    """``cwd`` equal to the prefix or below it with either separator (``/repo`` matches
    ``/repo/x`` and ``/repo\\x``, never ``/repo-wt``); compared literally, no wildcard."""
    cwd = (table if table is not None else SESSIONS).c.cwd
    base = prefix.rstrip(_PATH_SEPARATORS) or prefix
    if base[-1] in _PATH_SEPARATORS:  # a root ("/", "C:\\"): everything below it
        return func.substr(cwd, 1, len(base)) == base
    return or_(cwd == base, *(func.substr(cwd, 1, len(base) + 1) == base + sep
                              for sep in _PATH_SEPARATORS))


def _contains_ascii_ci(column: ColumnElement[Any], needle: str) -> ColumnElement[bool]:
    # ASCII case only, as the agent's LIKE did; NULL reads as "" (so it never matches).
    return func.lower(func.coalesce(column, "")).contains(needle.translate(_ASCII_LOWER),
                                                          autoescape=True)


def bulk_clauses(values: dict[str, object], table: FromClause | None = None,
                 ) -> list[ColumnElement[bool]]:
    """The clauses of validated v21 filters over ``sessions`` (ANDed by the caller); the
    substring and prefix filters are literal (no LIKE wildcard)."""
    c = (table if table is not None else SESSIONS).c
    numbers = {
        "messages": func.coalesce(c.message_count, 0),
        "tool_calls": func.coalesce(c.tool_call_count, 0),
        "tokens": func.coalesce(c.input_tokens, 0) + func.coalesce(c.output_tokens, 0),
        "cost": func.coalesce(c.actual_cost_usd, c.estimated_cost_usd, 0.0),
    }
    found: list[ColumnElement[bool]] = []
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
