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
* :func:`next_ids` / :func:`ids_taken` — ids for rows a batch numbers itself, and the counter
  moved past ids given explicitly. Both backends never hand out an id twice, even a deleted
  one: SQLite's ``AUTOINCREMENT`` remembers the highest in ``sqlite_sequence`` (and moves it
  itself past an explicit id); PostgreSQL's identity sequence does not see explicit ids, so
  :func:`ids_taken` moves it. :func:`id_high_water` and :func:`keep_ids_above` read and carry
  that memory from one store to another.
"""

from __future__ import annotations

import re
from typing import Any

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
    TableClause,
    Text,
    cast,
    column,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy import table as table_clause
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION, JSONB, REGCLASS
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeEngine

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
FLOAT: TypeEngine[float] = REAL[float]().with_variant(DOUBLE_PRECISION[float](), PG)


# --------------------------------------------------------------------------- statements


def dialect_name(db: Connection | Session) -> str:
    return db.get_bind().dialect.name if isinstance(db, Session) else db.dialect.name


def has_fts5(db: Connection | Session) -> bool:
    """Whether FTS5 objects (and the CJK side tables that feed them) can exist in ``db``."""
    return dialect_name(db) == "sqlite"


def insert(db: Connection | Session, table: TableClause) -> Any:
    """``INSERT`` for ``db``'s dialect, with ``on_conflict_do_update``/``_do_nothing``."""
    return pg_insert(table) if dialect_name(db) == PG else sqlite_insert(table)


def json_values(db: Connection | Session, json_array: str) -> Select[Any]:
    """``SELECT value FROM <the elements of json_array>`` (text values)."""
    if dialect_name(db) == PG:
        array = cast(literal(json_array, Text()), JSONB)  # text in: JSONB would re-encode it
        elements = func.jsonb_array_elements_text(array).table_valued("value")
        return select(elements.c.value.collate("C"))
    return select(literal_column("value")).select_from(func.json_each(json_array))


_SQLITE_SEQUENCE = table_clause("sqlite_sequence", column("name"), column("seq"))


def _identity_sequence(table: Table) -> Any:
    return func.pg_get_serial_sequence(table.name, table.c.id.name)


def _pg_sequence_top(table: Table) -> Any:
    """The last value the sequence handed out (0 before the first)."""
    last = func.pg_sequence_last_value(cast(_identity_sequence(table), REGCLASS))
    return func.coalesce(last, 0)


def next_ids(db: Connection | Session, table: Table, count: int) -> list[int]:
    """``count`` ascending ids for new rows of ``table``, above every id it holds or ever held.

    On PostgreSQL they come from the identity sequence (safe against concurrent appends; not
    necessarily consecutive), after moving it past ids written without it."""
    if count <= 0:
        return []
    top = select(func.coalesce(func.max(table.c.id), 0)).scalar_subquery()
    if dialect_name(db) == PG:
        ids_taken(db, table, int(db.execute(select(top)).scalar_one()))
        drawn = func.nextval(_identity_sequence(table))
        rows = db.execute(select(drawn).select_from(func.generate_series(1, count))).scalars()
        return sorted(int(i) for i in rows)
    seq = (select(_SQLITE_SEQUENCE.c.seq).where(_SQLITE_SEQUENCE.c.name == table.name)
           .scalar_subquery())
    start = int(db.execute(select(greatest(top, func.coalesce(seq, 0)))).scalar_one()) + 1
    return list(range(start, start + count))


def ids_taken(db: Connection | Session, table: Table, highest: int) -> None:
    """Ids up to ``highest`` were written explicitly: new rows must get ids above them."""
    if dialect_name(db) != PG or highest <= 0:
        return  # SQLite's AUTOINCREMENT moves sqlite_sequence past an explicit id itself
    wanted = literal(highest, BigInteger())
    db.execute(select(func.setval(_identity_sequence(table), wanted))
               .where(wanted > _pg_sequence_top(table)))


def id_high_water(db: Connection | Session, table: Table) -> int:
    """The highest id ``table`` ever held or handed out, deleted rows included."""
    top = select(func.coalesce(func.max(table.c.id), 0)).scalar_subquery()
    if dialect_name(db) == PG:
        return int(db.execute(select(greatest(top, _pg_sequence_top(table)))).scalar_one())
    seq = (select(_SQLITE_SEQUENCE.c.seq).where(_SQLITE_SEQUENCE.c.name == table.name)
           .scalar_subquery())
    return int(db.execute(select(greatest(top, func.coalesce(seq, 0)))).scalar_one())


def keep_ids_above(db: Connection | Session, table: Table, highest: int) -> None:
    """New rows of ``table`` get ids above ``highest`` on either backend, even when no row
    holds it (a store copied from one whose newest rows were deleted)."""
    if highest <= 0:
        return
    if dialect_name(db) == PG:
        ids_taken(db, table, highest)
        return
    seq = _SQLITE_SEQUENCE
    moved = db.execute(seq.update().where(seq.c.name == table.name)
                       .values(seq=greatest(seq.c.seq, literal(highest, BigInteger()))))
    if not isinstance(moved, CursorResult):
        raise TypeError(f"an UPDATE returned {type(moved).__name__}, not a CursorResult")
    if not moved.rowcount:
        db.execute(seq.insert().values(name=table.name, seq=highest))


class greatest(FunctionElement[Any]):
    """The largest of its (non-NULL) arguments."""

    inherit_cache = True
    name = "greatest"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.type = args[0].type if args and hasattr(args[0], "type") else REAL()


@compiles(greatest)
def _greatest_sqlite(element: greatest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"


@compiles(greatest, PG)
def _greatest_pg(element: greatest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"GREATEST({compiler.process(element.clauses, **kw)})"


class starts_with(ColumnElement[bool]):
    """True when the stored text ``expr`` begins with ``prefix`` (which may hold NUL)."""

    inherit_cache = True
    type = Boolean()
    _traverse_internals = [
        ("expr", InternalTraversal.dp_clauseelement), ("prefix", InternalTraversal.dp_string)]

    def __init__(self, expr: ColumnElement[Any], prefix: str) -> None:
        self.expr = expr
        self.prefix = prefix


@compiles(starts_with)
def _starts_with_sqlite(element: starts_with, compiler: SQLCompiler, **kw: Any) -> str:
    raw = element.prefix.encode()
    head = func.substr(cast(element.expr, LargeBinary), 1, len(raw))
    return compiler.process(head == literal(raw, LargeBinary), **kw)


@compiles(starts_with, PG)
def _starts_with_pg(element: starts_with, compiler: SQLCompiler, **kw: Any) -> str:
    # The prefix travels as a parameter, which the connection escapes as it does every
    # string; only the length must count the stored (escaped) form.
    head = func.substr(element.expr, 1, len(escape_nul(element.prefix)))
    return compiler.process(head == literal(element.prefix, Text), **kw)
