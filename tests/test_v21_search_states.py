"""v21 API (docs/v21.md#parameters): ``search_messages`` hides rewound rows by default on every
route, keeps compacted ones findable, and ``include_inactive=True`` finds every row."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from v21_stores import BASE_TS

from hermes_store import Message, SessionDB

messages = Message.__table__

# One query per route (docs/search.md): a word, a 3+ character CJK term (trigram), a 2
# character CJK term (bigram), a tool-role search (LIKE) and a mixed query (set combination).
ROUTES = {
    "word": ("zebra", {}),
    "trigram": ("斑马线", {}),
    "bigram": ("斑马", {}),
    "like": ("zebra", {"role_filter": ["tool"]}),
    "mixed": ("zebra OR 斑马", {}),
    "newest": ("zebra", {"sort": "newest"}),
    "filtered": ("zebra", {"source_filter": ["cli"]}),
}


def state(db: SessionDB, ids: list[int], *, active: int, compacted: int) -> None:
    db._write(lambda c: c.execute(update(messages).where(messages.c.id.in_(ids))
                                  .values(active=active, compacted=compacted)))


@pytest.fixture
def three_states(db: SessionDB) -> dict[str, int]:
    db.create_session("s", "cli")
    made = {}
    for n, name in enumerate(("live", "rewound", "compacted")):
        text = f"zebra 斑马线 {name}"
        made[name] = db.append_message("s", "user", text, timestamp=BASE_TS + n)
        db.append_message("s", "tool", text, tool_call_id=f"c{n}", timestamp=BASE_TS + n)
    state(db, [made["rewound"], made["rewound"] + 1], active=0, compacted=0)
    state(db, [made["compacted"], made["compacted"] + 1], active=0, compacted=1)
    return made


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_rewound_rows_are_hidden_on_every_route(db: SessionDB, three_states: dict,
                                                route: str) -> None:
    query, options = ROUTES[route]
    found = {hit["id"] for hit in db.search_messages(query, limit=50, **options)}
    everything = {hit["id"] for hit in db.search_messages(query, limit=50, include_inactive=True,
                                                          **options)}
    rewound = {three_states["rewound"], three_states["rewound"] + 1}
    compacted = {three_states["compacted"], three_states["compacted"] + 1}
    assert found and not (found & rewound)
    assert everything - found == everything & rewound != set()
    assert compacted & found


@pytest.mark.parametrize("query", ["zebra", "斑马线", "斑马"])
def test_a_page_is_full_when_rewound_rows_outrank_the_live_ones(db: SessionDB,
                                                               query: str) -> None:
    # The ranked shortcuts cut each index at its best rows: hidden rows among them must not
    # leave the page short or out of order.
    db.create_session("s", "cli")
    hidden = [db.append_message("s", "user", f"{query} {query} {query} {query}",
                                timestamp=BASE_TS + n) for n in range(40)]
    shown = [db.append_message("s", "user", f"{query} and some other words {n}",
                               timestamp=BASE_TS + 100 + n) for n in range(12)]
    state(db, hidden, active=0, compacted=0)
    page = [hit["id"] for hit in db.search_messages(query, limit=5)]
    assert len(page) == 5 and set(page) <= set(shown)
    second = [hit["id"] for hit in db.search_messages(query, limit=5, offset=5)]
    assert len(second) == 5 and not set(page) & set(second)
    assert len(db.search_messages(query, limit=5, include_inactive=True)) == 5
    assert {h["id"] for h in db.search_messages(query, limit=100)} == set(shown)


def test_everything_hidden_gives_an_empty_page(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = [db.append_message("s", "user", f"斑马 {n}", timestamp=BASE_TS + n)
           for n in range(30)]
    state(db, ids, active=0, compacted=0)
    assert db.search_messages("斑马") == []
    assert len(db.search_messages("斑马", include_inactive=True)) == 20


def test_a_v21_store_searches_its_active_rows(v21_db: SessionDB) -> None:
    hits = v21_db.search_messages("docker", limit=5)
    assert hits == v21_db.search_messages("docker", limit=5, include_inactive=True)
