"""The benchmark's queries, one per kind, in the three forms every comparison runs.

* ``QUERIES``: what the library is asked (``search_messages(conn, text, **filters)``).
* ``FLOOR``: the same work in hand-written sqlite3 on the head file: the MATCHes the contract
  needs on this layout (a Latin term in the word index and, for rows holding CJK, the bigram
  index), the join with sessions, the filters, the ordering, 20 rows with snippets and their
  neighbours. No sanitizer, no routing, no SQLAlchemy: the least any library could spend on
  this layout.
* ``INLINE``: what the agent's v11 store runs on its inline layout: its word index for Latin
  terms, its trigram index for CJK terms of 3+ characters, and a LIKE over every message for
  shorter CJK terms (v11 OR-ed the LIKE terms; here they are AND-ed, as the contract requires).

The pytest-benchmark suite (test_bench_search.py) and the scale benchmark (scale.py) both run
these, so their figures compare the same statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from hermes_store.search.snippets import snippet_from_text

# kind -> (query text, keyword filters of search_messages)
QUERIES: dict[str, tuple[str, dict[str, Any]]] = {
    "word": ("docker deployment", {}),
    "phrase": ('"docker deployment"', {}),
    "prefix": ("deploy*", {}),
    "substring": ("数据库迁移", {}),
    "cjk1": ("桂", {}),
    "cjk2": ("通信", {}),
    "mixed": ("docker 部署", {}),
    "filtered": ("docker deployment", {"source_filter": ["telegram", "discord"],
                                       "role_filter": ["user"]}),
    "newest": ("docker deployment", {"sort": "newest"}),
}
KINDS = tuple(QUERIES)

PAGE = """
SELECT m.id, m.session_id, m.role, {snip}, m.timestamp, m.tool_name, s.source, s.model,
       s.started_at
FROM ({top}) AS t JOIN messages m ON m.id = t.id JOIN sessions s ON s.id = m.session_id
{where}ORDER BY t.score LIMIT 20"""
# Hits without an FTS5 snippet get the contract's marked snippet from the stored text, as the
# library must make it: the floor does that work too.
STORED = "m.content, m.tool_name, m.tool_calls"
WORD_TOP = ("SELECT rowid AS id, rank AS score, snippet(hs_fts, -1, '>>>', '<<<', '...', 40) "
            "AS snip FROM hs_fts WHERE hs_fts MATCH ? ORDER BY rank LIMIT 20")
TRIGRAM_TOP = ("SELECT rowid AS id, rank AS score, snippet(hs_fts_trigram, -1, '>>>', '<<<', "
               "'...', 40) AS snip FROM hs_fts_trigram WHERE hs_fts_trigram MATCH ? "
               "ORDER BY rank LIMIT 20")
BIGRAM_TOP = ("SELECT rowid AS id, rank AS score, NULL AS snip FROM hs_fts_cjk "
              "WHERE hs_fts_cjk MATCH ? ORDER BY rank LIMIT 20")
# Filtered: every match is a candidate (the filter decides which 20 are best), and snippets are
# made for the page's rows only.
WORD_ALL = ("SELECT rowid AS id, rank AS score, 1 AS word FROM hs_fts "
            "WHERE hs_fts MATCH ?")
BIGRAM_ALL = ("SELECT rowid AS id, rank AS score, 0 AS word FROM hs_fts_cjk "
              "WHERE hs_fts_cjk MATCH ?")
FILTERED_PAGE = """
SELECT p.id, p.session_id, p.role,
  CASE WHEN p.word THEN (SELECT snippet(hs_fts, -1, '>>>', '<<<', '...', 40)
                         FROM hs_fts WHERE hs_fts MATCH ? AND rowid = p.id) END,
  p.content, p.tool_name, p.tool_calls, p.timestamp, p.source, p.model, p.started_at
FROM (SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.tool_calls, m.timestamp,
             s.source, s.model, s.started_at, t.word, t.score
      FROM ({top}) AS t JOIN messages m ON m.id = t.id JOIN sessions s ON s.id = m.session_id
      WHERE s.source IN ({sources}) AND m.role IN ({roles})
      ORDER BY t.score LIMIT 20) AS p"""
# v11's filtered search: one MATCH joined with messages and sessions, snippet in the select list.
INLINE_FILTERED = """
SELECT m.id, m.session_id, m.role, snippet(hs_fts, 0, '>>>', '<<<', '...', 40),
       m.timestamp, m.tool_name, s.source, s.model, s.started_at
FROM hs_fts JOIN messages m ON m.id = hs_fts.rowid
JOIN sessions s ON s.id = m.session_id
WHERE hs_fts MATCH ? AND s.source IN ({sources}) AND m.role IN ({roles})
ORDER BY rank LIMIT 20"""
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


# Newest first: every hit of the word index, joined and ordered by time.
WORD_NEWEST = """
SELECT m.id, m.session_id, m.role, snippet(hs_fts, -1, '>>>', '<<<', '...', 40), m.timestamp,
       m.tool_name, s.source, s.model, s.started_at
FROM hs_fts JOIN messages m ON m.id = hs_fts.rowid JOIN sessions s ON s.id = m.session_id
WHERE hs_fts MATCH ? ORDER BY m.timestamp DESC, m.id DESC LIMIT 20"""


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
                      snip=STORED if text_terms else "t.snip", where="")
    params = [match for _, match in tops]

    def run(con: sqlite3.Connection) -> list[tuple]:
        rows = con.execute(sql, params).fetchall()
        return _with_context(con, _text_snippets(rows, text_terms) if text_terms else rows)

    return run


def _marks(values: list[str]) -> str:
    return ",".join("?" * len(values))


def _filtered(match: str, terms: list[str], sources: list[str], roles: list[str],
              bigram: bool = True) -> Query:
    """The floor of a filtered ranked query: word (and bigram) matches, filtered, best 20."""
    top = f"{WORD_ALL} UNION ALL {BIGRAM_ALL}" if bigram else WORD_ALL
    sql = FILTERED_PAGE.format(top=top, sources=_marks(sources), roles=_marks(roles))
    params = [match, match, *([match] if bigram else []), *sources, *roles]

    def run(con: sqlite3.Connection) -> list[tuple]:
        out = []
        for row in con.execute(sql, params).fetchall():
            snippet = row[3] if row[3] is not None else snippet_from_text(row[4:7], terms)
            out.append((*row[:3], snippet, *row[7:]))
        return _with_context(con, out)

    return run


def _inline_filtered(match: str, sources: list[str], roles: list[str]) -> Query:
    sql = _v11(INLINE_FILTERED).format(sources=_marks(sources), roles=_marks(roles))
    params = [match, *sources, *roles]

    def run(con: sqlite3.Connection) -> list[tuple]:
        return _with_context(con, con.execute(sql, params).fetchall())

    return run


def _newest(match: str, v11: bool = False) -> Query:
    sql = _v11(WORD_NEWEST) if v11 else WORD_NEWEST

    def run(con: sqlite3.Connection) -> list[tuple]:
        return _with_context(con, con.execute(sql, (match,)).fetchall())

    return run


def _by_time(where: str, *params: str, terms: list[str]) -> Query:
    sql = BY_TIME.format(where=where)

    def run(con: sqlite3.Connection) -> list[tuple]:
        return _with_context(con, _text_snippets(con.execute(sql, params).fetchall(), terms))

    return run


_FILTERS = QUERIES["filtered"][1]
# The floor does what the contract asks of this layout, in the fewest statements: a Latin term
# is looked up in the word index and, for rows holding CJK, in the bigram index.
FLOOR: dict[str, Query] = {
    "word": _ranked((WORD_TOP, "docker AND deployment"), (BIGRAM_TOP, "docker AND deployment")),
    "phrase": _ranked((WORD_TOP, '"docker deployment"'), (BIGRAM_TOP, '"docker deployment"')),
    "prefix": _ranked((WORD_TOP, "deploy*"), (BIGRAM_TOP, "deploy*")),
    "substring": _ranked((TRIGRAM_TOP, '"数据库迁移"')),
    "cjk1": _ranked((BIGRAM_TOP, 'text : "桂"*'), text_terms=["桂"]),
    "cjk2": _ranked((BIGRAM_TOP, 'text : "通信"'), text_terms=["通信"]),
    "mixed": _by_time(
        "(m.id IN (SELECT rowid FROM hs_fts WHERE hs_fts MATCH ?) "
        "OR m.id IN (SELECT rowid FROM hs_fts_cjk WHERE hs_fts_cjk MATCH ?)) "
        "AND m.id IN (SELECT rowid FROM hs_fts_cjk WHERE hs_fts_cjk MATCH ?)",
        "docker", "docker", 'text : "部署"', terms=["docker", "部署"]),
    "filtered": _filtered("docker AND deployment", ["docker", "deployment"],
                          _FILTERS["source_filter"], _FILTERS["role_filter"]),
    "newest": _newest("docker AND deployment"),
}
# The floor on a store that records no Latin glued to CJK (revision 0025): a Latin term needs
# the word index alone (docs/search.md#the-row-split).
FLOOR_UNGLUED: dict[str, Query] = {
    **FLOOR,
    "word": _ranked((WORD_TOP, "docker AND deployment")),
    "phrase": _ranked((WORD_TOP, '"docker deployment"')),
    "prefix": _ranked((WORD_TOP, "deploy*")),
    "mixed": _by_time(
        "m.id IN (SELECT rowid FROM hs_fts WHERE hs_fts MATCH ?) "
        "AND m.id IN (SELECT rowid FROM hs_fts_cjk WHERE hs_fts_cjk MATCH ?)",
        "docker", 'text : "部署"', terms=["docker", "部署"]),
    "filtered": _filtered("docker AND deployment", ["docker", "deployment"],
                          _FILTERS["source_filter"], _FILTERS["role_filter"], bigram=False),
}


def floor_for(con: sqlite3.Connection) -> dict[str, Query]:
    """The floor queries for the store behind ``con``: both indexes for a Latin term only when
    a row of the bigram index may hold Latin glued to CJK."""
    row = con.execute("SELECT value FROM state_meta WHERE key = 'hs_cjk_glued_latin'").fetchone()
    return FLOOR_UNGLUED if row is not None and row[0] == "0" else FLOOR


_LIKE3 = "(m.content LIKE ? OR m.tool_name LIKE ? OR m.tool_calls LIKE ?)"


def _v11(sql: str) -> str:
    """The same statement on the agent's v11 layout, whose inline indexes keep its own names."""
    return sql.replace("hs_fts", "messages_fts")
INLINE: dict[str, Query] = {
    "word": _ranked((_v11(WORD_TOP), "docker deployment")),
    "phrase": _ranked((_v11(WORD_TOP), '"docker deployment"')),
    "prefix": _ranked((_v11(WORD_TOP), "deploy*")),
    "substring": _ranked((_v11(TRIGRAM_TOP), '"数据库迁移"')),
    "cjk1": _by_time(_LIKE3, *["%桂%"] * 3, terms=["桂"]),
    "cjk2": _by_time(_LIKE3, *["%通信%"] * 3, terms=["通信"]),
    "mixed": _by_time(f"{_LIKE3} AND {_LIKE3}", *(["%docker%"] * 3 + ["%部署%"] * 3),
                      terms=["docker", "部署"]),
    "filtered": _inline_filtered("docker deployment", _FILTERS["source_filter"],
                                 _FILTERS["role_filter"]),
    "newest": _newest("docker deployment", v11=True),
}


def in_snapshot(query: Query, con: sqlite3.Connection) -> list[tuple]:
    """Several statements make one answer only when they read one snapshot, as the library's
    do; ``con`` is an autocommit connection (``isolation_level=None``)."""
    con.execute("BEGIN")
    try:
        return query(con)
    finally:
        con.execute("COMMIT")
