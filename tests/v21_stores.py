"""The stores the v21 API tests of compression, gateway, handoff and lookup run on, and a few
row builders. One place to change when the tests run over a second backend.

tests/conftest.py registers this module as a plugin, so its fixtures (``db``, ``v21_db``) reach
every test module by name; the row builders are imported (``from v21_stores import make``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.engine import URL

from hermes_store import ChatSession, SessionDB

sessions = ChatSession.__table__

BASE_TS = 1_790_000_000.0  # 2026-09: a fixed past, far from the sanity window's edges


@pytest.fixture
def db(store: str) -> Iterator[SessionDB]:
    """A SessionDB on a fresh store at head, on either backend (``store`` is a path or a URL)."""
    with SessionDB(store) as opened:
        yield opened


@pytest.fixture
def v21_db(legacy_db: Callable[[int], Path]) -> Iterator[SessionDB]:
    """A SessionDB on a copy of the v21 agent's own store (tests/fixtures/state-v21.db.gz)."""
    with SessionDB(legacy_db(21)) as store:
        yield store


def set_columns(db: SessionDB, session_id: str, **values: Any) -> None:
    """Write columns the API has no setter for (times, end reasons) in one unit."""
    db._write(lambda c: c.execute(update(sessions).where(sessions.c.id == session_id)
                                  .values(**values)))


def column(db: SessionDB, session_id: str, name: str) -> Any:
    return db._read(lambda c: c.execute(select(sessions.c[name])
                                        .where(sessions.c.id == session_id)).scalar())


def make(db: SessionDB, session_id: str, source: str = "cli", *, parent: str | None = None,
         started_at: float = BASE_TS, ended_at: float | None = None,
         end_reason: str | None = None, markers: dict[str, str] | None = None,
         messages: int = 0, **columns: Any) -> str:
    """A session with exact times; ``markers`` go into ``model_config``; ``messages`` user
    turns are appended one second apart from ``started_at``."""
    db.create_session(session_id, source, parent_session_id=parent,
                      model_config=dict(markers or {}, temperature=0) if markers else None)
    for n in range(messages):
        db.append_message(session_id, "user", f"turn {n} of {session_id}",
                          timestamp=started_at + n + 1)
    set_columns(db, session_id, started_at=started_at, ended_at=ended_at,
                end_reason=end_reason, **columns)
    return session_id


def config_of(db: SessionDB, session_id: str) -> dict[str, Any] | None:
    text = column(db, session_id, "model_config")
    return json.loads(text) if text else None


@contextmanager
def holding_write_lock(db: SessionDB) -> Iterator[None]:
    """Another connection holds what every write needs for the duration (as a sibling process
    in the middle of a long write would): SQLite's write lock; on PostgreSQL every table of the
    store, locked against writes but not reads, so a writer waits out its lock timeout."""
    if db.db_path is None:
        with _holding_every_table(db.location.url):
            yield
        return
    other = sqlite3.connect(db.db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@contextmanager
def _holding_every_table(url: URL) -> Iterator[None]:
    import psycopg  # the postgres extra: only the server variants get here

    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain) as other:
        names = [r[0] for r in other.execute(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'")]
        other.execute(f"LOCK TABLE {', '.join(names)} IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            other.rollback()
