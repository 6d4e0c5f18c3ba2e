"""Ranked pages (docs/search.md#ranking): every page of a ranked search is the matching slice of
the one ordering (best score first, equal scores newest first), however many rows share the
score at the page's edge, with filters and with rewound rows among them; on SQLite a page is one
statement. Both backends, except where a test's name says SQLite."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from v21_stores import BASE_TS

from hermes_store import Message, SessionDB
from hermes_store.search import statements as search_module

messages = Message.__table__

# One query per ranked route: the word index, the bigram index (2 CJK characters) and the
# trigram index (3 or more).
QUERIES = {"word": "zebra", "bigram": "通信", "trigram": "通信协"}
TEXT = "zebra crossing 通信协议"
# (limit, offset) pairs whose last row falls before, inside and after a group of equal scores.
PAGES = [(1, 0), (5, 0), (7, 3), (20, 0), (10, 25), (5, 38), (3, 41), (20, 40), (50, 0)]


def rewind(db: SessionDB, ids: list[int]) -> None:
    db._write(lambda c: c.execute(update(messages).where(messages.c.id.in_(ids))
                                  .values(active=0, compacted=0)))


def ids_of(db: SessionDB, query: str, **kw: object) -> list[int]:
    return [hit["id"] for hit in db.search_messages(query, **kw)]  # type: ignore[arg-type]


def newest_first(rows: list[tuple[int, float]]) -> list[int]:
    return [row_id for row_id, _ in sorted(rows, key=lambda r: (r[1], r[0]), reverse=True)]


def tied(found: list[int], ties: list[tuple[int, float]]) -> list[int]:
    """The tied rows among ``found``, in their order; they must sit side by side."""
    wanted = {row_id for row_id, _ in ties}
    where = [n for n, row_id in enumerate(found) if row_id in wanted]
    assert where == list(range(where[0], where[0] + len(where))) if where else True
    return [found[n] for n in where]


@pytest.fixture
def ties(db: SessionDB) -> list[tuple[int, float]]:
    """45 messages with the same text (so the same score on every index), timestamps out of
    insertion order and some equal (ties broken by id), plus two other matches."""
    db.create_session("s", "cli")
    rows = []
    for n in range(45):
        stamp = BASE_TS + (n * 7) % 45 // 2  # pairs of equal timestamps, not in id order
        rows.append((db.append_message("s", "user", TEXT, timestamp=stamp), stamp))
    db.append_message("s", "user", f"{TEXT} {TEXT} {TEXT}", timestamp=BASE_TS - 1)
    db.append_message("s", "user", f"{TEXT} " + "filler words " * 40, timestamp=BASE_TS + 99)
    return rows


@pytest.mark.parametrize("route", sorted(QUERIES))
def test_every_page_is_its_slice_of_one_ordering(db: SessionDB, ties: list, route: str) -> None:
    query = QUERIES[route]
    everything = ids_of(db, query, limit=1000)
    assert len(everything) == 47
    assert tied(everything, ties) == newest_first(ties)
    for limit, offset in PAGES:
        assert ids_of(db, query, limit=limit, offset=offset) == \
            everything[offset:offset + limit], (limit, offset)


@pytest.mark.parametrize("route", sorted(QUERIES))
def test_pages_of_filtered_ties_hold_only_matching_rows_newest_first(db: SessionDB,
                                                                     route: str) -> None:
    query = QUERIES[route]
    db.create_session("cli", "cli")
    db.create_session("tg", "telegram")
    wanted = []
    for n in range(120):
        session, role = ("tg", "cli")[n % 2], ("user", "assistant", "user")[n % 3]
        row = db.append_message(session, role, TEXT, timestamp=BASE_TS + 60 - n // 3)
        if session == "tg" and role == "user":
            wanted.append((row, BASE_TS + 60 - n // 3))
    expected = newest_first(wanted)
    assert len(expected) == 40
    for limit, offset in PAGES:
        assert ids_of(db, query, limit=limit, offset=offset, source_filter=["telegram"],
                      role_filter=["user"]) == expected[offset:offset + limit], (limit, offset)
    assert ids_of(db, query, limit=1000, exclude_sources=["cli"],
                  role_filter=["user"]) == expected


@pytest.mark.parametrize("route", sorted(QUERIES))
@pytest.mark.parametrize("filtered", [False, True])
def test_rewound_rows_among_equal_scores_leave_exact_pages(db: SessionDB, ties: list,
                                                           route: str, filtered: bool) -> None:
    # The newest 30 of the tied rows are rewound: the rows the page needs lie past them.
    query = QUERIES[route]
    order = newest_first(ties)
    rewind(db, order[:30])
    options = {"source_filter": ["cli"]} if filtered else {}
    everything = ids_of(db, query, limit=1000, **options)
    assert len(everything) == 17 and tied(everything, ties) == order[30:]
    assert tied(ids_of(db, query, limit=1000, include_inactive=True, **options), ties) == order
    for limit, offset in PAGES:
        assert ids_of(db, query, limit=limit, offset=offset, **options) == \
            everything[offset:offset + limit], (limit, offset)


@pytest.mark.sqlite_only
@pytest.mark.parametrize("route", sorted(QUERIES))
@pytest.mark.parametrize("options", [{}, {"source_filter": ["cli"]}, {"include_inactive": True},
                                     {"role_filter": ["user"], "offset": 30}])
def test_a_ranked_page_on_sqlite_is_one_statement_whatever_the_ties(
        db: SessionDB, ties: list, monkeypatch, route: str, options: dict) -> None:
    """SQLite-only: counts the statements its search runs (the page, no tie or id round trip)."""
    rewind(db, newest_first(ties)[:10])
    statements: list[str] = []
    real = search_module._fetch

    def counting(conn, statement, **kw):
        statements.append(statement.text)
        return real(conn, statement, **kw)

    monkeypatch.setattr(search_module, "_fetch", counting)
    for limit in (1, 5, 20):
        statements.clear()
        assert db.search_messages(QUERIES[route], limit=limit, **options)
        assert len(statements) == 1


@pytest.mark.sqlite_only
@pytest.mark.parametrize("query", ["zebra 通信", "zebra OR 通信", "zebra NOT 通信", "通信 100%"])
def test_terms_on_several_routes_are_combined_in_the_one_statement_on_sqlite(
        db: SessionDB, monkeypatch, query: str) -> None:
    """SQLite-only: no term's id set travels through Python (each was a list of every id)."""
    db.create_session("s", "cli")
    for n in range(30):
        db.append_message("s", "user", ("zebra 通信 100%", "zebra alone", "通信 only")[n % 3],
                          timestamp=BASE_TS + n)
    params: list[list] = []
    real = search_module._fetch

    def recording(conn, statement, **kw):
        params.append(list(statement.params))
        return real(conn, statement, **kw)

    monkeypatch.setattr(search_module, "_fetch", recording)
    assert db.search_messages(query, limit=5)
    assert len(params) == 1
    assert not [p for p in params[0] if isinstance(p, str) and p.startswith("[")]


@pytest.mark.sqlite_only
@pytest.mark.parametrize("limit", [1, 5, 60])
def test_a_cjk_row_both_indexes_find_gets_the_word_snippet_on_any_page(db: SessionDB,
                                                                        limit: int) -> None:
    """SQLite-only: PostgreSQL cuts every snippet from the stored text (docs/search.md)."""
    # "zebra" is in most rows, so its word score is poor everywhere; among the rows holding CJK
    # (the bigram index) it is rare, so the CJK row's bigram score puts it first, while 40 rows
    # outscore it on the word index. A row with Latin glued to CJK makes Latin terms read the
    # bigram index at all (docs/search.md#the-row-split).
    db.create_session("s", "cli")
    db.append_message("s", "user", "修改youer服务端", timestamp=BASE_TS - 1)
    for n in range(40):
        db.append_message("s", "user", "zebra zebra", timestamp=BASE_TS + n)
    for n in range(30):
        db.append_message("s", "user", f"通信协议 {n}", timestamp=BASE_TS + 100 + n)
    row = db.append_message("s", "user", "zebra 通信 zebra", timestamp=BASE_TS + 200)
    first = db.search_messages("zebra", limit=limit)[0]
    assert first["id"] == row
    assert first["snippet"] == ">>>zebra<<< 通信 >>>zebra<<<"
