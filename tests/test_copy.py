"""``copy``: a whole store between backends, either way, resumable, verified, refusing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backends import PgServer, sql, sql_many, table_names
from cli_support import run, run_json
from sqlalchemy.engine import make_url

from hermes_store import SessionDB
from hermes_store.db import catalog, migrate
from hermes_store.db import engine as engine_mod
from hermes_store.errors import TargetNotEmptyError, UsageError
from hermes_store.ops import copy as copying

CJK = "在终端里运行测试"


def q(location: str, statement: str, **params: object) -> list:
    return sql(engine_mod.open_engine(location), statement, **params)


def q_many(location: str, statement: str, rows: list[dict]) -> None:
    sql_many(engine_mod.open_engine(location), statement, rows)


def _fill(location: str, sessions: int = 3, per_session: int = 4) -> None:
    """Sessions whose ids sort children before parents, CJK and NUL text, a deleted message,
    plus a column and a table of a newer agent release."""
    db = SessionDB(location)
    db.create_session("z-parent", "cli", model="m1")
    for i in range(sessions):
        sid = f"a-child-{i}"
        db.create_session(sid, "telegram", parent_session_id="z-parent")
        for j in range(per_session):
            db.append_message(sid, "user", f"hello world {i} {j}")
        db.append_message(sid, "assistant", f"{CJK} {i}")
    db.append_message("z-parent", "tool", "nul\x00inside", tool_name="shell")
    last = db.append_message("z-parent", "user", "to be deleted")
    db.set_session_title("z-parent", "The parent")
    db.close()
    q(location, "DELETE FROM messages WHERE id = :id", id=last)
    q(location, "ALTER TABLE sessions ADD COLUMN future_flag TEXT")
    q(location, "UPDATE sessions SET future_flag = 'x' WHERE id = 'z-parent'")
    q(location, "CREATE TABLE future_things (id INTEGER PRIMARY KEY, note TEXT, score REAL)")
    q_many(location, "INSERT INTO future_things (id, note, score) VALUES (:id, :n, :s)",
             [{"id": k, "n": f"note {k}", "s": k / 3} for k in range(1, 8)])


def _other(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh empty store on the *other* backend than ``backend``."""
    if backend == "postgresql":
        return str(tmp_path / "copy.db")
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.empty_database()
    request.addfinalizer(lambda: (engine_mod.dispose_all(), server.drop(url)))
    return url


def _contents(location: str) -> dict[str, list]:
    out = {}
    for table in ("sessions", "messages", "future_things"):
        rows = [{k: v for k, v in r._asdict().items() if not catalog.is_derived_name(k)}
                for r in q(location, f"SELECT * FROM {table}")]  # the search columns differ
        out[table] = sorted((repr(r["id"]), r) for r in rows)
    return out


def test_a_store_copies_to_the_other_backend_whole_and_verified(
        head_store: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _fill(head_store)
    target = _other(backend, tmp_path, request)
    report = copying.copy_store(head_store, target, batch=3)
    assert report.verified and not report.resumed
    assert report.tables["messages"].target_count == 3 * 5 + 1
    assert report.tables["future_things"].target_count == 7
    assert "future_things" in report.created_tables
    assert "sessions.future_flag" in report.added_columns
    db = SessionDB(target)
    assert db.get_session("a-child-1")["parent_session_id"] == "z-parent"
    assert db.get_session("z-parent")["title"] == "The parent"
    assert [m["content"] for m in db.get_messages("z-parent")] == ["nul\x00inside"]
    assert db.message_count() == 16
    db.close()
    assert migrate.status(target).at_head
    names = lambda loc: {r[0] for r in q(loc, "SELECT key FROM state_meta")}  # noqa: E731
    assert copying.PROGRESS_KEY not in names(target) and copying.DONE_KEY in names(target)


def test_the_copy_continues_message_ids_after_the_sources_high_water(
        head_store: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _fill(head_store)
    highest = q(head_store, "SELECT max(id) FROM messages")[0][0]
    target = _other(backend, tmp_path, request)
    copying.copy_store(head_store, target)
    db = SessionDB(target)
    new_id = db.append_message("z-parent", "user", "after the copy")
    db.close()
    assert new_id == highest + 2  # the deleted message's id is never handed out again


def test_a_copy_into_sqlite_has_complete_search_indexes(
        store: str, backend: str, tmp_path: Path) -> None:
    if backend == "sqlite":
        migrate.upgrade(store)
    _fill(store)
    target = str(tmp_path / "searchable.db")
    copying.copy_store(store, target, batch=2)
    assert q(target, "SELECT count(*) FROM hs_cjk_pending")[0][0] == 0
    db = SessionDB(target)
    hits = db.search_messages("终端")
    words = db.search_messages("hello")
    db.close()
    assert {h["session_id"] for h in hits} == {"a-child-0", "a-child-1", "a-child-2"}
    assert len(words) == 12


_SEARCHABLE = [
    ("user", "the quick brown fox jumps over the lazy dog", None),
    ("assistant", "quick thinking saves the day", None),
    ("user", "a brown bear and a Café au lait", None),
    ("assistant", "在终端里运行测试", None),
    ("user", "终端 is where the 测试 run", None),
    ("assistant", "运行程序之前先写测试用例", None),
    ("user", "東京タワーに行く予定です", None),
    ("assistant", "한국어 검색 테스트", None),
    ("user", [{"type": "text", "text": "a picture of the 终端 and a fox"}], None),
    ("assistant", "calling the shell", [{"function": {"name": "shell",
                                                       "arguments": "{\"cmd\": \"测试\"}"}}]),
    ("tool", "tool output mentions quick 终端 too", None),
]
# Latin words, AND, OR, prefix, a phrase, diacritics folded; CJK terms of 1 and 2 characters
# (the bigram index's two paths) and longer ones, in three scripts.
_QUERIES = ["quick", "brown fox", "quick OR bear", "qui*", '"quick brown"', "cafe", "fox",
            "终", "端", "终端", "测试", "运行程", "東京", "京", "한국", "테", "shell"]


def _fill_searchable(location: str) -> None:
    db = SessionDB(location)
    for n, (role, content, calls) in enumerate(_SEARCHABLE):
        sid = f"s{n % 3}"
        if db.get_session(sid) is None:
            db.create_session(sid, "cli")
        db.append_message(sid, role, content, tool_calls=calls,
                          tool_name="shell" if role == "tool" else None)
    db.close()
    # Rows another program wrote (no bigram tokens yet): the copy must leave them searchable.
    q(location, "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s0', 'user', 'written outside 终端 quick', 1700000000)")


def _hits(location: str) -> dict[str, set[tuple[int, str]]]:
    db = SessionDB(location)
    try:
        return {query: {(h["id"], h["session_id"]) for h in db.search_messages(query, limit=100)}
                for query in _QUERIES}
    finally:
        db.close()


def test_search_finds_the_same_hits_in_a_copy_on_the_other_backend(
        head_store: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _fill_searchable(head_store)
    target = _other(backend, tmp_path, request)
    copying.copy_store(head_store, target, batch=4)
    before, after = _hits(head_store), _hits(target)
    assert all(before[query] for query in _QUERIES), before  # every query finds something
    assert after == before
    if backend == "sqlite":  # into PostgreSQL: every covered row carries its CJK tokens
        assert q(target, "SELECT count(*) FROM messages WHERE hs_search_cjk IS NULL "
                         "AND role IS DISTINCT FROM 'tool'") == [(0,)]
    else:  # into SQLite: nothing left pending, the FTS5 indexes whole
        assert q(target, "SELECT count(*) FROM hs_cjk_pending") == [(0,)]
        q(target, "INSERT INTO hs_fts(hs_fts) VALUES ('integrity-check')")


def test_a_column_with_no_faithful_type_is_named_as_not_copied(
        head_db: Path, tmp_path: Path) -> None:
    _fill(str(head_db))
    q(str(head_db), "CREATE TABLE loose (id INTEGER PRIMARY KEY, anything)")
    q(str(head_db), "INSERT INTO loose (id, anything) VALUES (1, 'x'), (2, 3.5)")
    report = copying.copy_store(str(head_db), str(tmp_path / "out.db"))
    assert report.not_copied and report.not_copied[0].startswith("loose.anything")
    assert report.tables["loose"].target_count == 2 and report.verified


def test_a_non_empty_target_that_is_no_copy_of_this_source_is_refused(
        head_store: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _fill(head_store)
    target = _other(backend, tmp_path, request)
    migrate.upgrade(target)
    db = SessionDB(target)
    db.create_session("someone-else", "cli")
    db.close()
    with pytest.raises(TargetNotEmptyError, match="not empty"):
        copying.copy_store(head_store, target)
    assert [r[0] for r in q(target, "SELECT id FROM sessions")] == ["someone-else"]
    assert copying.PROGRESS_KEY not in {r[0] for r in q(target, "SELECT key FROM state_meta")}
    result = run("--db", head_store, "copy", "--to", target)
    assert result.exit_code == 1 and "not empty" in result.stderr


def test_rerunning_a_finished_copy_copies_nothing_and_verifies_again(
        head_store: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _fill(head_store)
    target = _other(backend, tmp_path, request)
    first = copying.copy_store(head_store, target)
    counts = {n: t.target_count for n, t in first.tables.items()}
    again = copying.copy_store(head_store, target)
    assert again.already_copied and again.verified and not again.resumed
    assert {n: t.target_count for n, t in again.tables.items()} == counts
    assert {n: t.target_checksum for n, t in again.tables.items()} == \
        {n: t.target_checksum for n, t in first.tables.items()}
    assert q(target, "SELECT count(*) FROM messages")[0][0] == counts["messages"]
    result = run("--db", head_store, "copy", "--to", target)
    assert result.exit_code == 0, result.stderr
    assert "already copied" in result.stdout and "verified" in result.stdout
    assert f"messages: {counts['messages']:,}/{counts['messages']:,} rows" in result.stdout
    code, doc = run_json("--db", head_store, "copy", "--to", target)
    assert code == 0 and doc["already_copied"] is True and doc["verified"] is True


def test_a_rerun_into_a_finished_copy_that_changed_since_is_a_mismatch(
        head_db: Path, tmp_path: Path) -> None:
    _fill(str(head_db))
    target = str(tmp_path / "done.db")
    copying.copy_store(str(head_db), target)
    q(target, "DELETE FROM future_things WHERE id = 1")
    result = run("--db", str(head_db), "copy", "--to", target)
    assert result.exit_code == 1 and "future_things" in result.stderr
    assert "DIFFERS" in result.stdout


def test_a_finished_copy_of_another_source_is_refused(head_db: Path, tmp_path: Path) -> None:
    _fill(str(head_db))
    target = str(tmp_path / "done.db")
    copying.copy_store(str(head_db), target)
    other = tmp_path / "other.db"
    SessionDB(other).close()
    with pytest.raises(TargetNotEmptyError, match="finished copy") as raised:
        copying.copy_store(str(other), target)
    assert "resume" not in str(raised.value)


def test_a_store_is_not_copied_onto_itself(head_db: Path) -> None:
    with pytest.raises(UsageError, match="source itself"):
        copying.copy_store(str(head_db), f"sqlite:///{head_db}")


def test_a_source_behind_head_is_refused_before_the_target_is_touched(
        legacy_db, tmp_path: Path) -> None:
    result = run("--db", str(legacy_db(6)), "copy", "--to", str(tmp_path / "new.db"))
    assert result.exit_code == 6 and "upgrade" in result.stderr
    assert not (tmp_path / "new.db").exists()


_KILLABLE = """
import sys
from hermes_store.cli import main
main(["-q", "--db", sys.argv[1], "copy", "--to", sys.argv[2], "--batch-size", "20"])
"""


def _progress(location: str) -> dict | None:
    try:
        rows = q(location, "SELECT value FROM state_meta WHERE key = :k",
                   k=copying.PROGRESS_KEY)
    except Exception:  # noqa: BLE001 - the target may not have its tables yet
        return None
    return json.loads(rows[0][0]) if rows else None


def test_a_copy_killed_mid_stream_resumes_without_duplicates(
        head_store: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _fill(head_store, sessions=2, per_session=2)
    rows = [{"sid": "bulk", "c": f"bulk message {k} 终端", "t": 1_700_000_000 + k}
            for k in range(4000)]
    q(head_store, "INSERT INTO sessions (id, source, started_at) VALUES ('bulk', 'cli', 1)")
    q_many(head_store, "INSERT INTO messages (session_id, role, content, timestamp) "
                         "VALUES (:sid, 'user', :c, :t)", rows)
    target = _other(backend, tmp_path, request)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE, head_store, target], env=env,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    seen = None
    while time.monotonic() < deadline and proc.poll() is None:
        seen = _progress(target)
        if seen and seen.get("rows", {}).get("messages", 0) >= 200:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the copy finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    engine_mod.dispose_all()
    partial = _progress(target)
    assert partial is not None and "messages" not in partial["done"]
    copied = q(target, "SELECT count(*) FROM messages")[0][0]
    assert copied == partial["rows"]["messages"]  # marker and rows committed together
    code, doc = run_json("--db", head_store, "copy", "--to", target, "--batch-size", "500")
    assert code == 0 and doc["resumed"] is True and doc["verified"] is True, doc
    assert _contents(target) == _contents(head_store)
    ids = [r[0] for r in q(target, "SELECT id FROM messages")]
    assert len(ids) == len(set(ids)) == 4000 + 2 * 3 + 1


@pytest.mark.direct_pg  # a missing database: the pooler, not the server, answers the login
def test_passwords_never_appear_in_copy_output(
        head_db: Path, pg_server: PgServer, request: pytest.FixtureRequest) -> None:
    _fill(str(head_db), sessions=1, per_session=1)
    url = make_url(pg_server.empty_database())
    request.addfinalizer(lambda: (engine_mod.dispose_all(), pg_server.drop(str(url))))
    secret = "s3cret-Pa55"
    with_password = url.set(password=secret).render_as_string(hide_password=False)
    result = run("--json", "--db", str(head_db), "copy", "--to", with_password)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["verified"] and secret not in result.stdout + result.stderr
    missing = url.set(password=secret, database="no_such_db_for_copy")
    result = run("--db", str(head_db), "copy", "--to",
                 missing.render_as_string(hide_password=False))
    assert result.exit_code == 3 and secret not in result.stdout + result.stderr
    human = run("--db", str(head_db), "copy", "--to", with_password)  # the verified rerun
    assert human.exit_code == 0 and secret not in human.stdout + human.stderr
    assert "already copied" in human.stdout and url.database in human.stdout
    assert table_names(str(head_db)) >= {"sessions", "messages"}
