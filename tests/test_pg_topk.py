"""Ranked pages on PostgreSQL rank a bounded window of hits (docs/search.md#top-k-on-postgresql):
a query with at most ``RANK_WINDOW`` hits is ranked exactly as a whole; with more, the page ranks
the newest ``RANK_WINDOW`` hits and older hits follow newest first, every page a slice of that one
order. Filters choose the window's hits. PostgreSQL only: SQLite ranks every hit (FTS5's own
bounded sort of bm25)."""

from __future__ import annotations

import pytest

from hermes_store import SessionDB
from hermes_store.search import postgres as pg_search

BASE_TS = 1_700_000_000.0
WINDOW = 6


def _fill(url: str) -> dict[int, float]:
    """20 hits of "zebra" with ranks that disagree with their age (one, two or three zebras),
    half of them in a telegram session; returns the hits' timestamps by id."""
    stamps = {}
    with SessionDB(url) as db:
        db.create_session("cli", "cli")
        db.create_session("tg", "telegram")
        for n in range(20):
            text = " ".join(["zebra"] * (1 + (n * 7) % 3) + ["crossing"] * 5)
            stamp = BASE_TS + n
            session = "tg" if n % 2 else "cli"
            stamps[db.append_message(session, "user", text, timestamp=stamp)] = stamp
        db.append_message("cli", "user", "no match here", timestamp=BASE_TS + 99)
    return stamps


def _ids(url: str, query: str = "zebra", **kw: object) -> list[int]:
    with SessionDB(url) as db:
        return [hit["id"] for hit in db.search_messages(query, **kw)]  # type: ignore[arg-type]


def _exact(url: str, monkeypatch: pytest.MonkeyPatch, **kw: object) -> list[int]:
    monkeypatch.setattr(pg_search, "RANK_WINDOW", 0)  # every hit ranked
    try:
        return _ids(url, **kw)
    finally:
        monkeypatch.undo()


def test_a_query_with_no_more_hits_than_the_window_is_ranked_exactly(
        pg_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(pg_store)
    exact = _exact(pg_store, monkeypatch, limit=50)
    monkeypatch.setattr(pg_search, "RANK_WINDOW", 20)
    assert _ids(pg_store, limit=50) == exact
    assert exact != sorted(exact, reverse=True)  # ranks really differ from time order
    for limit, offset in ((5, 0), (5, 5), (7, 12), (20, 0)):
        assert _ids(pg_store, limit=limit, offset=offset) == exact[offset:offset + limit]


def test_past_the_window_the_newest_hits_are_ranked_and_older_ones_follow_newest_first(
        pg_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stamps = _fill(pg_store)
    exact = _exact(pg_store, monkeypatch, limit=50)
    monkeypatch.setattr(pg_search, "RANK_WINDOW", WINDOW)
    whole = _ids(pg_store, limit=50)
    newest = sorted(stamps, key=stamps.get, reverse=True)
    window = set(newest[:WINDOW])
    assert set(whole[:WINDOW]) == window
    assert whole[:WINDOW] == [i for i in exact if i in window]  # the exact order among them
    assert whole[WINDOW:] == newest[WINDOW:]
    assert whole[:WINDOW] != exact[:WINDOW]  # the difference this test documents
    for limit, offset in ((3, 0), (6, 0), (4, 4), (5, 9), (20, 0), (10, 15)):
        assert _ids(pg_store, limit=limit, offset=offset) == whole[offset:offset + limit]


def test_filters_choose_the_hits_the_window_holds(
        pg_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stamps = _fill(pg_store)
    exact = _exact(pg_store, monkeypatch, limit=50, source_filter=["telegram"])
    monkeypatch.setattr(pg_search, "RANK_WINDOW", WINDOW)
    found = _ids(pg_store, limit=50, source_filter=["telegram"])
    assert sorted(found) == sorted(exact) and len(found) == 10
    telegram = sorted((i for i in stamps if i in set(exact)), key=stamps.get, reverse=True)
    assert found[:WINDOW] == [i for i in exact if i in set(telegram[:WINDOW])]
    assert found[WINDOW:] == telegram[WINDOW:]


def test_time_ordered_pages_are_not_windowed(
        pg_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stamps = _fill(pg_store)
    monkeypatch.setattr(pg_search, "RANK_WINDOW", WINDOW)
    assert _ids(pg_store, limit=50, sort="oldest") == sorted(stamps, key=stamps.get)
