"""Helpers shared by the CLI tests: invoking the CLI, another process holding a store, fingerprints."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from hermes_store.cli import main

_HOLDER = """
import sqlite3, sys, time
if sys.argv[2] == "raw":
    handle = open(sys.argv[1], "rb")
else:
    handle = sqlite3.connect(sys.argv[1])
    handle.execute("SELECT count(*) FROM sqlite_master").fetchone()
print("ready", flush=True)
time.sleep(120)
"""


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("--json", *args)
    return result.exit_code, json.loads(result.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def held_by_other_process(path: Path, *, raw: bool = False) -> Iterator[int]:
    """A child process with the store (or, ``raw``, any file) open; yields its pid."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), "raw" if raw else "db"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def add_session(path: Path, sid: str, n_messages: int, *, source: str = "cli",
                text: str = "hello world") -> None:
    """Rows written the way another program would: plain sqlite3, triggers firing."""
    con = sqlite3.connect(path)
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                    (sid, source, time.time()))
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(sid, f"{text} {i}", time.time()) for i in range(n_messages)])
    con.close()
