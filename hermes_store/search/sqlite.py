"""SQLite's statements for a message search (docs/search.md): fixed FTS5 and LIKE fragments,
and the functions that compose one query's statements from them. Nothing here runs a statement;
``search.statements`` plans, runs and pages.

Values are bound, never spliced. The page statement selects ``shape.PAGE_COLUMNS``, and callers
read rows through ``shape.page_columns``: a column is read by its name, wherever it sits in the
statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from hermes_store.content import marker_sql
from hermes_store.db.catalog import SearchLayout
from hermes_store.db.sqlite_driver import is_fts5_query_error
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


def _scored(template: str) -> tuple[str, str]:
    """A hit part without and with its bm25 score, indexed by ``scored``: a term's id set needs
    no score, and computing bm25 for thousands of hits was most of that set's cost. The score is
    FTS5's ``rank`` column (bm25), so a read ordered by it can be FTS5's own sorted cursor."""
    return template.format(score="0.0"), template.format(score="rank")


# Parts of a hit list: each selects (id, rank, origin). ``origin`` says where the snippet comes
# from: an FTS5 snippet of the word or trigram index, or the stored text.
_WORD_MATCH = """
SELECT f.rowid, {score}, 'word' FROM hs_fts AS f
WHERE hs_fts MATCH ?"""
_WORD_HITS = _scored(_WORD_MATCH)
_WORD_HITS_SPLIT = _scored(_WORD_MATCH + """
  AND NOT EXISTS (SELECT 1 FROM hs_cjk AS c WHERE c.id = f.rowid)""")
_BIGRAM_MATCH = """
SELECT rowid, {score}, '{origin}' FROM hs_fts_cjk WHERE hs_fts_cjk MATCH ?"""
_BIGRAM_HITS = _scored(_BIGRAM_MATCH.replace("{origin}", "text"))
# On the word route (no NOT) a bigram hit may be a word hit too; the page asks the word index
# (``_RESOLVED``): a row either index finds gets FTS5's snippet whichever scored it better.
_BIGRAM_WORD_HITS = _scored(_BIGRAM_MATCH.replace("{origin}", "bigram"))
_TRIGRAM_HITS = _scored("""
SELECT rowid, {score}, 'trigram' FROM hs_fts_trigram
WHERE hs_fts_trigram MATCH ?""")
_RETIRED_WORD_HITS = _scored("""
SELECT rowid, {score}, 'text' FROM hs_fts_old
WHERE hs_fts_old MATCH ? AND rowid > ? AND rowid <= ?""")
_RETIRED_TRIGRAM_HITS = _scored("""
SELECT o.rowid, {score}, 'text' FROM hs_fts_trigram_old AS o
WHERE hs_fts_trigram_old MATCH ? AND o.rowid > ? AND o.rowid <= ?
  AND EXISTS (SELECT 1 FROM hs_search_scope AS sc WHERE sc.id = o.rowid)""")
# CROSS JOIN keeps the (normally empty) pending list as the outer loop.
_PENDING_LIKE_HITS = """
SELECT sc.id, 0.0, 'text' FROM hs_cjk_pending AS p
CROSS JOIN hs_search_scope AS sc ON sc.id = p.id WHERE {like}"""
_WINDOW_SCOPE_LIKE_HITS = """
SELECT sc.id, 0.0, 'text' FROM hs_search_scope AS sc
WHERE sc.id > ? AND sc.id <= ? AND {like}"""
# The text of the window's rows, multimodal parts included, as the word index will hold it.
_WINDOW_LIKE_HITS = """
SELECT t.id, 0.0, 'text' FROM hs_search_text AS t WHERE t.id > ? AND t.id <= ? AND {like}"""
_LIKE_HITS = "SELECT m.id, 0.0, 'text' FROM messages AS m WHERE {like}"
# With a source filter the LIKE route walks only those sessions' messages (both are indexed).
_LIKE_HITS_IN_SOURCES = """
SELECT m.id, 0.0, 'text' FROM sessions AS s JOIN messages AS m ON m.session_id = s.id
WHERE s.source IN (SELECT value FROM json_each(?)) AND {like}"""
# A rewound row (active = 0, compacted = 0) is hidden from default searches
# (docs/v21.md#parameters). The test probes idx_messages_session_active rather than read
# ``active`` from the row. ``timestamp``, the probe's key, is stored after ``content``: reading
# it walks a long message's overflow pages, so ranked pages test only the rows they may show.
_REWOUND = """EXISTS (SELECT 1 FROM messages AS rw WHERE rw.session_id = {t}.session_id
   AND rw.active = 0 AND rw.timestamp IS {t}.timestamp AND +rw.id = {t}.id AND rw.compacted = 0)"""
_SHOWN_HITS = "\n  JOIN messages AS m ON m.id = h.id WHERE NOT " + _REWOUND.format(t="m")
# A term whose "%" unicode61 dropped keeps only the rows whose stored text holds the literal.
_LITERAL_CHECK = """WITH lc(id, rank, origin) AS ({hits})
SELECT id, 0.0, 'text' FROM messages WHERE id IN (SELECT id FROM lc)
  AND (content LIKE ? ESCAPE '\\' OR tool_name LIKE ? ESCAPE '\\') IS TRUE"""

_ALL_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")
_SCOPE_COLUMNS = ("sc.text", "sc.tool_name")
_TEXT_COLUMNS = ("t.text", "t.tool_name", "t.tool_calls")


# The page statement's columns (``shape.PAGE_COLUMNS``) and their expressions. ``content`` and
# ``tool_calls`` only where the snippet is made from the stored text; the neighbours' text is cut
# in SQL (``_CONTEXT_TEXT``, filled in per statement).
_PAGE_OUTPUT = {
    "id": "page.id", "session_id": "m.session_id", "role": "m.role",
    "timestamp": "page.timestamp", "tool_name": "m.tool_name", "source": "s.source",
    "model": "s.model", "started_at": "s.started_at", "best": "page.best",
    "origin": "r.origin", "fts_snippet": "r.snippet",
    "content": "CASE WHEN r.origin = 'text' THEN m.content END",
    "tool_calls": "CASE WHEN r.origin = 'text' THEN m.tool_calls END",
    "ctx_self": "{ctx_self}",
    "prev_id": "p.id", "prev_role": "p.role", "prev_text": "{ctx_p}",
    "next_id": "n.id", "next_role": "n.role", "next_text": "{ctx_n}",
}
_PAGE_SELECT = page_select(_PAGE_OUTPUT)

# One statement for the page: hits are merged, filtered, ordered and cut (reading only what the
# order needs), and only then are the session, snippets (FTS5's, for index hits), stored text
# (for the others) and neighbours looked up, for the page's rows alone. Row values let each
# neighbour be one seek in idx_messages_session. The select list is ``PAGE_COLUMNS``, each
# named. ``{matched}`` is one row an id with its best rank and origin: ``_BY_TIME`` or
# ``_BY_RANK``.
_PAGE = """
WITH {matched},
page AS (
  SELECT m.id AS id, m.timestamp AS timestamp, matched.best AS best, matched.origin AS origin
  FROM matched JOIN messages AS m ON m.id = matched.id{cut}
  ORDER BY {inner_order}
  LIMIT ? OFFSET ?){snippets},
resolved(id, origin, snippet) AS MATERIALIZED (SELECT page.id, {origin}, {snippet} FROM page)
SELECT """ + _PAGE_SELECT + """
FROM page JOIN messages AS m ON m.id = page.id JOIN resolved AS r ON r.id = page.id
LEFT JOIN sessions AS s ON s.id = m.session_id
LEFT JOIN messages AS p ON p.id = (
  """ + previous_message("b.id") + """)
LEFT JOIN messages AS n ON n.id = (
  """ + next_message("a.id") + """)
ORDER BY {outer_order}"""
# Ordered by time every shown hit is a candidate: grouped, filtered, then sorted by the page.
_BY_TIME = """hits(id, rank, origin) AS MATERIALIZED ({hits}),
matched AS MATERIALIZED (
  SELECT h.id AS id, min(h.rank) AS best, max(h.origin) AS origin FROM hits AS h{filters}
  GROUP BY h.id)"""
# Ordered by rank, in one statement whatever the ties (docs/search.md#ranking). ``top`` keeps
# the best ``depth`` hits by bm25: unfiltered, SQLite's bounded sort of each index's hits (FTS5's
# own ``ORDER BY rank`` sorts every hit); filtered, FTS5's sorted cursors, read in order and
# checked row by row until ``depth`` rows pass (most hits are never joined). An id occurs at
# most ``width`` times (once per part of the hit list), so the best ``width * (offset + limit)``
# entries (up to the ``cut``) hold ``offset + limit`` distinct ids: the last row of the page is
# among them. Only those are checked for rewound rows (``shown``) and grouped, unless rewound
# rows left fewer than ``offset + limit`` ids up to the cut: then ``rest`` adds the other rows
# of ``top``. ``deep`` reads the hits again only when ``top`` may have cut a group of equal
# scores short (it is full and its last score is the cut's), or is full and rewound rows left
# too few (then every hit). Otherwise the LIMITs of ``rest`` and ``deep`` are 0 and they never
# run.
_BY_RANK = """hits(id, rank, origin) AS NOT MATERIALIZED ({hits}),
top(id, rank, origin) AS MATERIALIZED (
  SELECT h.id, h.rank, h.origin FROM hits AS h{stream}
  ORDER BY {order} LIMIT ?),
state(full, last, cut) AS MATERIALIZED (
  SELECT count(*) = ?, max(rank), (SELECT rank FROM top ORDER BY rank LIMIT 1 OFFSET ?)
  FROM top),
shown(id, rank, origin) AS MATERIALIZED (
  SELECT h.id, h.rank, h.origin FROM top AS h{shown}),
enough(ok) AS MATERIALIZED (SELECT {enough}),
rest(id, rank, origin) AS (
  SELECT h.id, h.rank, h.origin FROM top AS h{rest}
  LIMIT (SELECT CASE WHEN ok THEN 0 ELSE -1 END FROM enough)),
deep(id, rank, origin) AS (
  SELECT h.id, h.rank, h.origin FROM hits AS h{deep}
  LIMIT (SELECT CASE WHEN full AND (last = cut OR NOT ok) THEN -1 ELSE 0 END
         FROM state, enough)),
matched AS MATERIALIZED (
  SELECT id, min(rank) AS best, max(origin) AS origin
  FROM (SELECT * FROM shown UNION ALL SELECT * FROM rest UNION ALL SELECT * FROM deep)
  GROUP BY id)"""
_UP_TO_CUT = "h.rank <= COALESCE((SELECT cut FROM state), h.rank)"
_PAST_CUT = "h.rank > (SELECT cut FROM state)"
_DEEP_CUT = "h.rank <= COALESCE((SELECT cut FROM state, enough WHERE ok), h.rank)"
# Rewound rows in an unfiltered ``top``: enough remain when ``offset + limit`` ids up to the cut
# are shown.
_ENOUGH_SHOWN = "(SELECT count(DISTINCT id) >= ? FROM shown)"
# How deep ``top`` is, per entry the page needs: room for a group of equal scores (duplicate
# messages; 74 at the cut of a 2-character CJK term at 200k messages) costs a few percent more
# sort, a second read of the hits 100%.
_DEPTH, _SLACK = 3, 32
# Filters read only columns stored before ``content`` (session_id, role), so checking them
# never walks a long message's overflow pages.
_FILTER_JOIN = """
  JOIN messages AS m ON m.id = h.id JOIN sessions AS s ON s.id = m.session_id"""
_FILTER_TESTS = ("(? IS NULL OR s.source IN (SELECT value FROM json_each(?)))",
                 "(? IS NULL OR s.source NOT IN (SELECT value FROM json_each(?)))",
                 "(? IS NULL OR m.role IN (SELECT value FROM json_each(?)))")
_MESSAGE_JOIN = "\n  JOIN messages AS m ON m.id = h.id"
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
# FTS5 snippets of the page's index hits, made in one pass over the MATCH between the page's
# first and last rowids. Made by a MATCH on each row's rowid instead, FTS5 seeks every term in
# every segment of the index: that cost 0.15 ms a row for two words at 60k messages and 0.3 ms
# for a substring (a run of trigrams), several times the pass.
_SNIPPETS = """,
{index}_snippets(id, snippet) AS MATERIALIZED (
  SELECT rowid, snippet({table}, -1, '>>>', '<<<', '...', 40) FROM {table}
  WHERE {table} MATCH ?
    AND rowid BETWEEN (SELECT min(id) FROM page WHERE origin IN ({origins}))
                  AND (SELECT max(id) FROM page WHERE origin IN ({origins}))
    AND +rowid IN (SELECT id FROM page WHERE origin IN ({origins})))"""
# index -> (its table, the origins whose rows it may hold)
_SNIPPET_INDEXES = {"word": ("hs_fts", "'word', 'bigram'"),
                    "trigram": ("hs_fts_trigram", "'trigram'")}
_SNIPPET = "(SELECT snippet FROM {index}_snippets WHERE id = page.id)"
# A bigram hit of the word route is a word hit when the word index holds it too.
_RESOLVED = ("CASE page.origin WHEN 'bigram' THEN CASE WHEN EXISTS (SELECT 1 FROM word_snippets "
             "WHERE id = page.id) THEN 'word' ELSE 'text' END ELSE page.origin END")
# The context text of the hit (m) and of its neighbours (p, n).
_CONTEXT_TEXT = {t: context_text(t, marker_sql(f"{t}.content")) for t in ("m", "p", "n")}


def is_match_error(err: BaseException) -> bool:
    """True when FTS5 refused a MATCH expression: its syntax errors only. Anything else it says
    ("invalid fts5 file format", a page it cannot read) is a damaged index, never "no hits"."""
    return is_fts5_query_error(err)


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
        if layout.bigram and layout.glued:
            # On the rows it holds, the bigram index finds every Latin term the word index
            # finds (and Latin runs glued to CJK too). Without NOT the expression is monotone,
            # so the union of both equals the row split and costs no per-hit exclusion. While
            # no row holds Latin glued to CJK, both answer alike: the word index alone serves.
            split = _has_not(tree)
            word = _WORD_HITS_SPLIT if split else _WORD_HITS
            parts.append(Sql(word[scored], [match]))
            bigram = _BIGRAM_HITS if split else _BIGRAM_WORD_HITS
            parts.append(Sql(bigram[scored], [bigram_match(tree)], width=0 if split else 1))
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
            parts.append(_like_part(_WINDOW_LIKE_HITS, tree, _TEXT_COLUMNS, layout.window))
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


def _pending_part(tree: Node) -> Sql:
    # A row waits in hs_cjk_pending or is in the bigram index, never both.
    pending = _like_part(_PENDING_LIKE_HITS, tree, _SCOPE_COLUMNS)
    return Sql(pending.text, pending.params, width=0)


def _bigram_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Sql]:
    parts = [Sql(_BIGRAM_HITS[scored], [bigram_match(tree)]), _pending_part(tree)]
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


def literal_checked(hits: Sql, pattern: str) -> Sql:
    """Those of ``hits`` whose stored text really holds ``pattern`` (a LIKE pattern), unranked."""
    return Sql(_LITERAL_CHECK.format(hits=hits.text), [*hits.params, pattern, pattern])


def tree_hits(tree: Node, term_hits: Callable[[Term], Sql]) -> Sql:
    """The hits of ``tree`` combined from each term's hits (``term_hits``, on the term's own
    route) with FTS5's precedence, in SQL: ``id IN`` for AND, UNION ALL for OR, ``NOT IN`` for
    NOT, so no id set travels through Python. Unranked; an id may occur several times."""
    terms: list[Sql] = []
    names: dict[Term, str] = {}

    def ids(node: Node) -> str:
        if isinstance(node, Term):
            if node not in names:
                hits = term_hits(node)
                names[node] = f"t{len(names)}"
                terms.append(Sql(f"{names[node]}(id, rank, origin) AS ({hits.text})",
                                 hits.params, width=hits.width))
            return f"SELECT id FROM {names[node]}"
        if isinstance(node, Not):
            return f"SELECT id FROM ({ids(node.left)}) WHERE id NOT IN ({ids(node.right)})"
        first, *others = (ids(child) for child in node.children)
        if isinstance(node, And):
            # "+": SQLite would otherwise hand the IN list to FTS5 as rowids to look up, one
            # MATCH per id of the other term (thousands), instead of one pass over the doclist.
            return f"SELECT id FROM ({first}) WHERE " + " AND ".join(
                f"+id IN ({other})" for other in others)
        return " UNION ALL ".join(f"SELECT id FROM ({child})" for child in (first, *others))

    body = ids(tree)
    return Sql(f"WITH {', '.join(t.text for t in terms)}\nSELECT id, 0.0, 'text' FROM ({body})",
               [x for t in terms for x in t.params], width=sum(t.width for t in terms))


# --------------------------------------------------------------------------------- the page


def _where(tests: Sequence[str]) -> str:
    return "\n  WHERE " + "\n    AND ".join(tests) if tests else ""


def _by_time(hits: Sql, filters: Filters, hide: bool) -> tuple[str, list[Any]]:
    params = list(hits.params)
    where = ""
    if filters.any:
        tests = [*_FILTER_TESTS, *(["NOT " + _REWOUND.format(t="m")] if hide else [])]
        where = _FILTER_JOIN + _where(tests)
        params += filters.json_values()
    elif hide:
        where = _SHOWN_HITS
    return _BY_TIME.format(hits=hits.text, filters=where), params


def _by_rank(hits: Sql, filters: Filters, hide: bool, wanted: int) -> tuple[str, list[Any]]:
    entries = max(hits.width, 1) * wanted
    rewound = ["NOT " + _REWOUND.format(t="m")] if hide else []
    enough, enough_params = "1", []
    if filters.any:
        # Filters and the rewound test ride on the sorted read: every row of ``top`` is shown.
        # Each row read costs a join and most fail the filters: no deeper than needed.
        depth = entries + 16
        filter_params = filters.json_values()
        stream = _FILTER_JOIN + _where([*_FILTER_TESTS, *rewound])
        shown, rest = _where([_UP_TO_CUT]), _where([_PAST_CUT])
        deep = _FILTER_JOIN + _where([*_FILTER_TESTS, *rewound, _DEEP_CUT])
        order = "h.rank"
    else:
        # A deeper bounded sort costs next to nothing. The second key keeps the order from
        # FTS5 (its sort is of every hit), so each part's sort is SQLite's, bounded.
        depth = _DEPTH * entries + _SLACK
        filter_params = []
        stream = ""
        join = _MESSAGE_JOIN if hide else ""
        shown = join + _where([_UP_TO_CUT, *rewound])
        rest = join + _where([_PAST_CUT, *rewound])
        deep = join + _where([_DEEP_CUT, *rewound])
        order = "h.rank, h.id"
        if hide:
            enough, enough_params = _ENOUGH_SHOWN, [wanted]
    params = [*hits.params, *filter_params, depth, depth, entries - 1, *enough_params,
              *filter_params]
    return _BY_RANK.format(hits=hits.text, stream=stream, order=order, shown=shown,
                           enough=enough, rest=rest, deep=deep), params


def page_statement(hits: Sql, tree: Node, layout: SearchLayout, order: str, filters: Filters,
                   limit: int, offset: int, hide: bool = False) -> Sql:
    """The page of ``hits`` in ``PAGE_COLUMNS``, one statement whatever the order and the ties;
    ``hide`` drops rewound rows (``_REWOUND``)."""
    if order == "rank":
        matched, params = _by_rank(hits, filters, hide, offset + limit)
        cut = _RANK_CUT
        params.append(offset + limit - 1)
    else:
        matched, params = _by_time(hits, filters, hide)
        cut = ""
    params += [limit, offset]
    # Snippets only from indexes this store has (a missing table fails to prepare).
    present = [i for i, there in (("word", layout.word), ("trigram", layout.trigram)) if there]
    snippets = "".join(_SNIPPETS.format(index=i, table=_SNIPPET_INDEXES[i][0],
                                        origins=_SNIPPET_INDEXES[i][1]) for i in present)
    snippet = ("CASE page.origin " + " ".join(
        f"WHEN {origin} THEN {_SNIPPET.format(index=i)}"
        for i in present for origin in _SNIPPET_INDEXES[i][1].split(", ")) + " END"
        if present else "NULL")
    params += [language.render_match(tree, i) for i in present]
    inner, outer = _ORDERS[order]
    sql = _PAGE.format(matched=matched, cut=cut, inner_order=inner, outer_order=outer,
                       snippets=snippets, snippet=snippet,
                       origin=_RESOLVED if layout.word else "page.origin",
                       ctx_self=_CONTEXT_TEXT["m"], ctx_p=_CONTEXT_TEXT["p"],
                       ctx_n=_CONTEXT_TEXT["n"])
    return Sql(sql, params)
