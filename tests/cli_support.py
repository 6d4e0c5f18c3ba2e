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


DAY = 86400.0


def make_session(path: Path, sid: str, *, source: str = "cli", age_days: float = 1.0,
                 ended: bool = True, end_reason: str | None = "user_exit",
                 parent: str | None = None, pinned: bool = False, archived: bool = False,
                 title: str | None = None, texts: tuple[str, ...] = ("hello world",),
                 extra: dict[str, Any] | None = None) -> str:
    """A session last active ``age_days`` ago, with one user message per text (plain sqlite3,
    triggers firing), ended unless ``ended=False``."""
    at = time.time() - age_days * DAY
    cols = {"id": sid, "source": source, "started_at": at - 60, "ended_at": at if ended else None,
            "end_reason": end_reason if ended else None, "parent_session_id": parent,
            "pinned": int(pinned), "archived": int(archived), "title": title,
            "message_count": len(texts), **(extra or {})}
    con = sqlite3.connect(path)
    with con:
        con.execute(f"INSERT INTO sessions ({', '.join(cols)}) "
                    f"VALUES ({', '.join('?' for _ in cols)})", list(cols.values()))
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(sid, text, at - 30 + i) for i, text in enumerate(texts)])
    con.close()
    return sid


def add_message(path: Path, sid: str, role: str, content: str, **cols: Any) -> None:
    values = {"session_id": sid, "role": role, "content": content, "timestamp": time.time(),
              **cols}
    con = sqlite3.connect(path)
    with con:
        con.execute(f"INSERT INTO messages ({', '.join(values)}) "
                    f"VALUES ({', '.join('?' for _ in values)})", list(values.values()))
    con.close()


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()
