"""Getting off the inline index: complete search at once, a resumable backfill, space returned."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading
from hermes_store.ops import storage
from hermes_store.repo import bigrams
from hermes_store.search.statements import search_messages

ROOT = Path(__file__).resolve().parent.parent
ROWS = 6_000  # above the revision's small-store threshold, so the backfill window opens
WORDS = ("docker deploy kernel python socket buffer cache render vector matrix lambda "
         "config router tensor shader packet").split()
CJK_CHARS = "记忆断裂广西桂林漓江旅游部署通信协议服务端配置会议纪要昨晚今天"
PHRASES = ("记忆断裂", "会议纪要", "桂林旅游")


def _text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(3, 12)):
        if rng.random() < 0.05:
            parts.append(rng.choice(PHRASES))
        elif rng.random() < 0.3:
            parts.append("".join(rng.choice(CJK_CHARS) for _ in range(rng.randint(1, 6))))
        else:
            parts.append(rng.choice(WORDS))
    return " ".join(parts)


def build_inline_store(path: Path, rows: int = ROWS, seed: int = 7) -> None:
    """A v11 store (inline indexes) holding ``rows`` messages, written as the agent wrote them."""
    migrate.upgrade(path, "0011_v11_inline_fts")
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                    [("s-cli", "cli", 1.0), ("s-cron", "cron", 2.0), ("s-tg", "telegram", 3.0)])
    batch = []
    for n in range(rows):
        session = rng.choice(("s-cli", "s-cli", "s-tg", "s-cron"))
        role = rng.choice(("user", "assistant", "assistant", "tool"))
        content = _text(rng) if role != "tool" else _text(rng) * rng.randint(1, 40)
        tool_name = "terminal" if role == "tool" else None
        batch.append((session, role, content, tool_name, float(n)))
    con.executemany("INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                    "VALUES (?, ?, ?, ?, ?)", batch)
    con.commit()
    con.close()


@pytest.fixture(scope="module")
def inline_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inline") / "template.db"
    build_inline_store(path)
    return path


@pytest.fixture
def inline_store(inline_template: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(store upgraded to head with the window open, untouched inline reference copy)."""
    reference = Path(shutil.copy(inline_template, tmp_path / "reference.db"))
    path = Path(shutil.copy(inline_template, tmp_path / "big.db"))
    migrate.upgrade(path)
    return path, reference


def search_ids(path: Path, query: str, **kw) -> set[int]:
    with reading(open_engine(path)) as conn:
        return {h["id"] for h in search_messages(conn, query, limit=100_000, **kw)}


def covered_text(path: Path) -> dict[int, str]:
    con = sqlite3.connect(path)
    try:
        return {r[0]: r[1] for r in con.execute(
            # The one search scope (docs/search.md#search-scope): every row of every session,
            # tool output by its first 8,192 characters.
            "SELECT id, CASE WHEN role = 'tool' THEN substr(content, 1, 8192) ELSE content END "
            "FROM messages")}
    finally:
        con.close()


def inline_hits(reference: Path, term: str) -> set[int]:
    con = sqlite3.connect(reference)
    try:
        return {r[0] for r in con.execute(
            "SELECT f.rowid FROM messages_fts f JOIN messages m ON m.id = f.rowid "
            "WHERE messages_fts MATCH ? AND m.role IS NOT 'tool'", (term,))}
    finally:
        con.close()


def window(path: Path) -> tuple[int, int] | None:
    with reading(open_engine(path)) as conn:
        return storage.backfill_window(conn)


def assert_fully_indexed(path: Path) -> None:
    """Every row indexed exactly once: FTS5's external-content check re-reads every source row."""
    with reading(open_engine(path)) as conn:
        assert storage.integrity_problems(conn) == {}
        assert storage.backfill_window(conn) is None
        assert bigrams.pending_count(conn) == 0
    con = sqlite3.connect(path)
    try:
        for index, source in (("hs_fts", "hs_fts_src"),
                              ("hs_fts_trigram", "hs_fts_trigram_src")):
            docs = con.execute(f"SELECT count(*) FROM {index}_docsize").fetchone()[0]
            assert docs == con.execute(f"SELECT count(*) FROM {source}").fetchone()[0]
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        side = {r[0]: r[1] for r in con.execute("SELECT id, text FROM hs_cjk")}
        scope = con.execute("SELECT id, text, tool_name FROM hs_search_scope").fetchall()
    finally:
        con.close()
    assert not tables & set(storage.RETIRED)
    # Every row of the scope view holding CJK text (or a CJK tool name) has its side row.
    expected = {i: bigrams.cjk_bigram_text(" ".join(p for p in (t, name) if p))
                for i, t, name in scope if bigrams.contains_cjk(t) or bigrams.contains_cjk(name)}
    assert side == expected


def test_upgrade_of_a_large_inline_store_opens_a_window_and_retires_cheaply(inline_store) -> None:
    path, _ = inline_store
    assert window(path) == (0, ROWS)
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"hs_fts_old", "hs_fts_trigram_old"} <= tables
        assert con.execute("SELECT count(*) FROM hs_fts_docsize").fetchone()[0] == 0
    finally:
        con.close()


@pytest.mark.parametrize("term", ["docker", "kernel", "shader", "python", "vector"])
def test_word_search_is_complete_right_after_the_upgrade(inline_store, term: str) -> None:
    path, reference = inline_store
    expected = inline_hits(reference, term)
    assert expected
    non_tool = set(non_tool_rows(path))
    assert search_ids(path, term) & non_tool == expected


def non_tool_rows(path: Path) -> set[int]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT id FROM messages WHERE role IS NOT 'tool'")}
    finally:
        con.close()




@pytest.mark.parametrize("term", ["桂林", "通信", "记忆断", "会议纪要", "漓"])
def test_cjk_search_is_complete_right_after_the_upgrade(inline_store, term: str) -> None:
    path, _ = inline_store
    expected = {i for i, text in covered_text(path).items() if term in text}
    assert expected
    assert search_ids(path, term) == expected


def test_optimize_storage_backfills_retires_and_returns_space(inline_store) -> None:
    path, _ = inline_store
    before = {t: search_ids(path, t) for t in ("docker", "桂林", "会议纪要", "kernel OR 通信")}
    phases = []
    report = storage.optimize_storage(path, progress=lambda *a: phases.append(a), chunk=700)
    assert_fully_indexed(path)
    assert {t: search_ids(path, t) for t in before} == before
    order = [p[0] for p in phases]
    assert order[0] == "backfill" and order[-1] == "done"
    assert order.index("teardown") < order.index("vacuum")
    assert ("backfill", ROWS, ROWS) in phases
    assert report.rows_backfilled == ROWS
    assert report.tables_dropped == ["hs_fts_old", "hs_fts_trigram_old"]
    assert report.bytes_after < report.bytes_before
    assert os.path.getsize(path) == report.bytes_after


def test_writes_during_the_window_are_indexed_exactly_once(inline_store) -> None:
    path, _ = inline_store
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s-cli', 'user', '窗口期间 newcomer', 99999)")
    con.execute("UPDATE messages SET content = '改写 rewritten' WHERE id = 10")
    con.execute("DELETE FROM messages WHERE id = 11")
    con.execute("UPDATE messages SET active = 0 WHERE id = 12")
    con.close()
    assert search_ids(path, "newcomer")
    storage.optimize_storage(path, chunk=1000, vacuum=False)
    assert_fully_indexed(path)
    assert 10 in search_ids(path, "rewritten")


KILLABLE = textwrap.dedent("""
    import sys, time
    from hermes_store.ops.storage import optimize_storage

    def progress(phase, done, total):
        print(phase, done, total, flush=True)
        time.sleep(0.005)

    optimize_storage(sys.argv[1], progress=progress, vacuum=False, chunk=150, teardown_chunk=40)
""")


def run_and_kill(path: Path, phase: str, after_lines: int, rng: random.Random) -> bool:
    """Start optimize_storage in a child, SIGKILL it during ``phase``; False if it finished."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", KILLABLE, str(path)], env=env,
                             stdout=subprocess.PIPE, text=True)
    seen = 0
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(phase):
            seen += 1
            if seen >= after_lines:
                # Land anywhere: between chunks, inside a write transaction, mid-commit.
                time.sleep(rng.random() * 0.02)
                child.send_signal(signal.SIGKILL)
                child.wait()
                return True
    child.wait()
    return False


def test_kill_minus_9_anywhere_and_rerun_indexes_every_row_exactly_once(inline_store) -> None:
    path, _ = inline_store
    rng = random.Random(3)
    killed_in_backfill = 0
    for _ in range(4):
        if run_and_kill(path, "backfill", rng.randint(2, 6), rng):
            killed_in_backfill += 1
    progress_made = window(path)
    assert killed_in_backfill and progress_made is not None and 0 < progress_made[0] < ROWS
    run_and_kill(path, "teardown", 3, rng)
    storage.optimize_storage(path)
    assert_fully_indexed(path)


def test_optimize_storage_on_a_store_at_head_is_a_quick_no_op(head_db: Path) -> None:
    phases = []
    report = storage.optimize_storage(head_db, progress=lambda *a: phases.append(a[0]),
                                          vacuum=False)
    assert report.rows_backfilled == 0 and report.tables_dropped == []
    assert phases == ["teardown", "done"]
    assert_fully_indexed(head_db)


def test_optimize_fts_merges_segments_and_keeps_indexes_consistent(inline_store) -> None:
    path, _ = inline_store
    storage.optimize_storage(path, vacuum=False)
    assert storage.optimize_fts(path) == list(storage.INDEXES)
    assert_fully_indexed(path)


def test_vacuum_alone_returns_free_pages_and_keeps_the_rows(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1.7e9)")
        con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('s', 'user', ?, 1.7e9)", [("x" * 4000,) for _ in range(200)])
        con.execute("DELETE FROM messages WHERE id % 2 = 0")
    assert con.execute("PRAGMA freelist_count").fetchone()[0] > 0
    con.close()
    storage.vacuum(head_db)
    con = sqlite3.connect(head_db)
    try:
        assert con.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == 100
    finally:
        con.close()


def test_an_unreadable_backfill_window_fails_instead_of_reading_as_closed(inline_store) -> None:
    path, _ = inline_store
    con = sqlite3.connect(path)
    with con:
        con.execute("DROP VIEW hs_backfill_window")
        con.execute("CREATE VIEW hs_backfill_window AS SELECT lo, hi FROM lost_window_table")
    con.close()
    with pytest.raises(sqlite3.OperationalError, match="lost_window_table"):
        storage.optimize_storage(path, vacuum=False)
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert {"hs_fts_old", "hs_fts_trigram_old"} <= tables


def test_a_store_before_the_window_view_has_no_window(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    with con:
        con.execute("DROP VIEW hs_backfill_window")
    con.close()
    assert window(head_db) is None
