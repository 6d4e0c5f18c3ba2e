"""Search latency per query kind: the library at head, the raw-sqlite3 floor, the v11 layout.

* ``head``   — ``hermes_store.search.statements.search_messages`` on the migrated, optimized store.
* ``floor``  — the same work in hand-written sqlite3 on the same file (queries.py).
* ``inline`` — what v11 did on its inline layout (a LIKE scan for short CJK terms).
* ``like``   — a plain ``LIKE '%…%'`` scan of every message, the bar for the bigram index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import pytest

from hermes_store.db.engine import open_engine, reading
from hermes_store.search.statements import search_messages

from .queries import INLINE, QUERIES, floor_for, in_snapshot


@pytest.fixture
def raw(stores) -> Iterator[Callable[[str], sqlite3.Connection]]:
    opened: list[sqlite3.Connection] = []

    def connect(which: str) -> sqlite3.Connection:
        con = sqlite3.connect(getattr(stores, which), isolation_level=None)
        opened.append(con)
        return con

    yield connect
    for con in opened:
        con.close()


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_head(benchmark, stores, kind: str) -> None:
    benchmark.group = f"query:{kind}"
    benchmark.extra_info.update(kind=kind, layout="head")
    engine = open_engine(stores.head)
    text, filters = QUERIES[kind]

    def run() -> list[dict]:
        with reading(engine) as conn:
            return search_messages(conn, text, **filters)

    assert benchmark(run)


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_floor(benchmark, raw, kind: str) -> None:
    benchmark.group = f"query:{kind}"
    benchmark.extra_info.update(kind=kind, layout="floor")
    con = raw("head")
    assert benchmark(in_snapshot, floor_for(con)[kind], con)


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_inline(benchmark, raw, kind: str) -> None:
    benchmark.group = f"query:{kind}"
    benchmark.extra_info.update(kind=kind, layout="inline")
    con = raw("inline")
    assert benchmark(INLINE[kind], con)


def test_like_scan_for_two_cjk_characters(benchmark, raw) -> None:
    benchmark.group = "query:cjk2"
    benchmark.extra_info.update(kind="cjk2", layout="like")
    con = raw("head")
    assert benchmark(INLINE["cjk2"], con)
