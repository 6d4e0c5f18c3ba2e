"""hermes_store.compat as the agent imports it: its ``hermes_state.py`` becomes one star import
(docs/v21.md#module-names)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hermes_store import SessionDB as FacadeSessionDB
from hermes_store import compat
from hermes_store.errors import StoreDamagedError

SURFACE = {
    "SessionDB", "AsyncSessionDB", "DEFAULT_DB_PATH", "SCHEMA_VERSION", "SCHEMA_SQL",
    "DEFERRED_INDEX_SQL", "FTS_SQL", "FTS_TRIGRAM_SQL", "MAX_FTS5_QUERY_CHARS", "workspace_key",
    "get_last_init_error", "format_session_db_unavailable", "apply_wal_with_fallback",
    "is_malformed_db_error", "repair_state_db_schema", "_db_opens_cleanly",
    "_set_last_init_error", "_repair_attempted_paths",
}

AGENT = """
from hermes_state import *
from hermes_state import _db_opens_cleanly, _repair_attempted_paths, _set_last_init_error
import json, sys
db = SessionDB()
db.create_session("s1", "cli")
db.append_message("s1", "user", "hello from the agent")
hits = db.search_messages("agent")
print(json.dumps({
    "names": sorted(n for n in dir() if not n.startswith("__")),
    "path": str(DEFAULT_DB_PATH), "db_path": str(db.db_path), "hits": len(hits),
    "version": SCHEMA_VERSION, "probe": _db_opens_cleanly(db.db_path),
}))
db.close()
"""


def test_a_star_import_gives_exactly_the_contract_names() -> None:
    namespace: dict[str, object] = {}
    exec("from hermes_store.compat import *", namespace)  # noqa: S102 - the agent's own line
    assert set(namespace) - {"__builtins__"} == SURFACE
    assert set(compat.__all__) == SURFACE


def test_an_agent_whose_store_module_is_one_import_line_runs(tmp_path: Path) -> None:
    (tmp_path / "hermes_state.py").write_text("from hermes_store.compat import *\n")
    (tmp_path / "agent.py").write_text(textwrap.dedent(AGENT))
    home = tmp_path / "home"
    out = subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, capture_output=True,
                         text=True, env={"HERMES_HOME": str(home), "PATH": ""}, check=True)
    doc = json.loads(out.stdout)
    assert set(doc["names"]) >= SURFACE
    assert doc["path"] == doc["db_path"] == str(home / "state.db")
    assert doc["hits"] == 1 and doc["version"] == 21 and doc["probe"] is None


def test_the_names_have_the_contract_types() -> None:
    assert isinstance(compat.DEFAULT_DB_PATH, pathlib.Path)
    assert compat.SCHEMA_VERSION == 21 and type(compat.SCHEMA_VERSION) is int
    assert compat.MAX_FTS5_QUERY_CHARS == 2048
    for name in ("SCHEMA_SQL", "DEFERRED_INDEX_SQL", "FTS_SQL", "FTS_TRIGRAM_SQL"):
        assert isinstance(getattr(compat, name), str) and getattr(compat, name).strip()
    assert issubclass(compat.SessionDB, FacadeSessionDB)
    assert list(inspect.signature(compat.SessionDB.__init__).parameters)[:3] == [
        "self", "db_path", "read_only"]
    assert list(inspect.signature(compat.repair_state_db_schema).parameters) == [
        "db_path", "backup"]
    assert list(inspect.signature(compat.apply_wal_with_fallback).parameters) == [
        "conn", "db_label"]


def test_the_default_path_is_resolved_at_import(monkeypatch, tmp_path: Path) -> None:
    home = os.environ["HERMES_HOME"]
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "at-import"))
    fresh = importlib.reload(compat)
    try:
        monkeypatch.setenv("HERMES_HOME", str(tmp_path / "after-import"))
        assert tmp_path / "at-import" / "state.db" == fresh.DEFAULT_DB_PATH
        assert fresh.DEFAULT_DB_PATH.parent.name == "at-import"
    finally:
        monkeypatch.setenv("HERMES_HOME", home)
        importlib.reload(compat)


def test_a_path_less_open_honours_a_rebound_default(monkeypatch, tmp_path: Path) -> None:
    target = tmp_path / "rebound" / "state.db"
    monkeypatch.setattr(compat, "DEFAULT_DB_PATH", target)
    with compat.SessionDB() as db:
        assert db.db_path == target
    assert target.is_file()


def test_without_a_rebound_default_the_path_is_resolved_when_opening(monkeypatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "later"))
    with compat.SessionDB() as db:
        assert db.db_path == tmp_path / "later" / "state.db"


@pytest.mark.parametrize(("row", "key"), [
    ({"git_repo_root": " /repo ", "cwd": "/repo/sub", "git_branch": "main"}, "/repo"),
    ({"git_repo_root": "  ", "cwd": " /work "}, "/work"),
    ({"git_repo_root": None, "cwd": ""}, None),
    ({}, None),
    ({"git_branch": "main"}, None),
])
def test_workspace_key_is_the_repo_root_else_the_cwd(row: dict[str, object],
                                                     key: str | None) -> None:
    assert compat.workspace_key(row) == key


def test_the_sanitizer_keeps_only_the_first_2048_characters() -> None:
    long = "word " * 2000
    cleaned = FacadeSessionDB._sanitize_fts5_query(long)
    assert len(cleaned) <= 2 * compat.MAX_FTS5_QUERY_CHARS
    assert cleaned.count("word") <= compat.MAX_FTS5_QUERY_CHARS // 5 + 1
    marked = "a" * compat.MAX_FTS5_QUERY_CHARS + " beyond"
    assert "beyond" not in FacadeSessionDB._sanitize_fts5_query(marked)


# --------------------------------------------------------------------------- init errors


def test_a_failed_open_is_recorded_and_formatted(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(sqlite3.DatabaseError) as raised:
        compat.SessionDB(bad)
    cause = compat.get_last_init_error()
    assert cause == f"{type(raised.value).__name__}: {raised.value}"
    assert compat.format_session_db_unavailable() == f"Session database not available: {cause}."
    assert compat.format_session_db_unavailable("No store").startswith("No store: ")


def test_a_later_success_does_not_clear_the_last_error(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        compat.SessionDB(tmp_path / "missing.db", read_only=True)
    first = compat.get_last_init_error()
    assert first is not None and first.startswith("StoreNotFoundError: ")
    compat.SessionDB(tmp_path / "ok.db").close()
    assert compat.get_last_init_error() == first


def test_the_network_filesystem_hint_names_nfs_and_the_wal_page(monkeypatch) -> None:
    from hermes_store.facade import opening

    opening._set_last_init_error(sqlite3.OperationalError("locking protocol"))
    text = compat.format_session_db_unavailable()
    assert text.startswith("Session database not available: OperationalError: locking protocol (")
    assert "NFS/SMB" in text and "https://www.sqlite.org/wal.html" in text and text.endswith(".")
    opening._set_last_init_error(sqlite3.OperationalError("disk I/O error"))
    assert compat.format_session_db_unavailable() == (
        "Session database not available: OperationalError: disk I/O error.")


def test_without_any_failure_the_message_is_the_prefix(monkeypatch) -> None:
    from hermes_store.facade import opening

    monkeypatch.setattr(opening, "_last_init_error", None)
    assert compat.get_last_init_error() is None
    assert compat.format_session_db_unavailable() == "Session database not available."
    assert compat.format_session_db_unavailable("Store off") == "Store off."


def test_concurrent_failures_and_successes_keep_a_failure(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\0" * 512 + b"garbage!" * 512)  # a store whose first page is lost
    errors: list[BaseException] = []

    def fail() -> None:
        try:
            compat.SessionDB(bad)
        except sqlite3.DatabaseError:
            return
        errors.append(AssertionError("a garbage file opened"))

    def succeed(n: int) -> None:
        compat.SessionDB(tmp_path / f"good{n}.db").close()

    threads = [threading.Thread(target=fail) for _ in range(3)]
    threads += [threading.Thread(target=succeed, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (compat.get_last_init_error() or "").startswith(StoreDamagedError.__name__)


# --------------------------------------------------------------------------- malformed errors


@pytest.mark.parametrize(("error", "expected"), [
    (sqlite3.DatabaseError("malformed database schema (x) - table x already exists"), True),
    (sqlite3.OperationalError("Database disk image is malformed"), True),
    (StoreDamagedError("database disk image is malformed: the store is damaged"), True),
    (sqlite3.DatabaseError("file is not a database"), False),
    (sqlite3.OperationalError("database is locked"), False),
    (ValueError("malformed database schema"), False),
    (None, False),
    ("malformed database schema", False),
])
def test_is_malformed_db_error(error: object, expected: bool) -> None:
    assert compat.is_malformed_db_error(error) is expected


def test_is_malformed_db_error_never_raises_on_an_odd_exception() -> None:
    class Odd(sqlite3.DatabaseError):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    assert compat.is_malformed_db_error(Odd()) is False


def test_async_session_db_is_exported_and_wraps_a_store(tmp_path: Path) -> None:
    with compat.SessionDB(tmp_path / "a.db") as db:
        wrapped = compat.AsyncSessionDB(db)
        assert asyncio.run(wrapped.create_session("s1", "cli")) == "s1"
        assert asyncio.run(wrapped.get_session("s1"))["id"] == "s1"


def test_the_agents_init_error_setter_is_the_one_the_open_path_uses(tmp_path: Path,
                                                                     monkeypatch) -> None:
    from hermes_store.facade import opening

    compat._set_last_init_error(sqlite3.OperationalError("disk I/O error"))
    assert compat.get_last_init_error() == "OperationalError: disk I/O error"
    compat._set_last_init_error(None)
    assert compat.get_last_init_error() is None
    seen: list[BaseException] = []
    monkeypatch.setattr(compat, "_set_last_init_error", seen.append)
    assert opening._set_last_init_error == seen.append
    (tmp_path / "not-a-store").mkdir()
    with pytest.raises(Exception) as raised:
        compat.SessionDB(tmp_path / "not-a-store")
    assert seen == [raised.value]


def test_the_repair_attempts_set_is_the_one_the_open_path_uses(monkeypatch) -> None:
    from hermes_store.facade import opening

    assert compat._repair_attempted_paths is opening._repair_attempted_paths
    fresh: set[str] = set()
    monkeypatch.setattr(compat, "_repair_attempted_paths", fresh)
    assert opening._repair_attempted_paths is fresh
    namespace: dict[str, object] = {}
    exec("from hermes_store.compat import *", namespace)  # noqa: S102 - the agent's own line
    assert namespace["_repair_attempted_paths"] is fresh
