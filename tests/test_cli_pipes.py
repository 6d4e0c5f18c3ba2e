"""A reader that closes the pipe early (``hermes-store search … | head -1``) ends the command
with exit 0 and nothing on stderr, as ``git log | head`` does, whichever way the output is
written (rich tables, plain lines, --nl/--csv records, JSON, an export to ``-``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import make_session


@pytest.fixture
def busy_store(head_db: Path) -> Path:
    for i in range(30):
        make_session(head_db, f"20260801_1200{i:02d}_aaaa{i:02d}", title=f"borrow {i}",
                     texts=tuple(f"borrow checker note {i}.{j} " + "x" * 200 for j in range(4)))
    return head_db


@pytest.mark.parametrize("args", [
    ["search", "borrow*", "--limit", "100"], ["search", "borrow", "--nl", "--limit", "100"],
    ["search", "borrow", "--csv"], ["show", "20260801_120001_aaaa01"], ["stats"],
    ["list", "--limit", "100"], ["--json", "search", "borrow"], ["export", "-"]],
    ids=lambda a: "-".join(a[:2]))
def test_a_closed_pipe_is_a_quiet_success(busy_store: Path, args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: `| head -0`
    try:
        done = subprocess.run([sys.executable, "-m", "hermes_store.cli", "-q", "--db",
                               str(busy_store), *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
