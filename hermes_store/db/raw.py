"""A store file read on the standard library alone: the reading commands' path.

A command such as ``hermes-store search WORD`` runs a handful of statements, and importing
SQLAlchemy cost several times what they do. :func:`reading` opens one connection by the same
policy as the engines (:mod:`db.connection_policy`: read-only URI, immutable rule, pragmas,
tokenizer), after the same checks (:func:`paths.open_problem`), and holds one read transaction.
The connection it yields answers the part of SQLAlchemy's ``Connection`` that the statement
modules on this path use — ``exec_driver_sql``, ``connection.driver_connection`` (and its ``info``),
``dialect.name`` and ``info`` — so they run unchanged on either. Nothing here writes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from hermes_store.db import connection_policy
from hermes_store.db.sqlite_driver import unwrap
from hermes_store.paths import open_problem

if TYPE_CHECKING:
    from sqlalchemy import Connection


class RawResult:
    """The rows of one statement, read the ways the reading path reads them."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    def keys(self) -> list[str]:
        return [d[0] for d in self._cursor.description or ()]

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    all = fetchall

    def first(self) -> Any:
        return self._cursor.fetchone()

    def one(self) -> Any:
        row = self._cursor.fetchone()
        if row is None:  # as SQLAlchemy's one(): a statement that must give a row gave none
            raise LookupError("the statement returned no row")
        return row

    def scalar(self) -> Any:
        row = self._cursor.fetchone()
        return None if row is None else row[0]

    def mappings(self) -> list[dict[str, Any]]:
        keys = self.keys()
        return [dict(zip(keys, row, strict=True)) for row in self._cursor.fetchall()]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor.fetchall())


class RawConnection:
    """One read-only stdlib connection in the shape of the SQLAlchemy ``Connection`` subset
    the reading path uses (see the module)."""

    dialect = SimpleNamespace(name="sqlite")

    def __init__(self, dbapi: sqlite3.Connection, path: str) -> None:
        self.connection = SimpleNamespace(driver_connection=dbapi, dbapi_connection=dbapi,
                                          info={})
        self.info: dict[str, Any] = {}
        self.path = path

    def exec_driver_sql(self, statement: str, parameters: Sequence[Any] | dict[str, Any] = (),
                        ) -> RawResult:
        return RawResult(self.connection.driver_connection.execute(statement, parameters))


def held(path: str | Path) -> bool:
    """Whether an engine of this process has the file open (db.engine loaded and holding it)."""
    engine = sys.modules.get("hermes_store.db.engine")
    return engine is not None and engine.holds(path)


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[Connection]:
    """A read transaction on the store file at ``path`` (one snapshot), errors as the
    engines report them (``unwrap``: damage and unopenable files name their cause)."""
    p = Path(path)
    # The header check opens and closes a descriptor, which drops this process's POSIX locks
    # on the file: skipped when an engine of this process holds it (as open_engine does).
    if (problem := open_problem(p, write=False, header=not held(p))) is not None:
        raise problem  # missing, a directory, unreadable, not SQLite
    resolved = str(p.resolve())
    dbapi = connection_policy.connect(resolved, readonly=True)
    try:
        dbapi.execute("BEGIN")
        # Typed as the Connection its callers take: it answers the subset of one that the
        # statement modules on this path use (see the module), and nothing else reaches it.
        yield cast("Connection", RawConnection(dbapi, resolved))
    except sqlite3.Error as err:
        translated = unwrap(err, resolved)
        if translated is err:
            raise
        raise translated from err
    finally:
        dbapi.close()  # a read-only transaction: closing ends it, nothing to commit
