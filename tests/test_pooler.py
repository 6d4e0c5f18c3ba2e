"""Behind a connection pooler: the default URL works through pgbouncer in transaction mode
(prepared statements are switched off for connections that go through a pooler, kept on
direct ones), and the errors a pooler causes name their cause.

The rest of the store's behaviour through pgbouncer is the pooled run of the both-backend
tests (``HERMES_STORE_TEST_VIA=pgbouncer``, see tests/conftest.py and .ci/run)."""

from __future__ import annotations

import sqlite3
import threading

import psycopg
import pytest
from backends import PgServer, Pooler

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import postgres
from hermes_store.errors import PoolerError
from hermes_store.paths import resolve_location

THREADS, TURNS = 6, 30


@pytest.fixture
def pooled_store(pg_server: PgServer, pgbouncer: Pooler) -> tuple[str, str]:
    """(direct URL, URL through pgbouncer) of one fresh database at head."""
    url = pg_server.head_database()
    name = resolve_location(url).database
    yield pg_server.direct_url_for(name), pgbouncer.url_for(pg_server.direct_url_for(name))
    engine_mod.dispose_all()
    pg_server.drop(url)


def _threshold(url: str) -> int | None:
    raw = engine_mod.open_engine(url).raw_connection()
    try:
        return raw.driver_connection.prepare_threshold
    finally:
        raw.close()


def test_a_direct_connection_keeps_prepared_statements(pooled_store: tuple[str, str]) -> None:
    direct, _ = pooled_store
    assert not postgres.through_pooler(engine_mod.open_engine(direct))
    assert _threshold(direct) == postgres.PREPARE_THRESHOLD


def test_a_connection_through_pgbouncer_prepares_nothing(pooled_store: tuple[str, str]) -> None:
    _, pooled = pooled_store
    assert postgres.through_pooler(engine_mod.open_engine(pooled))
    assert _threshold(pooled) is None


def test_a_prepare_threshold_in_the_url_is_kept_behind_a_pooler(
        pooled_store: tuple[str, str]) -> None:
    # pgbouncer 1.21+ with max_prepared_statements carries them: the user may ask for them.
    _, pooled = pooled_store
    assert _threshold(pooled + "?prepare_threshold=3") == 3


def test_threads_sharing_pgbouncer_with_the_default_url_lose_nothing(
        pooled_store: tuple[str, str]) -> None:
    # More client connections than the pooler has server connections: each statement may run
    # on another server connection than the last, which a prepared statement does not survive.
    _, pooled = pooled_store
    errors: list[BaseException] = []
    with SessionDB(pooled) as db:
        for n in range(THREADS):
            db.create_session(f"s{n}", "cli")

        def host(n: int) -> None:
            try:
                for turn in range(TURNS):
                    db.append_message(f"s{n}", "user", f"turn {turn} of host {n} kubernetes")
                    db.search_messages("kubernetes", limit=5)
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=host, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert [db.message_count(f"s{n}") for n in range(THREADS)] == [TURNS] * THREADS


@pytest.mark.parametrize("statements", [
    ["EXECUTE hermes_never_prepared"],  # 26000
    ["PREPARE hermes_twice AS SELECT 1", "PREPARE hermes_twice AS SELECT 1"],  # 42P05
])
def test_lost_prepared_statements_are_named_as_the_pooler_problem(
        pooled_store: tuple[str, str], statements: list[str]) -> None:
    direct, _ = pooled_store

    def unit(conn: object) -> None:
        for statement in statements:
            conn.exec_driver_sql(statement)  # type: ignore[attr-defined]

    with pytest.raises(PoolerError, match="prepared statement") as err:
        engine_mod.run_write(engine_mod.open_engine(direct), unit)
    assert isinstance(err.value, sqlite3.OperationalError)
    assert "prepare_threshold=none" in str(err.value)


def test_a_protocol_violation_is_not_reported_as_an_unreachable_server() -> None:
    location = resolve_location("postgresql://hermes@db.example/hermes")
    violation = psycopg.errors.ProtocolViolation(
        "bind message supplies 20 parameters, but prepared statement \"_pg3_4\" requires 5")
    translated = postgres.unwrap(violation, location, {"pooled": True})
    assert isinstance(translated, PoolerError)
    assert "goes through a pooler" in str(translated) and "bind message" in str(translated)
