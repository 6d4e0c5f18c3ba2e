"""The session repository: verbs on ``sessions`` rows and ``state_meta``.

Every function takes a caller-owned ``Connection`` (inside the caller's transaction) and never
commits. Argument checking that must happen before a transaction starts lives in the
``check_*``/``prepare_*`` helpers, which touch no database.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    RowMapping,
    Select,
    and_,
    case,
    exc,
    func,
    literal_column,
    select,
    update,
)

from hermes_store.content import check_integer, check_key, check_text, dump_json
from hermes_store.db import distribution
from hermes_store.db.dialect import insert
from hermes_store.db.models import SESSIONS, STATE_META
from hermes_store.errors import TitleInUseError
from hermes_store.repo import lineage, prompts, titles
from hermes_store.repo.executor import Executor as Executor
from hermes_store.repo.executor import connection_of as connection_of
from hermes_store.repo.executor import rowcount

sessions = SESSIONS
state_meta = STATE_META

PLACEHOLDER_SOURCE = "unknown"

# Keywords create_session/ensure_session accept besides id and source: v11's five plus the
# newer columns a caller may know at creation time (the v21 gateway's peer among them).
CREATE_FIELDS = frozenset({
    "model", "model_config", "system_prompt", "user_id", "parent_session_id",
    "cwd", "git_branch", "git_repo_root", "profile_name", "origin_json",
    "billing_provider", "billing_base_url", "billing_mode",
    "session_key", "chat_id", "chat_type", "thread_id",
})
NUMERIC_IDS = frozenset({"chat_id", "thread_id"})
# Documented get_session keys that only newer upstream stores have as columns; reported as None
# when the live table lacks them, so callers see one shape.
HANDOFF_KEYS = ("handoff_state", "handoff_platform", "handoff_error")
_TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                  "reasoning_tokens")


# --------------------------------------------------------------------------- checks


def new_session_id(now: float | None = None) -> str:
    """A CLI-shaped id: local ``YYYYMMDD_HHMMSS_`` plus 6 hex digits (never order by it)."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}_{secrets.token_hex(3)}"


def check_session_id(session_id: object) -> str:
    """A valid id or a clear error: ``TypeError`` for a non-str, ``ValueError`` for ``""``."""
    if not isinstance(session_id, str):
        raise TypeError(f"a session id must be a str, not {type(session_id).__name__}")
    if session_id == "":
        raise ValueError("a session id must not be empty")
    check_key("session id", session_id)
    return session_id


def prepare_create_fields(session_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Validate create/ensure keywords and serialise them (before any transaction starts)."""
    unknown = sorted(set(fields) - CREATE_FIELDS)
    if unknown:
        raise TypeError("create_session() got unexpected keyword argument(s): "
                        + ", ".join(unknown))
    values: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "model_config":
            value = (value if isinstance(value, str) else dump_json(value)) if value else None
        elif name in NUMERIC_IDS and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            value = str(value)  # chat platforms hand out numbers; the columns hold text
        elif value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
        check_text(name, value)
        if value is not None:
            values[name] = value
    if values.get("parent_session_id") == session_id:
        raise ValueError(f"session {session_id!r} cannot be its own parent")
    return values


# --------------------------------------------------------------------------- create / read


def create_or_fill(conn: Executor, session_id: str, source: str, values: Mapping[str, Any],
                   now: float) -> str:
    """Insert the session, or fill the NULL columns of an existing one (never overwriting).

    ``source`` replaces only the placeholder ``'unknown'``; ``started_at`` never changes. An
    unknown ``parent_session_id`` fails with ``IntegrityError`` and writes nothing.
    """
    prompt = values.get("system_prompt")
    if prompt is not None and prompts.hashed(connection_of(conn)):
        values = {k: v for k, v in values.items() if k != "system_prompt"}
    else:
        prompt = None
    parent = values.get("parent_session_id")
    if distribution.distributed(connection_of(conn)):
        # Citus routes the row by its root: the value is known before the insert, is the key
        # of the conflict, and never moves (a distribution column is not updated).
        root: str | ColumnElement[str] = (lineage.root_of(conn, session_id)
                     or (parent and lineage.root_of(conn, parent)) or parent or session_id)
        key, below = [sessions.c.root_session_id, sessions.c.id], None
    else:
        root, key = _root_below(parent, session_id), [sessions.c.id]
        # Filling the parent of an existing row moves it (and its subtree) under a new root.
        below = lineage.subtree(conn, session_id) if parent is not None else None
    stmt = insert(conn, sessions).values(id=session_id, source=source, started_at=now,
                                         root_session_id=root, **values)
    fill: dict[str, ColumnElement[Any]] = {name: func.coalesce(sessions.c[name], stmt.excluded[name]) for name in values}
    fill["source"] = case((sessions.c.source == PLACEHOLDER_SOURCE, stmt.excluded.source),
                          else_=sessions.c.source)
    conn.execute(stmt.on_conflict_do_update(index_elements=key, set_=fill))
    if prompt is not None:
        prompts.fill(connection_of(conn), session_id, prompt)
    if below is not None:
        lineage.reroot(conn, session_id, below)
    return session_id


def _root_below(parent: str | None, session_id: str) -> str | ColumnElement[str]:
    """The root a new session starts with: its parent's, or its own id without a parent."""
    if parent is None:
        return session_id
    above = sessions.alias("new_parent")
    return func.coalesce(select(func.coalesce(above.c.root_session_id, above.c.id))
                         .where(above.c.id == parent).scalar_subquery(), parent)


def exists(conn: Executor, session_id: str) -> bool:
    found = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
    return found is not None


def get_session(conn: Executor, session_id: str) -> dict[str, Any] | None:
    """Every column of the live table (adopted stores may have more than the model)."""
    every: Select[*tuple[Any, ...]] = select(literal_column("*")).select_from(sessions).where(sessions.c.id == session_id)
    row: Row[*tuple[Any, ...]] | None = conn.execute(every).first()
    if row is None:
        return None
    item = row._asdict()
    prompts.resolve(connection_of(conn), [item])
    return full_row(item)


def full_row(row: Mapping[str, Any] | RowMapping) -> dict[str, Any]:
    """A session row as a dict with every documented key (a RowMapping iterates its names)."""
    item = {key: row[key] for key in row}
    for key in HANDOFF_KEYS:
        item.setdefault(key, None)
    return item


def _prefix_upper(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (for a range)."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF or 0xD7FF <= last <= 0xDFFF:
        return None
    return prefix[:-1] + chr(last + 1)


def _with_prefix(prefix: str) -> ColumnElement[bool]:
    """The condition "the id starts with ``prefix``" (case-sensitive, LIKE wildcards literal),
    as a range the primary key's index answers."""
    conditions = [sessions.c.id >= prefix, func.substr(sessions.c.id, 1, len(prefix)) == prefix]
    upper = _prefix_upper(prefix)
    if upper is not None:
        conditions.append(sessions.c.id < upper)
    return and_(*conditions)


def ids_with_prefix(conn: Executor, prefix: str, limit: int | None = None) -> list[str]:
    """Ids starting with ``prefix``, case-sensitively, with LIKE wildcards taken literally."""
    query = select(sessions.c.id).where(_with_prefix(prefix)).order_by(sessions.c.id)
    if limit is not None:
        query = query.limit(limit)
    return list(conn.execute(query).scalars())


def count_with_prefix(conn: Executor, prefix: str) -> int:
    """How many ids start with ``prefix`` (an ambiguous prefix names its true count)."""
    return int(conn.execute(select(func.count()).select_from(sessions)
                            .where(_with_prefix(prefix))).scalar() or 0)


def resolve_session_id(conn: Executor, ref: str) -> str | None:
    """An exact id wins; else the one id starting with ``ref``; none or several → None."""
    ref = ref.strip()
    if not ref:
        return None
    if exists(conn, ref):
        return ref
    found = ids_with_prefix(conn, ref, limit=2)
    return found[0] if len(found) == 1 else None


# --------------------------------------------------------------------------- lifecycle


def end_session(conn: Executor, session_id: str, end_reason: str, now: float) -> bool:
    """The first end wins: time and reason are set only while ``ended_at`` is NULL."""
    result = conn.execute(update(sessions)
                          .where(sessions.c.id == session_id, sessions.c.ended_at.is_(None))
                          .values(ended_at=now, end_reason=end_reason))
    return rowcount(result) > 0


def reopen_session(conn: Executor, session_id: str) -> bool:
    result = conn.execute(update(sessions)
                          .where(sessions.c.id == session_id, sessions.c.ended_at.is_not(None))
                          .values(ended_at=None, end_reason=None))
    return rowcount(result) > 0


def update_system_prompt(conn: Executor, session_id: str, system_prompt: str | None) -> bool:
    if prompts.hashed(connection_of(conn)):
        return prompts.replace(connection_of(conn), session_id, system_prompt)
    result = conn.execute(update(sessions).where(sessions.c.id == session_id)
                          .values(system_prompt=system_prompt))
    return rowcount(result) > 0


def update_token_counts(conn: Executor, session_id: str, *, now: float, absolute: bool = False,
                        model: str | None = None, tokens: Mapping[str, int] | None = None,
                        estimated_cost_usd: float | None = None,
                        actual_cost_usd: float | None = None,
                        replace: Mapping[str, str | None] | None = None,
                        first_wins: Mapping[str, str | None] | None = None,
                        api_call_count: int | None = None) -> None:
    """Add (or, with ``absolute``, set) usage figures; a missing row is created first.

    ``tokens`` maps the five token counters to values; ``replace`` holds cost_status,
    cost_source and pricing_version (replaced when not None); ``first_wins`` the billing
    columns (set only while NULL). The table in docs/contracts.md#sessions is the specification.
    """
    conn.execute(insert(conn, sessions)
                 .values(id=session_id, source=PLACEHOLDER_SOURCE, model=model, started_at=now)
                 .on_conflict_do_nothing(index_elements=[sessions.c.id]))
    c = sessions.c
    values: dict[str, Any] = {}
    for name in _TOKEN_COLUMNS:
        amount = int((tokens or {}).get(name) or 0)
        values[name] = amount if absolute else func.coalesce(c[name], 0) + amount
    if absolute:
        if estimated_cost_usd is not None:
            values["estimated_cost_usd"] = estimated_cost_usd
        if actual_cost_usd is not None:
            values["actual_cost_usd"] = actual_cost_usd
        if api_call_count is not None:
            values["api_call_count"] = api_call_count
    else:
        values["estimated_cost_usd"] = (func.coalesce(c.estimated_cost_usd, 0.0)
                                        + (estimated_cost_usd or 0.0))
        if actual_cost_usd is not None:
            values["actual_cost_usd"] = func.coalesce(c.actual_cost_usd, 0.0) + actual_cost_usd
        values["api_call_count"] = func.coalesce(c.api_call_count, 0) + (api_call_count or 0)
    for name, value in (replace or {}).items():
        if value is not None:
            values[name] = value
    for name, value in {**(first_wins or {}), "model": model}.items():
        if value is not None:
            values[name] = func.coalesce(c[name], value)
    conn.execute(update(sessions).where(c.id == session_id).values(**values))


def check_count(what: str, value: object) -> None:
    """A usage figure the counters can hold: ``int()`` of it fits 64 bits (``ValueError``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        check_integer(what, int(value))


def check_finite(what: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, not {value!r}")


# --------------------------------------------------------------------------- titles


def title_holder(conn: Executor, title: str) -> str | None:
    return conn.execute(select(sessions.c.id).where(sessions.c.title == title)).scalar()


def set_title(conn: Executor, session_id: str, title: str | None, *,
              movable_from: Collection[str] = ()) -> bool:
    """Write an already-cleaned title; False for an unknown session, ValueError on a clash.
    A holder listed in ``movable_from`` gives the title up instead (it becomes NULL there)."""
    if not exists(conn, session_id):
        return False
    if title is not None:
        holder = title_holder(conn, title)
        if holder is not None and holder != session_id:
            if holder not in movable_from:
                raise ValueError(f"Title '{title}' is already in use by session {holder}")
            conn.execute(update(sessions).where(sessions.c.id == holder).values(title=None))
    try:
        with conn.begin_nested():
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(title=title))
    except exc.IntegrityError:
        # Another writer took the title between our check and our write (unique index).
        holder = title_holder(conn, title) if title is not None else None
        raise ValueError(f"Title '{title}' is already in use by session {holder}") from None
    return True


def rename(conn: Executor, session_id: str, title: str) -> None:
    """Give an existing session an already-cleaned title; TitleInUseError names the session
    that holds it."""
    holder = title_holder(conn, title)
    if holder is not None and holder != session_id:
        raise TitleInUseError(title, holder)
    try:
        set_title(conn, session_id, title)
    except ValueError:
        # Taken between the check and the write by another writer.
        raise TitleInUseError(title, title_holder(conn, title) or "?") from None


def get_title(conn: Executor, session_id: str) -> str | None:
    return conn.execute(select(sessions.c.title).where(sessions.c.id == session_id)).scalar()


def session_by_title(conn: Executor, title: str) -> dict[str, Any] | None:
    session_id = title_holder(conn, title)
    return get_session(conn, session_id) if session_id is not None else None


def lineage_titles(conn: Executor, base: str) -> list[tuple[str, str, float | None]]:
    """``(id, title, started_at)`` of the base title and the titles starting ``<base> #``."""
    prefix = titles.variant_prefix(base)
    rows = conn.execute(select(sessions.c.id, sessions.c.title, sessions.c.started_at).where(
        (sessions.c.title == base)
        | ((sessions.c.title >= prefix) & (sessions.c.title < base + " $")
           & (func.substr(sessions.c.title, 1, len(prefix)) == prefix))))
    return [(r.id, r.title, r.started_at) for r in rows]


def resolve_by_title(conn: Executor, title: str) -> str | None:
    """The newest numbered variant ``<title> #N`` (ties → larger N), else the exact title."""
    rows = lineage_titles(conn, title)
    variants = [(started or 0.0, n, sid) for sid, t, started in rows
                if (n := titles.variant_number(t, title)) is not None]
    if variants:
        return max(variants)[2]
    exact = [sid for sid, t, _ in rows if t == title]
    return exact[0] if exact else None


def next_title_in_lineage(conn: Executor, base_title: str) -> str:
    base, _ = titles.split_numbered(base_title)
    return titles.next_title(base_title, (t for _, t, _ in lineage_titles(conn, base)))


# --------------------------------------------------------------------------- counts and meta


def session_count(conn: Executor, source: str | None = None) -> int:
    query = select(func.count()).select_from(sessions)
    if source is not None:
        query = query.where(sessions.c.source == source)
    return int(conn.execute(query).scalar() or 0)


def get_meta(conn: Executor, key: str) -> str | None:
    return conn.execute(select(state_meta.c.value).where(state_meta.c.key == key)).scalar()


def set_meta(conn: Executor, key: str, value: object) -> None:
    text = None if value is None else str(value)
    stmt = insert(conn, state_meta).values(key=key, value=text)
    conn.execute(stmt.on_conflict_do_update(index_elements=[state_meta.c.key],
                                            set_={"value": stmt.excluded.value}))
