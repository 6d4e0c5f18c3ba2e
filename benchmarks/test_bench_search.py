"""Search latency per query kind: the library at head, the raw-sqlite3 floor, the v11 layout.

* ``head``   — ``hermes_store.search.statements.search_messages`` on the migrated, optimized store.
* ``floor``  — the same work in hand-written sqlite3 on the same file: the MATCHes the contract
  needs on this layout (a Latin term in the word index and, for rows holding CJK, the bigram
  index), the join with sessions, the ordering, 20 rows with snippets and their neighbours.
  No sanitizer, no routing, no SQLAlchemy: the least any library could spend on this layout.
* ``inline`` — what v11 did on its inline layout (a LIKE scan for short CJK terms).
* ``like``   — a plain ``LIKE '%…%'`` scan of every message, the bar for the bigram index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import pytest

from hermes_store.db.engine import open_engine, reading
from hermes_store.search.snippets import snippet_from_text
from hermes_store.search.statements import search_messages

QUERIES = {
    "word": "docker deployment",
    "phrase": '"docker deployment"',
    "prefix": "deploy*",
    "substring": "数据库迁移",
    "cjk2": "通信",
    "mixed": "docker 部署",
}

PAGE = """
SELECT m.id, m.session_id, m.role, {snip}, m.timestamp, m.tool_name, s.source, s.model,
       s.started_at
FROM ({top}) AS t JOIN messages m ON m.id = t.id JOIN sessions s ON s.id = m.session_id
ORDER BY t.score LIMIT 20"""
# Hits without an FTS5 snippet get the contract's marked snippet from the stored text, as the
# library must make it: the floor does that work too.
STORED = "m.content, m.tool_name, m.tool_calls"
WORD_TOP = ("SELECT rowid AS id, rank AS score, snippet(messages_fts, -1, '>>>', '<<<', '...', 40) "
            "AS snip FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20")
TRIGRAM_TOP = ("SELECT rowid AS id, rank AS score, snippet(messages_fts_trigram, -1, '>>>', '<<<', "
               "'...', 40) AS snip FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ? "
               "ORDER BY rank LIMIT 20")
BIGRAM_TOP = ("SELECT rowid AS id, rank AS score, NULL AS snip FROM messages_fts_cjk "
              "WHERE messages_fts_cjk MATCH ? ORDER BY rank LIMIT 20")
INLINE_TOP = WORD_TOP
NEIGHBOURS = """
SELECT m.id,
  (SELECT p.id FROM messages p WHERE p.session_id = m.session_id AND (p.timestamp, p.id) <
     (m.timestamp, m.id) ORDER BY p.timestamp DESC, p.id DESC LIMIT 1),
  (SELECT n.id FROM messages n WHERE n.session_id = m.session_id AND (n.timestamp, n.id) >
     (m.timestamp, m.id) ORDER BY n.timestamp, n.id LIMIT 1)
FROM messages m WHERE m.id IN ({marks})"""
CONTEXT = "SELECT id, role, substr(content, 1, 200) FROM messages WHERE id IN ({marks})"
BY_TIME = """
SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.tool_calls, m.timestamp,
       s.source, s.model, s.started_at
FROM messages m JOIN sessions s ON s.id = m.session_id WHERE {where}
ORDER BY m.timestamp DESC, m.id DESC LIMIT 20"""
Query = Callable[[sqlite3.Connection], list[tuple]]


def _with_context(con: sqlite3.Connection, rows: list[tuple]) -> list[tuple]:
    ids = [r[0] for r in rows]
    if not ids:
        return rows
    marks = ",".join("?" * len(ids))
    pairs = con.execute(NEIGHBOURS.format(marks=marks), ids).fetchall()
    wanted = sorted({i for row in pairs for i in row if i is not None})
    con.execute(CONTEXT.format(marks=",".join("?" * len(wanted))), wanted).fetchall()
    return rows


def _text_snippets(rows: list[tuple], terms: list[str]) -> list[tuple]:
    return [(r[0], r[1], r[2], snippet_from_text(r[3:6], terms), *r[6:]) for r in rows]


def _ranked(*tops: tuple[str, str], text_terms: list[str] | None = None) -> Query:
    """Best 20 by rank over one or more indexes (each index's own top 20, merged)."""
    sql = PAGE.format(top=" UNION ALL ".join(f"SELECT * FROM ({top})" for top, _ in tops),
                      snip=STORED if text_terms else "t.snip")
    params = [match for _, match in tops]

    def run(con: sqlite3.Connection) -> list[tuple]:
        rows = con.execute(sql, params).fetchall()
        return _with_context(con, _text_snippets(rows, text_terms) if text_terms else rows)

    return run


def _by_time(where: str, *params: str, terms: list[str]) -> Query:
    sql = BY_TIME.format(where=where)

    def run(con: sqlite3.Connection) -> list[tuple]:
        return _with_context(con, _text_snippets(con.execute(sql, params).fetchall(), terms))

    return run


# The floor does what the contract asks of this layout, in the fewest statements: a Latin term
# is looked up in the word index and, for rows holding CJK, in the bigram index.
FLOOR = {
    "word": _ranked((WORD_TOP, "docker AND deployment"), (BIGRAM_TOP, "docker AND deployment")),
    "phrase": _ranked((WORD_TOP, '"docker deployment"'), (BIGRAM_TOP, '"docker deployment"')),
    "prefix": _ranked((WORD_TOP, "deploy*"), (BIGRAM_TOP, "deploy*")),
    "substring": _ranked((TRIGRAM_TOP, '"数据库迁移"')),
    "cjk2": _ranked((BIGRAM_TOP, 'text : "通信"'), text_terms=["通信"]),
    "mixed": _by_time(
        "(m.id IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?) "
        "OR m.id IN (SELECT rowid FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ?)) "
        "AND m.id IN (SELECT rowid FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ?)",
        "docker", "docker", 'text : "部署"', terms=["docker", "部署"]),
}
# v11: the inline word index for Latin, the inline trigram for CJK of 3+ characters, and a LIKE
# over every message otherwise (its fallback OR-ed terms; here they are AND-ed, as required).
_LIKE3 = "(m.content LIKE ? OR m.tool_name LIKE ? OR m.tool_calls LIKE ?)"
INLINE = {
    "word": _ranked((WORD_TOP, "docker deployment")),
    "phrase": _ranked((WORD_TOP, '"docker deployment"')),
    "prefix": _ranked((WORD_TOP, "deploy*")),
    "substring": _ranked((TRIGRAM_TOP, '"数据库迁移"')),
    "cjk2": _by_time(_LIKE3, *["%通信%"] * 3, terms=["通信"]),
    "mixed": _by_time(f"{_LIKE3} AND {_LIKE3}", *(["%docker%"] * 3 + ["%部署%"] * 3),
                      terms=["docker", "部署"]),
}


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

    def run() -> list[dict]:
        with reading(engine) as conn:
            return search_messages(conn, QUERIES[kind])

    assert benchmark(run)


def _snapshot(query: Query, con: sqlite3.Connection) -> list[tuple]:
    # Several statements make one answer only when they read one snapshot, as the library does.
    con.execute("BEGIN")
    try:
        return query(con)
    finally:
        con.execute("COMMIT")


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_floor(benchmark, raw, kind: str) -> None:
    benchmark.group = f"query:{kind}"
    benchmark.extra_info.update(kind=kind, layout="floor")
    con = raw("head")
    assert benchmark(_snapshot, FLOOR[kind], con)


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
