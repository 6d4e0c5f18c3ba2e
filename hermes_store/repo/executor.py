"""What every repository function runs on: the caller's Connection, or an ORM Session whose
transaction the caller owns (Core statements run on either)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, CursorResult, Result
from sqlalchemy.orm import Session

Executor = Connection | Session


def connection_of(db: Executor) -> Connection:
    """The Connection behind an executor (for code that needs driver-level SQL)."""
    return db.connection() if isinstance(db, Session) else db


def rowcount(result: Result[*tuple[Any, ...]]) -> int:
    """Rows an INSERT/UPDATE/DELETE matched. Both executors hand back the driver's
    CursorResult for a Core statement; a Session's ``execute`` is merely typed as the wider
    Result, which carries no count."""
    if not isinstance(result, CursorResult):
        raise TypeError(f"a row count needs a CursorResult, not {type(result).__name__}")
    return result.rowcount
