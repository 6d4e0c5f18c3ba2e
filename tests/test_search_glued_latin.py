"""Latin terms read the CJK bigram index only while a row there holds Latin glued to CJK
(docs/search.md#the-row-split; revision 0025). SQLite only: PostgreSQL's word route is its own.

The promise is that recall does not change: for every query, the hits with the store's recorded
answer equal the hits with both indexes read (the key forced to ``'1'``, the earlier plan)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from benchmarks import corpus as corpus_mod
from hermes_store import SessionDB
from hermes_store.db import migrate
from hermes_store.ops import storage
from hermes_store.repo import bigrams

KEY = "hs_cjk_glued_latin"
QUERIES = ("docker", "docker deployment", '"docker deployment"', "deploy*", "the OR error",
           "docker NOT deployment", "youer", "服务 docker", '"chat send"*', "build NOT 部署")


def flag(path: Path) -> str | None:
    with sqlite3.connect(path) as con:
        row = con.execute("SELECT value FROM state_meta WHERE key = ?", (KEY,)).fetchone()
    return None if row is None else row[0]


def set_flag(path: Path, value: str) -> None:
    with sqlite3.connect(path) as con:
        con.execute("INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?)", (KEY, value))


def hit_sets(path: Path, queries: tuple[str, ...] | list[str]) -> dict[str, set[int]]:
    with SessionDB(path) as db:
        return {q: {h["id"] for h in db.search_messages(q, limit=100_000)} for q in queries}


def same_hits_as_both_indexes(path: Path, queries: tuple[str, ...] | list[str]) -> None:
    recorded = flag(path)
    found = hit_sets(path, queries)
    set_flag(path, "1")
    both = hit_sets(path, queries)
    set_flag(path, recorded or "1")
    assert found == both


def load_raw(path: Path, texts: list[str]) -> None:
    """Rows written by another program (plain sqlite3): the triggers mark them pending."""
    with sqlite3.connect(path) as con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('raw', 'cli', 1)")
        con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('raw', 'user', ?, ?)", [(t, n) for n, t in enumerate(texts)])


@pytest.mark.parametrize("text, expected", [
    ("修改youer服务端", True), ("A2A通信", True), ("日本語abc", True), ("部署 docker", False),
    ("数据库。docker", False), ("中文，english", False), ("「部署」docker", False),
    ("plain latin", False), ("배포 서버 docker", False)])
def test_glued_means_a_cjk_letter_next_to_a_non_separator(text: str, expected: bool) -> None:
    assert bigrams.glued(text) is expected


def test_a_new_store_records_no_glued_row_and_the_first_glued_append_records_one(
        head_db: Path) -> None:
    assert flag(head_db) == "0"
    with SessionDB(head_db) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "部署 docker，然后 deployment")
    assert flag(head_db) == "0"
    with SessionDB(head_db) as db:
        row = db.append_message("s", "user", "修改youer服务端")
        assert flag(head_db) == "1"
        assert [h["id"] for h in db.search_messages("youer")] == [row]


def test_rows_other_programs_wrote_record_glued_text_when_caught_up(head_db: Path) -> None:
    load_raw(head_db, ["用docker部署", "部署 docker"])
    assert flag(head_db) == "0"
    storage.optimize_storage(head_db)
    assert flag(head_db) == "1"
    assert len(hit_sets(head_db, ["docker"])["docker"]) == 2


def test_without_glued_rows_latin_hits_equal_both_indexes_on_the_benchmark_corpus(
        head_db: Path) -> None:
    texts = [row.content for _, rows in corpus_mod.generate(1500) for row in rows]
    assert not any(bigrams.glued(t) for t in texts)
    load_raw(head_db, texts)
    storage.optimize_storage(head_db)
    assert flag(head_db) == "0"
    same_hits_as_both_indexes(head_db, QUERIES)


def test_with_glued_rows_latin_hits_equal_both_indexes(head_db: Path) -> None:
    texts = ["修改youer服务端 deployment", "用docker部署 and deployment", "docker部署",
             "部署 docker deployment", "chat-send工具", "the error 错误 build"]
    load_raw(head_db, texts)
    storage.optimize_storage(head_db)
    assert flag(head_db) == "1"
    same_hits_as_both_indexes(head_db, QUERIES)
    found = hit_sets(head_db, ["youer", "docker deployment"])
    assert len(found["youer"]) == 1 and len(found["docker deployment"]) == 2


def test_the_upgrade_records_the_v11_fixtures_glued_rows_and_recall_is_unchanged(
        legacy_db) -> None:  # type: ignore[no-untyped-def]
    path = legacy_db(11)
    migrate.upgrade(path)
    storage.optimize_storage(path)
    with sqlite3.connect(path) as con:
        texts = [t for (t,) in con.execute("SELECT content FROM messages") if t]
    glued_words = sorted({w.lower() for t in texts for w in re.findall(
        r"(?<=[\u4e00-\u9fff])[A-Za-z]{3,}|[A-Za-z]{3,}(?=[\u4e00-\u9fff])", t)})
    assert flag(path) == ("1" if glued_words else "0")
    same_hits_as_both_indexes(path, [*QUERIES, *glued_words[:40]])
