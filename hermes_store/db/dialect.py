"""SQL that SQLite and PostgreSQL spell differently, as Core constructs each dialect compiles its
own way, so that repositories stay dialect-free.

* :class:`greatest` — the scalar maximum (SQLite's multi-argument ``max()``, PostgreSQL's
  ``GREATEST``). Callers never pass NULL: SQLite's ``max()`` returns NULL for it, ``GREATEST``
  skips it.
* :func:`insert` — the dialect's ``INSERT`` with ``ON CONFLICT`` (both spell it the same way, but
  each dialect builds its own statement object).
* :data:`TEXT` — text columns; on PostgreSQL in the ``"C"`` collation, which orders and compares
  by code point exactly as SQLite's ``BINARY`` does (prefix ranges, ``ORDER BY id``) and, like
  SQLite, folds case for ASCII only.
* :func:`escape_nul` / :func:`unescape_nul` — PostgreSQL cannot store NUL in ``text``, while the
  agent's own format starts multimodal content with one (``"\\x00json:"``) and ids, prompts and
  tool output may hold any character. ``db.postgres`` makes every connection write NUL as
  ``U+FFFF '0'`` (and ``U+FFFF`` itself as ``U+FFFF '1'``) and read it back, so Python sees the
  text unchanged while SQL sees the escaped form (compare constants through
  :func:`escape_nul`).
* :func:`json_values` — the values of a JSON array passed as one parameter, as a one-column
  ``value`` select (``json_each`` on SQLite, ``jsonb_array_elements_text`` on PostgreSQL): one
  bound parameter however many ids, where an ``IN`` list would hit SQLite's variable limit.
* :class:`starts_with` — ``stored LIKE prefix%`` for a prefix that may hold NUL (SQLite's text
  functions stop at NUL, so it compares bytes there; PostgreSQL compares the escaped form).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from sqlalchemy import (
    REAL,
    BigInteger,
    Boolean,
    ColumnElement,
    Connection,
    Integer,
    LargeBinary,
    Select,
    Table,
    Text,
    cast,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION, JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal

PG = "postgresql"

# --------------------------------------------------------------------------- NUL on PostgreSQL

NUL_ESCAPE = "\uffff"  # a noncharacter: never in text people or models write
_ESCAPED_NUL = NUL_ESCAPE + "0"
_ESCAPED_ESCAPE = NUL_ESCAPE + "1"
_UNESCAPE_RE = re.compile(f"{NUL_ESCAPE}([01])")


def escape_nul(text: str) -> str:
    """The form PostgreSQL stores (no NUL); the identity for text without NUL or U+FFFF."""
    if "\x00" not in text and NUL_ESCAPE not in text:
        return text
    return text.replace(NUL_ESCAPE, _ESCAPED_ESCAPE).replace("\x00", _ESCAPED_NUL)


def unescape_nul(stored: str) -> str:
    if NUL_ESCAPE not in stored:
        return stored
    return _UNESCAPE_RE.sub(lambda m: "\x00" if m.group(1) == "0" else NUL_ESCAPE, stored)


# The column types of the models: SQLite DDL unchanged; PostgreSQL gets 64-bit integers (SQLite's
# INTEGER is 64-bit), double precision (its REAL is 4 bytes: epoch seconds would lose minutes)
# and code-point ordered text.
TEXT = Text().with_variant(Text(collation="C"), PG)
INTEGER = Integer().with_variant(BigInteger(), PG)
FLOAT = REAL().with_variant(DOUBLE_PRECISION(), PG)


# --------------------------------------------------------------------------- statements


def dialect_name(db: Connection | Session) -> str:
    return db.get_bind().dialect.name if isinstance(db, Session) else db.dialect.name


def has_fts5(db: Connection | Session) -> bool:
    """Whether FTS5 objects (and the CJK side tables that feed them) can exist in ``db``."""
    return dialect_name(db) == "sqlite"


def insert(db: Connection | Session, table: Table) -> Any:
    """``INSERT`` for ``db``'s dialect, with ``on_conflict_do_update``/``_do_nothing``."""
    return pg_insert(table) if dialect_name(db) == PG else sqlite_insert(table)


def json_values(db: Connection | Session, json_array: str) -> Select[Any]:
    """``SELECT value FROM <the elements of json_array>`` (text values)."""
    if dialect_name(db) == PG:
        array = cast(literal(json_array, Text()), JSONB)  # text in: JSONB would re-encode it
        elements = func.jsonb_array_elements_text(array).table_valued("value")
        return select(elements.c.value.collate("C"))
    return select(literal_column("value")).select_from(func.json_each(json_array))


class greatest(FunctionElement[Any]):
    """The largest of its (non-NULL) arguments."""

    inherit_cache = True
    name = "greatest"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.type = args[0].type if args and hasattr(args[0], "type") else REAL()


@compiles(greatest)
def _greatest_sqlite(element: greatest, compiler: Any, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"


@compiles(greatest, PG)
def _greatest_pg(element: greatest, compiler: Any, **kw: Any) -> str:
    return f"GREATEST({compiler.process(element.clauses, **kw)})"


class starts_with(ColumnElement[bool]):
    """True when the stored text ``expr`` begins with ``prefix`` (which may hold NUL)."""

    inherit_cache = True
    type = Boolean()
    _traverse_internals: ClassVar[list[tuple[str, Any]]] = [
        ("expr", InternalTraversal.dp_clauseelement), ("prefix", InternalTraversal.dp_string)]

    def __init__(self, expr: ColumnElement[Any], prefix: str) -> None:
        self.expr = expr
        self.prefix = prefix


@compiles(starts_with)
def _starts_with_sqlite(element: starts_with, compiler: Any, **kw: Any) -> str:
    raw = element.prefix.encode()
    head = func.substr(cast(element.expr, LargeBinary), 1, len(raw))
    return compiler.process(head == literal(raw, LargeBinary), **kw)


@compiles(starts_with, PG)
def _starts_with_pg(element: starts_with, compiler: Any, **kw: Any) -> str:
    stored = escape_nul(element.prefix)
    head = func.substr(element.expr, 1, len(stored))
    return compiler.process(head == literal(stored, Text), **kw)
