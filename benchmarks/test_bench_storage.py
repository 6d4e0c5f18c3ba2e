"""File bytes, migration time and append throughput: inline v11 against head.

Sizes and migration times are measured once while the session's stores are built (see
conftest); they ride along as ``extra_info`` of the benchmarks below, so one results JSON holds
every figure ``report.py`` needs.
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.db import migrate

from .conftest import INLINE_REVISION

APPENDS = 200
_counter = itertools.count()


def test_storage_figures(benchmark, stores) -> None:
    """Records sizes and the migration cost; times reading the head file's size (trivial)."""
    benchmark.group = "storage"
    benchmark.extra_info.update(
        layout="head", kind="storage", messages=len(stores.corpus.rows),
        text_bytes=stores.corpus.text_bytes, inline_bytes=stores.inline_bytes,
        head_bytes=stores.head_bytes, upgrade_s=stores.upgrade_s, optimize_s=stores.optimize_s)
    benchmark(lambda: stores.head.stat().st_size)


def _message(n: int) -> tuple[str, str, float]:
    text = ("部署服务之后通信正常，" if n % 3 == 0 else "") + f"append benchmark message {n} docker"
    return ("bench", text, float(n))


@pytest.fixture
def scratch(tmp_path: Path):
    """Makes a store at *revision* holding the session the appends go to; remembers each path."""
    made: list[Path] = []

    def make(revision: str) -> Path:
        path = tmp_path / f"append-{revision}-{next(_counter)}.db"
        migrate.upgrade(path, revision)
        con = sqlite3.connect(path)
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('bench', 'cli', 0)")
        con.commit()
        con.close()
        made.append(path)
        return path

    make.made = made  # type: ignore[attr-defined]
    return make


def _landed(paths: list[Path], *, counted: bool) -> None:
    """Every round wrote all its rows (and, through the library, counted them)."""
    assert paths
    for path in paths:
        con = sqlite3.connect(path)
        rows = con.execute("SELECT count(*) FROM messages WHERE session_id = 'bench'").fetchone()
        count = con.execute("SELECT message_count FROM sessions WHERE id = 'bench'").fetchone()
        con.close()
        assert rows[0] == APPENDS, path
        if counted:
            assert count[0] == APPENDS, path


def _raw_appends(path: Path) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    for n in range(APPENDS):
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES (?, 'user', ?, ?)", _message(n))
        con.execute("COMMIT")
    con.close()


def test_append_inline(benchmark, scratch) -> None:
    benchmark.group = "append"
    benchmark.extra_info.update(layout="inline", kind="append", messages=APPENDS)
    benchmark.pedantic(_raw_appends, setup=lambda: ((scratch(INLINE_REVISION),), {}), rounds=5)
    _landed(scratch.made, counted=False)


def test_append_floor(benchmark, scratch) -> None:
    benchmark.group = "append"
    benchmark.extra_info.update(layout="floor", kind="append", messages=APPENDS)
    benchmark.pedantic(_raw_appends, setup=lambda: ((scratch("head"),), {}), rounds=5)
    _landed(scratch.made, counted=False)


def _library_appends(db: SessionDB) -> None:
    # The public call end to end: validation, encoding, the write unit with its retries, the
    # counters and the CJK side rows; close() ends it as con.close() ends the floor.
    for n in range(APPENDS):
        sid, text, ts = _message(n)
        db.append_message(sid, "user", text, timestamp=ts)
    db.close()


def test_append_head(benchmark, scratch) -> None:
    """``SessionDB.append_message``; opening the store (a one-time schema check) is not timed."""
    benchmark.group = "append"
    benchmark.extra_info.update(layout="head", kind="append", messages=APPENDS)
    benchmark.pedantic(_library_appends, setup=lambda: ((SessionDB(scratch("head")),), {}),
                       rounds=5)
    _landed(scratch.made, counted=True)


def test_migration_inline_to_head(benchmark, stores, tmp_path: Path) -> None:
    """The blocking part of the move (``upgrade``) on a copy of the inline store."""
    benchmark.group = "migration"
    benchmark.extra_info.update(layout="head", kind="migration")
    copies = itertools.count()

    def setup():
        target = tmp_path / f"migrate-{next(copies)}.db"
        shutil.copy(stores.inline, target)
        return (target,), {}

    benchmark.pedantic(migrate.upgrade, setup=setup, rounds=3)
