"""SQLite's statements for a message search (docs/search.md): fixed FTS5 and LIKE fragments,
and the functions that compose one query's statements from them. Nothing here runs a statement;
``search.statements`` plans, runs and pages.

Values are bound, never spliced. The select lists of the page and top statements are made from
``PAGE_COLUMNS`` and ``TOP_COLUMNS``, and callers read rows through ``page_columns`` and
``top_columns``: a column is read by its name, wherever it sits in the statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from hermes_store.content import marker_sql
from hermes_store.db.catalog import SearchLayout
from hermes_store.search import language
from hermes_store.search.language import And, Node, Not, Term

CONTEXT_CHARS = 200


def _scored(template: str, index: str) -> tuple[str, str]:
    """A hit part without and with its bm25 score, indexed by ``scored``: a term's id set needs
    no score, and computing bm25 for thousands of hits was most of that set's cost."""
    return template.format(score="0.0"), template.format(score=f"bm25({index})")


# Parts of a hit list: each selects (id, rank, origin). ``origin`` says where the snippet comes
# from: an FTS5 snippet of the word or trigram index, or the stored text.
_WORD_MATCH = """
SELECT f.rowid, {score}, 'word' FROM messages_fts AS f
WHERE messages_fts MATCH ?"""
_WORD_HITS = _scored(_WORD_MATCH, "messages_fts")
_WORD_HITS_SPLIT = _scored(_WORD_MATCH + """
  AND NOT EXISTS (SELECT 1 FROM messages_cjk AS c WHERE c.id = f.rowid)""", "messages_fts")
_BIGRAM_HITS = _scored("""
SELECT rowid, {score}, 'text' FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ?""",
                       "messages_fts_cjk")
_TRIGRAM_HITS = _scored("""
SELECT rowid, {score}, 'trigram' FROM messages_fts_trigram
WHERE messages_fts_trigram MATCH ?""", "messages_fts_trigram")
_RETIRED_WORD_HITS = _scored("""
SELECT rowid, {score}, 'text' FROM messages_fts_old
WHERE messages_fts_old MATCH ? AND rowid > ? AND rowid <= ?""", "messages_fts_old")
_RETIRED_TRIGRAM_HITS = _scored("""
SELECT o.rowid, {score}, 'text' FROM messages_fts_trigram_old AS o
WHERE messages_fts_trigram_old MATCH ? AND o.rowid > ? AND o.rowid <= ?
  AND EXISTS (SELECT 1 FROM messages_search_scope AS sc WHERE sc.id = o.rowid)""",
                                 "messages_fts_trigram_old")
# CROSS JOIN keeps the (normally empty) pending list as the outer loop.
_PENDING_LIKE_HITS = """
SELECT sc.id, 0.0, 'text' FROM messages_cjk_pending AS p
CROSS JOIN messages_search_scope AS sc ON sc.id = p.id WHERE {like}"""
_WINDOW_SCOPE_LIKE_HITS = """
SELECT sc.id, 0.0, 'text' FROM messages_search_scope AS sc
WHERE sc.id > ? AND sc.id <= ? AND {like}"""
_WINDOW_LIKE_HITS = """
SELECT m.id, 0.0, 'text' FROM messages AS m WHERE m.id > ? AND m.id <= ? AND {like}"""
_LIKE_HITS = "SELECT m.id, 0.0, 'text' FROM messages AS m WHERE {like}"
# With a source filter the LIKE route walks only those sessions' messages (both are indexed).
_LIKE_HITS_IN_SOURCES = """
SELECT m.id, 0.0, 'text' FROM sessions AS s JOIN messages AS m ON m.session_id = s.id
WHERE s.source IN (SELECT value FROM json_each(?)) AND {like}"""
_ID_LIST_HITS = "SELECT value, 0.0, 'text' FROM json_each(?)"
_CANDIDATE_HITS = """
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(?)"""
# The top of one index by rank, snippets made while FTS5's cursor is on the row (``rank`` in
# ORDER BY lets FTS5 sort internally and stop at the LIMIT). Columns: ``TOP_COLUMNS``.
TOP_COLUMNS = ("id", "rank", "origin", "snippet")
_TOP = {
    "word": """SELECT rowid AS id, rank, 'fts' AS origin,
  snippet(messages_fts, -1, '>>>', '<<<', '...', 40) AS snippet
FROM messages_fts WHERE messages_fts MATCH ?{split} ORDER BY rank LIMIT ?""",
    "trigram": """SELECT rowid AS id, rank, 'fts' AS origin,
  snippet(messages_fts_trigram, -1, '>>>', '<<<', '...', 40) AS snippet
FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ? ORDER BY rank LIMIT ?""",
    "bigram": """SELECT rowid AS id, rank, 'text' AS origin, NULL AS snippet FROM messages_fts_cjk
WHERE messages_fts_cjk MATCH ? ORDER BY rank LIMIT ?""",
}
# A bigram-only query has no FTS5 snippet to collect on the way, so its top rows are a CTE of
# the page statement itself; ``tie_cut`` says the cut fell inside a group of equal ranks (the
# page is then run again with a deeper cut, as ``search.statements`` does for the other
# routes).
_BIGRAM_TOP_CTE = """top(id, rank) AS MATERIALIZED (
  SELECT rowid, rank FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ? ORDER BY rank LIMIT ?),
"""
_TOP_HITS = "SELECT id, rank, 'text' FROM top"
_TIE_CUT = """(SELECT count(*) = ?
     AND coalesce(max(rank) = (SELECT rank FROM top{shown} ORDER BY rank LIMIT 1 OFFSET ?), 1)
   FROM top)"""
# A rewound row (active = 0, compacted = 0) is hidden from default searches
# (docs/v21.md#parameters). The test probes idx_messages_session_active with the row's early
# columns, so a long message's overflow pages are never walked to reach ``active``.
_REWOUND = """EXISTS (SELECT 1 FROM messages AS rw WHERE rw.session_id = {t}.session_id
   AND rw.active = 0 AND rw.timestamp IS {t}.timestamp AND +rw.id = {t}.id AND rw.compacted = 0)"""
_SHOWN_HITS = "\n  JOIN messages AS m ON m.id = h.id WHERE NOT " + _REWOUND.format(t="m")
_SHOWN_TOP = (" WHERE NOT EXISTS (SELECT 1 FROM messages AS tm WHERE tm.id = top.id AND "
              + _REWOUND.format(t="tm") + ")")
_HIDDEN_OF = ("SELECT m.id FROM messages AS m WHERE m.id IN (SELECT value FROM json_each(?)) "
              "AND " + _REWOUND.format(t="m"))
_SPLIT = " AND NOT EXISTS (SELECT 1 FROM messages_cjk AS c WHERE c.id = messages_fts.rowid)"
_LITERAL_CHECK = """
SELECT id FROM messages WHERE id IN (SELECT value FROM json_each(?))
  AND (content LIKE ? ESCAPE '\\' OR tool_name LIKE ? ESCAPE '\\') IS TRUE"""

# Only the ids of a term's hits travel back to Python (every text value costs a decode).
_IDS_OF = "WITH h(id, rank, origin) AS ({hits}) SELECT id FROM h"

_ALL_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")
_SCOPE_COLUMNS = ("sc.text", "sc.tool_name")


# The page statement's columns, in select order (name -> expression). ``content`` and
# ``tool_calls`` only where the snippet is made from the stored text; the neighbours' text is cut
# in SQL (``_CONTEXT_TEXT``, filled in per statement).
_PAGE_OUTPUT = {
    "id": "page.id", "session_id": "page.session_id", "role": "page.role",
    "timestamp": "page.timestamp", "tool_name": "page.tool_name", "source": "page.source",
    "model": "page.model", "started_at": "page.started_at", "best": "page.best",
    "origin": "page.origin", "fts_snippet": "{snippet}",
    "content": "CASE WHEN page.origin = 'text' THEN m.content END",
    "tool_calls": "CASE WHEN page.origin = 'text' THEN m.tool_calls END",
    "ctx_self": "{ctx_self}",
    "prev_id": "p.id", "prev_role": "p.role", "prev_text": "{ctx_p}",
    "next_id": "n.id", "next_role": "n.role", "next_text": "{ctx_n}",
    "tie_cut": "{tie_cut}",
}
PAGE_COLUMNS = tuple(_PAGE_OUTPUT)
_PAGE_SELECT = ",\n  ".join(f"{expr} AS {name}" for name, expr in _PAGE_OUTPUT.items())


def page_columns(*names: str) -> Callable[[Sequence[Any]], Any]:
    """A reader of the named columns of a page row: their values in the order asked (the value
    itself for one name). Rows stay plain tuples: a named tuple per row cost as much as all the
    other Python work of a page."""
    return itemgetter(*(PAGE_COLUMNS.index(name) for name in names))


def top_columns(*names: str) -> Callable[[Sequence[Any]], Any]:
    """A reader of the named columns of a ``_TOP`` row, as :func:`page_columns`."""
    return itemgetter(*(TOP_COLUMNS.index(name) for name in names))


# One statement for the page: hits are merged, filtered, ordered and cut, and only then are
# snippets (FTS5's, for index hits), stored text (for the others) and neighbours looked up, for
# the page's rows alone. Row values let each neighbour be one seek in idx_messages_session.
# The select list is ``PAGE_COLUMNS``, each named.
_PAGE = """
WITH {top}hits(id, rank, origin) AS MATERIALIZED ({hits}),
matched AS MATERIALIZED (
  SELECT h.id AS id, min(h.rank) AS best, max(h.origin) AS origin FROM hits AS h{filters}
  GROUP BY h.id),
page AS (
  SELECT m.id AS id, m.session_id AS session_id, m.role AS role, m.timestamp AS timestamp,
         m.tool_name AS tool_name, s.source AS source, s.model AS model,
         s.started_at AS started_at, matched.best AS best, matched.origin AS origin
  FROM matched JOIN messages AS m ON m.id = matched.id
  LEFT JOIN sessions AS s ON s.id = m.session_id{cut}
  ORDER BY {inner_order}
  LIMIT ? OFFSET ?)
SELECT """ + _PAGE_SELECT + """
FROM page JOIN messages AS m ON m.id = page.id
LEFT JOIN messages AS p ON p.id = (
  SELECT b.id FROM messages AS b WHERE b.session_id = m.session_id
     AND (b.timestamp, b.id) < (m.timestamp, m.id)
   ORDER BY b.timestamp DESC, b.id DESC LIMIT 1)
LEFT JOIN messages AS n ON n.id = (
  SELECT a.id FROM messages AS a WHERE a.session_id = m.session_id
     AND (a.timestamp, a.id) > (m.timestamp, m.id)
   ORDER BY a.timestamp ASC, a.id ASC LIMIT 1)
ORDER BY {outer_order}"""
# Filters read only columns stored before ``content`` (session_id, role), so checking them
# never walks a long message's overflow pages.
_FILTERS = """
  JOIN messages AS m ON m.id = h.id JOIN sessions AS s ON s.id = m.session_id
  WHERE (? IS NULL OR s.source IN (SELECT value FROM json_each(?)))
    AND (? IS NULL OR s.source NOT IN (SELECT value FROM json_each(?)))
    AND (? IS NULL OR m.role IN (SELECT value FROM json_each(?)))"""
# Ranked pages read message rows only for the best ``offset + limit`` hits (ties included, so
# the timestamp tie-break stays exact): a common word's thousands of hits are never joined.
_RANK_CUT = """
  WHERE matched.best <= COALESCE(
    (SELECT best FROM matched ORDER BY best LIMIT 1 OFFSET ?), matched.best)"""
_ORDERS = {
    "rank": ("matched.best, m.timestamp DESC, m.id DESC",
             "page.best, page.timestamp DESC, page.id DESC"),
    "newest": ("m.timestamp DESC, m.id DESC", "page.timestamp DESC, page.id DESC"),
    "oldest": ("m.timestamp ASC, m.id ASC", "page.timestamp ASC, page.id ASC"),
}
_SNIPPET_CASES = {
    "word": """WHEN 'word' THEN (SELECT snippet(messages_fts, -1, '>>>', '<<<', '...', 40)
    FROM messages_fts WHERE messages_fts MATCH ? AND rowid = page.id)""",
    "trigram": """WHEN 'trigram' THEN (
    SELECT snippet(messages_fts_trigram, -1, '>>>', '<<<', '...', 40)
    FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ? AND rowid = page.id)""",
}
# Context text: multimodal content is fetched whole (its text parts may sit anywhere), plain
# text is cut in SQL.
_CONTEXT_TEXT = (f"CASE WHEN {marker_sql('{t}.content')} "
                 f"THEN {{t}}.content ELSE substr({{t}}.content, 1, {CONTEXT_CHARS}) END")

_MATCH_ERRORS = ("fts5", "syntax error", "unterminated string", "no such column",
                 "malformed match")


def is_match_error(err: BaseException) -> bool:
    """True when SQLite refused a MATCH expression (as opposed to any other failure)."""
    text = str(getattr(err, "orig", err)).lower()
    return any(marker in text for marker in _MATCH_ERRORS)


@dataclass
class Sql:
    """SQL text with its positional parameters, composed from fixed fragments only."""

    text: str
    params: list[Any]
    # psycopg's ``prepare``: None lets it prepare a statement run often (server-side, with a
    # generic plan after a few runs), False never (planned for its values every time).
    prepare: bool | None = None

    @staticmethod
    def union(parts: Sequence[Sql]) -> Sql:
        return Sql(" UNION ALL ".join(p.text for p in parts), [x for p in parts for x in p.params])


# --------------------------------------------------------------------------------- rendering


def _render(tree: Node, leaf: Callable[[Term], str]) -> str:
    """FTS5 text for ``tree``, explicitly parenthesized (the shape of ``language.render_match``)."""
    if isinstance(tree, Term):
        return leaf(tree)

    def sub(node: Node) -> str:
        text = _render(node, leaf)
        return text if isinstance(node, Term) else f"({text})"

    if isinstance(tree, Not):
        return f"{sub(tree.left)} NOT {sub(tree.right)}"
    joiner = " AND " if isinstance(tree, And) else " OR "
    return joiner.join(sub(child) for child in tree.children)


def _bigram_leaf(term: Term) -> str:
    # CJK pieces live in the ``text`` column only; ``calls`` holds raw tool-call JSON, where a
    # Latin term must be found (as the word index would) but CJK pieces must not.
    if term.is_cjk:
        return "text : " + term.bigram_match()
    return term.bigram_match()


def bigram_match(tree: Node) -> str:
    """The MATCH text of ``tree`` for the bigram index."""
    return _render(tree, _bigram_leaf)


def _like(tree: Node, columns: Sequence[str]) -> tuple[str, list[str]]:
    # A bare ``col LIKE ?`` in WHERE makes SQLite re-prepare the statement at every execution
    # (the bound pattern might allow the LIKE index optimization, useless for our "%…%"
    # patterns); behind IS TRUE the filter is the same and the prepared statement is reused.
    like, params = language.render_like(tree, columns)
    return f"({like}) IS TRUE", params


def _like_part(template: str, tree: Node, columns: Sequence[str],
               leading: Sequence[Any] = ()) -> Sql:
    like, params = _like(tree, columns)
    return Sql(template.format(like=like), [*leading, *params])


# --------------------------------------------------------------------------------- routes


def _has_not(tree: Node) -> bool:
    if isinstance(tree, Term):
        return False
    if isinstance(tree, Not):
        return True
    return any(_has_not(child) for child in tree.children)


def _word_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Sql]:
    parts: list[Sql] = []
    if layout.word:
        match = language.render_match(tree, "word")
        if layout.bigram:
            # On the rows it holds, the bigram index finds every Latin term the word index
            # finds (and Latin runs glued to CJK too). Without NOT the expression is monotone,
            # so the union of both equals the row split and costs no per-hit exclusion.
            word = _WORD_HITS_SPLIT if _has_not(tree) else _WORD_HITS
            parts.append(Sql(word[scored], [match]))
            parts.append(Sql(_BIGRAM_HITS[scored], [bigram_match(tree)]))
        else:
            parts.append(Sql(_WORD_HITS[scored], [match]))
    else:
        parts.append(_like_part(_LIKE_HITS, tree, _ALL_COLUMNS))
        return parts
    if layout.window:
        if layout.retired_word:
            parts.append(Sql(_RETIRED_WORD_HITS[scored],
                             [language.render_match(tree, "word"), *layout.window]))
        else:
            parts.append(_like_part(_WINDOW_LIKE_HITS, tree, _ALL_COLUMNS, layout.window))
    return parts


def _trigram_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Sql]:
    parts = [Sql(_TRIGRAM_HITS[scored], [language.render_match(tree, "trigram")])]
    if layout.window:
        if layout.retired_trigram:
            parts.append(Sql(_RETIRED_TRIGRAM_HITS[scored],
                             [language.render_match(tree, "trigram"), *layout.window]))
        else:
            parts.append(_like_part(_WINDOW_SCOPE_LIKE_HITS, tree, _SCOPE_COLUMNS, layout.window))
    return parts


def _bigram_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Sql]:
    parts = [Sql(_BIGRAM_HITS[scored], [bigram_match(tree)]),
             _like_part(_PENDING_LIKE_HITS, tree, _SCOPE_COLUMNS)]
    if layout.window:
        parts.append(_like_part(_WINDOW_SCOPE_LIKE_HITS, tree, _SCOPE_COLUMNS, layout.window))
    return parts


def route_hits(route: str, tree: Node, layout: SearchLayout, sources: list[str] | None = None,
               *, scored: bool = True) -> Sql:
    """Every hit of ``tree`` on ``route`` as ``(id, rank, origin)`` rows; ``scored=False`` ranks
    them all 0.0 (for a term's id set, where the score is never read)."""
    if route == "word":
        return Sql.union(_word_parts(tree, layout, scored))
    if route == "trigram":
        return Sql.union(_trigram_parts(tree, layout, scored))
    if route == "bigram":
        return Sql.union(_bigram_parts(tree, layout, scored))
    if sources:
        return _like_part(_LIKE_HITS_IN_SOURCES, tree, _ALL_COLUMNS, [json.dumps(sources)])
    return _like_part(_LIKE_HITS, tree, _ALL_COLUMNS)


def ids_of(hits: Sql) -> Sql:
    """Only the ids of ``hits`` (every text value costs a decode on its way back)."""
    return Sql(_IDS_OF.format(hits=hits.text), hits.params)


def literal_check(ids: set[int], pattern: str) -> Sql:
    """Those of ``ids`` whose stored text really holds ``pattern`` (a LIKE pattern)."""
    return Sql(_LITERAL_CHECK, [json.dumps(sorted(ids)), pattern, pattern])


def hidden_of(ids: Sequence[int]) -> Sql:
    """Those of ``ids`` that are rewound (hidden from a default search), as ``(id,)`` rows."""
    return Sql(_HIDDEN_OF, [json.dumps(list(ids))])


def bigram_top(match: str, fetch: int) -> Sql:
    """The best ``fetch`` rows of the bigram index for ``match`` (columns ``TOP_COLUMNS``)."""
    return Sql(_TOP["bigram"], [match, fetch])


def id_list_hits(ids: set[int]) -> Sql:
    return Sql(_ID_LIST_HITS, [json.dumps(sorted(ids))])


def candidate_hits(best: dict[int, tuple[float, str]], extra: Sequence[Sql]) -> Sql:
    """Hits already ranked in Python (``{id: (rank, origin)}``), plus the ``extra`` parts."""
    triples = [[row_id, rank, origin] for row_id, (rank, origin) in best.items()]
    return Sql.union([Sql(_CANDIDATE_HITS, [json.dumps(triples)]), *extra])


def top_hits(extra: Sequence[Sql]) -> Sql:
    """The rows of the page statement's own ``top`` CTE, plus the ``extra`` parts."""
    return Sql.union([Sql(_TOP_HITS, []), *extra])


def top_parts(route: str, tree: Node,
              layout: SearchLayout) -> tuple[list[Sql], list[Sql]] | None:
    """Ranked statements of a single-route query (each cut to its best rows by a last bound
    LIMIT, columns ``TOP_COLUMNS``) and the bounded parts that join them unranked; None when
    the route has no such shortcut."""
    if layout.window is not None:
        return None
    if route == "trigram" and layout.trigram:
        return [Sql(_TOP["trigram"], [language.render_match(tree, "trigram")])], []
    if route == "word" and layout.word:
        word = _TOP["word"].format(split=_SPLIT if layout.bigram and _has_not(tree) else "")
        parts = [Sql(word, [language.render_match(tree, "word")])]
        if layout.bigram:
            parts.append(Sql(_TOP["bigram"], [bigram_match(tree)]))
        return parts, []
    if route == "bigram" and layout.bigram:
        return ([Sql(_TOP["bigram"], [bigram_match(tree)])],
                [_like_part(_PENDING_LIKE_HITS, tree, _SCOPE_COLUMNS)])
    return None


# --------------------------------------------------------------------------------- the page


@dataclass(frozen=True)
class Filters:
    """The filters every route shares; ``sources=None`` means any source."""

    sources: list[str] | None = None
    excluded: list[str] | None = None
    roles: list[str] | None = None

    @property
    def any(self) -> bool:
        return self.sources is not None or bool(self.excluded) or bool(self.roles)


def page_statement(hits: Sql, tree: Node, layout: SearchLayout, order: str, filters: Filters,
                   limit: int, offset: int, top: tuple[str, int] | None = None,
                   hide: bool = False) -> Sql:
    """The page of ``hits`` in ``PAGE_COLUMNS``; ``top`` (a bigram MATCH and how deep to
    cut it) makes the hits that index's best rows, with a ``tie_cut`` flag (``_BIGRAM_TOP_CTE``);
    ``hide`` drops rewound rows (``_REWOUND``)."""
    params: list[Any] = [*top] if top else []
    params += hits.params
    where = ""
    if filters.any:
        where = _FILTERS
        for value in (filters.sources, filters.excluded or None, filters.roles or None):
            encoded = None if value is None else json.dumps(value)
            params += [encoded, encoded]
        if hide:
            where += "\n    AND NOT " + _REWOUND.format(t="m")
    elif hide:
        where = _SHOWN_HITS
    cut = ""
    if order == "rank":
        cut = _RANK_CUT
        params.append(offset + limit - 1)
    params += [limit, offset]
    # Snippet subqueries only for indexes this store has (a missing table fails to prepare).
    present = {"word": layout.word, "trigram": layout.trigram}
    cases = [name for name in _SNIPPET_CASES if present[name]]
    snippet = ("CASE page.origin " + " ".join(_SNIPPET_CASES[c] for c in cases) + " END"
               if cases else "NULL")
    params += [language.render_match(tree, c) for c in cases]  # type: ignore[arg-type]
    if top:
        params += [top[1], offset + limit - 1]
    inner, outer = _ORDERS[order]
    sql = _PAGE.format(top=_BIGRAM_TOP_CTE if top else "", hits=hits.text, filters=where,
                       cut=cut, inner_order=inner, outer_order=outer, snippet=snippet,
                       tie_cut=(_TIE_CUT.format(shown=_SHOWN_TOP if hide else "") if top
                                else "0"),
                       ctx_self=_CONTEXT_TEXT.format(t="m"), ctx_p=_CONTEXT_TEXT.format(t="p"),
                       ctx_n=_CONTEXT_TEXT.format(t="n"))
    return Sql(sql, params)
