"""A ``--db`` that cannot be opened (a directory, a file this user may not read, a text file) is
one line naming the cause, exit 1, for every command; a read-only store is read by every
reading command and refused, saying so, by the changing ones. Never a traceback, never
"damaged" for what is not damage."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import make_session, run, run_json, sha256

from hermes_store.db import engine as engine_mod
from hermes_store.errors import StoreUnopenableError

# Each command with arguments that reach the store.
COMMANDS = [["stats"], ["list"], ["search", "hello"], ["show", "abcd"], ["export", "-"],
            ["check"], ["current"], ["upgrade"], ["optimize-storage", "--yes"], ["compact"],
            ["copy", "--to", "{tmp}/copy.db"], ["doctor"]]
READS = [["stats"], ["list"], ["search", "hello"], ["show", "2026"], ["export", "-"],
         ["check"], ["current"], ["doctor"]]
WRITES = [["optimize-storage", "--yes"], ["compact"]]
NOBODY = 65534


def _args(args: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in args]


def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "damaged" not in lines[0] and "recover" not in lines[0]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_directory_is_named_as_one(tmp_path: Path, args: list[str]) -> None:
    place = tmp_path / "state.db"
    place.mkdir()
    _one_line_error(run("--db", str(place), *_args(args, tmp_path)), "is a directory")
    assert list(place.iterdir()) == []


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_text_file_is_not_an_sqlite_database(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "notes.db"
    path.write_text("[session]\nid = 20260802_120000_fff666\n" * 500)
    before = sha256(path)
    _one_line_error(run("--db", str(path), *_args(args, tmp_path)),
                    "not an SQLite database")
    assert sha256(path) == before


def test_json_names_the_reason(tmp_path: Path) -> None:
    code, doc = run_json("--db", str(tmp_path), "stats")
    assert code == 1
    assert doc["error"]["code"] == "cannot_open" and doc["error"]["reason"] == "directory"


def test_the_library_raises_what_a_v11_caller_catches(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_text("not a database\n")
    with pytest.raises(sqlite3.OperationalError) as info:
        engine_mod.open_engine(path, readonly=True)
    assert isinstance(info.value, StoreUnopenableError) and info.value.reason == "not_sqlite"


# ------------------------------------------------------------- as a user without the rights


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can enter (pytest's tmp_path is private to its owner)."""
    place = Path(tempfile.mkdtemp(prefix="h-unopenable-"))
    place.chmod(0o755)
    yield place
    for p in [place, *place.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(place)


def _as_other_user(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI run by a user without root's rights (root reads everything; as anyone else the
    modes themselves are enough)."""
    drop: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "running as root needs setpriv(1) to test as another user"
        drop = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run([*drop, sys.executable, "-m", "hermes_store.cli", *args],
                          capture_output=True, text=True, timeout=120, cwd="/", check=False,
                          env={**os.environ, "HERMES_HOME": "/nonexistent"})


def _store(place: Path) -> Path:
    path = place / "state.db"
    assert run("--db", str(path), "upgrade").exit_code == 0
    make_session(path, "20260801_120000_aaaa11", title="readable",
                 texts=("hello from a read-only store",))
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    engine_mod.dispose_all()
    for sidecar in ("-wal", "-shm", "-writer.lock"):
        Path(f"{path}{sidecar}").unlink(missing_ok=True)
    return path


def test_a_file_this_user_may_not_read_says_permission_denied(shared_dir: Path) -> None:
    path = _store(shared_dir)
    path.chmod(0o000)
    for args in (["stats"], ["search", "hello"], ["doctor"], ["upgrade"]):
        done = _as_other_user("--db", str(path), *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.strip().splitlines() == [
            f"error: {path}: permission denied (this user may not read it)"]
        assert "DAMAGE" not in done.stdout


def test_a_read_only_store_in_a_read_only_directory_is_read_by_every_reading_command(
        shared_dir: Path) -> None:
    path = _store(shared_dir)
    path.chmod(0o444)
    shared_dir.chmod(0o555)
    before = sha256(path)
    for args in READS:
        done = _as_other_user("--db", str(path), *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "DAMAGE" not in done.stdout
    found = _as_other_user("--db", str(path), "search", "hello")
    assert "20260801_120000_aaaa11" in found.stdout
    for args in WRITES:
        done = _as_other_user("--db", str(path), *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "read-only: opened for reading only" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert sha256(path) == before
    assert sorted(p.name for p in shared_dir.iterdir()) == ["state.db"]
