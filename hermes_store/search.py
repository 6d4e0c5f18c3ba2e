"""Message search over the compact layout (search.md): routing, set combination, results.

``search_messages(db, query, …)`` sanitizes the query (``fts.sanitize_query``), routes each term
to the index that can answer it (``fts.route_term``) and then either

* runs the whole expression as one MATCH when every term uses the same index (the word index
  and the bigram index count as one: each row is judged by exactly one of them, the bigram
  index for the rows it holds, the word index for the others), ordered by bm25; or
* computes each term's id set on its own route and combines the sets with FTS5's precedence
  (``fts.evaluate_tree``), ordered by time.

Every route is bounded: an index lookup, plus LIKE only over the ids still waiting for the CJK
index (``messages_cjk_pending``) or inside an open backfill window; the explicit LIKE route
(tool bodies, excluded sources) is the one documented exception. Filters, order and paging are
applied once, in the final query, so they are identical on every route.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, exc
from sqlalchemy.orm import Session

from . import fts
from .fts import And, Node, Not, Or, Term

log = logging.getLogger(__name__)

EXCLUDED_SOURCES = frozenset(("cron", "subagent"))
CONTEXT_CHARS = 200
MULTIMODAL_PLACEHOLDER = "[multimodal content]"

_INDEX_TABLES = ("messages_fts", "messages_fts_trigram", "messages_cjk", "messages_fts_old",
                 "messages_fts_trigram_old")
_LAYOUT = f"""
SELECT (SELECT json_group_array(name) FROM sqlite_master
        WHERE type = 'table' AND name IN ({", ".join(f"'{t}'" for t in _INDEX_TABLES)})),
       (SELECT value FROM state_meta WHERE key = 'fts_rebuild_progress'),
       (SELECT value FROM state_meta WHERE key = 'fts_rebuild_high_water')"""

# Parts of a hit list: each selects (id, rank, origin). ``origin`` says where the snippet comes
# from: an FTS5 snippet of the word or trigram index, or the stored text.
_WORD_HITS = """
SELECT f.rowid, bm25(messages_fts), 'word' FROM messages_fts AS f
WHERE messages_fts MATCH ?"""
_WORD_HITS_SPLIT = _WORD_HITS + """
  AND NOT EXISTS (SELECT 1 FROM messages_cjk AS c WHERE c.id = f.rowid)"""
_BIGRAM_HITS = """
SELECT rowid, bm25(messages_fts_cjk), 'text' FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ?"""
_TRIGRAM_HITS = """
SELECT rowid, bm25(messages_fts_trigram), 'trigram' FROM messages_fts_trigram
WHERE messages_fts_trigram MATCH ?"""
_RETIRED_WORD_HITS = """
SELECT rowid, bm25(messages_fts_old), 'text' FROM messages_fts_old
WHERE messages_fts_old MATCH ? AND rowid > ? AND rowid <= ?"""
_RETIRED_TRIGRAM_HITS = """
SELECT o.rowid, bm25(messages_fts_trigram_old), 'text' FROM messages_fts_trigram_old AS o
WHERE messages_fts_trigram_old MATCH ? AND o.rowid > ? AND o.rowid <= ?
  AND EXISTS (SELECT 1 FROM messages_search_scope AS sc WHERE sc.id = o.rowid)"""
_PENDING_LIKE_HITS = """
SELECT sc.id, 0.0, 'text' FROM messages_cjk_pending AS p
JOIN messages_search_scope AS sc ON sc.id = p.id WHERE {like}"""
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
_LITERAL_CHECK = """
SELECT id FROM messages WHERE id IN (SELECT value FROM json_each(?))
  AND (content LIKE ? ESCAPE '\\' OR tool_name LIKE ? ESCAPE '\\')"""

_ALL_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")
_SCOPE_COLUMNS = ("sc.text", "sc.tool_name")

_PAGE = """
WITH hits(id, rank, origin) AS MATERIALIZED ({hits})
SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       min(h.rank) AS best, max(h.origin) AS origin
FROM hits AS h JOIN messages AS m ON m.id = h.id JOIN sessions AS s ON s.id = m.session_id
WHERE (? IS NULL OR s.source IN (SELECT value FROM json_each(?)))
  AND (? IS NULL OR s.source NOT IN (SELECT value FROM json_each(?)))
  AND (? IS NULL OR m.role IN (SELECT value FROM json_each(?)))
GROUP BY m.id
ORDER BY {order}
LIMIT ? OFFSET ?"""
_ORDERS = {
    "rank": "best, m.timestamp DESC, m.id DESC",
    "newest": "m.timestamp DESC, m.id DESC",
    "oldest": "m.timestamp ASC, m.id ASC",
}
_SNIPPETS = {
    "word": """SELECT snippet(messages_fts, -1, '>>>', '<<<', '...', 40) FROM messages_fts
WHERE messages_fts MATCH ? AND rowid = ?""",
    "trigram": """SELECT snippet(messages_fts_trigram, -1, '>>>', '<<<', '...', 40)
FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ? AND rowid = ?""",
}
_STORED_TEXT = """
SELECT id, content, tool_name, tool_calls FROM messages
WHERE id IN (SELECT value FROM json_each(?))"""
_NEIGHBOURS = """
SELECT m.id,
  (SELECT p.id FROM messages AS p WHERE p.session_id = m.session_id
     AND (p.timestamp < m.timestamp OR (p.timestamp = m.timestamp AND p.id < m.id))
   ORDER BY p.timestamp DESC, p.id DESC LIMIT 1),
  (SELECT n.id FROM messages AS n WHERE n.session_id = m.session_id
     AND (n.timestamp > m.timestamp OR (n.timestamp = m.timestamp AND n.id > m.id))
   ORDER BY n.timestamp ASC, n.id ASC LIMIT 1)
FROM messages AS m WHERE m.id IN (SELECT value FROM json_each(?))"""
# Multimodal content is fetched whole (its text parts may sit anywhere); plain text is cut in SQL.
_CONTEXT_ROWS = f"""
SELECT id, role,
  CASE WHEN substr(CAST(content AS BLOB), 1, 6) = X'006A736F6E3A' THEN content
       ELSE substr(content, 1, {CONTEXT_CHARS}) END
FROM messages WHERE id IN (SELECT value FROM json_each(?))"""

_MATCH_ERRORS = ("fts5", "syntax error", "unterminated string", "no such column",
                 "malformed match")


@dataclass(frozen=True)
class Layout:
    """Which indexes this store has, and the backfill window still served by the old ones."""

    word: bool
    trigram: bool
    bigram: bool
    retired_word: bool
    retired_trigram: bool
    window: tuple[int, int] | None

    @classmethod
    def read(cls, conn: Connection) -> Layout:
        names_json, progress, high = conn.exec_driver_sql(_LAYOUT).one()
        names = set(json.loads(names_json or "[]"))
        window = (int(progress), int(high)) if progress is not None and high is not None else None
        return cls("messages_fts" in names, "messages_fts_trigram" in names,
                   "messages_cjk" in names, "messages_fts_old" in names,
                   "messages_fts_trigram_old" in names, window)


@dataclass
class _Sql:
    """SQL text with its positional parameters, composed from fixed fragments only."""

    text: str
    params: list[Any]

    @staticmethod
    def union(parts: Sequence[_Sql]) -> _Sql:
        return _Sql(" UNION ALL ".join(p.text for p in parts), [x for p in parts for x in p.params])


# --------------------------------------------------------------------------------- rendering


def _render(tree: Node, leaf: Callable[[Term], str]) -> str:
    """FTS5 text for ``tree`` with explicit parentheses (same shape as ``fts.render_match``)."""
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


def _like(tree: Node, columns: Sequence[str]) -> tuple[str, list[str]]:
    return fts.render_like(tree, columns)


def _like_part(template: str, tree: Node, columns: Sequence[str],
               leading: Sequence[Any] = ()) -> _Sql:
    like, params = _like(tree, columns)
    return _Sql(template.format(like=like), [*leading, *params])


# --------------------------------------------------------------------------------- routes


def _word_parts(tree: Node, layout: Layout) -> list[_Sql]:
    parts: list[_Sql] = []
    if layout.word:
        match = fts.render_match(tree, "word")
        if layout.bigram:
            parts.append(_Sql(_WORD_HITS_SPLIT, [match]))
            parts.append(_Sql(_BIGRAM_HITS, [_render(tree, _bigram_leaf)]))
        else:
            parts.append(_Sql(_WORD_HITS, [match]))
    else:
        parts.append(_like_part(_LIKE_HITS, tree, _ALL_COLUMNS))
        return parts
    if layout.window:
        if layout.retired_word:
            parts.append(_Sql(_RETIRED_WORD_HITS, [fts.render_match(tree, "word"), *layout.window]))
        else:
            parts.append(_like_part(_WINDOW_LIKE_HITS, tree, _ALL_COLUMNS, layout.window))
    return parts


def _trigram_parts(tree: Node, layout: Layout) -> list[_Sql]:
    parts = [_Sql(_TRIGRAM_HITS, [fts.render_match(tree, "trigram")])]
    if layout.window:
        if layout.retired_trigram:
            parts.append(_Sql(_RETIRED_TRIGRAM_HITS,
                              [fts.render_match(tree, "trigram"), *layout.window]))
        else:
            parts.append(_like_part(_WINDOW_SCOPE_LIKE_HITS, tree, _SCOPE_COLUMNS, layout.window))
    return parts


def _bigram_parts(tree: Node, layout: Layout) -> list[_Sql]:
    parts = [_Sql(_BIGRAM_HITS, [_render(tree, _bigram_leaf)]),
             _like_part(_PENDING_LIKE_HITS, tree, _SCOPE_COLUMNS)]
    if layout.window:
        parts.append(_like_part(_WINDOW_SCOPE_LIKE_HITS, tree, _SCOPE_COLUMNS, layout.window))
    return parts


def _route_parts(route: str, tree: Node, layout: Layout,
                 sources: list[str] | None = None) -> list[_Sql]:
    if route == "word":
        return _word_parts(tree, layout)
    if route == "trigram":
        return _trigram_parts(tree, layout)
    if route == "bigram":
        return _bigram_parts(tree, layout)
    if sources:
        return [_like_part(_LIKE_HITS_IN_SOURCES, tree, _ALL_COLUMNS, [json.dumps(sources)])]
    return [_like_part(_LIKE_HITS, tree, _ALL_COLUMNS)]


# --------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class _Plan:
    tree: Node
    routes: dict[Term, str]

    @property
    def single_route(self) -> str | None:
        kinds = set(self.routes.values())
        if len(kinds) != 1:
            return None
        (route,) = kinds
        if route in ("word", "bigram") and any(t.needs_literal_check for t in self.routes):
            return None  # "%" is dropped by unicode61: the literal is checked term by term
        return route


def _plan(tree: Node, layout: Layout, source_filter: list[str] | None,
          role_filter: list[str] | None) -> _Plan:
    tool_role = bool(role_filter) and "tool" in role_filter  # type: ignore[operator]
    excluded = bool(source_filter) and bool(EXCLUDED_SOURCES.intersection(source_filter or ()))
    routes = {
        term: fts.route_term(term, trigram_available=layout.trigram, bigram_ready=layout.bigram,
                             tool_role=tool_role, excluded_source_filter=excluded)
        for term in fts.iter_terms(tree)
    }
    return _Plan(tree, routes)


def _term_ids(conn: Connection, term: Term, route: str, layout: Layout,
              sources: list[str] | None) -> set[int]:
    hits = _Sql.union(_route_parts(route, term, layout, sources))
    ids = {r[0] for r in conn.exec_driver_sql(hits.text, tuple(hits.params))}
    if ids and route in ("word", "bigram") and term.needs_literal_check:
        pattern = term.like_pattern()
        ids = {r[0] for r in conn.exec_driver_sql(
            _LITERAL_CHECK, (json.dumps(sorted(ids)), pattern, pattern))}
    return ids


# --------------------------------------------------------------------------------- results


def _normalize_list(value: Sequence[str] | None) -> list[str] | None:
    return None if value is None else [str(v) for v in value]


def _context_text(content: str | None) -> str:
    if content is None:
        return ""
    if content.startswith(fts.MULTIMODAL_PREFIX):
        text = fts.text_of_content(content)
        return text[:CONTEXT_CHARS] if text else MULTIMODAL_PLACEHOLDER
    return content[:CONTEXT_CHARS]


def _contexts(conn: Connection, ids: list[int]) -> dict[int, list[dict[str, str]]]:
    batch = json.dumps(ids)
    neighbours = {r[0]: (r[1], r[2]) for r in conn.exec_driver_sql(_NEIGHBOURS, (batch,))}
    wanted = sorted({i for pair in neighbours.values() for i in pair if i is not None} | set(ids))
    rows = {r[0]: {"role": r[1], "content": _context_text(r[2])}
            for r in conn.exec_driver_sql(_CONTEXT_ROWS, (json.dumps(wanted),))}
    out: dict[int, list[dict[str, str]]] = {}
    for hit in ids:
        prev_id, next_id = neighbours.get(hit, (None, None))
        out[hit] = [rows[i] for i in (prev_id, hit, next_id) if i is not None and i in rows]
    return out


def _snippets(conn: Connection, page: list[Any], tree: Node) -> dict[int, str]:
    out: dict[int, str] = {}
    matches = {"word": fts.render_match(tree, "word"), "trigram": fts.render_match(tree, "trigram")}
    stored = [row.id for row in page if row.origin not in _SNIPPETS]
    for row in page:
        if row.origin in _SNIPPETS:
            text = conn.exec_driver_sql(_SNIPPETS[row.origin],
                                        (matches[row.origin], row.id)).scalar()
            if text:
                out[row.id] = text
            else:
                stored.append(row.id)
    if stored:
        terms = [t.text for t in fts.positive_terms(tree)]
        for row_id, content, tool_name, tool_calls in conn.exec_driver_sql(
                _STORED_TEXT, (json.dumps(stored),)):
            out[row_id] = fts.snippet_from_text([content, tool_name, tool_calls], terms)
    return out


def _page(conn: Connection, hits: _Sql, order: str, source_filter: list[str] | None,
          exclude_sources: list[str] | None, role_filter: list[str] | None, limit: int,
          offset: int) -> list[Any]:
    def pair(value: list[str] | None) -> list[str | None]:
        encoded = None if value is None else json.dumps(value)
        return [encoded, encoded]

    params = [*hits.params, *pair(source_filter), *pair(exclude_sources or None),
              *pair(role_filter or None), limit, offset]
    sql = _PAGE.format(hits=hits.text, order=_ORDERS[order])
    return list(conn.exec_driver_sql(sql, tuple(params)))


def _is_match_error(err: BaseException) -> bool:
    text = str(getattr(err, "orig", err)).lower()
    return any(marker in text for marker in _MATCH_ERRORS)


def _normalize_sort(sort: object) -> str | None:
    if isinstance(sort, str) and sort.strip().lower() in ("newest", "oldest"):
        return sort.strip().lower()
    return None


def search_messages(db: Session | Connection, query: str | None, *,
                    source_filter: Sequence[str] | None = None,
                    exclude_sources: Sequence[str] | None = None,
                    role_filter: Sequence[str] | None = None, limit: int = 20, offset: int = 0,
                    sort: str | None = None) -> list[dict[str, Any]]:
    """Search messages (search.md): a list of hit dicts, best or newest first; never raises
    for any query text. ``limit``/``offset`` below 0 raise ``ValueError``."""
    if int(limit) < 0 or int(offset) < 0:
        raise ValueError(f"limit and offset must be >= 0 (got limit={limit}, offset={offset})")
    sources = _normalize_list(source_filter)
    if limit == 0 or sources == []:
        return []
    tree = fts.build_tree(fts.parse_query(fts.sanitize_query(query)))
    if tree is None:
        return []
    conn = db.connection() if isinstance(db, Session) else db
    try:
        return _search(conn, tree, sources, _normalize_list(exclude_sources),
                       _normalize_list(role_filter), int(limit), int(offset),
                       _normalize_sort(sort))
    except exc.OperationalError as err:
        if not _is_match_error(err):
            raise
        log.warning("search for %r gave an invalid MATCH: %s", query, err)
        return []


def _search(conn: Connection, tree: Node, sources: list[str] | None,
            excluded: list[str] | None, roles: list[str] | None, limit: int, offset: int,
            sort: str | None) -> list[dict[str, Any]]:
    layout = Layout.read(conn)
    plan = _plan(tree, layout, sources, roles)
    route = plan.single_route
    if route is not None:
        hits = _Sql.union(_route_parts(route, tree, layout, sources))
        ranked = route in ("word", "trigram", "bigram")
    else:
        ids = fts.evaluate_tree(tree, lambda t: _term_ids(conn, t, plan.routes[t], layout, sources))
        if not ids:
            return []
        hits = _Sql(_ID_LIST_HITS, [json.dumps(sorted(ids))])
        ranked = False
    order = sort or ("rank" if ranked else "newest")
    page = _page(conn, hits, order, sources, excluded, roles, limit, offset)
    if not page:
        return []
    snippets = _snippets(conn, page, tree)
    try:
        contexts = _contexts(conn, [row.id for row in page])
    except exc.SQLAlchemyError as err:  # the hits stand on their own; context is a courtesy
        log.warning("search context unavailable: %s", err)
        contexts = {}
    return [
        {
            "id": row.id,
            "session_id": row.session_id,
            "role": row.role,
            "snippet": snippets.get(row.id, ""),
            "timestamp": row.timestamp,
            "tool_name": row.tool_name,
            "source": row.source,
            "model": row.model,
            "session_started": row.started_at,
            "context": contexts.get(row.id, []),
        }
        for row in page
    ]
