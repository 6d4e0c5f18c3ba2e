"""How a facade method runs: a short read, one write unit, or a best-effort write.

Best effort is the v21 contract's exception for advisory state (compression cooldowns and
locks, …): a failed write there must not break the agent's turn, so the failure is logged
and the neutral value returned. Every other write raises.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from hermes_store.errors import HermesStoreError

log = logging.getLogger("hermes_store.facade")

T = TypeVar("T")


class SessionDB(Protocol):
    """What a unit needs of the facade (a protocol, so that units never import the class)."""

    @property
    def engine(self) -> Engine: ...

    def _read(self, fn: Callable[[Connection], T], *, replica_ok: bool = ...) -> T: ...

    def _write(self, fn: Callable[[Connection], T], *, append: bool = ...,
               what: str = ...) -> T: ...


def absent(value: object) -> bool:
    """The contract's "falsy id": ``None`` and ``""`` mean "nothing to do"."""
    return value is None or value == ""


def read(db: SessionDB, fn: Callable[[Connection], T]) -> T:
    return db._read(fn)


def read_replica(db: SessionDB, fn: Callable[[Connection], T]) -> T:
    """A search or a listing: served by the store's read location when it has one."""
    return db._read(fn, replica_ok=True)


def write(db: SessionDB, fn: Callable[[Connection], T], *, what: str) -> T:
    return db._write(fn, what=what)


def append(db: SessionDB, fn: Callable[[Connection], T], *, what: str) -> T:
    """A write unit on the agent's hot path (a turn's rows), with the longer lock budget."""
    return db._write(fn, append=True, what=what)


def best_effort(db: SessionDB, fn: Callable[[Connection], T], *, default: T, what: str) -> T:
    """One write unit; a database failure (lock budget included) is logged, not raised."""
    try:
        return db._write(fn, what=what)
    except (sqlite3.Error, SQLAlchemyError, HermesStoreError) as exc:
        log.warning("%s failed, continuing without it: %s", what, exc)
        return default


def call_args(**values: Any) -> dict[str, Any]:
    """Keyword arguments with the ``None`` ones dropped (for "only when given" updates)."""
    return {k: v for k, v in values.items() if v is not None}
