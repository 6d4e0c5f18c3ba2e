"""The plans PostgreSQL gives the library's search and append statements on a table large enough
that the planner prefers an index: a statement psycopg may prepare keeps an index plan once the
server switches to a generic plan (after five executions), and a statement whose right plan
depends on its terms is never prepared.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from backends import PgServer

from hermes_store import SessionDB
from hermes_store.db import engine as eng
from hermes_store.repo import bigrams
from hermes_store.repo import messages as messages_repo
from hermes_store.search import statements

pytestmark = pytest.mark.slow

SESSIONS, MESSAGES = 2_000, 30_000
CJK_TEXT = "数据库迁移完成了，通信正常 docker"
# What each kind must read ``messages`` through (every kind: never a sequential scan).
KINDS: dict[str, tuple[str, dict[str, Any], str]] = {
    "word": ("rare17", {}, "hs_idx_messages_words"),
    "phrase": ('"rare17 filler"', {}, "hs_idx_messages_words"),
    "prefix": ("rare17*", {}, "hs_idx_messages_words"),
    "cjk2": ("通信", {}, "hs_idx_messages_cjk"),
    "cjk1": ("迁", {}, "hs_idx_messages_cjk"),
    "mixed": ("docker 数据库", {}, "hs_idx_messages"),
}
# One statement, never prepared (time order, filters); what its plan reads ``messages`` by.
TIMED: dict[str, tuple[str, dict[str, Any], str]] = {
    "newest": ("needle", {"sort": "newest"}, "hs_idx_messages_words"),
    "oldest": ("needle", {"sort": "oldest"}, "hs_idx_messages_words"),
    "substring": ("据库迁", {}, "hs_idx_messages_trgm"),  # unranked: newest first
    "filtered": ("rare17", {"source_filter": ["cli"], "role_filter": ["assistant"]},
                 "hs_idx_messages_words"),  # ranked, but filters need their values
    # A term in every row: walk the time index and stop at the page.
    "newest common": ("filler", {"sort": "newest"}, "hs_idx_messages_time"),
}


def _filled(pg_server: PgServer, cjk_every: int) -> str:
    """A store at head with SESSIONS sessions and MESSAGES messages (a fifth of them tool
    output, every ``cjk_every``-th one holding CJK text, 0: none), analyzed."""
    url = pg_server.head_database()
    cjk = bigrams.cjk_vector(CJK_TEXT, None, None)
    with SessionDB(url) as db:
        db.create_session("s0", "cli")  # the library's own write, so its caches are warm
    eng.run_write(eng.open_engine(url), lambda conn: (
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at) SELECT 's' || g, "
            "CASE WHEN g %% 3 = 0 THEN 'telegram' ELSE 'cli' END, g "
            "FROM generate_series(1, %(n)s) AS g", {"n": SESSIONS}),
        conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp, hs_search_cjk) "
            "SELECT 's' || (1 + g %% %(sessions)s), CASE WHEN g %% 5 = 3 THEN 'tool' "
            "WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END, "
            "CASE WHEN g %% %(every)s = 0 THEN %(cjk_text)s "
            "ELSE 'rare' || (g %% 1000) || ' filler text ' || md5(g::text) "
            "|| CASE WHEN g %% 10000 = 7 THEN ' needle' ELSE '' END END, g, "
            "CASE WHEN g %% 5 = 3 THEN NULL WHEN g %% %(every)s = 0 THEN %(cjk)s::tsvector "
            "ELSE ''::tsvector END FROM generate_series(1, %(n)s) AS g",
            {"sessions": SESSIONS, "n": MESSAGES, "cjk_text": CJK_TEXT, "cjk": cjk,
             "every": cjk_every or MESSAGES + 1})))
    eng.vacuum(eng.open_engine(url))
    return url


@pytest.fixture(scope="module")
def big_store(pg_server: PgServer) -> Iterator[str]:
    url = _filled(pg_server, 97)
    yield url
    eng.dispose_all()
    pg_server.drop(url)


@pytest.fixture(scope="module")
def latin_store(pg_server: PgServer) -> Iterator[str]:
    """No CJK text at all: the bigram column has no lexeme statistics."""
    url = _filled(pg_server, 0)
    yield url
    eng.dispose_all()
    pg_server.drop(url)


def _recorded(url: str, query: str, options: dict[str, Any], found: bool = True) -> list[Any]:
    seen: list[Any] = []
    real = statements._fetch

    def recording(conn: Any, statement: Any) -> list[Any]:
        seen.append(statement)
        return real(conn, statement)

    statements._fetch = recording  # type: ignore[assignment]
    try:
        with SessionDB(url) as db:
            assert bool(db.search_messages(query, **options)) == found
    finally:
        statements._fetch = real  # type: ignore[assignment]
    return seen


def _numbered(sql: str) -> str:
    """psycopg placeholders (``%s``, ``%(name)s``) as ``$n``, for PREPARE."""
    names: dict[str, int] = {}
    counter = iter(range(1, 10_000))

    def number(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return f"${next(counter)}"
        if match.group(1) not in names:
            names[match.group(1)] = next(counter)
        return f"${names[match.group(1)]}"

    return re.sub(r"%(?:\((\w+)\))?s", number, sql)


def _plan(url: str, sql: str, params: Any, *, generic: bool, blocks: bool = False) -> Any:
    """The plan of ``sql`` prepared and executed five times, generic forced or custom (with
    ``blocks``: the pages its execution read instead)."""
    import psycopg

    if isinstance(params, dict):
        order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
        params = [params[name] for name in order]
    with psycopg.ClientCursor(psycopg.connect(url, autocommit=True)) as cur:
        cur.execute(f"PREPARE q AS {_numbered(sql)}")
        run = "EXECUTE q" + (f"({', '.join(['%s'] * len(params))})" if params else "")
        cur.execute("BEGIN")
        for _ in range(5):
            cur.execute(run, params)
        mode = "force_generic_plan" if generic else "force_custom_plan"
        cur.execute(f"SET LOCAL plan_cache_mode = {mode}")
        if blocks:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + run, params)
            top = cur.fetchone()[0][0]["Plan"]
            plan = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
        else:
            cur.execute("EXPLAIN " + run, params)
            plan = "\n".join(row[0] for row in cur.fetchall())
        cur.execute("ROLLBACK")
        cur.connection.close()
    return plan


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_prepared_search_statement_keeps_its_index_under_a_generic_plan(
        big_store: str, kind: str) -> None:
    query, options, index = KINDS[kind]
    prepared = [s for s in _recorded(big_store, query, options) if s.prepare is not False]
    assert prepared, "every kind runs at least one statement psycopg may prepare"
    for statement in prepared:
        plan = _plan(big_store, statement.text, statement.params, generic=True)
        assert "Seq Scan on messages" not in plan, plan
        # The rows of a page whose ids another statement chose are read by their keys.
        assert ("pk_messages" if "AS listed(" in statement.text else index) in plan, plan
        # An index that answers "every row" is a scan too (pg_trgm for a 2-character term):
        # the generic plan reads about the pages the plan made for the values reads.
        generic = _plan(big_store, statement.text, statement.params, generic=True, blocks=True)
        custom = _plan(big_store, statement.text, statement.params, generic=False, blocks=True)
        assert generic <= 2 * custom + 50, (generic, custom, plan)


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_statement_whose_plan_depends_on_its_values_is_never_prepared(
        big_store: str, kind: str) -> None:
    query, options, index = TIMED[kind]
    page, rows = _recorded(big_store, query, options)
    assert (page.prepare, rows.prepare) == (False, None)  # the page's ids, then their rows
    plan = _plan(big_store, page.text, page.params, generic=False)
    assert "Seq Scan on messages" not in plan and index in plan, plan
    # A rare term reads its index and sorts the few hits; a common one never sorts them all.
    assert ("Bitmap" in plan) == (index != "hs_idx_messages_time"), plan
    plan = _plan(big_store, rows.text, rows.params, generic=True)
    assert "Seq Scan on messages" not in plan and "pk_messages" in plan, plan


def test_the_append_statements_stay_index_lookups_under_a_generic_plan(big_store: str) -> None:
    plan = _plan(big_store, messages_repo._BUMP_PG,
                 {**messages_repo._BUMP_PG_PARAMS, "sid": "s7", "rows": 1, "delta": 0},
                 generic=True)
    assert "Seq Scan" not in plan and "pk_sessions" in plan, plan


@pytest.mark.parametrize("query", ["nowhere", "桂林", "needle"])
def test_a_time_ordered_search_for_a_term_in_few_rows_or_none_reads_the_index(
        latin_store: str, query: str) -> None:
    # A planner that guesses a term common walks the time index and stops after the page; for
    # a term in no row it reads the whole table that way (statistics decide, revision 0021).
    recorded = _recorded(latin_store, query, {"sort": "newest"}, found=query.startswith("needle"))
    page = next(s for s in recorded if s.prepare is False)
    plan = _plan(latin_store, page.text, page.params, generic=False)
    assert "hs_idx_messages_time" not in plan and "Bitmap" in plan, plan
