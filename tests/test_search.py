"""search_messages: the query language, routing per term, filters on every route, result shape.

Every test runs on both backends on the same data (search parity: the same hit sets); the ones
about SQLite's query plans say so in their names and carry ``sqlite_only``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.orm import Session

from hermes_store import SessionDB
from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.repo import bigrams
from hermes_store.search import postgres as pg_statements
from hermes_store.search import statements as search_module
from hermes_store.search.shape import PAGE_COLUMNS
from hermes_store.search.statements import search_messages

LONG_TOOL_OUTPUT = "CONTAINER ID   IMAGE\n" + "x" * 9000 + " deepneedle"
IMAGE = ("\x00json:" + json.dumps([
    {"type": "text", "text": "look at this picture of 熊猫 please"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJDREVGR0hJSktM"}},
]))

# (session, source, model, started_at)
SESSIONS = [("s1", "cli", "model-a", 100.0), ("s2", "cron", "model-b", 200.0),
            ("s3", "telegram", "model-c", 300.0)]
# (key, session, role, content, tool_name, tool_calls)
MESSAGES = [
    ("deploy", "s1", "user", "How do I set up docker deployment with compose?", None, None),
    ("chat", "s1", "assistant", "Run the chat-send command now", None,
     '[{"function": {"name": "terminal", "arguments": "{\\"command\\": \\"docker ps\\"}"}}]'),
    ("tool", "s1", "tool", LONG_TOOL_OUTPUT, "UNIQUETOOLNAME", None),
    ("night1", "s1", "user", "昨晚讨论了记忆系统", None, None),
    ("night2", "s1", "assistant", "昨晚的会议纪要已发送", None, None),
    ("travel", "s1", "user", "广西桂林山水甲天下，漓江旅游", None, None),
    ("youer", "s1", "assistant", "修改youer服务端的配置", None, None),
    ("agent", "s1", "user", "Agent通信协议的设计", None, None),
    ("bald", "s1", "user", "秃发问题怎么办", None, None),
    ("pct", "s1", "user", "达成100%完成率", None, None),
    ("nopct", "s1", "user", "达成100完成率", None, None),
    ("py", "s1", "user", "python is great", None, None),
    ("pyjp", "s1", "user", "python 日本語 notes", None, None),
    ("cafe", "s1", "assistant", "a café au lait", None, None),
    ("image", "s1", "user", IMAGE, None, None),
    ("cronnight", "s2", "user", "昨晚 cron job docker", None, None),
    ("travel2", "s3", "user", "桂林旅游 photos", None, None),
    ("english", "s3", "assistant", "English travel notes about Guilin", None, None),
]


def execute(location: str, sql: str, params: dict | None = None) -> list:
    """Run ``sql`` as another program would: no library write path (no CJK tokens written)."""
    return run_write(open_engine(location),
                     lambda c: list(c.execute(text(sql), params or {})))


def insert_message(location: str, session: str, content: str, timestamp: float,
                   role: str = "user") -> int:
    return int(execute(location, "INSERT INTO messages (session_id, role, content, timestamp) "
                       "VALUES (:s, :r, :c, :t) RETURNING id",
                       {"s": session, "r": role, "c": content, "t": timestamp})[0][0])


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, int]]]:
    if backend == "sqlite":
        location = str(request.getfixturevalue("head_db"))
    else:
        location = request.getfixturevalue("pg_store")

    def fill(conn) -> dict[str, int]:
        for sid, source, model, started in SESSIONS:
            conn.execute(text("INSERT INTO sessions (id, source, model, started_at) "
                              "VALUES (:i, :s, :m, :t)"),
                         {"i": sid, "s": source, "m": model, "t": started})
        ids = {}
        for n, (key, sid, role, content, tool_name, tool_calls) in enumerate(MESSAGES):
            ids[key] = conn.execute(text(
                "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
                "timestamp) VALUES (:s, :r, :c, :n, :k, :t) RETURNING id"),
                {"s": sid, "r": role, "c": content, "n": tool_name, "k": tool_calls,
                 "t": 1000.0 + n}).scalar_one()
        return ids

    ids = run_write(open_engine(location), fill)
    run_write(open_engine(location), lambda c: bigrams.catch_up(c, 10_000))
    yield location, ids


def run(path: str, query: object, **kw: object) -> list[dict]:
    with reading(open_engine(path)) as conn:
        limit = kw.pop("limit", 100)
        return search_messages(conn, query, limit=limit, **kw)  # type: ignore[arg-type]


def keys(store: tuple[str, dict[str, int]], query: object, **kw: object) -> set[str]:
    path, ids = store
    by_id = {v: k for k, v in ids.items()}
    return {by_id[h["id"]] for h in run(path, query, **kw)}


# --------------------------------------------------------------------------- query language


@pytest.mark.parametrize(("query", "expected"), [
    ("docker deployment", {"deploy"}),
    ("deploy*", {"deploy"}),
    ('"set up docker"', {"deploy"}),
    ('"docker setup"', set()),
    ("chat-send", {"chat"}),
    ("docker OR python", {"deploy", "chat", "cronnight", "py", "pyjp"}),
    ("python NOT java", {"py", "pyjp"}),
    ("docker AND compose", {"deploy"}),
    ("cafe", {"cafe"}),
    ("terminal", {"chat"}),
    ("UNIQUETOOLNAME", {"tool"}),
])
def test_word_queries_follow_fts5_semantics(store, query: str, expected: set[str]) -> None:
    assert keys(store, query) == expected


def test_juxtaposition_binds_tighter_than_or(store) -> None:
    # a OR b c = a, or (b and c)
    assert keys(store, "compose OR python great") == {"deploy", "py"}


def test_tool_output_is_word_indexed_only_up_to_its_prefix(store) -> None:
    assert keys(store, "deepneedle") == set()
    assert keys(store, "deepneedle", role_filter=["tool"]) == {"tool"}


# --------------------------------------------------------------------------- known complaints


def test_two_character_cjk_finds_every_row_not_just_index_hits(store) -> None:
    assert keys(store, "昨晚") == {"night1", "night2", "cronnight"}


def test_cjk_or_routes_each_term_by_its_own_length(store) -> None:
    assert keys(store, "广西 OR 桂林 OR 漓江 OR 旅游") == {"travel", "travel2"}
    assert keys(store, "广西 OR 桂林 OR 漓江 OR 旅游", source_filter=["telegram"]) == {"travel2"}


@pytest.mark.parametrize("query", ["youer", "修改youer", "youer服务端"])
def test_latin_run_glued_to_cjk_is_found(store, query: str) -> None:
    assert keys(store, query) == {"youer"}


def test_latin_and_cjk_mixed_term(store) -> None:
    assert keys(store, "Agent通信") == {"agent"}
    assert keys(store, "Agent 通信") == {"agent"}


def test_prefix_star_never_reaches_a_like_pattern(store) -> None:
    assert keys(store, "秃发*") == {"bald"}


def test_percent_is_matched_literally(store) -> None:
    assert keys(store, "100%完成") == {"pct"}


def test_not_keeps_its_meaning_across_routes(store) -> None:
    assert keys(store, "python NOT 日本") == {"py"}
    assert keys(store, "docker NOT 昨晚", source_filter=["cli", "cron"]) == {"deploy", "chat"}


def test_single_cjk_character_is_found_inside_and_at_the_end_of_runs(store) -> None:
    assert keys(store, "晚") == {"night1", "night2", "cronnight"}
    assert keys(store, "送") == {"night2"}


def test_cjk_reaches_cron_sessions_with_and_without_a_source_filter(store) -> None:
    assert keys(store, "昨晚") == {"night1", "night2", "cronnight"}
    assert keys(store, "昨晚", source_filter=["cron"]) == {"cronnight"}


def test_multimodal_content_is_searched_by_its_text_parts_only(store) -> None:
    assert keys(store, "熊猫") == {"image"}
    assert keys(store, "picture") == {"image"}
    assert keys(store, "QUJDREVGR0hJSktM") == set()
    assert keys(store, "base64") == set()
    path, ids = store
    [hit] = run(path, "picture")
    assert "json" not in hit["snippet"] and "\x00" not in hit["snippet"]
    assert hit["context"][1]["content"] == "look at this picture of 熊猫 please"


# --------------------------------------------------------------------------- filters x routes

ROUTE_QUERIES = {
    "word": "docker OR python OR travel OR 100",
    "trigram": "记忆系统 OR 会议纪要 OR 桂林旅游",
    "bigram": "昨晚 OR 桂林 OR 完成",
    "mixed": "python OR 昨晚 OR travel OR 旅游",
    "like": "docker OR 昨晚",
}
FILTERS = [
    {"source_filter": ["cli"]},
    {"source_filter": ["telegram", "cron"]},
    {"exclude_sources": ["cli"]},
    {"role_filter": ["assistant"]},
    {"source_filter": ["cli"], "role_filter": ["user"], "exclude_sources": ["telegram"]},
]


@pytest.mark.parametrize("route", sorted(ROUTE_QUERIES))
@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: json.dumps(f, sort_keys=True))
def test_filters_apply_identically_on_every_route(store, route: str, filters: dict) -> None:
    path, _ = store
    extra = {"role_filter": ["tool", "user", "assistant"]} if route == "like" else {}
    unfiltered = run(path, ROUTE_QUERIES[route], **extra)
    assert unfiltered, route
    merged = {**extra, **filters}
    if route == "like" and "role_filter" in filters:
        merged["role_filter"] = [*filters["role_filter"], "tool"]
    hits = run(path, ROUTE_QUERIES[route], **merged)
    sources = merged.get("source_filter")
    expected = [h["id"] for h in unfiltered
                if (sources is None or h["source"] in sources)
                and h["source"] not in (merged.get("exclude_sources") or [])
                and h["role"] in (merged.get("role_filter") or [h["role"]])]
    if sources and "cron" in sources and route in ("trigram", "bigram", "mixed"):
        # Naming an excluded source moves CJK terms to LIKE, which reaches cron rows too.
        assert set(expected) <= {h["id"] for h in hits}
    else:
        assert sorted(h["id"] for h in hits) == sorted(expected)
    for hit in hits:
        assert sources is None or hit["source"] in sources
        assert hit["source"] not in (merged.get("exclude_sources") or [])
        assert hit["role"] in (merged.get("role_filter") or [hit["role"]])


def test_empty_source_filter_gives_nothing(store) -> None:
    assert keys(store, "docker", source_filter=[]) == set()


def test_empty_role_and_exclude_filters_have_no_effect(store) -> None:
    assert keys(store, "docker", role_filter=[], exclude_sources=[]) == keys(store, "docker")


# --------------------------------------------------------------------------- results


def test_hit_has_the_documented_keys_in_order(store) -> None:
    path, ids = store
    [hit] = run(path, "compose")
    assert list(hit) == ["id", "session_id", "role", "snippet", "timestamp", "tool_name",
                         "source", "model", "session_started", "context"]
    assert hit["id"] == ids["deploy"]
    assert (hit["session_id"], hit["role"], hit["source"], hit["model"]) == (
        "s1", "user", "cli", "model-a")
    assert hit["session_started"] == 100.0
    assert hit["snippet"] == "How do I set up docker deployment with >>>compose<<<?"


def test_fts_snippets_mark_the_best_column(store) -> None:
    path, _ = store
    assert run(path, "chat-send")[0]["snippet"] == "Run the >>>chat-send<<< command now"
    assert run(path, "UNIQUETOOLNAME")[0]["snippet"] == ">>>UNIQUETOOLNAME<<<"


def test_bigram_and_like_snippets_mark_the_literal(store) -> None:
    path, _ = store
    assert run(path, "漓江")[0]["snippet"] == "广西桂林山水甲天下，>>>漓江<<<旅游"
    assert run(path, "docker", role_filter=["tool"], limit=5) == []  # not in the tool body
    tool_hit = run(path, "deepneedle", role_filter=["tool"])[0]
    assert tool_hit["snippet"].endswith(">>>deepneedle<<<")
    assert tool_hit["snippet"].startswith("...")


def test_context_is_the_hit_and_its_neighbours(store) -> None:
    path, _ = store
    [hit] = run(path, "compose")
    assert [c["role"] for c in hit["context"]] == ["user", "assistant"]  # first of its session
    [hit] = run(path, "terminal")
    context = hit["context"]
    assert [c["role"] for c in context] == ["user", "assistant", "tool"]
    assert len(context[2]["content"]) == 200


def test_sort_newest_and_oldest_on_every_route(store) -> None:
    path, _ = store
    for query in ROUTE_QUERIES.values():
        newest = run(path, query, sort=" Newest ")
        oldest = run(path, query, sort="oldest")
        assert [h["id"] for h in newest] == [h["id"] for h in reversed(oldest)]
        stamps = [h["timestamp"] for h in newest]
        assert stamps == sorted(stamps, reverse=True)


def test_limit_and_offset_page_the_merged_list(store) -> None:
    path, _ = store
    query = "python OR 昨晚 OR travel OR 旅游 OR docker"
    everything = [h["id"] for h in run(path, query)]
    pages = [h["id"] for off in range(0, len(everything), 2)
             for h in run(path, query, limit=2, offset=off)]
    assert pages == everything
    assert len(set(everything)) == len(everything)
    assert run(path, query, limit=0) == []


def test_negative_limit_or_offset_is_refused(store) -> None:
    path, _ = store
    with pytest.raises(ValueError):
        run(path, "docker", limit=-1)
    with pytest.raises(ValueError):
        run(path, "docker", offset=-1)


@pytest.mark.parametrize("query", [None, "", "   ", "NOT java", "***", "AND OR", '""', "🚀"])
def test_queries_that_sanitize_to_nothing_give_nothing(store, query) -> None:
    assert run(store[0], query) == []


def test_works_through_an_orm_session(store) -> None:
    path, ids = store
    with reading(open_engine(path)) as conn, Session(bind=conn) as session:
        assert [h["id"] for h in search_messages(session, "compose")] == [ids["deploy"]]


def test_rows_written_by_another_program_are_found_before_catch_up(store) -> None:
    path, _ = store
    new = insert_message(path, "s1", "今晚再讨论youer", 2000)
    assert new in {h["id"] for h in run(path, "晚")}
    assert new in {h["id"] for h in run(path, "再讨论")}
    run_write(open_engine(path), bigrams.catch_up)
    assert new in {h["id"] for h in run(path, "晚")}
    assert new in {h["id"] for h in run(path, "youer")}


ALPHABET = st.sampled_from(
    list("abcXYZ019 _-.%*\"'()[]{}:^+#@&|~<>=/\\,;!?$`\t\n\x00") + list("记忆断裂广西桂林日本ぁカ한")
    + ["AND", "OR", "NOT", "NEAR(", " AND ", " OR ", " NOT ", "🚀", "é", "\u3000", "。"])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(ALPHABET, max_size=20))
def test_no_query_text_raises(store, parts: list[str]) -> None:
    path, _ = store
    with reading(open_engine(path)) as conn:
        hits = search_messages(conn, "".join(parts), limit=5)
        assert isinstance(hits, list)
        assert isinstance(search_messages(conn, "".join(parts), role_filter=["tool"]), list)


def test_equal_scores_are_ordered_newest_first_across_the_ranked_cut(store) -> None:
    path, _ = store
    dupes = [insert_message(path, "s3", "duplicate zebra prompt", 5000.0 + n) for n in range(40)]
    newest = sorted(dupes, reverse=True)
    assert [h["id"] for h in run(path, "zebra", limit=5)] == newest[:5]
    assert [h["id"] for h in run(path, "zebra", limit=5, offset=30)] == newest[30:35]


@pytest.mark.parametrize("query", ["docker deployment", '"set up"', "deploy*", "记忆系统",
                                   "昨晚", "晚", "python NOT 日本", "广西 OR 桂林 OR travel",
                                   "youer", "100%完成"])
@pytest.mark.sqlite_only
def test_no_route_scans_the_whole_messages_table_in_sqlites_plans(store, monkeypatch,
                                                                  query: str) -> None:
    """SQLite-only: reads SQLite's EXPLAIN QUERY PLAN (the PostgreSQL plans have their own)."""
    path, _ = store
    seen: list[tuple[str, tuple]] = []
    real = search_module._fetch

    def recording(conn, statement, **kw):
        seen.append((statement.text, tuple(statement.params)))
        return real(conn, statement, **kw)

    monkeypatch.setattr(search_module, "_fetch", recording)
    run(path, query)
    assert seen
    con = sqlite3.connect(path)
    try:
        for sql, params in seen:
            plan = [r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql, params)]
            full_scans = [p for p in plan if p.split()[:2] in (["SCAN", "m"], ["SCAN", "messages"])]
            assert not full_scans, (query, sql, plan)
    finally:
        con.close()


@pytest.mark.parametrize("query", ["docker deployment", "记忆系统", "昨晚", "python NOT 日本",
                                   "广西 OR 桂林 OR travel"])
def test_rows_carry_the_column_names_they_are_read_by(store, monkeypatch,
                                                      query: str) -> None:
    path, _ = store
    named: list[list[str]] = []
    real = search_module._fetch

    def describing(conn, statement, **kw):
        cursor = conn.connection.driver_connection.cursor()
        try:
            cursor.execute(statement.text, tuple(statement.params))
            named.append([d[0] for d in cursor.description])
        finally:
            cursor.close()
        return real(conn, statement, **kw)

    monkeypatch.setattr(search_module, "_fetch", describing)
    assert run(path, query)
    wide = [names for names in named if len(names) > 1]
    assert list(PAGE_COLUMNS) in wide
    shapes = (list(PAGE_COLUMNS), list(pg_statements.PAGE_ID_COLUMNS))
    assert all(names in shapes for names in wide), wide


@pytest.mark.parametrize("query", ["python NOT 日本", "广西 OR 桂林 OR travel",
                                   "docker OR 记忆系统"])
def test_a_terms_id_set_is_computed_without_scores(store, monkeypatch, query: str) -> None:
    # Combined terms are ordered by time: no statement may score a single hit.
    path, _ = store
    seen: list[str] = []
    real = search_module._fetch

    def recording(conn, statement, **kw):
        seen.append(statement.text)
        return real(conn, statement, **kw)

    monkeypatch.setattr(search_module, "_fetch", recording)
    assert run(path, query)
    assert seen and not [sql for sql in seen if "bm25(" in sql or "ts_rank" in sql]


def test_text_holding_nul_comes_back_whole_in_hits_and_context_on_a_server(
        pg_store: str) -> None:
    # PostgreSQL text cannot hold NUL: it is stored escaped and read back unescaped, page rows
    # included. (SQLite's snippets and context stop at a NUL: its text functions read C
    # strings.)
    with SessionDB(pg_store) as db:
        db.create_session("nul", "cli")
        db.append_message("nul", "user", "before\x00 the zeroterm\x00hit \uffff0 kept")
        db.append_message("nul", "assistant", "after \x00 it")
        for sort in (None, "newest"):
            [hit] = db.search_messages("zeroterm", sort=sort)
            assert ">>>zeroterm<<<" in hit["snippet"]
            assert [c["content"] for c in hit["context"]] == [
                "before\x00 the zeroterm\x00hit \uffff0 kept", "after \x00 it"]
