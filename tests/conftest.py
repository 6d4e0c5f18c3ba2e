"""Shared fixtures: a fresh store per test on either backend, and the legacy fixture files.

``store`` / ``head_store`` are parametrised over ``sqlite`` and ``postgresql`` (see
``tests/backends.py`` for where the server comes from); a test about SQLite itself (pragmas,
files, FTS5) carries ``@pytest.mark.sqlite_only`` and gets the SQLite variant alone.
``store_path`` / ``head_db`` stay SQLite files.

With ``HERMES_STORE_TEST_VIA=pgbouncer`` every PostgreSQL store's URL goes through a pgbouncer
in transaction mode that the session starts (``.ci/run`` reruns a subset that way).
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backends import POOLER_ENV, PgServer, Pooler, ReplicaPair, pg_required, pooled_run

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate

# The v21 API tests' ``db`` and ``v21_db`` fixtures live beside their row builders; as a plugin
# they reach every test module by name, with no import of the fixture for pytest to find.
pytest_plugins = ["v21_stores"]

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY_VERSIONS = (1, 2, 4, 6, 10, 11, 21)


@pytest.fixture(autouse=True)
def _forget_engines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # No test may touch the real ~/.hermes, and engines must not outlive their test's files.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes_home"))
    yield
    engine_mod.dispose_all()


BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("backend", BACKENDS[:1] if only else BACKENDS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if pooled_run():
        items[:] = [item for item in items if item.get_closest_marker("direct_pg") is None]


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server, reason = PgServer.find()
    if server is None:
        if pg_required():
            pytest.fail(f"HERMES_STORE_REQUIRE_PG is set but {reason}", pytrace=False)
        pytest.skip(reason)
    if pooled_run():
        server.pooler = _start_pooler(server)
    yield server
    engine_mod.dispose_all()
    server.close()


def _start_pooler(server: PgServer) -> Pooler:
    try:
        return Pooler.start(server.admin_url)
    except RuntimeError as err:
        server.close()
        pytest.fail(f"{POOLER_ENV}=pgbouncer but {err}", pytrace=False)


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[Pooler]:
    """A pgbouncer in transaction mode in front of the test server (the pooled run's own, or
    one started for the tests about poolers)."""
    if pg_server.pooler is not None:
        yield pg_server.pooler
        return
    try:
        pooler = Pooler.start(pg_server.admin_url)
    except RuntimeError as err:
        if pg_required():
            pytest.fail(f"HERMES_STORE_REQUIRE_PG is set but {err}", pytrace=False)
        pytest.skip(str(err))
    yield pooler
    pooler.stop()


@pytest.fixture(scope="session")
def replica_pair() -> Iterator[ReplicaPair]:
    """A primary and a hot standby of it (throwaway clusters), for the tests about replicas."""
    try:
        pair = ReplicaPair.start()
    except Exception as err:  # noqa: BLE001 - any failure: no replica pair on this machine
        if pg_required():
            pytest.fail(f"HERMES_STORE_REQUIRE_PG is set but no replica pair: {err}",
                        pytrace=False)
        pytest.skip(f"no replica pair: {err}")
    yield pair
    engine_mod.dispose_all()
    pair.stop()


def _server_store(request: pytest.FixtureRequest, *, at_head: bool) -> Iterator[str]:
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.head_database() if at_head else server.empty_database()
    yield url
    engine_mod.dispose_all()
    server.drop(url)


@pytest.fixture
def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """Where this test's store lives: a file path with nothing there yet, or the URL of a fresh
    PostgreSQL database already at head (cloned: an upgrade per test would cost more)."""
    if backend == "sqlite":
        yield str(tmp_path / "state.db")
        return
    yield from _server_store(request, at_head=True)


@pytest.fixture
def empty_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A store with no tables yet on either backend (a missing file; an empty database)."""
    if backend == "sqlite":
        yield str(tmp_path / "state.db")
        return
    yield from _server_store(request, at_head=False)


@pytest.fixture
def pg_store(request: pytest.FixtureRequest) -> Iterator[str]:
    """For tests about the server itself: a fresh PostgreSQL database at head."""
    yield from _server_store(request, at_head=True)


@pytest.fixture
def pg_empty_store(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _server_store(request, at_head=False)


@pytest.fixture
def head_store(store: str, backend: str) -> str:
    if backend == "sqlite":
        migrate.upgrade(store)
    return store


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def head_db(store_path: Path) -> Path:
    migrate.upgrade(store_path)
    return store_path


@pytest.fixture
def legacy_db(tmp_path: Path) -> Callable[[int], Path]:
    """Decompress ``state-vN.db.gz`` into a private copy (the originals stay untouched)."""

    def make(version: int) -> Path:
        target = tmp_path / f"state-v{version}.db"
        with gzip.open(FIXTURES / f"state-v{version}.db.gz", "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        target.chmod(0o600)
        return target

    return make
