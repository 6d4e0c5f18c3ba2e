"""A PostgreSQL query whose terms take different routes (a Latin word and a CJK term) is one
statement over ``messages``: each route's hits are conditions on one row, combined with AND, OR
and NOT (docs/search.md#statements-and-plans-on-postgresql), with the same hits as each term
searched alone and combined."""

from __future__ import annotations

from typing import Any

from hermes_store import SessionDB
from hermes_store.search import statements

ROWS = [
    ("user", "docker 部署 done", None),
    ("user", "docker only here", None),
    ("tool", "部署 log without the latin word", "terminal"),
    ("user", "100%完成 docker", None),
    ("user", "100完成 docker", None),  # no literal "%": not a hit of "100%完成"
    ("assistant", "kubernetes 部署", None),
]


def _store(url: str) -> None:
    with SessionDB(url) as db:
        db.create_session("s", "cli")
        for n, (role, text, tool) in enumerate(ROWS, start=1):
            assert db.append_message("s", role, text, tool_name=tool,
                                     timestamp=1_700_000_000.0 + n) == n


def _found(url: str, query: str) -> set[str]:
    text_of = {n: text for n, (_, text, _) in enumerate(ROWS, start=1)}
    with SessionDB(url) as db:
        return {text_of[hit["id"]] for hit in db.search_messages(query, limit=50)}


def test_terms_on_different_routes_combine_with_and_or_and_not(pg_store: str) -> None:
    _store(pg_store)
    assert _found(pg_store, "docker 部署") == {"docker 部署 done"}
    assert _found(pg_store, "docker NOT 部署") == {
        "docker only here", "100%完成 docker", "100完成 docker"}
    assert _found(pg_store, "部署 NOT docker") == {
        "部署 log without the latin word", "kubernetes 部署"}
    assert _found(pg_store, "kubernetes OR 部署 docker") == {
        "docker 部署 done", "kubernetes 部署"}


def test_a_literal_percent_is_checked_inside_the_combined_statement(pg_store: str) -> None:
    _store(pg_store)
    assert _found(pg_store, '"100%完成" docker') == {"100%完成 docker"}
    assert _found(pg_store, 'docker NOT "100%完成"') == {
        "docker 部署 done", "docker only here", "100完成 docker"}


def test_a_combined_query_reads_one_page_statement_and_its_rows(pg_store: str,
                                                                monkeypatch: Any) -> None:
    _store(pg_store)
    seen: list[Any] = []
    real = statements._fetch

    def recording(conn: Any, statement: Any) -> list[Any]:
        seen.append(statement)
        return real(conn, statement)

    monkeypatch.setattr(statements, "_fetch", recording)
    assert _found(pg_store, "docker 部署") == {"docker 部署 done"}
    assert len(seen) == 2  # the page's ids, then their rows: no id list per term
