"""Where the store lives: a mistyped --db directory is reported, never created; only the
default home is created on demand."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_support import on_server, run, run_json
from sqlalchemy.engine import make_url

from hermes_store import open_engine
from hermes_store.errors import StoreNotFoundError


def _missing_place(store: str) -> str:
    """Where no store can be: a directory that is not there, or a database the server lacks."""
    if on_server(store):
        return make_url(store).set(database="no_such_db").render_as_string(hide_password=False)
    return str(Path(store).parent / "no-such-dir" / "state.db")


@pytest.mark.parametrize("args", [["list"], ["stats"], ["search", "x"], ["current"],
                                  ["upgrade"], ["show", "abcd1234"], ["check"]])
def test_a_store_in_a_missing_place_is_not_found(store: str, args: list[str]) -> None:
    missing = _missing_place(store)
    code, doc = run_json("--db", missing, *args)
    assert code == 3, doc
    assert doc["error"]["code"] == "not_found"
    assert ("no_such_db" if on_server(store) else "no-such-dir") in doc["error"]["message"]
    assert run_json("--db", missing, "list")[0] == 3  # nothing was created


def test_doctor_on_a_store_in_a_missing_directory_is_not_found(store: str) -> None:
    missing = _missing_place(store)
    code, doc = run_json("--db", missing, "doctor")
    assert (code, doc["error"]["code"]) == (3, "not_found"), doc
    assert not Path(missing).parent.exists()


def test_import_does_not_create_a_mistyped_directory(tmp_path: Path) -> None:
    source = tmp_path / "backup.jsonl"
    source.write_text("")
    missing = tmp_path / "typo" / "state.db"
    result = run("--db", str(missing), "import", str(source))
    assert result.exit_code == 3
    assert not missing.parent.exists()


def test_open_engine_does_not_create_a_mistyped_directory(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "deeper" / "state.db"
    with pytest.raises(StoreNotFoundError, match="typo"):
        open_engine(missing)
    with pytest.raises(sqlite3.OperationalError):  # what v11 callers catch
        open_engine(missing)
    assert not (tmp_path / "typo").exists()


def test_the_default_home_is_created_on_demand(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "fresh-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    code, doc = run_json("list")
    assert (code, doc["error"]["code"]) == (3, "not_found")
    assert "upgrade" in doc["error"]["message"]
    assert not home.exists()  # reading commands never create anything
    assert run("upgrade").exit_code == 0
    assert (home / "state.db").is_file()


@pytest.mark.parametrize("args", [["list"], ["stats"], ["search", "foo"], ["show", "abcd"],
                                  ["export", "-"], ["doctor"]])
def test_a_mistyped_store_name_in_an_existing_directory_is_not_found_and_not_created(
        tmp_path: Path, args: list[str]) -> None:
    result = run("--db", str(tmp_path / "stat.db"), *args)
    assert result.exit_code == 3, result.output
    assert "no store at" in result.stderr and "no messages match" not in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_profile_lives_under_the_home_and_is_a_plain_name(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "profiles" / "work").mkdir(parents=True)
    monkeypatch.setenv("HERMES_HOME", str(home))
    code, doc = run_json("--profile", "work", "stats")
    assert code == 3 and str(home / "profiles" / "work" / "state.db") in doc["error"]["message"]
    for bad in ("../../etc", "a/b", ".hidden"):
        result = run("--profile", bad, "stats")
        assert result.exit_code == 2, bad
        assert "profile name" in result.stderr
    result = run("--db", str(tmp_path / "x.db"), "--profile", "work", "stats")
    assert result.exit_code == 2 and "not both" in result.stderr
