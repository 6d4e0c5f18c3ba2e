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

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, run_write
from hermes_store.repo import bigrams

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
    def make(revision: str) -> Path:
        path = tmp_path / f"append-{revision}-{next(_counter)}.db"
        migrate.upgrade(path, revision)
        con = sqlite3.connect(path)
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('bench', 'cli', 0)")
        con.commit()
        con.close()
        return path

    return make


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


def test_append_floor(benchmark, scratch) -> None:
    benchmark.group = "append"
    benchmark.extra_info.update(layout="floor", kind="append", messages=APPENDS)
    benchmark.pedantic(_raw_appends, setup=lambda: ((scratch("head"),), {}), rounds=5)


def _library_appends(path: Path) -> None:
    engine = open_engine(path)

    def one(n: int):
        def unit(conn) -> None:
            new_id = conn.exec_driver_sql(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES (?, 'user', ?, ?)", _message(n)).lastrowid
            bigrams.sync_messages(conn, [new_id])

        return unit

    for n in range(APPENDS):
        run_write(engine, one(n), what="append")


def test_append_head(benchmark, scratch) -> None:
    benchmark.group = "append"
    benchmark.extra_info.update(layout="head", kind="append", messages=APPENDS)
    benchmark.pedantic(_library_appends, setup=lambda: ((scratch("head"),), {}), rounds=5)


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
