"""PostgreSQL's statements for a message search (docs/search.md#postgresql): the
same routes, hit lists and page as SQLite's (``search.sqlite``), over revision 0018's indexes
(the word column's text split at punctuation since revision 0020).

* word route: ``messages.hs_search_words @@ to_tsquery('hs_search', …)`` with every term cut
  at unicode61's separators, as the column's text was (``hs_word_text``, revision 0020), and
  its pieces quoted lexemes in ``<->`` steps: ``chat-send`` is ``('chat' <-> 'send')``,
  ``"Cargo.to"*`` is ``('Cargo' <-> 'to':*)``, as FTS5 reads both as phrases.
  ``websearch_to_tsquery`` is not used: it loses prefixes, parentheses and NOT. Rows holding CJK
  are judged by the bigram column instead, as SQLite judges them by its bigram index;
* bigram route: ``messages.hs_search_cjk @@ '…'::tsquery``, a literal of the lexemes
  ``repo.bigrams`` writes (a CJK term asks for weight A, the text, as SQLite names the column);
* substring route: ``ILIKE`` on the expression the pg_trgm index covers, scoped as the trigram
  index is;
* LIKE route: ``ILIKE`` over the stored columns (SQLite's LIKE folds ASCII case alone, and so
  does ILIKE in the columns' "C" collation).

A route's hits are :class:`Part` s, each a condition on one ``messages`` row (and its session);
the parts of a route never share a row, so no hit list needs grouping. A page is one ``SELECT``
on ``messages`` with the parts' conditions ORed. Ranked (``-ts_rank_cd``, lower is better, as
bm25) it ranks the newest ``RANK_WINDOW`` hits (all of them when there are no more). In time
order (``newest``/``oldest``, and routes without a rank) it is ordered by ``(timestamp, id)``,
which revision 0021's index serves: the planner walks it and stops at the page for a common
term, or reads the GIN indexes and sorts the few hits of a rare one. That choice needs the
terms, so those statements are never prepared (``Sql.prepare``): a generic plan could walk the
whole table for a rare term. Neither are ranked pages (their window is found the same way) or
filtered ones.

Snippets are cut from the stored text (``search.snippets``). Values are bound, never spliced;
the select list of the page is ``shape.PAGE_COLUMNS``, so rows are read by the same getters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_store.db.catalog import SearchLayout
from hermes_store.db.derived import (
    PG_ASCII_SPACE_CLASS,
    PG_SCOPE_TEXT,
    PG_SEARCH_CONFIG,
    PG_SEPARATOR_CLASS,
)
from hermes_store.repo import bigrams
from hermes_store.search import language
from hermes_store.search.language import And, Node, Not, Term
from hermes_store.search.shape import (
    Filters,
    Sql,
    context_text,
    next_message,
    page_select,
    previous_message,
)

# A lexeme no text yields (tokens never hold control characters): a term without any lexeme.
_NOTHING = "'\x01'"
_WORD_QUERY = f"to_tsquery('{PG_SEARCH_CONFIG}', %s)"
_SCOPE_TEXT = PG_SCOPE_TEXT.format(t="m.")
# The same text, written so that no index matches it: the rows still waiting for their CJK
# tokens are found through their own partial index. Matched against the trigram index's
# expression, a generic plan chose that index for a 2-character term, which pg_trgm answers
# with every row (200 ms where the pending rows took 0.1).
_PENDING_TEXT = f"({_SCOPE_TEXT} || '')"
_ALL_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")

# Conditions of the parts of a hit list, on ``messages AS m`` (and ``sessions AS s``).
# Rows whose CJK tokens are written are judged by the bigram column alone.
_WORD_MATCH = f"m.hs_search_words @@ {_WORD_QUERY}"
# ``COALESCE(length(m.hs_search_cjk), 0)`` is the expression revision 0021 keeps statistics on, so
# the planner knows how many rows each side of the split holds. The bigram match repeats it
# (implied by any match): without it a store with no CJK text, whose bigram column has no lexeme
# statistics, gets PostgreSQL's default guess of 0.5% for every term, and a time-ordered search
# for a term found nowhere would walk the whole table.
_CJK_LENGTH = "COALESCE(length(m.hs_search_cjk), 0)"
_WORD_SPLIT = f" AND {_CJK_LENGTH} = 0"
_WORD_SCORE = f"-ts_rank_cd(m.hs_search_words, {_WORD_QUERY})::float8"
_BIGRAM_MATCH = f"m.hs_search_cjk @@ %s::tsquery AND {_CJK_LENGTH} > 0"
_BIGRAM_SCORE = "-ts_rank_cd(m.hs_search_cjk, %s::tsquery)::float8"
_TRIGRAM = "{like}"
# Rows another program wrote wait for ``bigrams.catch_up`` (a partial index holds their ids).
_PENDING_LIKE = "m.hs_search_cjk IS NULL AND {like}"
_IN_SOURCES = "s.source = ANY(%s::text[]) AND {like}"
_LITERAL_CHECK = "(m.content ILIKE %s ESCAPE '\\' OR m.tool_name ILIKE %s ESCAPE '\\') IS TRUE"

# A rewound row (active = 0, compacted = 0) is hidden from default searches
# (docs/v21.md#parameters).
_SHOWN = "NOT (m.active = 0 AND m.compacted = 0)"
_FILTERS = """
    AND (%s::text[] IS NULL OR s.source = ANY(%s::text[]))
    AND (%s::text[] IS NULL OR NOT (s.source = ANY(%s::text[])))
    AND (%s::text[] IS NULL OR m.role = ANY(%s::text[]))"""
_SESSION_JOIN = "\n  JOIN sessions AS s ON s.id = m.session_id"

# Pages: one SELECT on ``messages`` whatever the route, its parts' conditions ORed (so the
# planner ORs their indexes in one bitmap; a UNION ALL of the parts was planned as a Parallel
# Append, whose workers cost more to start than a search of a few milliseconds). A ranked page
# takes each row's rank from the first part whose condition it meets (parts never share a row).
_RANKED_PAGE = """
SELECT m.id AS id, {rank} AS best, m.timestamp AS ts FROM messages AS m{join}
WHERE ({cond}){where}
ORDER BY best, m.timestamp DESC, m.id DESC
LIMIT %s OFFSET %s"""
# Ranking reads each hit's tsvector, so a ranked page ranks a bounded window: the newest
# RANK_WINDOW hits (docs/search.md#top-k-on-postgresql). A query with fewer hits is ranked
# exactly as a whole; past the window, older hits follow the ranked ones newest first (best 1.0,
# after every rank, which is at most 0), so every page is a slice of one order. The window is
# found like a time-ordered page (the time index walked, or the few hits sorted) and carries
# the two columns a rank reads (``_rank``: the word and bigram matches and scores), so no row is
# read twice.
RANK_WINDOW = 1000
_WINDOW = """
SELECT m.id AS id, {rank} AS best, m.timestamp AS ts
FROM (SELECT m.id, m.timestamp, m.hs_search_words, m.hs_search_cjk FROM messages AS m{join}
      WHERE ({cond}){where}
      ORDER BY m.timestamp DESC, m.id DESC LIMIT {window}) AS m"""
_WINDOW_PAGE = _WINDOW + """
ORDER BY best, ts DESC, id DESC
LIMIT %s OFFSET %s"""
_PAST_WINDOW_PAGE = """
SELECT id, best, ts FROM (""" + _WINDOW + """
UNION ALL
(SELECT m.id, 1.0::float8, m.timestamp FROM messages AS m{join}
 WHERE ({cond}){where}
 ORDER BY m.timestamp DESC, m.id DESC OFFSET {window})) AS page
ORDER BY best, ts DESC, id DESC
LIMIT %s OFFSET %s"""
_TIMED_PAGE = """
SELECT m.id AS id, 0.0::float8 AS best, m.timestamp AS ts FROM messages AS m{join}
WHERE ({cond}){where}
ORDER BY m.timestamp {dir}, m.id {dir}
LIMIT %s OFFSET %s"""
_IDS = "SELECT m.id, 0.0::float8, 'text' FROM messages AS m{join}\nWHERE {cond}"
# The columns of a page's ids (``PageIds``), read back in this order by ``PageIds.rows_of``.
PAGE_ID_COLUMNS = ("id", "best", "ts")
_LISTED = ("SELECT * FROM unnest(%s::bigint[], %s::float8[], %s::float8[]) "
           f"AS listed({', '.join(PAGE_ID_COLUMNS)})")
_IDS_OF = "WITH h(id, rank, origin) AS ({hits}) SELECT id FROM h"

# The neighbours' context text; PostgreSQL stores multimodal content's leading NUL as U+FFFF '0'
# (db.dialect.NUL_ESCAPE).
_CONTEXT_TEXT = {t: context_text(t, f"left({t}.content, 7) = U&'\\FFFF' || '0json:'")
                 for t in ("p", "n")}
_PAGE_OUTPUT = {
    "id": "m.id", "session_id": "m.session_id", "role": "m.role",
    "timestamp": "m.timestamp", "tool_name": "m.tool_name", "source": "s.source",
    "model": "s.model", "started_at": "s.started_at", "best": "page.best",
    "origin": "'text'", "fts_snippet": "NULL",
    "content": "m.content", "tool_calls": "m.tool_calls",
    "ctx_self": "NULL",  # the hit's own context is cut from its content, already in the row
    "prev_id": "p.id", "prev_role": "p.role", "prev_text": _CONTEXT_TEXT["p"],
    "next_id": "n.id", "next_role": "n.role", "next_text": _CONTEXT_TEXT["n"],
}
_PAGE_SELECT = page_select(_PAGE_OUTPUT)
# The page's rows, then each one's stored text, session and neighbours (20 rows, not every hit).
_PAGE = """
WITH page AS MATERIALIZED ({page})
SELECT """ + _PAGE_SELECT + """
FROM page JOIN messages AS m ON m.id = page.id
LEFT JOIN sessions AS s ON s.id = m.session_id
LEFT JOIN LATERAL (
  """ + previous_message("b.id, b.role, b.content") + """) AS p ON true
LEFT JOIN LATERAL (
  """ + next_message("a.id, a.role, a.content") + """) AS n ON true
ORDER BY {order}"""
# On a distributed store (db/distribution.py) Citus joins ``messages`` and ``sessions`` only on
# their distribution column: each join of a hit to its session or neighbours also matches roots.
_ROOTED = {
    "ON s.id = m.session_id": "ON s.id = m.session_id AND s.root_session_id = m.root_session_id",
    "WHERE b.session_id = m.session_id":
        "WHERE b.session_id = m.session_id AND b.root_session_id = m.root_session_id",
    "WHERE a.session_id = m.session_id":
        "WHERE a.session_id = m.session_id AND a.root_session_id = m.root_session_id",
}
assert all(plain in _SESSION_JOIN + _PAGE for plain in _ROOTED)


def rooted(text: str) -> str:
    """A search statement in its distributed form."""
    for plain, root_too in _ROOTED.items():
        text = text.replace(plain, root_too)
    return text


_ORDERS = {
    "rank": "page.best, page.ts DESC, page.id DESC",
    "newest": "page.ts DESC, page.id DESC",
    "oldest": "page.ts ASC, page.id ASC",
}


@dataclass(frozen=True)
class Part:
    """One part of a hit list: a condition on ``messages AS m`` (reading ``sessions AS s`` when
    ``session``), and the rank of its rows (``None``: unranked, 0)."""

    cond: str
    params: list[Any]
    session: bool = False
    score: str | None = None
    score_params: list[Any] = field(default_factory=list)


@dataclass
class Hits(Sql):
    """A route's hit list: its :class:`Part` s (``text``/``params`` select them as
    ``(id, rank, origin)`` rows, unranked, as ``sqlite`` hits)."""

    parts: list[Part] = field(default_factory=list)

    @classmethod
    def of(cls, parts: list[Part]) -> Hits:
        text = _IDS.format(join=_SESSION_JOIN if any(p.session for p in parts) else "",
                           cond=_any_of(parts))
        return cls(text, [x for p in parts for x in p.params], parts=parts)

    @property
    def ranked(self) -> bool:
        return any(p.score is not None for p in self.parts)


def _hits_of(hits: Sql) -> Hits:
    """``hits`` as this module's hit list: another dialect's statement cannot be read here."""
    if not isinstance(hits, Hits):
        raise TypeError(f"PostgreSQL's search reads its own hit lists, not {type(hits).__name__}")
    return hits


def is_match_error(err: BaseException) -> bool:
    """Never: every tsquery is composed of quoted lexemes, so PostgreSQL has none to refuse."""
    return False


# --------------------------------------------------------------------------------- rendering


def _render(tree: Node, leaf: Callable[[Term], str], and_: str, or_: str, not_: str) -> str:
    if isinstance(tree, Term):
        return leaf(tree)
    parts = [f"({_render(child, leaf, and_, or_, not_)})" for child in tree.children]
    if isinstance(tree, Not):
        return not_.format(*parts)
    return (and_ if isinstance(tree, And) else or_).join(parts)


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


_SEPARATORS = re.compile(f"[{PG_ASCII_SPACE_CLASS}{PG_SEPARATOR_CLASS}]+")
# An operand ``to_tsquery`` finds no lexeme in: it drops it from the query, as FTS5 drops a
# phrase without tokens (a term of separators alone, such as New Tai Lue vowel signs).
_NO_LEXEME = "' '"


def word_pieces(text: str) -> list[str]:
    """``text`` cut where unicode61 (and so ``hs_word_text``) cuts it."""
    return [piece for piece in _SEPARATORS.split(text) if piece]


def _word_leaf(term: Term) -> str:
    # FTS5 reads a term of several tokens as a phrase, its star on the last token alone.
    pieces = [_quoted(piece) for piece in word_pieces(term.text)]
    if not pieces:
        return _NO_LEXEME
    if term.prefix:
        pieces[-1] += ":*"
    return pieces[0] if len(pieces) == 1 else "(" + " <-> ".join(pieces) + ")"


def word_query(tree: Node) -> str:
    """The text ``to_tsquery('hs_search', …)`` reads for ``tree``."""
    return _render(tree, _word_leaf, " & ", " | ", "{} & !{}")


def _bigram_leaf(term: Term) -> str:
    # The same pieces as the FTS5 form (Term.bigram_match): a phrase, maybe a prefix.
    match = term.bigram_match()
    prefix = match.endswith("*")
    body = match[:-1] if prefix else match
    if len(body) >= 2 and body[0] == body[-1] == '"':
        body = body[1:-1].replace('""', '"')
    phrase = bigrams.tsquery_phrase(body, prefix=prefix, weight="A" if term.is_cjk else "")
    return phrase or _NOTHING


def bigram_query(tree: Node) -> str:
    """The tsquery literal of ``tree`` over the bigram column."""
    return _render(tree, _bigram_leaf, " & ", " | ", "{} & !{}")


def like_condition(tree: Node, columns: Sequence[str]) -> tuple[str, list[str]]:
    # Bare, not "IS TRUE" (SQLite's re-prepare guard): a wrapped ILIKE cannot use pg_trgm.
    return language.render_like(tree, columns, compare="ILIKE %s", false="false")


def _like_part(template: str, tree: Node, columns: Sequence[str], leading: Sequence[Any] = (),
               session: bool = True) -> Part:
    like, params = like_condition(tree, columns)
    return Part(template.format(like=like), [*leading, *params], session=session)


# --------------------------------------------------------------------------------- routes


def _word_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Part]:
    if not layout.word:
        return [_like_part("{like}", tree, _ALL_COLUMNS, session=False)]
    query = word_query(tree)
    word = Part(_WORD_MATCH + (_WORD_SPLIT if layout.bigram else ""), [query],
                score=_WORD_SCORE if scored else None, score_params=[query] if scored else [])
    if not layout.bigram:
        return [word]
    literal = bigram_query(tree)
    cjk = Part(_BIGRAM_MATCH, [literal], score=_BIGRAM_SCORE if scored else None,
               score_params=[literal] if scored else [])
    return [word, cjk]


def _bigram_parts(tree: Node, scored: bool) -> list[Part]:
    literal = bigram_query(tree)
    return [Part(_BIGRAM_MATCH, [literal],
                 score=_BIGRAM_SCORE if scored else None,
                 score_params=[literal] if scored else []),
            _like_part(_PENDING_LIKE, tree, (_PENDING_TEXT,), session=False)]


def route_hits(route: str, tree: Node, layout: SearchLayout, sources: list[str] | None = None,
               *, scored: bool = True) -> Hits:
    """Every hit of ``tree`` on ``route`` (as ``sqlite``: its text selects their ids)."""
    if route == "word":
        return Hits.of(_word_parts(tree, layout, scored))
    if route == "trigram":
        return Hits.of([_like_part(_TRIGRAM, tree, (_SCOPE_TEXT,), session=False)])
    if route == "bigram":
        return Hits.of(_bigram_parts(tree, scored))
    if sources:
        return Hits.of([_like_part(_IN_SOURCES, tree, _ALL_COLUMNS, [list(sources)])])
    return Hits.of([_like_part("{like}", tree, _ALL_COLUMNS, session=False)])


def literal_checked(hits: Sql, pattern: str) -> Hits:
    """Those of ``hits`` whose stored text really holds ``pattern`` (a LIKE pattern), unranked."""
    hits = _hits_of(hits)
    check = f"({_any_of(hits.parts)}) AND {_LITERAL_CHECK}"
    return Hits.of([Part(check, [*hits.params, pattern, pattern],
                         session=any(p.session for p in hits.parts))])


def tree_hits(tree: Node, term_hits: Callable[[Term], Sql]) -> Hits:
    """The hits of ``tree`` combined from each term's hits on its own route, unranked: every
    route's hits are conditions on one ``messages`` row, so AND, OR and NOT of terms are those
    of their conditions, one statement the planner answers with one bitmap (or a walk of the
    time index for a page of common terms); no term's ids are gathered first."""

    def condition(node: Node) -> tuple[str, list[Any], bool]:
        if isinstance(node, Term):
            hits = _hits_of(term_hits(node))
            return (f"({_any_of(hits.parts)})", list(hits.params),
                    any(p.session for p in hits.parts))
        if isinstance(node, Not):
            (left, lp, ls), (right, rp, rs) = condition(node.left), condition(node.right)
            # A NULL (an ILIKE over a NULL tool name) must not hide the row: only TRUE excludes.
            return f"({left} AND NOT ({right} IS TRUE))", [*lp, *rp], ls or rs
        found = [condition(child) for child in node.children]
        glue = " AND " if isinstance(node, And) else " OR "
        return ("(" + glue.join(c for c, _, _ in found) + ")",
                [x for _, params, _ in found for x in params], any(x for _, _, x in found))

    cond, params, session = condition(tree)
    return Hits.of([Part(cond, params, session=session)])


# --------------------------------------------------------------------------------- the page


def _where(filters: Filters, hide: bool) -> tuple[str, list[Any]]:
    where, params = "", []
    if hide:
        where += f"\n    AND {_SHOWN}"
    if filters.any:
        where += _FILTERS
        for value in filters.values():
            params += [value, value]
    return where, params


def _any_of(parts: list[Part]) -> str:
    return " OR ".join(f"({p.cond})" for p in parts)


def _rank(parts: list[Part]) -> tuple[str, list[Any]]:
    """The rank of a row: the score of the first part it belongs to (the last one: the rest)."""
    *tested, last = parts
    if not tested:
        return last.score or "0.0::float8", list(last.score_params)
    text, params = "CASE", []
    for part in tested:
        text += f" WHEN {part.cond} THEN {part.score or '0.0::float8'}"
        params += [*part.params, *part.score_params]
    return f"{text} ELSE {last.score or '0.0::float8'} END", [*params, *last.score_params]


def _ranked_page(hits: Hits, filters: Filters, hide: bool, limit: int, offset: int) -> Sql:
    where, where_params = _where(filters, hide)
    rank, rank_params = _rank(hits.parts)
    session = filters.any or any(p.session for p in hits.parts)
    text = _RANKED_PAGE.format(rank=rank, join=_SESSION_JOIN if session else "",
                               cond=_any_of(hits.parts), where=where)
    return Sql(text, [*rank_params, *hits.params, *where_params, limit, offset])


def _window_page(hits: Hits, filters: Filters, hide: bool, limit: int, offset: int,
                 window: int) -> Sql:
    where, where_params = _where(filters, hide)
    rank, rank_params = _rank(hits.parts)
    session = filters.any or any(p.session for p in hits.parts)
    fields = {"rank": rank, "join": _SESSION_JOIN if session else "",
              "cond": _any_of(hits.parts), "where": where, "window": int(window)}
    inner = [*rank_params, *hits.params, *where_params]
    if offset + limit <= window:
        return Sql(_WINDOW_PAGE.format(**fields), [*inner, limit, offset])
    return Sql(_PAST_WINDOW_PAGE.format(**fields),
               [*inner, *hits.params, *where_params, limit, offset])


def _timed_page(hits: Hits, order: str, filters: Filters, hide: bool, limit: int,
                offset: int) -> Sql:
    where, where_params = _where(filters, hide)
    session = filters.any or any(p.session for p in hits.parts)
    text = _TIMED_PAGE.format(join=_SESSION_JOIN if session else "", cond=_any_of(hits.parts),
                              where=where, dir="ASC" if order == "oldest" else "DESC")
    return Sql(text, [*hits.params, *where_params, limit, offset])


def page_statement(hits: Sql, tree: Node, layout: SearchLayout, order: str, filters: Filters,
                   limit: int, offset: int, hide: bool = False) -> Sql:
    """The page of ``hits`` in ``shape.PAGE_COLUMNS``; ``hide`` drops rewound rows. Ranked by
    ``order == "rank"`` when a part has a rank, else in time order (unprepared: see above)."""
    hits = _hits_of(hits)
    ranked = order == "rank" and hits.ranked
    windowed = ranked and RANK_WINDOW > 0
    if windowed:
        page = _window_page(hits, filters, hide, limit, offset, RANK_WINDOW)
    elif ranked:
        page = _ranked_page(hits, filters, hide, limit, offset)
    else:
        page = _timed_page(hits, "oldest" if order == "oldest" else "newest", filters, hide,
                           limit, offset)
    kind = "rank" if ranked else ("oldest" if order == "oldest" else "newest")
    # Filters are "NULL or one of" conditions a generic plan cannot fold: it read every message
    # of the filtered sessions through their session index (40× the pages of the plan made for
    # the values), so a filtered page is planned for its values too.
    if ranked and not windowed and not filters.any:
        return Sql(_PAGE.format(page=page.text, order=_ORDERS[kind]), page.params)
    return PageIds(page.text, page.params, prepare=False, order=kind)


@dataclass
class PageIds(Sql):
    """A page planned for its values (never prepared) selects only ``(id, best, ts)``; its rows
    come from :meth:`rows_of`, one text whatever the query and so prepared: planning the reads
    of the stored text and the neighbours was three quarters of planning a whole page."""

    order: str = "newest"

    def rows_of(self, page: list[Any]) -> Sql:
        ids, bests, stamps = (list(column) for column in zip(*page, strict=True))
        return Sql(_PAGE.format(page=_LISTED, order=_ORDERS[self.order]), [ids, bests, stamps])
