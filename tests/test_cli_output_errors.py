"""Outputs that cannot be written: a clear error naming the target, never a traceback, and
the documented exit code (with --json, still one JSON document on stdout)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import make_session, run, run_json

PROC = Path("/proc/self")
DEV_FULL = Path("/dev/full")
SID = "20260101_100000_aaaa1111"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, SID, texts=("hello there",))
    return head_store


def test_export_under_a_regular_file_names_it_and_exits_1(seeded: str, tmp_path: Path) -> None:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a directory")
    result = run("--db", seeded, "export", str(blocker / "out.jsonl"))
    assert result.exit_code == 1
    assert f"{blocker} is not a directory" in result.stderr
    assert "Traceback" not in result.output
    code, doc = run_json("--db", seeded, "export", str(blocker / "out.jsonl"))
    assert code == 1
    assert doc["ok"] is False and doc["error"]["code"] == "cannot_write"
    assert blocker.read_text() == "a file, not a directory"


@pytest.mark.skipif(not PROC.exists(), reason="needs a Linux /proc")
def test_export_into_proc_is_a_clear_error(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "export", "/proc/hermes-export.jsonl")
    assert code == 1
    assert doc["error"]["code"] == "cannot_write"
    assert doc["error"]["message"].startswith("cannot write /proc/hermes-export.jsonl")


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
def test_export_to_stdout_on_a_full_disk_says_so(seeded: str) -> None:
    with open(DEV_FULL, "w") as full:
        proc = subprocess.run([sys.executable, "-m", "hermes_store.cli", "--db", seeded,
                               "export", "-"], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert proc.returncode == 1
    assert "cannot write to standard output: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.mark.sqlite_only  # about a store file that cannot be created
@pytest.mark.skipif(not PROC.exists(), reason="needs a Linux /proc")
def test_import_into_a_store_that_cannot_be_created_is_a_clear_error(seeded: str,
                                                                     tmp_path: Path) -> None:
    backup = tmp_path / "backup.jsonl"
    assert run("--db", seeded, "export", str(backup)).exit_code == 0
    result = run("--db", "/proc/hermes-state.db", "import", str(backup))
    assert result.exit_code == 1
    assert "/proc/hermes-state.db" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.sqlite_only  # recover salvages a SQLite file
def test_recover_into_a_path_under_a_file_names_it(seeded: str, tmp_path: Path) -> None:
    blocker = tmp_path / "plain"
    blocker.write_text("x")
    output = blocker / "new.db"
    code, doc = run_json("--db", seeded, "recover", "--output", str(output),
                         "--report", str(tmp_path / "report.json"))
    assert code == 1
    assert doc["error"] == {"code": "cannot_write",
                            "message": f"cannot write {output}: {blocker} is not a directory"}
    assert json.loads(json.dumps(doc))  # one document, nothing else on stdout


# --------------------------------------------------------------------------- special targets


def _read_fifo_in_background(fifo: Path, into: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sh", "-c", 'cat "$1" > "$2"', "sh", str(fifo), str(into)])


@pytest.mark.parametrize("through_link", [False, True])
def test_export_force_writes_into_a_fifo_instead_of_replacing_it(seeded: str, tmp_path: Path,
                                                                 through_link: bool) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = fifo
    if through_link:
        target = tmp_path / "stdout-like"
        target.symlink_to(fifo)
    captured = tmp_path / "captured.jsonl"
    reader = _read_fifo_in_background(fifo, captured)
    try:
        result = run("--db", seeded, "export", str(target), "--force")
        assert result.exit_code == 0, result.output
        assert reader.wait(timeout=30) == 0
    finally:
        reader.kill()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert target.is_symlink() is through_link
    assert json.loads(captured.read_text().splitlines()[0])["id"] == SID


def test_export_force_over_a_link_to_a_file_refuses_and_leaves_both(seeded: str,
                                                                   tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    result = run("--db", seeded, "export", str(link), "--force")
    assert result.exit_code == 1
    assert "symlink" in result.output and "Traceback" not in result.output
    assert link.is_symlink() and link.resolve() == real
    assert real.read_text() == "old\n"


def test_export_without_force_refuses_an_existing_special_file(seeded: str,
                                                               tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, doc = run_json("--db", seeded, "export", str(fifo))
    assert code == 1 and doc["error"]["code"] == "output_exists"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
