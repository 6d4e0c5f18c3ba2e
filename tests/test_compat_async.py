"""``AsyncSessionDB``: every public method of a store, awaitable in a worker thread; nothing
else added (docs/v21.md#async)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.compat import AsyncSessionDB


def test_methods_return_what_the_store_returns(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)

    async def run() -> None:
        assert await adb.create_session("s1", "cli") == "s1"
        mid = await adb.append_message("s1", "user", "hello from the loop")
        assert await adb.get_messages("s1") == db.get_messages("s1")
        assert [m["id"] for m in await adb.search_messages("loop")] == [mid]
        with pytest.raises(ValueError, match="limit must be >= 0"):  # errors come back
            await adb.search_messages("loop", limit=-1)
        assert await adb.get_compression_tip("s1") == "s1"
        assert await adb.sanitize_title("  a   title ") == db.sanitize_title("  a   title ")
        assert await adb.vacuum() == db.optimize_fts()

    asyncio.run(run())


def test_calls_run_in_a_worker_thread(db: SessionDB) -> None:
    db.where = threading.get_ident  # type: ignore[attr-defined]
    worker = asyncio.run(AsyncSessionDB(db).where())
    assert worker != threading.get_ident()


def test_exceptions_come_back_as_raised(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)
    with pytest.raises(ValueError):
        asyncio.run(adb.create_session("", "cli"))
    with pytest.raises(sqlite3.IntegrityError):
        asyncio.run(adb.append_message("nobody", "user", "x"))


def test_non_callables_forward_as_they_are_at_lookup_time(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)
    assert adb.db_path == db.db_path and adb.read_only is False
    assert adb.MAX_TITLE_LENGTH == 100
    assert adb._db is db
    db.marker = "first"  # type: ignore[attr-defined]
    assert adb.marker == "first"
    db.marker = "second"  # type: ignore[attr-defined]
    assert adb.marker == "second"


def test_concurrent_awaits_run_in_parallel_and_all_land(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)
    db.create_session("s1", "cli")

    async def run() -> list[int]:
        return await asyncio.gather(*(adb.append_message("s1", "user", f"m{n}")
                                      for n in range(20)))

    ids = asyncio.run(run())
    assert len(set(ids)) == 20
    assert db.message_count("s1") == 20


def test_close_is_awaitable_and_the_wrapper_has_no_lifecycle(store_path: Path) -> None:
    store = SessionDB(store_path)
    adb = AsyncSessionDB(store)
    assert not isinstance(adb, SessionDB)
    for dunder in ("__enter__", "__exit__", "__aenter__", "__len__"):
        with pytest.raises(AttributeError):
            getattr(adb, dunder)
    asyncio.run(adb.close())
    with pytest.raises(sqlite3.ProgrammingError):
        store.get_session("s1")
