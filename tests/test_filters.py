"""The shared filter set: AGE/TIME syntax and the WHERE clause it builds (docs/cli.md#filters)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, insert, select

from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.db.models import ChatSession
from hermes_store.errors import UsageError
from hermes_store.repo.filters import (
    EmptyWindowError,
    FilterError,
    SessionFilter,
    TimeSyntaxError,
    escape_like,
    filter_clause,
    parse_time,
)

NOW = 1_800_000_000.0
S = ChatSession.__table__
# Stand-in for the session API's sanitised expression; the filter only needs a column expression.
LAST_ACTIVITY = func.coalesce(S.c.last_activity_at, S.c.started_at)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90 * 86400), ("1.5", 1.5 * 86400), ("30s", 30), ("10sec", 10), ("2secs", 2),
     ("5m", 300), ("5min", 300), ("5mins", 300), ("2h", 7200), ("2hr", 7200), ("3hrs", 10800),
     ("1.5h", 5400), ("1d", 86400), ("2day", 172800), ("2days", 172800), ("1w", 604800),
     ("1wk", 604800), ("2wks", 1209600), ("1week", 604800), ("2 weeks", 1209600), (".5d", 43200),
     ("3D", 3 * 86400)],
)
def test_ages_are_measured_back_from_now(text: str, seconds: float) -> None:
    assert parse_time(text, now=NOW) == pytest.approx(NOW - seconds)


def test_m_means_minutes_not_months() -> None:
    assert parse_time("3m", now=NOW) == NOW - 180


def test_naive_iso_times_are_local_and_aware_ones_are_converted() -> None:
    local = datetime(2026, 7, 5, 14, 30).astimezone().timestamp()
    assert parse_time("2026-07-05T14:30", now=NOW) == local
    assert parse_time("2026-07-05 14:30", now=NOW) == local
    assert parse_time("2026-07-05", now=NOW) == datetime(2026, 7, 5).astimezone().timestamp()
    aware = datetime(2026, 7, 5, 12, 30, tzinfo=UTC).timestamp()
    assert parse_time("2026-07-05T14:30+02:00", now=NOW) == aware
    assert parse_time("2026-07-05T12:30Z", now=NOW) == aware


@pytest.mark.parametrize("bad", ["", "  ", "soon", "3 months", "2y", "1mo", "-5", "5 parsecs",
                                 "2026-13-45", "1e400d"])
def test_bad_ages_raise_a_usage_error_that_names_the_flag(bad: str) -> None:
    with pytest.raises(TimeSyntaxError) as info:
        parse_time(bad, now=NOW, flag="--older-than")
    assert isinstance(info.value, ValueError) and isinstance(info.value, UsageError)
    assert info.value.exit_code == 2
    assert "--older-than" in str(info.value)


def test_empty_activity_window_is_refused() -> None:
    with pytest.raises(EmptyWindowError, match="empty time window"):
        SessionFilter(newer_than="7d", older_than="30d", now=NOW)


def test_empty_start_window_is_refused() -> None:
    with pytest.raises(EmptyWindowError, match="empty time window"):
        SessionFilter(after="2026-07-05", before="2026-07-01", now=NOW)
    with pytest.raises(EmptyWindowError):
        SessionFilter(after="2026-07-05", before="2026-07-05", now=NOW)


def test_contradictory_bounds_and_negative_bounds_are_refused() -> None:
    with pytest.raises(FilterError, match="above"):
        SessionFilter(min_messages=10, max_messages=5)
    with pytest.raises(FilterError):
        SessionFilter(min_cost=-1)


def test_escape_like_neutralises_wildcards() -> None:
    assert escape_like("100%_done\\") == "100\\%\\_done\\\\"


# --------------------------------------------------------------------------- against a store

def _row(sid: str, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {"id": sid, "source": "cli", "started_at": NOW - 86400 * 100,
                              "message_count": 0, "tool_call_count": 0}
    row.update(kw)
    return row


@pytest.fixture
def filled(head_store: str) -> str:
    """Four sessions on a store at head, on either backend."""
    rows = [
        _row("old", last_activity_at=NOW - 86400 * 60, title="Fix 100% of bugs", model="gpt-5",
             cwd="/a/b", git_branch="feature/Login_fix", billing_provider="OpenRouter",
             input_tokens=100, output_tokens=50, message_count=12, tool_call_count=3,
             end_reason="user_exit", user_id="ana", actual_cost_usd=1.5),
        _row("recent", last_activity_at=NOW - 3600, title="Fix 1000 of bugs", model="claude-sonnet-4",
             cwd="/a/bc", git_repo_root="/src/hermes", source="telegram", input_tokens=10,
             output_tokens=5, message_count=2, estimated_cost_usd=0.2, chat_id="42",
             chat_type="dm"),
        _row("mid", last_activity_at=NOW - 86400 * 10, started_at=NOW - 86400 * 12, cwd="/a/b/c",
             title="plain", source="cron", git_repo_root="", message_count=5),
        _row("nocost", started_at=NOW - 86400 * 200, cwd=None, title=None, source="cli"),
    ]
    engine = open_engine(head_store)
    run_write(engine, lambda conn: [conn.execute(insert(S).values(**r)) for r in rows])
    return head_store


def _ids(path: str, flt: SessionFilter) -> set[str]:
    with reading(open_engine(path)) as conn:
        return set(conn.scalars(select(S.c.id).where(filter_clause(flt, LAST_ACTIVITY))))


def test_empty_filter_matches_everything(filled: str) -> None:
    flt = SessionFilter(now=NOW)
    assert flt.is_empty
    assert _ids(filled, flt) == {"old", "recent", "mid", "nocost"}


def test_older_and_newer_than_bound_last_activity(filled: str) -> None:
    assert _ids(filled, SessionFilter(older_than="30d", now=NOW)) == {"old", "nocost"}
    assert _ids(filled, SessionFilter(newer_than="2h", now=NOW)) == {"recent"}
    assert _ids(filled, SessionFilter(newer_than="70", older_than="5d", now=NOW)) == {"old", "mid"}


def test_before_and_after_bound_started_at(filled: str) -> None:
    assert _ids(filled, SessionFilter(after=NOW - 86400 * 50, now=NOW)) == {"mid"}
    assert _ids(filled, SessionFilter(before="150d", now=NOW)) == {"nocost"}


def test_sources_are_ored_and_exact(filled: str) -> None:
    assert _ids(filled, SessionFilter(sources=("cron", "telegram"), now=NOW)) == {"mid", "recent"}
    assert _ids(filled, SessionFilter(sources=("cl",), now=NOW)) == set()


def test_substring_filters_are_case_insensitive_and_escape_wildcards(filled: str) -> None:
    assert _ids(filled, SessionFilter(title="100%", now=NOW)) == {"old"}
    assert _ids(filled, SessionFilter(title="FIX", now=NOW)) == {"old", "recent"}
    assert _ids(filled, SessionFilter(branch="login_", now=NOW)) == {"old"}
    assert _ids(filled, SessionFilter(branch="login%", now=NOW)) == set()
    assert _ids(filled, SessionFilter(model="SONNET", now=NOW)) == {"recent"}


def test_provider_is_exact_but_case_insensitive(filled: str) -> None:
    assert _ids(filled, SessionFilter(provider="openrouter", now=NOW)) == {"old"}
    assert _ids(filled, SessionFilter(provider="open", now=NOW)) == set()


def test_exact_filters(filled: str) -> None:
    assert _ids(filled, SessionFilter(end_reason="user_exit", now=NOW)) == {"old"}
    assert _ids(filled, SessionFilter(user="ana", now=NOW)) == {"old"}


def test_chat_filters_match_the_gateway_columns_exactly(filled: str) -> None:
    assert _ids(filled, SessionFilter(chat_id="42", now=NOW)) == {"recent"}
    assert _ids(filled, SessionFilter(chat_id="4", now=NOW)) == set()
    assert _ids(filled, SessionFilter(chat_type="dm", now=NOW)) == {"recent"}


def test_cwd_matches_on_path_component_boundaries(filled: str) -> None:
    assert _ids(filled, SessionFilter(cwd="/a/b", now=NOW)) == {"old", "mid"}
    assert _ids(filled, SessionFilter(cwd="/a/b/", now=NOW)) == {"old", "mid"}
    assert _ids(filled, SessionFilter(cwd="/a", now=NOW)) == {"old", "mid", "recent"}
    assert _ids(filled, SessionFilter(cwd="/", now=NOW)) == {"old", "mid", "recent"}


def test_workspace_uses_git_root_else_cwd(filled: str) -> None:
    assert _ids(filled, SessionFilter(workspace="hermes", now=NOW)) == {"recent"}
    # "recent" has a git root, so its cwd /a/bc is not its workspace; "mid" has an empty root.
    assert _ids(filled, SessionFilter(workspace="/a/b", now=NOW)) == {"old", "mid"}


def test_numeric_bounds_are_inclusive(filled: str) -> None:
    assert _ids(filled, SessionFilter(min_messages=5, max_messages=12, now=NOW)) == {"old", "mid"}
    assert _ids(filled, SessionFilter(min_tokens=150, now=NOW)) == {"old"}
    assert _ids(filled, SessionFilter(max_tokens=15, min_tokens=15, now=NOW)) == {"recent"}
    assert _ids(filled, SessionFilter(min_tool_calls=3, now=NOW)) == {"old"}


def test_cost_is_actual_else_estimated_else_zero(filled: str) -> None:
    assert _ids(filled, SessionFilter(min_cost=0.1, now=NOW)) == {"old", "recent"}
    assert _ids(filled, SessionFilter(max_cost=0.0, now=NOW)) == {"mid", "nocost"}


def test_values_are_bound_not_inlined(filled: str) -> None:
    clause = filter_clause(SessionFilter(title="x' OR 1=1 --", now=NOW), LAST_ACTIVITY)
    assert "OR 1=1" not in str(clause.compile())
    assert _ids(filled, SessionFilter(title="x' OR 1=1 --", now=NOW)) == set()


def test_describe_names_each_filter() -> None:
    text = SessionFilter(older_than="2026-07-05T14:30", sources=("cli",), now=time.time() + 1e9).describe()
    assert "last active before 2026-07-05 14:30" in text and "source 'cli'" in text


def test_shares_the_session_apis_last_activity_expression(filled: str) -> None:
    from hermes_store.db.models import Message
    from hermes_store.repo import lineage

    # A fresh message makes "old" recent, whatever its last_activity_at says.
    run_write(open_engine(filled), lambda conn: conn.execute(insert(Message.__table__).values(
        session_id="old", role="user", content="still here", timestamp=NOW - 3600)))
    expr = lineage.last_activity(S, now=NOW)
    with reading(open_engine(filled)) as conn:
        stale = set(conn.scalars(select(S.c.id).where(
            filter_clause(SessionFilter(older_than="30d", now=NOW), expr))))
    assert stale == {"nocost"}
