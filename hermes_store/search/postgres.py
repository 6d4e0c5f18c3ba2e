"""PostgreSQL's statements for a message search (docs/search.md#postgresql): the
same routes, hit lists and page as ``search.sqlite``, over revision 0018's indexes.

* word route: ``messages.search_words @@ to_tsquery('hermes_search', …)`` with every term a
  quoted lexeme (``'chat-send'``, ``'deploy':*``; the parser inside ``to_tsquery`` cuts a quoted
  phrase into ``<->`` steps exactly as ``to_tsvector`` cut the text). ``websearch_to_tsquery`` is
  not used: it loses prefixes, parentheses and NOT. Rows holding CJK are judged by the bigram
  column instead, as SQLite judges them by its bigram index;
* bigram route: ``messages.search_cjk @@ '…'::tsquery``, a literal of the lexemes
  ``repo.bigrams`` writes (a CJK term asks for weight A, the text, as SQLite names the column);
* substring route: ``ILIKE`` on the expression the pg_trgm index covers, scoped as the trigram
  index is;
* LIKE route: ``ILIKE`` over the stored columns (SQLite's LIKE folds ASCII case alone, and so
  does ILIKE in the columns' "C" collation).

Ranks are ``-ts_rank_cd`` (lower is better, as bm25), substring and LIKE hits rank 0. Snippets
are cut from the stored text (``search.snippets``). Values are bound, never spliced; the select
list of the page is ``sqlite.PAGE_COLUMNS``, so rows are read by the same getters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hermes_store.db.catalog import SearchLayout
from hermes_store.db.derived import PG_SCOPE_TEXT, PG_SEARCH_CONFIG
from hermes_store.repo import bigrams
from hermes_store.search.language import And, Node, Not, Term
from hermes_store.search.sqlite import CONTEXT_CHARS, PAGE_COLUMNS, Filters, Sql

# A lexeme no text yields (tokens never hold control characters): a term without any lexeme.
_NOTHING = "'\x01'"
_WORD_QUERY = f"to_tsquery('{PG_SEARCH_CONFIG}', %s)"
_SCOPE = "COALESCE(s.source, '') NOT IN ('cron', 'subagent')"
_SCOPE_TEXT = PG_SCOPE_TEXT.format(t="m")
_ALL_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")

# Parts of a hit list, each selecting (id, rank, origin); ``{score}`` is the rank or 0.
_WORD_HITS = f"""
SELECT m.id, {{score}}, 'text' FROM messages AS m
WHERE m.search_words @@ {_WORD_QUERY}{{split}}"""
_WORD_SCORE = f"-ts_rank_cd(m.search_words, {_WORD_QUERY})::float8"
# Rows whose CJK tokens are written are judged by the bigram column alone.
_SPLIT = " AND COALESCE(length(m.search_cjk), 0) = 0"
_CJK_WORD_HITS = """
SELECT m.id, {score}, 'text' FROM messages AS m WHERE m.search_cjk @@ %s::tsquery"""
_BIGRAM_HITS = f"""
SELECT m.id, {{score}}, 'text' FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.search_cjk @@ %s::tsquery AND {_SCOPE}"""
_BIGRAM_SCORE = "-ts_rank_cd(m.search_cjk, %s::tsquery)::float8"
_TRIGRAM_HITS = f"""
SELECT m.id, 0.0::float8, 'text' FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.role IS DISTINCT FROM 'tool' AND {_SCOPE} AND {{like}}"""
# Rows another program wrote wait for ``bigrams.catch_up`` (a partial index holds their ids).
_PENDING_LIKE_HITS = f"""
SELECT m.id, 0.0::float8, 'text' FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.search_cjk IS NULL AND m.role IS DISTINCT FROM 'tool' AND {_SCOPE} AND {{like}}"""
_LIKE_HITS = "SELECT m.id, 0.0::float8, 'text' FROM messages AS m WHERE {like}"
_LIKE_HITS_IN_SOURCES = """
SELECT m.id, 0.0::float8, 'text' FROM sessions AS s JOIN messages AS m ON m.session_id = s.id
WHERE s.source = ANY(%s::text[]) AND {like}"""
_ID_LIST_HITS = "SELECT unnest(%s::bigint[]), 0.0::float8, 'text'"
_IDS_OF = "WITH h(id, rank, origin) AS ({hits}) SELECT id FROM h"
_LITERAL_CHECK = """
SELECT id FROM messages WHERE id = ANY(%s::bigint[])
  AND (content ILIKE %s ESCAPE '\\' OR tool_name ILIKE %s ESCAPE '\\') IS TRUE"""

_CONTEXT_TEXT = ("CASE WHEN left({t}.content, 7) = U&'\\FFFF' || '0json:' THEN {t}.content "
                 f"ELSE substr({{t}}.content, 1, {CONTEXT_CHARS}) END")
_PAGE_OUTPUT = {
    "id": "page.id", "session_id": "page.session_id", "role": "page.role",
    "timestamp": "page.timestamp", "tool_name": "page.tool_name", "source": "page.source",
    "model": "page.model", "started_at": "page.started_at", "best": "page.best",
    "origin": "page.origin", "fts_snippet": "NULL",
    "content": "m.content", "tool_calls": "m.tool_calls",
    "ctx_self": _CONTEXT_TEXT.format(t="m"),
    "prev_id": "p.id", "prev_role": "p.role", "prev_text": _CONTEXT_TEXT.format(t="p"),
    "next_id": "n.id", "next_role": "n.role", "next_text": _CONTEXT_TEXT.format(t="n"),
}
assert tuple(_PAGE_OUTPUT) == PAGE_COLUMNS  # rows are read by the SQLite page's getters
_PAGE_SELECT = ",\n  ".join(f"{expr} AS {name}" for name, expr in _PAGE_OUTPUT.items())
_PAGE = """
WITH hits(id, rank, origin) AS MATERIALIZED ({hits}),
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
  LIMIT %s OFFSET %s)
SELECT """ + _PAGE_SELECT + """
FROM page JOIN messages AS m ON m.id = page.id
LEFT JOIN LATERAL (
  SELECT b.id, b.role, b.content FROM messages AS b WHERE b.session_id = m.session_id
     AND (b.timestamp, b.id) < (m.timestamp, m.id)
   ORDER BY b.timestamp DESC, b.id DESC LIMIT 1) AS p ON true
LEFT JOIN LATERAL (
  SELECT a.id, a.role, a.content FROM messages AS a WHERE a.session_id = m.session_id
     AND (a.timestamp, a.id) > (m.timestamp, m.id)
   ORDER BY a.timestamp ASC, a.id ASC LIMIT 1) AS n ON true
ORDER BY {outer_order}"""
_FILTERS = """
  JOIN messages AS m ON m.id = h.id JOIN sessions AS s ON s.id = m.session_id
  WHERE (%s::text[] IS NULL OR s.source = ANY(%s::text[]))
    AND (%s::text[] IS NULL OR NOT (s.source = ANY(%s::text[])))
    AND (%s::text[] IS NULL OR m.role = ANY(%s::text[]))"""
# A rewound row (active = 0, compacted = 0) is hidden from default searches
# (docs/v21.md#parameters).
_REWOUND = "(m.active = 0 AND m.compacted = 0)"
_SHOWN_HITS = "\n  JOIN messages AS m ON m.id = h.id WHERE NOT " + _REWOUND
_RANK_CUT = """
  WHERE matched.best <= COALESCE(
    (SELECT best FROM matched ORDER BY best LIMIT 1 OFFSET %s), matched.best)"""
_ORDERS = {
    "rank": ("matched.best, m.timestamp DESC, m.id DESC",
             "page.best, page.timestamp DESC, page.id DESC"),
    "newest": ("m.timestamp DESC, m.id DESC", "page.timestamp DESC, page.id DESC"),
    "oldest": ("m.timestamp ASC, m.id ASC", "page.timestamp ASC, page.id ASC"),
}


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


def _word_leaf(term: Term) -> str:
    return _quoted(term.text) + (":*" if term.prefix else "")


def word_query(tree: Node) -> str:
    """The text ``to_tsquery('hermes_search', …)`` reads for ``tree``."""
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
    params: list[str] = []
    term_sql = "(" + " OR ".join(f"{col} ILIKE %s ESCAPE '\\'" for col in columns) + ")"

    def leaf(term: Term) -> str:
        params.extend([term.like_pattern()] * len(columns))
        return term_sql

    # NULL columns make ILIKE NULL; "NOT NULL" must not drop rows that lack the term.
    sql = _render(tree, leaf, " AND ", " OR ", "{} AND NOT COALESCE({}, false)")
    # Bare, not "IS TRUE" (SQLite's re-prepare guard): a wrapped ILIKE cannot use pg_trgm.
    return f"({sql})", params


def _like_part(template: str, tree: Node, columns: Sequence[str],
               leading: Sequence[Any] = ()) -> Sql:
    like, params = like_condition(tree, columns)
    return Sql(template.format(like=like), [*leading, *params])


# --------------------------------------------------------------------------------- routes


def _word_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Sql]:
    if not layout.word:
        return [_like_part(_LIKE_HITS, tree, _ALL_COLUMNS)]
    query = word_query(tree)
    score = _WORD_SCORE if scored else "0.0::float8"
    word = _WORD_HITS.format(score=score, split=_SPLIT if layout.bigram else "")
    parts = [Sql(word, [query, query] if scored else [query])]
    if layout.bigram:
        literal = bigram_query(tree)
        cjk = _CJK_WORD_HITS.format(score=_BIGRAM_SCORE if scored else "0.0::float8")
        parts.append(Sql(cjk, [literal, literal] if scored else [literal]))
    return parts


def _bigram_parts(tree: Node, layout: SearchLayout, scored: bool) -> list[Sql]:
    literal = bigram_query(tree)
    hits = _BIGRAM_HITS.format(score=_BIGRAM_SCORE if scored else "0.0::float8")
    return [Sql(hits, [literal, literal] if scored else [literal]),
            _like_part(_PENDING_LIKE_HITS, tree, (_SCOPE_TEXT,))]


def route_hits(route: str, tree: Node, layout: SearchLayout, sources: list[str] | None = None,
               *, scored: bool = True) -> Sql:
    """Every hit of ``tree`` on ``route`` as ``(id, rank, origin)`` rows (as ``sqlite``)."""
    if route == "word":
        return Sql.union(_word_parts(tree, layout, scored))
    if route == "trigram":
        return _like_part(_TRIGRAM_HITS, tree, (_SCOPE_TEXT,))
    if route == "bigram":
        return Sql.union(_bigram_parts(tree, layout, scored))
    if sources:
        return _like_part(_LIKE_HITS_IN_SOURCES, tree, _ALL_COLUMNS, [list(sources)])
    return _like_part(_LIKE_HITS, tree, _ALL_COLUMNS)


def ids_of(hits: Sql) -> Sql:
    return Sql(_IDS_OF.format(hits=hits.text), hits.params)


def literal_check(ids: set[int], pattern: str) -> Sql:
    return Sql(_LITERAL_CHECK, [sorted(ids), pattern, pattern])


def id_list_hits(ids: set[int]) -> Sql:
    return Sql(_ID_LIST_HITS, [sorted(ids)])


def page_statement(hits: Sql, tree: Node, layout: SearchLayout, order: str, filters: Filters,
                   limit: int, offset: int, hide: bool = False) -> Sql:
    """The page of ``hits`` in ``sqlite.PAGE_COLUMNS``; ``hide`` drops rewound rows."""
    params: list[Any] = list(hits.params)
    where = ""
    if filters.any:
        where = _FILTERS
        for value in (filters.sources, filters.excluded or None, filters.roles or None):
            params += [value, value]
        if hide:
            where += "\n    AND NOT " + _REWOUND
    elif hide:
        where = _SHOWN_HITS
    cut = ""
    if order == "rank":
        cut = _RANK_CUT
        params.append(offset + limit - 1)
    params += [limit, offset]
    inner, outer = _ORDERS[order]
    sql = _PAGE.format(hits=hits.text, filters=where, cut=cut, inner_order=inner,
                       outer_order=outer)
    return Sql(sql, params)
