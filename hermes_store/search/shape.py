"""The shape every dialect's search shares (docs/search.md): a statement and its parameters
(``Sql``), the filters of a page, the page's columns and how its rows are read, the context text
cut in SQL, what a dialect module offers (``Dialect``), and the hit it ends in (``SearchHit``). ``search.sqlite`` and
``search.postgres`` both build on this and never on each other; ``search.statements`` picks one.

Nothing here loads SQLAlchemy: a file's search never needs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

if TYPE_CHECKING:
    from hermes_store.db.catalog import SearchLayout
    from hermes_store.search.language import Node, Term

CONTEXT_CHARS = 200


class ContextMessage(TypedDict):
    """A hit or one of its neighbours in its session, as a hit's ``context`` lists them."""

    role: str
    content: str  # its text, cut to CONTEXT_CHARS (multimodal: its text parts, or a placeholder)


class SearchHit(TypedDict):
    """One hit of ``search_messages``, its keys in the contract's order (docs/search.md#results).
    ``source``, ``model`` and ``session_started`` are the session's."""

    id: int
    session_id: str
    role: str
    snippet: str  # never None, may be ""
    timestamp: float
    tool_name: str | None
    source: str
    model: str | None
    session_started: float
    context: list[ContextMessage]  # the previous message, the hit, the next one (those there)

# A page row as the driver gives it: a plain tuple, read through ``page_columns``.
Row = tuple[Any, ...]


@dataclass
class Sql:
    """SQL text with its positional parameters, composed from fixed fragments only."""

    text: str
    params: list[Any]
    _: KW_ONLY  # the options below are named at every call: two of them are small numbers
    # psycopg's ``prepare``: None lets it prepare a statement run often (server-side, with a
    # generic plan after a few runs), False never (planned for its values every time).
    prepare: bool | None = None
    # For a hit list: how many of its rows one id may have (each part of a union yields an id
    # once, so a union of n parts at most n times; a part holding only rows no other part can,
    # as the pending list, adds none), which bounds the ranked page's first cut.
    width: int = 1

    @staticmethod
    def union(parts: Sequence[Sql]) -> Sql:
        return Sql(" UNION ALL ".join(p.text for p in parts), [x for p in parts for x in p.params],
                   width=sum(p.width for p in parts))


@dataclass(frozen=True)
class Filters:
    """The filters every route shares; ``sources=None`` means any source."""

    sources: list[str] | None = None
    excluded: list[str] | None = None
    roles: list[str] | None = None

    @property
    def any(self) -> bool:
        return self.sources is not None or bool(self.excluded) or bool(self.roles)

    def values(self) -> tuple[list[str] | None, list[str] | None, list[str] | None]:
        """Each filter's values in statement order, an empty list as no filter (None)."""
        return self.sources, self.excluded or None, self.roles or None

    def json_values(self) -> list[str | None]:
        """The filters' values as SQLite's statements bind them: each JSON-encoded, twice
        (``? IS NULL OR … json_each(?)``)."""
        params: list[str | None] = []
        for value in self.values():
            encoded = None if value is None else json.dumps(value)
            params += [encoded, encoded]
        return params


# The page statement's columns, in select order; every dialect's page selects them all, each
# named, so rows are read by the same getters whichever dialect made them.
PAGE_COLUMNS = ("id", "session_id", "role", "timestamp", "tool_name", "source", "model",
                "started_at", "best", "origin", "fts_snippet", "content", "tool_calls",
                "ctx_self", "prev_id", "prev_role", "prev_text", "next_id", "next_role",
                "next_text")


def page_select(output: Mapping[str, str]) -> str:
    """A dialect's page select list from its ``column -> expression`` map, which must name
    exactly ``PAGE_COLUMNS`` in that order (rows are read by position)."""
    if tuple(output) != PAGE_COLUMNS:
        raise ValueError(f"a page selects {PAGE_COLUMNS}, in that order; got {tuple(output)}")
    return ",\n  ".join(f"{expr} AS {name}" for name, expr in output.items())


def page_columns(*names: str) -> Callable[[Sequence[Any]], Any]:
    """A reader of the named columns of a page row: their values in the order asked (the value
    itself for one name). Rows stay plain tuples: a named tuple per row cost as much as all the
    other Python work of a page."""
    return itemgetter(*(PAGE_COLUMNS.index(name) for name in names))


# A hit's neighbour in its session, by (timestamp, id): the message just before it (``<``,
# newest first) or just after it (``>``, oldest first). Each is one seek in idx_messages_session.
_NEIGHBOUR = """SELECT {columns} FROM messages AS {a} WHERE {a}.session_id = m.session_id
     AND ({a}.timestamp, {a}.id) {op} (m.timestamp, m.id)
   ORDER BY {a}.timestamp {dir}, {a}.id {dir} LIMIT 1"""


def previous_message(columns: str) -> str:
    """The message before the page row ``m`` in its session, as ``b``, selecting ``columns``."""
    return _NEIGHBOUR.format(columns=columns, a="b", op="<", dir="DESC")


def next_message(columns: str) -> str:
    """The message after the page row ``m`` in its session, as ``a``, selecting ``columns``."""
    return _NEIGHBOUR.format(columns=columns, a="a", op=">", dir="ASC")


def context_text(t: str, multimodal: str) -> str:
    """The context text of the row aliased ``t``: multimodal content (``multimodal``, the
    dialect's test for it) is fetched whole, since its text parts may sit anywhere; plain text
    is cut in SQL."""
    return (f"CASE WHEN {multimodal} THEN {t}.content "
            f"ELSE substr({t}.content, 1, {CONTEXT_CHARS}) END")


class Dialect(Protocol):
    """What ``search.statements`` asks of a dialect module (``search.sqlite``,
    ``search.postgres``): the hits of a route, of a literal check and of a whole tree, a
    page of hits, and whether an error is a query the engine refused."""

    def route_hits(self, route: str, tree: Node, layout: SearchLayout,
                   sources: list[str] | None = None, *, scored: bool = True) -> Sql: ...

    def literal_checked(self, hits: Sql, pattern: str) -> Sql: ...

    def tree_hits(self, tree: Node, term_hits: Callable[[Term], Sql]) -> Sql: ...

    def page_statement(self, hits: Sql, tree: Node, layout: SearchLayout, order: str,
                       filters: Filters, limit: int, offset: int, hide: bool = False) -> Sql: ...

    def is_match_error(self, err: BaseException) -> bool: ...
