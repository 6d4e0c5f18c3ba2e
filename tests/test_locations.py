"""Store locations: a file path or a SQLAlchemy URL, $HERMES_STORE_URL as the default, and a
password that never shows."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from backends import closed_port
from cli_support import run, run_json

from hermes_store import SessionDB
from hermes_store.db import migrate
from hermes_store.errors import StoreUnavailableError, UsageError
from hermes_store.paths import (
    PG_DRIVER,
    STORE_URL_ENV,
    StoreLocation,
    hermes_home,
    resolve_location,
)

SECRET = "s3cr3t-pa55"


@pytest.fixture
def down_url() -> str:
    """A PostgreSQL URL with a password, pointing at a port nothing listens on."""
    return f"postgresql://hermes:{SECRET}@127.0.0.1:{closed_port()}/storedb"


@pytest.mark.parametrize("url", ["postgresql://u@h/db", "postgres://u@h/db",
                                 "postgresql+psycopg://u@h/db"])
def test_postgresql_urls_mean_psycopg_3_and_name_no_file(url: str) -> None:
    location = resolve_location(url)
    assert location.path is None and location.url.drivername == PG_DRIVER
    assert location.dialect == "postgresql" and location.database == "db"


def test_a_url_is_never_made_into_directories(down_url: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreUnavailableError):
        SessionDB(down_url)
    assert run("--db", down_url, "upgrade").exit_code == 9
    assert not any("postgres" in p.name for p in tmp_path.rglob("*"))


def test_a_sqlite_url_names_the_same_file_as_its_path(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "state.db"
    location = resolve_location(f"sqlite:///{target}")
    assert location.path == target and location == StoreLocation.for_path(target)
    with SessionDB(f"sqlite:///{target}") as db:
        db.create_session("s1", "cli")
    with SessionDB(target) as db:
        assert db.get_session("s1") is not None


@pytest.mark.parametrize("url", ["mysql://u:pw@h/db", "postgresql+psycopg2://u@h/db",
                                 "sqlite://", "postgresql://u@h/"])
def test_an_unusable_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError):
        resolve_location(url)
    code, doc = run_json("--db", url, "current")
    assert code == 2 and doc["error"]["code"] == "usage"
    assert "pw" not in doc["error"]["message"]


def test_the_password_never_appears_in_messages_logs_or_json(
        down_url: str, caplog: pytest.LogCaptureFixture) -> None:
    location = resolve_location(down_url + f"?sslpassword={SECRET}")
    assert SECRET not in f"{location} {location!r} {location.display}"
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreUnavailableError) as err:
        SessionDB(down_url)
    assert SECRET not in str(err.value) and SECRET not in caplog.text
    for args in (("--json", "--db", down_url, "list"), ("--db", down_url, "check"),
                 ("--json", "--db", down_url, "upgrade")):
        result = run(*args)
        assert result.exit_code == 9
        assert SECRET not in result.stdout + result.stderr


def test_hermes_store_url_is_the_default_store(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "from_env.db"
    monkeypatch.setenv(STORE_URL_ENV, f"sqlite:///{target}")
    with SessionDB() as db:
        assert db.db_path == target
        db.create_session("s1", "cli")
    assert run("upgrade").exit_code == 0
    code, doc = run_json("current")
    assert code == 0 and doc["path"] == str(target)
    # An explicit store, or a profile, still wins over the environment.
    other = tmp_path / "explicit.db"
    assert run("--db", str(other), "upgrade").exit_code == 0 and other.exists()
    assert resolve_location(profile="work").path == (
        hermes_home() / "profiles" / "work" / "state.db")


def test_hermes_store_url_may_name_a_server(pg_store: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_URL_ENV, pg_store)
    with SessionDB() as db:
        assert db.db_path is None and db.location.dialect == "postgresql"
        db.create_session("from-env", "cli")
    with SessionDB(pg_store) as db:
        assert db.get_session("from-env") is not None
    code, doc = run_json("check")
    assert code == 0 and doc["at_head"] is True
    assert migrate.status().at_head
