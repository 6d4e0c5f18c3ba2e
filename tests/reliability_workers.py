"""Child-process bodies for the reliability tests and the writer benchmark.

``multiprocessing`` with the ``spawn`` start method imports the target by module name, so these
live in an importable module rather than in a test file. Each worker reports through a JSON file
(written atomically at the end) or a line-per-event log it appends to as it goes: a file survives
a ``SIGKILL`` of the child, a queue does not.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from hermes_store import SessionDB
from hermes_store.db import engine as eng
from hermes_store.repo import messages

INSERT_SESSION = text(
    "INSERT INTO sessions (id, source, started_at) VALUES (:id, :source, :t) "
    "ON CONFLICT(id) DO NOTHING")


# --------------------------------------------------------------------------- reporting


def write_report(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
    os.replace(tmp, path)


def read_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def log_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


def wait_for_file(path: str | os.PathLike[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout}s")
        time.sleep(0.01)


# --------------------------------------------------------------------------- the append unit


def create_session(engine: Any, session_id: str, source: str) -> None:
    """Engine-level session row, for tests that work below the facade."""
    eng.run_write(engine, lambda c: c.execute(
        INSERT_SESSION, {"id": session_id, "source": source, "t": time.time()}),
        budget=eng.APPEND_BUDGET_S, what="create_session")


def append_unit(session_id: str, content: str, role: str = "user") -> Callable[[Connection], int]:
    """Exactly the unit ``SessionDB.append_message`` runs: row, counters and CJK index."""
    prepared = messages.prepare_message(session_id, role, content=content, timestamp=time.time())
    return lambda conn: messages.append(conn, prepared)


def append(engine: Any, session_id: str, content: str) -> int:
    return eng.run_write(engine, append_unit(session_id, content),
                         budget=eng.APPEND_BUDGET_S, what="append_message")


def _guarded(report: str, body: Callable[[dict[str, Any]], None]) -> None:
    result: dict[str, Any] = {"errors": [], "written": []}
    try:
        body(result)
    except Exception as err:  # noqa: BLE001 - every failure goes to the parent's assertion
        result["errors"].append(f"{type(err).__name__}: {err}")
    write_report(report, result)


# --------------------------------------------------------------------------- load writers


def gateway_writer(path: str, name: str, count: int, report: str) -> None:
    """One long-lived engine appending to one session at a steady pace, like the gateway."""

    def body(result: dict[str, Any]) -> None:
        with SessionDB(path) as db:
            session_id = f"gw-{name}"
            db.create_session(session_id, "telegram", model="m")
            for i in range(count):
                content = f"{name} turn {i} reply about kubernetes deploys"
                db.append_message(session_id, "user" if i % 2 else "assistant", content)
                result["written"].append(content)
                time.sleep(random.uniform(0.0, 0.004))

    _guarded(report, body)


def cli_writer(path: str, name: str, bursts: int, per_burst: int, report: str) -> None:
    """Short CLI invocations: each opens the store, writes a small session, and goes away."""

    def body(result: dict[str, Any]) -> None:
        for b in range(bursts):
            with SessionDB(path) as db:
                session_id = f"cli-{name}-{b}"
                db.create_session(session_id, "cli")
                for i in range(per_burst):
                    content = f"{name} burst {b} line {i} grep sqlite locking"
                    db.append_message(session_id, "user", content)
                    result["written"].append(content)
                db.end_session(session_id, "user_exit")
            eng.dispose_all()  # the process "exits": its pool and WAL handles go

    _guarded(report, body)


def cron_writer(path: str, name: str, bursts: int, per_burst: int, report: str) -> None:
    """Cron runs: a new session per run, a quick burst of appends, then a pause."""

    def body(result: dict[str, Any]) -> None:
        with SessionDB(path) as db:
            for b in range(bursts):
                session_id = f"cron_{name}_{b:04d}"
                db.create_session(session_id, "cron")
                for i in range(per_burst):
                    content = f"{name} run {b} step {i} backup rotated"
                    db.append_message(session_id, "assistant", content)
                    result["written"].append(content)
                db.end_session(session_id, "cron_complete")
                time.sleep(random.uniform(0.02, 0.08))

    _guarded(report, body)


SEARCHES = ("kubernetes", "sqlite locking", "backup", "turn OR step", '"burst 3"')


def reader(path: str, stop_file: str, report: str) -> None:
    """Listings and searches, each its own short read transaction, until told to stop."""
    result: dict[str, Any] = {"errors": [], "queries": 0, "hits": 0}
    try:
        with SessionDB(path) as db:
            while not os.path.exists(stop_file):
                db.list_sessions_rich(limit=20)
                db.search_sessions(limit=20)
                query = random.choice(SEARCHES)
                result["hits"] += len(db.search_messages(query, limit=20))
                result["queries"] += 3
                time.sleep(0.005)
    except Exception as err:  # noqa: BLE001
        result["errors"].append(f"{type(err).__name__}: {err}")
    write_report(report, result)


# --------------------------------------------------------------------------- gateway hosts


SHARED_SESSION = "shared-gateway"


def host_writer(url: str, name: str, turns: int, own_sessions: int, report: str) -> None:
    """A gateway host on a shared server store: turns of user, assistant (with a tool call) and
    tool messages, alternating between its own sessions and one session every host writes to,
    each turn followed by a usage update. The report holds what was written and counted."""

    def body(result: dict[str, Any]) -> None:
        result["tokens"] = {}
        with SessionDB(url) as db:
            mine = [f"{name}-s{n}" for n in range(own_sessions)]
            for session_id in mine:
                db.create_session(session_id, "telegram", model="m")
            db.ensure_session(SHARED_SESSION, "discord", model="m")
            for i in range(turns):
                session_id = SHARED_SESSION if i % 2 else mine[i % own_sessions]
                user = f"{name} turn {i} kubernetes rollout 部署 question"
                answer = f"{name} turn {i} answer: restart the deploy 重启"
                tool = f"{name} turn {i} tool output deployment/api restarted"
                db.append_message(session_id, "user", user)
                db.append_message(session_id, "assistant", answer, tool_calls=[
                    {"id": f"call-{name}-{i}", "type": "function",
                     "function": {"name": "terminal", "arguments": "{}"}}])
                db.append_message(session_id, "tool", tool, tool_name="terminal",
                                  tool_call_id=f"call-{name}-{i}")
                result["written"] += [[session_id, user], [session_id, answer],
                                      [session_id, tool]]
                db.update_token_counts(session_id, input_tokens=100 + i, output_tokens=7,
                                       reasoning_tokens=i % 3, model="m", api_call_count=1)
                counted = result["tokens"].setdefault(session_id, [0, 0, 0, 0])
                for k, amount in enumerate((100 + i, 7, i % 3, 1)):
                    counted[k] += amount

    _guarded(report, body)


SERVER_SEARCHES = (("kubernetes", {}), ('"kubernetes rollout"', {}), ("部署", {}),
                   ("kube*", {"sort": "newest"}), ("restart OR 重启", {}),
                   ("deploy", {"role_filter": ["assistant"], "source_filter": ["discord"]}))
_SNAPSHOT = text("SELECT s.message_count, (SELECT count(*) FROM messages AS m "
                 "WHERE m.session_id = s.id) FROM sessions AS s WHERE s.id = :sid")


def server_reader(url: str, stop_file: str, report: str) -> None:
    """Searches of every kind and listings on a shared server store, until told to stop; in each
    snapshot the shared session's counter must equal its rows (an append is one transaction)."""
    result: dict[str, Any] = {"errors": [], "queries": 0, "hits": 0, "torn": []}
    try:
        with SessionDB(url) as db:
            while not os.path.exists(stop_file):
                query, options = random.choice(SERVER_SEARCHES)
                result["hits"] += len(db.search_messages(query, limit=20, **options))
                db.list_sessions_rich(limit=20)
                with eng.reading(db.engine) as conn:
                    row = conn.execute(_SNAPSHOT, {"sid": SHARED_SESSION}).first()
                if row is not None and row[0] != row[1]:
                    result["torn"].append(list(row))
                result["queries"] += 3
                time.sleep(0.005)
    except Exception as err:  # noqa: BLE001
        result["errors"].append(f"{type(err).__name__}: {err}")
    write_report(report, result)


# --------------------------------------------------------------------------- faults


def hold_open_transaction(path: str, session_id: str, content: str, ready_file: str) -> None:
    """Insert a message and bump its counter inside BEGIN IMMEDIATE, then wait to be killed."""
    engine = eng.open_engine(path)

    def unit(conn: Connection) -> None:
        append_unit(session_id, content)(conn)
        Path(ready_file).touch()
        time.sleep(600)

    eng.run_write(engine, unit)


def append_until_killed(path: str, session_id: str, log_file: str) -> None:
    """Append forever, logging each content only after its transaction committed."""
    db = SessionDB(path)
    i = 0
    while True:
        content = f"committed {i} {'x' * random.randint(0, 3000)}"
        db.append_message(session_id, "user", content)
        log_line(log_file, content)
        i += 1


def upgrade_with_location(path: str, location: str) -> None:
    from hermes_store.db import migrate

    migrate.upgrade(path, location=location)


def kill_self() -> None:
    """What the OOM killer does: no cleanup, no rollback, no checkpoint."""
    os.kill(os.getpid(), signal.SIGKILL)


def optimize_and_die(path: str, phase: str, nth: int, chunk: int, teardown_chunk: int) -> None:
    """Run optimize_storage and SIGKILL ourselves at the ``nth`` progress report of ``phase``.

    ``vacuum`` is reported just before VACUUM starts, so there the kill is armed on a timer and
    lands while VACUUM (or what follows it) runs.
    """
    import threading

    from hermes_store.ops import storage

    seen: dict[str, int] = {}

    def progress(reported: str, done: int, total: int) -> None:
        seen[reported] = seen.get(reported, 0) + 1
        if reported == phase and seen[reported] == nth:
            if phase == "vacuum":
                threading.Timer(0.005, kill_self).start()
            else:
                kill_self()

    storage.optimize_storage(path, progress=progress, chunk=chunk,
                                 teardown_chunk=teardown_chunk)
    time.sleep(60)  # the vacuum timer fires while we wait, if VACUUM was quicker


def import_and_die(path: str, files: list[str], hook: str, nth: int) -> None:
    """Run an import and SIGKILL ourselves inside the transaction of the ``nth`` call of
    ``importing.<hook>``, after it has written its rows but before the commit."""
    from hermes_store.transfer import load as importing

    original = getattr(importing, hook)
    calls = 0

    def dying(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        out = original(*args, **kwargs)
        if calls == nth:
            kill_self()
        return out

    setattr(importing, hook, dying)
    importing.import_paths(eng.open_engine(path), files)


def hold_write_lock_then_commit(path: str, seconds: float, ready_file: str) -> None:
    """A sibling holding the write lock for seconds (a VACUUM, a big import) and then finishing."""
    engine = eng.open_engine(path)

    def unit(conn: Connection) -> None:
        append_unit("s1", "written by the slow sibling")(conn)
        Path(ready_file).touch()
        time.sleep(seconds)

    eng.run_write(engine, unit)


def repair_and_die(path: str) -> None:
    """Run ``repair`` and SIGKILL ourselves inside its fix transaction, after the indexes were
    rebuilt but before the commit."""
    from hermes_store.ops import repair as recovery
    from hermes_store.ops import storage

    original = storage.rebuild_indexes

    def dying(conn: Connection) -> None:
        original(conn)
        kill_self()

    storage.rebuild_indexes = dying  # type: ignore[assignment]
    recovery.repair_store(path)


def recover_and_die(source: str, output: str) -> None:
    """Run ``recover`` and SIGKILL ourselves once it has copied the first chunk of messages."""
    from hermes_store.ops import recover as salvage

    def progress(table: str, done: int, total: int) -> None:
        if table == "messages":
            kill_self()

    salvage.recover_store(source, output, progress=progress, chunk_size=50)
