"""Message search over the compact layout (docs/search.md): routing, set combination, results.

``search_messages(db, query, …)`` sanitizes the query (``language.sanitize_query``), routes each term
to the index that can answer it (``language.route_term``) and then either

* runs the whole expression as one MATCH when every term uses the same index (the word index
  and the bigram index count as one: each row is judged by exactly one of them, the bigram
  index for the rows it holds, the word index for the others), ordered by bm25; or
* looks each term up on its own route and combines the hits with FTS5's precedence, ordered by
  time: in the statement itself on SQLite (``sqlite.tree_hits``), as id sets
  (``language.evaluate_tree``) on PostgreSQL.

Every route is bounded: an index lookup, plus LIKE only over the ids still waiting for the CJK
index (``hs_cjk_pending``) or inside an open backfill window; the explicit LIKE route
(whole tool bodies) is the one documented exception. Filters, order and paging are
applied once, in the final query, so they are identical on every route; a page is one
statement, whatever the ties at its cut.

The SQL itself is the dialect's: SQLite's composed in ``search.sqlite``, PostgreSQL's in
``search.postgres`` (siblings over ``search.shape``, each a ``shape.Dialect``, chosen once per
search by :func:`_statements`); which indexes the store has is the schema catalog's answer
(``db.catalog.search_layout``).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hermes_store.content import MULTIMODAL_PREFIX, text_of
from hermes_store.db import catalog
from hermes_store.db.catalog import SearchLayout
from hermes_store.db.sqlite_driver import (
    driver_errors,
    is_corrupt,
    is_index_damage,
    search_index_damaged,
)
from hermes_store.errors import HermesStoreError
from hermes_store.repo import index_health
from hermes_store.search import language, sqlite
from hermes_store.search.language import Node, Term
from hermes_store.search.shape import (
    CONTEXT_CHARS,
    ContextMessage,
    Dialect,
    Filters,
    Row,
    SearchHit,
    Sql,
    page_columns,
)
from hermes_store.search.snippets import snippet_from_text

if TYPE_CHECKING:  # a file's reading commands search on db.raw, without SQLAlchemy
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session
    from typing_extensions import TypeIs

log = logging.getLogger(__name__)

MULTIMODAL_PLACEHOLDER = "[multimodal content]"

# Rows are read by column name through these (see ``shape.page_columns``).
_HIT = page_columns("id", "session_id", "role", "timestamp", "tool_name", "source", "model",
                    "started_at", "origin", "fts_snippet", "content", "tool_calls")
_CONTEXT = page_columns("id", "role", "ctx_self", "prev_id", "prev_role", "prev_text",
                        "next_id", "next_role", "next_text", "content")


def _fetch(conn: Connection, statement: Sql) -> list[Row]:
    """Run a read on the DB-API connection under ``conn`` (same transaction); plain tuples.

    Search statements are read-only FTS5 SQL built from fixed fragments; SQLAlchemy's
    per-statement result machinery cost as much as the statements themselves here.
    """
    raw = conn.connection.driver_connection
    if isinstance(raw, sqlite3.Connection):
        return _fetch_sqlite(raw, statement)
    text = statement.text
    if conn.dialect.name == "postgresql":  # only a server store is distributed (and a file's
        from hermes_store.db import distribution  # search loads no SQLAlchemy: db.raw)
        from hermes_store.search import postgres

        if distribution.distributed(conn):
            text = postgres.rooted(text)
    if raw is None:
        raise RuntimeError("search needs an open connection: this one's DB-API connection is gone")
    cursor = raw.cursor()
    try:
        rows: list[Row]
        if statement.prepare is None:
            rows = cursor.execute(text, tuple(statement.params)).fetchall()
        else:
            rows = cursor.execute(text, tuple(statement.params),
                                  prepare=statement.prepare).fetchall()
        return rows
    finally:
        cursor.close()


def _fetch_sqlite(raw: sqlite3.Connection, statement: Sql) -> list[Row]:
    """The page is decoded by sqlite3's own UTF-8 decoder (the store's text factory, a Python
    call per text value, cost a tenth of a 20-hit page); only a page holding text that is not
    UTF-8 is read again with it (``sqlite_driver.decode_text``: replacement characters)."""
    factory = raw.text_factory
    raw.text_factory = str
    try:
        return raw.execute(statement.text, statement.params).fetchall()
    except sqlite3.OperationalError as err:
        if "decode" not in str(err):
            raise
    finally:
        raw.text_factory = factory
    return raw.execute(statement.text, statement.params).fetchall()


def _statements(conn: Connection) -> Dialect:
    """The module composing this store's SQL (``search.sqlite`` or ``search.postgres``)."""
    if conn.dialect.name != "postgresql":
        return sqlite
    # Imported here: its module loads SQLAlchemy (db.derived), which a file's search never needs.
    from hermes_store.search import postgres

    return postgres


# --------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class _Plan:
    tree: Node
    routes: dict[Term, str]

    def indexes(self, layout: SearchLayout) -> tuple[str, ...]:
        """Every FTS5 index the plan's routes read (SQLite)."""
        found = [i for route in sorted(set(self.routes.values()))
                 for i in _route_indexes(route, layout)]
        return tuple(dict.fromkeys(found))

    @property
    def single_route(self) -> str | None:
        kinds = set(self.routes.values())
        if len(kinds) != 1:
            return None
        (route,) = kinds
        if route in ("word", "bigram") and any(t.needs_literal_check for t in self.routes):
            return None  # "%" is dropped by unicode61: the literal is checked term by term
        return route


def _route_indexes(route: str, layout: SearchLayout) -> tuple[str, ...]:
    """The FTS5 indexes a route reads on SQLite: the word route reads the bigram index too, for
    the rows holding Latin glued to CJK text (so a damaged bigram index fails Latin words as
    well: their hits in those rows would be missing)."""
    if route == "word" and layout.word:
        both = layout.bigram and layout.glued
        return (catalog.WORD_FTS, catalog.CJK_FTS) if both else (catalog.WORD_FTS,)
    if route == "trigram" and layout.trigram:
        return (catalog.TRIGRAM_FTS,)
    if route == "bigram" and layout.bigram:
        return (catalog.CJK_FTS,)
    return ()


def _plan(tree: Node, layout: SearchLayout, role_filter: list[str] | None) -> _Plan:
    tool_role = role_filter is not None and "tool" in role_filter
    routes: dict[Term, str] = {
        term: language.route_term(term, trigram_available=layout.trigram,
                                  bigram_ready=layout.bigram, tool_role=tool_role)
        for term in language.iter_terms(tree)
    }
    return _Plan(tree, routes)


def _term_hits(sql: Dialect, term: Term, route: str, layout: SearchLayout,
               sources: list[str] | None) -> Sql:
    hits = sql.route_hits(route, term, layout, sources, scored=False)
    if route in ("word", "bigram") and term.needs_literal_check:
        return sql.literal_checked(hits, term.like_pattern())
    return hits


def _combined_hits(conn: Connection, plan: _Plan, layout: SearchLayout,
                   sources: list[str] | None) -> Sql | None:
    """The hits of a query whose terms take several routes, combined in SQL."""
    sql = _statements(conn)
    return sql.tree_hits(plan.tree,
                         lambda t: _term_hits(sql, t, plan.routes[t], layout, sources))


# --------------------------------------------------------------------------------- results


def _normalize_list(value: Sequence[str] | None) -> list[str] | None:
    return None if value is None else [str(v) for v in value]


def _context_text(content: str | None) -> str:
    if content is None:
        return ""
    if content.startswith(MULTIMODAL_PREFIX):
        text = text_of(content)
        return text[:CONTEXT_CHARS] if text else MULTIMODAL_PLACEHOLDER
    return content[:CONTEXT_CHARS]


def _context(row: Row) -> list[ContextMessage]:
    """The hit and its neighbours in the session; ``[]`` if a neighbour cannot be read."""
    (hit_id, role, ctx_self, prev_id, prev_role, prev_text, next_id, next_role,
     next_text, content) = _CONTEXT(row)
    if ctx_self is None:  # PostgreSQL's page leaves it out: the hit's content is in the row
        ctx_self = content
    try:
        out: list[ContextMessage] = []
        if prev_id is not None:
            out.append({"role": prev_role, "content": _context_text(prev_text)})
        if role is not None:
            out.append({"role": role, "content": _context_text(ctx_self)})
        if next_id is not None:
            out.append({"role": next_role, "content": _context_text(next_text)})
        return out
    except (ValueError, TypeError) as err:
        log.warning("search context unavailable for message %s: %s", hit_id, err)
        return []


def _hit(row: Row, terms: list[str]) -> SearchHit:
    """The result dict of one page row."""
    (hit_id, session_id, role, timestamp, tool_name, source, model, started_at, origin,
     fts_snippet, content, tool_calls) = _HIT(row)
    if origin == "text":
        snippet = snippet_from_text([content, tool_name, tool_calls], terms)
    else:
        snippet = fts_snippet or ""
    return {"id": hit_id, "session_id": session_id, "role": role, "snippet": snippet,
            "timestamp": timestamp, "tool_name": tool_name, "source": source, "model": model,
            "session_started": started_at, "context": _context(row)}


def _postgres_page(conn: Connection, hits: Sql, tree: Node, layout: SearchLayout, order: str,
                   filters: Filters, limit: int, offset: int, hide: bool = False) -> list[Row]:
    # Imported here: its module loads SQLAlchemy (db.derived), which a file's search never needs.
    from hermes_store.search import postgres

    statement = postgres.page_statement(hits, tree, layout, order, filters, limit, offset,
                                        hide=hide)
    page = _fetch(conn, statement)
    if isinstance(statement, postgres.PageIds):  # ids first, then their rows
        page = _fetch(conn, statement.rows_of(page)) if page else []
    return page


def _normalize_sort(sort: object) -> str | None:
    if isinstance(sort, str) and sort.strip().lower() in ("newest", "oldest"):
        return sort.strip().lower()
    return None


def search_messages(db: Session | Connection, query: str | None, *,
                    source_filter: Sequence[str] | None = None,
                    exclude_sources: Sequence[str] | None = None,
                    role_filter: Sequence[str] | None = None, limit: int = 20, offset: int = 0,
                    sort: str | None = None, include_inactive: bool = False,
                    syntax: str = "agent") -> list[SearchHit]:
    """Search messages (docs/search.md): a list of hit dicts, best or newest first; never raises
    for any query text. ``limit``/``offset`` below 0 raise ``ValueError``; a damaged index
    raises ``SearchIndexDamagedError`` (docs/search.md#damage). Rewound rows are hidden unless
    ``include_inactive`` (compacted ones stay findable). ``syntax``: what ``-word`` means
    (``language.SYNTAXES``: ``agent`` reads it as a word, ``exclusions`` excludes it, as the
    command line does)."""
    if syntax not in language.SYNTAXES:
        language.apply_syntax(query, syntax)  # raises, naming the readings
    if int(limit) < 0 or int(offset) < 0:
        raise ValueError(f"limit and offset must be >= 0 (got limit={limit}, offset={offset})")
    sources = _normalize_list(source_filter)
    if limit == 0 or sources == []:
        return []
    tree = _query_tree(query, syntax) if isinstance(query, str) else _parse(query, syntax)
    if tree is None:
        return []
    conn = db.connection() if _is_session(db) else db
    try:
        return _search(conn, tree, Filters(sources, _normalize_list(exclude_sources),
                                           _normalize_list(role_filter)),
                       int(limit), int(offset), _normalize_sort(sort),
                       hide=not include_inactive)
    except HermesStoreError:
        raise
    except _statement_errors() as err:
        if not _statements(conn).is_match_error(err):
            raise
        log.warning("search for %r gave an invalid MATCH: %s", query, err)
        return []


def _is_session(db: Session | Connection) -> TypeIs[Session]:
    orm = sys.modules.get("sqlalchemy.orm")  # not loaded: ``db`` cannot be a Session
    return orm is not None and isinstance(db, orm.Session)


def _statement_errors() -> tuple[type[BaseException], ...]:
    """What a failed search statement raises: a DB-API error of ``sqlite3``'s (a file read on
    db.raw), or the driver's behind SQLAlchemy's wrapper."""
    return (sqlite3.DatabaseError, *driver_errors()[1:])


def _parse(query: str | None, syntax: str) -> Node | None:
    text = language.apply_syntax(query, syntax)
    return language.build_tree(language.parse_query(language.sanitize_query(text)))


# The same few queries come back (an agent's memory lookups, a user's paging): their trees and,
# on SQLite, their page statements are kept, so a repeated search is the statement alone.
_query_tree = functools.lru_cache(maxsize=256)(_parse)


def _search(conn: Connection, tree: Node, filters: Filters, limit: int, offset: int,
            sort: str | None, hide: bool = False) -> list[SearchHit]:
    """One search; on SQLite, damage to an index it reads is an error, never fewer hits
    (docs/search.md#damage): FTS5's own complaints are translated, and an answer shorter than
    ``limit`` is trusted only once the indexes pass ``index_health``'s bounded probe."""
    layout = catalog.search_layout(conn)
    sqlite_store = _statements(conn) is sqlite
    try:
        if sqlite_store:
            statement, indexes = _sqlite_page(tree, layout, _key(filters.sources),
                                              _key(filters.excluded), _key(filters.roles),
                                              limit, offset, sort, hide)
            found = _results(_fetch(conn, statement), tree) if statement is not None else []
        else:
            indexes = ()
            found = _answer(conn, _plan(tree, layout, filters.roles), layout, filters, limit,
                            offset, sort, hide)
    except _statement_errors() as err:
        if sqlite_store and (is_index_damage(err) or is_corrupt(err)):
            indexes = _plan(tree, layout, filters.roles).indexes(layout)
            if indexes:
                raise search_index_damaged(err, indexes) from err
        raise
    if indexes and len(found) < limit:
        failed = index_health.verified(conn, indexes, layout.window)
        if failed:
            raise search_index_damaged(
                "; ".join(f"{index}: {', '.join(problems)}" for index, problems in failed.items()),
                tuple(failed))
    return found


def _key(values: list[str] | None) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)


@functools.lru_cache(maxsize=256)
def _sqlite_page(tree: Node, layout: SearchLayout, sources: tuple[str, ...] | None,
                 excluded: tuple[str, ...] | None, roles: tuple[str, ...] | None, limit: int,
                 offset: int, sort: str | None,
                 hide: bool) -> tuple[Sql | None, tuple[str, ...]]:
    """The page statement of a SQLite search (None when it can find nothing) and the FTS5
    indexes it reads. Pure: on SQLite the terms of several routes meet in the statement."""
    filters = Filters(*(None if v is None else list(v) for v in (sources, excluded, roles)))
    plan = _plan(tree, layout, filters.roles)
    hits, route, ranked = _hits(None, plan, layout, filters, sort)
    if hits is None:
        return None, plan.indexes(layout)
    # Snippets only from the index the hits came from: a statement naming an index that
    # fails to load fails whole, and one index's damage must not stop another's route.
    shown = replace(layout, word=layout.word and route == "word",
                    trigram=layout.trigram and route == "trigram")
    order = sort or ("rank" if ranked else "newest")
    statement = sqlite.page_statement(hits, tree, shown, order, filters, limit, offset, hide=hide)
    return statement, plan.indexes(layout)


def _hits(conn: Connection | None, plan: _Plan, layout: SearchLayout, filters: Filters,
          sort: str | None) -> tuple[Sql | None, str | None, bool]:
    """The hit list of ``plan``, its single route (None for several) and whether it is ranked;
    ``conn`` only on PostgreSQL (SQLite's statements are composed without one)."""
    route = plan.single_route
    if route is None:
        found = (sqlite.tree_hits(plan.tree, lambda t: _term_hits(sqlite, t, plan.routes[t],
                                                                   layout, filters.sources))
                 if conn is None else _combined_hits(conn, plan, layout, filters.sources))
        return found, None, False
    ranked = route in ("word", "trigram", "bigram")
    statements: Dialect = sqlite if conn is None else _statements(conn)
    # Scores only where they order the page: bm25 for every hit is most of a MATCH's cost.
    hits = statements.route_hits(route, plan.tree, layout, filters.sources,
                                 scored=ranked and sort is None)
    return hits, route, ranked


def _answer(conn: Connection, plan: _Plan, layout: SearchLayout, filters: Filters, limit: int,
            offset: int, sort: str | None, hide: bool) -> list[SearchHit]:
    """A PostgreSQL search (``search.postgres``'s statements)."""
    hits, _, ranked = _hits(conn, plan, layout, filters, sort)
    if hits is None:
        return []
    order = sort or ("rank" if ranked else "newest")
    return _results(_postgres_page(conn, hits, plan.tree, layout, order, filters, limit,
                                   offset, hide=hide), plan.tree)


def _results(page: list[Row], tree: Node) -> list[SearchHit]:
    if not page:
        return []
    terms = [t.text for t in language.positive_terms(tree)]
    return [_hit(row, terms) for row in page]
