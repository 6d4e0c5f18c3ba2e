"""Append throughput on realistic messages: the library, the raw floor, the agent's v11 store.

Every layout appends the same 300 messages of the seeded corpus (chat in several languages,
assistant turns with tool calls, tool outputs up to 100 kB), one transaction a message, into a
fresh store holding their sessions, at the durability the library runs at (its ``synchronous``
is read from a library connection and set on the raw ones):

* ``head``   — ``SessionDB.append_message``, end to end (validation, serialisation, the write).
* ``floor``  — raw sqlite3 on a head store executing the statements the library's append runs:
  ``BEGIN IMMEDIATE``, the insert, the counter update, the CJK side row (read through the search
  view, derived in Python with the library's own function: the layout needs it) and the
  pending-list upkeep, ``COMMIT``.
* ``inline`` — the agent's v11 append on its inline layout: ``BEGIN IMMEDIATE``, insert, counter
  update, ``COMMIT``.

Floor and v11 also run v11's PASSIVE checkpoint every 50 writes, as the library does.

    pytest benchmarks/test_bench_append.py --benchmark-only \
        --benchmark-json=benchmarks/results/append.json
    python -m benchmarks.report --append benchmarks/results/append.json

A round appends the messages once per layout, back to back in a rotating order (each into a
fresh store), so the ratios compare appends made under the same load from other processes.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate

from . import corpus as corpus_mod
from . import floors

INLINE_REVISION = "0011_v11_inline_fts"
APPENDS = 300
ROUNDS = 9
CHECKPOINT_EVERY = engine_mod.CHECKPOINT_EVERY_N_WRITES
_counter = itertools.count()

V11_INSERT = ("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
              "VALUES (?, ?, ?, ?, ?, ?)")


@pytest.fixture(scope="module")
def messages() -> tuple[list[corpus_mod.Session], list[corpus_mod.Row]]:
    sessions: list[corpus_mod.Session] = []
    rows: list[corpus_mod.Row] = []
    for session, chunk in corpus_mod.generate(APPENDS, seed=corpus_mod.SEED + 1):
        sessions.append(session)
        rows.extend(chunk)
    return sessions, rows


@pytest.fixture
def scratch(tmp_path: Path, messages):
    sessions, _ = messages

    def make(revision: str) -> Path:
        path = tmp_path / f"append-{next(_counter)}.db"
        migrate.upgrade(path, revision)
        con = sqlite3.connect(path)
        con.executemany("INSERT INTO sessions (id, source, model, started_at) VALUES (?, ?, ?, ?)",
                        sessions)
        con.commit()
        con.close()
        engine_mod.dispose_all()
        return path

    return make


def _library_synchronous(path: Path) -> int:
    with engine_mod.reading(engine_mod.open_engine(path)) as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar())


def _raw(path: Path) -> sqlite3.Connection:
    sync = _library_synchronous(path)
    engine_mod.dispose_all()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(f"PRAGMA synchronous={sync}")
    con.execute("PRAGMA foreign_keys=ON")
    return con


def _checkpoint(con: sqlite3.Connection, n: int) -> None:
    if n % CHECKPOINT_EVERY == 0:
        con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _inline_appends(con: sqlite3.Connection, rows: list[corpus_mod.Row]) -> None:
    for n, r in enumerate(rows, 1):
        con.execute("BEGIN IMMEDIATE")
        con.execute(V11_INSERT, (r.session_id, r.role, r.content, r.tool_name, r.tool_calls,
                                 r.timestamp))
        con.execute(floors.SQLITE_BUMP,
                    (floors.tool_calls_of(r.role, r.tool_calls), r.session_id))
        con.execute("COMMIT")
        _checkpoint(con, n)
    con.close()


def _floor_appends(con: sqlite3.Connection, rows: list[corpus_mod.Row]) -> None:
    # The writers benchmark's floor append (benchmarks/floors.py), checkpoint cadence included.
    for n, r in enumerate(rows, 1):
        floors.sqlite_append(con, n, r.session_id, r.role, r.content, r.tool_name, r.tool_calls,
                             r.timestamp)
    con.close()


def _library_appends(db: SessionDB, rows: list[corpus_mod.Row]) -> None:
    for r in rows:
        db.append_message(r.session_id, r.role, r.content, tool_name=r.tool_name,
                          tool_calls=r.tool_calls, timestamp=r.timestamp)
    db.close()


def _check(path: Path, rows: list[corpus_mod.Row]) -> None:
    con = sqlite3.connect(path)
    try:
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == len(rows)
    finally:
        con.close()


LAYOUTS = {  # layout: (revision, open the store, append the rows)
    "inline": (INLINE_REVISION, _raw, _inline_appends),
    "floor": ("head", _raw, _floor_appends),
    "head": ("head", SessionDB, _library_appends),
}


def test_append_rates(benchmark, scratch, messages) -> None:
    """One round appends the messages once per layout, in a rotating order, each into a fresh
    store: load from other processes then hits the three alike, and each round's ratios compare
    appends made seconds apart. ``extra_info`` holds every layout's seconds per round, in wall
    time and in this process's CPU time (the statements, SQLite's work included, without the
    waits for the disk and for other processes)."""
    _, rows = messages
    times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    cpu: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    rounds = itertools.count()

    def setup():
        paths = {layout: scratch(revision) for layout, (revision, _, _) in LAYOUTS.items()}
        return (paths, next(rounds)), {}

    def one_round(paths: dict[str, Path], n: int) -> None:
        names = list(LAYOUTS)
        for layout in names[n % 3:] + names[:n % 3]:
            _, prepare, append = LAYOUTS[layout]
            target = prepare(paths[layout])
            start, start_cpu = time.perf_counter(), time.process_time()
            append(target, rows)
            times[layout].append(time.perf_counter() - start)
            cpu[layout].append(time.process_time() - start_cpu)
        for path in paths.values():
            _check(path, rows)

    benchmark.group = "append:realistic"
    benchmark.pedantic(one_round, setup=setup, rounds=ROUNDS)
    benchmark.extra_info.update(kind="append-rates", messages=len(rows), seconds=times,
                                cpu_seconds=cpu)
