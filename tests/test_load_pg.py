"""Gateway hosts on one PostgreSQL database: writer processes and searching readers at once;
nothing lost or doubled, every counter exact, every snapshot whole, the search columns complete.
(The SQLite counterpart is tests/test_load.py; timing is benchmarks/bench_writers.py's business.)
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import reliability_workers as rw
from backends import PgServer
from sqlalchemy import text

from hermes_store import SessionDB
from hermes_store.db import engine as eng

pytestmark = pytest.mark.slow

HOSTS = 4
TURNS = 40  # three messages and a usage update a turn
OWN_SESSIONS = 3
READERS = 2
RUN_TIMEOUT_S = 240


@dataclass
class ServerLoad:
    url: str
    writers: list[dict]
    readers: list[dict]


def _rows(url: str, statement: str, **params: str) -> list:
    with eng.reading(eng.open_engine(url)) as conn:
        return list(conn.execute(text(statement), params))


@pytest.fixture(scope="module")
def server_load(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[ServerLoad]:
    """One run shared by the checks below (it is the expensive part): writer processes standing
    in for gateway hosts, readers searching all along."""
    tmp = tmp_path_factory.mktemp("pgload")
    url = pg_server.head_database()
    ctx = mp.get_context("spawn")
    stop = tmp / "stop"
    writer_reports = [str(tmp / f"host-{n}.json") for n in range(HOSTS)]
    reader_reports = [str(tmp / f"reader-{n}.json") for n in range(READERS)]
    writers = [ctx.Process(target=rw.host_writer,
                           args=(url, f"host{n}", TURNS, OWN_SESSIONS, writer_reports[n]))
               for n in range(HOSTS)]
    readers = [ctx.Process(target=rw.server_reader, args=(url, str(stop), reader_reports[n]))
               for n in range(READERS)]
    for p in readers + writers:
        p.start()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while any(p.is_alive() for p in writers) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.touch()
    try:
        for p in writers + readers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                pytest.fail(f"{p.name} did not finish within the run's time bound")
        yield ServerLoad(url, [rw.read_report(r) for r in writer_reports],
                         [rw.read_report(r) for r in reader_reports])
    finally:
        eng.dispose_all()
        pg_server.drop(url)


def test_no_error_reaches_a_host_or_a_reader(server_load: ServerLoad) -> None:
    assert [w["errors"] for w in server_load.writers] == [[]] * HOSTS
    assert [r["errors"] for r in server_load.readers] == [[]] * READERS
    assert all(r["queries"] > 0 and r["hits"] > 0 for r in server_load.readers)


def test_every_snapshot_a_reader_took_had_counters_equal_to_rows(server_load: ServerLoad) -> None:
    assert [r["torn"] for r in server_load.readers] == [[]] * READERS


def test_concurrent_appends_are_neither_lost_nor_doubled(server_load: ServerLoad) -> None:
    written = Counter((sid, content) for w in server_load.writers for sid, content in w["written"])
    assert sum(written.values()) == HOSTS * TURNS * 3
    assert max(written.values()) == 1  # every message is unique: a double would show
    stored = Counter((sid, content) for sid, content in
                     _rows(server_load.url, "SELECT session_id, content FROM messages"))
    assert stored == written


def test_message_and_tool_call_counters_are_exact(server_load: ServerLoad) -> None:
    counters = {sid: (n, calls) for sid, n, calls in _rows(
        server_load.url, "SELECT id, message_count, tool_call_count FROM sessions")}
    rows = {sid: (n, calls) for sid, n, calls in _rows(
        server_load.url, "SELECT session_id, count(*), count(tool_calls) FROM messages "
                         "GROUP BY session_id")}
    assert len(counters) == HOSTS * OWN_SESSIONS + 1
    assert counters == rows
    assert counters[rw.SHARED_SESSION] == (HOSTS * TURNS // 2 * 3, HOSTS * TURNS // 2)


def test_token_counters_are_exact(server_load: ServerLoad) -> None:
    expected: dict[str, list[int]] = {}
    for w in server_load.writers:
        for sid, amounts in w["tokens"].items():
            total = expected.setdefault(sid, [0, 0, 0, 0])
            for k, amount in enumerate(amounts):
                total[k] += amount
    stored = {sid: list(values) for sid, *values in _rows(
        server_load.url, "SELECT id, input_tokens, output_tokens, reasoning_tokens, "
                         "api_call_count FROM sessions")}
    assert stored == expected
    per_model = {sid: list(values) for sid, *values in _rows(
        server_load.url, "SELECT session_id, sum(input_tokens), sum(output_tokens), "
                         "sum(reasoning_tokens), sum(api_call_count) FROM session_model_usage "
                         "GROUP BY session_id")}
    assert per_model == expected


def test_every_row_is_in_the_search_columns_and_found(server_load: ServerLoad) -> None:
    url = server_load.url
    [(pending, words, cjk)] = _rows(url, """
        SELECT count(*) FILTER (WHERE hs_search_cjk IS NULL AND role <> 'tool'),
               count(*) FILTER (WHERE hs_search_words @@ to_tsquery('hs_search', 'kubernetes')
                                  OR hs_search_cjk @@ '''kubernetes'''::tsquery),
               count(*) FILTER (WHERE hs_search_cjk @@ CAST(:cjk AS tsquery))
        FROM messages""", cjk="'部署':A")
    assert (pending, words, cjk) == (0, HOSTS * TURNS, HOSTS * TURNS)
    with SessionDB(url, readonly=True) as db:
        newest = db.search_messages("kubernetes", sort="newest", limit=HOSTS * TURNS + 5)
        assert len(newest) == HOSTS * TURNS
        stamps = [(hit["timestamp"], hit["id"]) for hit in newest]
        assert stamps == sorted(stamps, reverse=True)
        assert len(db.search_messages("部署", limit=HOSTS * TURNS + 5)) == HOSTS * TURNS
