"""Helpers shared by the CLI tests: invoking the CLI, another process holding a store, fingerprints,
and rows written on either backend.

A store is a SQLite file (a ``Path`` or its ``str``) or a PostgreSQL URL (the ``store`` /
``head_store`` fixtures). On a file, rows are written with plain sqlite3, as another program
writes them (triggers firing); on a server, through the repositories, as the agent writes them
(the CJK tokens and counters with each message), since no other program writes ours there.
"""

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
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from hermes_store.cli import main
from hermes_store.db import engine as engine_mod
from hermes_store.paths import resolve_location
from hermes_store.repo import messages as message_repo
from hermes_store.repo import sessions as session_repo

# The test server trusts local connections and ignores a password; a URL given to the CLI
# without one gains this, and no output may show it.
PASSWORD = "pw-never-shown-9c1e"

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


def on_server(store: str | Path) -> bool:
    return resolve_location(str(store)).path is None


def _with_password(arg: str) -> tuple[str, str | None]:
    if "://" not in arg or arg.startswith("sqlite"):
        return arg, None
    url = make_url(arg)
    if url.password is None:
        url = url.set(password=PASSWORD)
    return url.render_as_string(hide_password=False), str(url.password)


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    """The CLI in-process. A server URL after ``--db`` carries a password, and the result
    must not show it anywhere."""
    argv, secrets = list(args), []
    for i in range(1, len(argv)):
        if argv[i - 1] == "--db":
            argv[i], secret = _with_password(argv[i])
            secrets += [secret] if secret else []
    result = CliRunner(env=env).invoke(main, argv, input=input, catch_exceptions=False)
    for secret in secrets:
        assert secret not in result.stdout and secret not in result.stderr, "password shown"
    return result


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("--json", *args)
    return result.exit_code, json.loads(result.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def store_exists(store: str | Path) -> bool:
    """Whether anything was made: the file, or on a server (whose database is given) tables."""
    if not on_server(store):
        return Path(store).exists()
    with engine_mod.reading(engine_mod.open_engine(str(store), readonly=True)) as conn:
        return bool(inspect(conn).get_table_names())


def fingerprint(store: str | Path) -> str:
    """What "changes nothing" means on either backend: the file's bytes, or on a server
    every row of every table."""
    if not on_server(store):
        return sha256(Path(store))
    digest = hashlib.sha256()
    with engine_mod.reading(engine_mod.open_engine(str(store), readonly=True)) as conn:
        for table in sorted(inspect(conn).get_table_names()):
            found = conn.execute(text(f'SELECT * FROM "{table}"')).all()
            digest.update(repr((table, sorted(map(repr, found)))).encode())
    return digest.hexdigest()


def execute(store: str | Path, statement: str, **params: Any) -> None:
    """One statement with ``:named`` parameters, committed: what another program (or
    another connection) does to the store."""
    if on_server(store):
        engine_mod.run_write(engine_mod.open_engine(str(store)),
                             lambda conn: conn.execute(text(statement), params))
        return
    con = sqlite3.connect(store)
    with con:
        con.execute(statement, params)
    con.close()


def _write(store: str | Path, session: dict[str, Any] | None,
           messages: list[dict[str, Any]]) -> None:
    """On a server: the session row and messages through the repositories, counted as every
    append counts them."""
    def unit(conn: Any) -> None:
        if session is not None:
            values = {k: v for k, v in session.items()
                      if k not in ("id", "source", "started_at", "message_count")}
            session_repo.create_or_fill(conn, session["id"], session["source"], values,
                                        now=session["started_at"])
        message_repo.append_many(conn, [message_repo.stored_message(m) for m in messages])

    engine_mod.run_write(engine_mod.open_engine(str(store)), unit)


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


def add_session(path: str | Path, sid: str, n_messages: int, *, source: str = "cli",
                text: str = "hello world") -> None:
    """``n_messages`` user messages in a new session (on a file, the way another program
    writes them)."""
    now = time.time()
    if on_server(path):
        _write(path, {"id": sid, "source": source, "started_at": now},
               [{"session_id": sid, "role": "user", "content": f"{text} {i}", "timestamp": now}
                for i in range(n_messages)])
        return
    con = sqlite3.connect(path)
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                    (sid, source, time.time()))
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(sid, f"{text} {i}", time.time()) for i in range(n_messages)])
    con.close()


DAY = 86400.0


def make_session(path: str | Path, sid: str, *, source: str = "cli", age_days: float = 1.0,
                 ended: bool = True, end_reason: str | None = "user_exit",
                 parent: str | None = None, pinned: bool = False, archived: bool = False,
                 title: str | None = None, texts: tuple[str, ...] = ("hello world",),
                 extra: dict[str, Any] | None = None) -> str:
    """A session last active ``age_days`` ago, with one user message per text, ended unless
    ``ended=False``."""
    at = time.time() - age_days * DAY
    cols = {"id": sid, "source": source, "started_at": at - 60, "ended_at": at if ended else None,
            "end_reason": end_reason if ended else None, "parent_session_id": parent,
            "pinned": int(pinned), "archived": int(archived), "title": title,
            "message_count": len(texts), **(extra or {})}
    if on_server(path):
        _write(path, cols, [{"session_id": sid, "role": "user", "content": text,
                             "timestamp": at - 30 + i} for i, text in enumerate(texts)])
        return sid
    con = sqlite3.connect(path)
    with con:
        con.execute(f"INSERT INTO sessions ({', '.join(cols)}) "
                    f"VALUES ({', '.join('?' for _ in cols)})", list(cols.values()))
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(sid, text, at - 30 + i) for i, text in enumerate(texts)])
    con.close()
    return sid


def add_message(path: str | Path, sid: str, role: str, content: str, **cols: Any) -> None:
    values = {"session_id": sid, "role": role, "content": content, "timestamp": time.time(),
              **cols}
    if on_server(path):
        _write(path, None, [values])
        return
    con = sqlite3.connect(path)
    with con:
        con.execute(f"INSERT INTO messages ({', '.join(values)}) "
                    f"VALUES ({', '.join('?' for _ in values)})", list(values.values()))
    con.close()


def rows(path: str | Path, sql: str) -> list[tuple[Any, ...]]:
    if on_server(path):
        with engine_mod.reading(engine_mod.open_engine(str(path), readonly=True)) as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def continues(store: str | Path, root: str, tip: str) -> None:
    """``tip`` becomes the compression continuation of ``root``: it starts when ``root`` ended."""
    execute(store, "UPDATE sessions SET started_at = (SELECT ended_at FROM sessions "
                   "WHERE id = :root) WHERE id = :tip", root=root, tip=tip)
