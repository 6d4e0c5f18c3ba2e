"""hermes-store repair: probes tell fresh from broken, fixes run after a backup, then re-probe."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_support import add_session, held_by_other_process, run, run_json, sha256

from hermes_store import SessionDB
from hermes_store.db import catalog, migrate
from hermes_store.db import engine as eng
from hermes_store.ops import repair as recovery
from hermes_store.ops import storage


def _tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    return names


def _backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.repair-*"))


@pytest.fixture
def store(head_db: Path) -> Path:
    add_session(head_db, "20260101_000000_aaaaaaaa", 40, text="alpha beta gamma")
    return head_db


def test_a_healthy_store_passes_every_probe(store: Path) -> None:
    code, doc = run_json("--db", str(store), "repair", "--check-only")
    assert code == 0, doc
    names = [p["name"] for p in doc["probes"]]
    assert names[:4] == ["opens", "quick_check", "orphan_fts_shadows", "dead_triggers"]
    assert "write_probe" in names and any(n.startswith("fts:") for n in names)
    assert doc["healthy"] is True and doc["backup"] == []


def test_the_write_probe_leaves_no_trace(store: Path) -> None:
    con = sqlite3.connect(store)
    before = con.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone()
    assert run("--db", str(store), "repair", "--check-only").exit_code == 0
    assert con.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone() == before
    con.close()


def test_orphan_shadow_tables_are_found_then_dropped_after_a_backup(store: Path) -> None:
    base = next(t for t in catalog.FTS_TABLES if t not in _tables(store))
    con = sqlite3.connect(store)
    with con:
        con.execute(f'CREATE TABLE "{base}_data" (id INTEGER PRIMARY KEY, block BLOB)')
        con.execute(f'CREATE TABLE "{base}_config" (k PRIMARY KEY, v) WITHOUT ROWID')
    con.close()
    code, doc = run_json("--db", str(store), "repair", "--check-only")
    assert code == 7
    orphan = next(p for p in doc["probes"] if p["name"] == "orphan_fts_shadows")
    assert f"{base}_data" in orphan["detail"] and orphan["ok"] is False
    assert _backups(store) == []  # --check-only changes nothing

    code, doc = run_json("--db", str(store), "repair")
    assert code == 0, doc
    assert not {f"{base}_data", f"{base}_config"} & _tables(store)
    assert _backups(store) and f"{base}_data" in _tables(_backups(store)[0])


def test_a_trigger_whose_table_is_gone_is_not_mistaken_for_a_fresh_store(store: Path) -> None:
    con = sqlite3.connect(store)
    with con:
        con.execute("DROP TABLE hs_fts")
    con.close()
    code, doc = run_json("--db", str(store), "repair", "--check-only")
    assert code == 7
    failed = {p["name"]: p["detail"] for p in doc["probes"] if not p["ok"]}
    assert "hs_fts" in failed["dead_triggers"]
    assert "no such table" in failed["write_probe"]

    code, doc = run_json("--db", str(store), "repair")
    assert code == 0, doc
    assert any("dropped trigger" in a for a in doc["actions"])
    add_session(store, "20260102_000000_bbbbbbbb", 3)  # writes work again


def test_a_corrupt_fts_index_is_rebuilt(store: Path) -> None:
    con = sqlite3.connect(store)
    with con:
        con.execute("UPDATE hs_fts_data SET block = randomblob(length(block)) "
                    "WHERE id IN (SELECT id FROM hs_fts_data WHERE id > 10 LIMIT 2)")
    con.close()
    code, doc = run_json("--db", str(store), "repair", "--check-only")
    assert code == 7
    assert not next(p for p in doc["probes"] if p["name"] == "fts:hs_fts")["ok"]

    code, doc = run_json("--db", str(store), "repair")
    assert code == 0, doc
    assert all(p["ok"] for p in doc["after"])
    con = sqlite3.connect(store)
    hits = con.execute("SELECT COUNT(*) FROM hs_fts WHERE hs_fts MATCH 'gamma'")
    assert hits.fetchone()[0] == 40
    con.close()


def test_a_duplicate_schema_row_is_removed_by_surgery_on_a_backed_up_file(store: Path) -> None:
    con = sqlite3.connect(store)
    con.execute("PRAGMA writable_schema=ON")
    with con:
        con.execute("INSERT INTO sqlite_master SELECT * FROM sqlite_master "
                    "WHERE name = 'hs_fts'")
    con.close()
    code, doc = run_json("--db", str(store), "repair", "--check-only")
    assert code == 7
    assert "duplicate schema rows" in doc["probes"][0]["detail"]

    code, doc = run_json("--db", str(store), "repair")
    assert code == 0, doc
    assert _backups(store)
    con = sqlite3.connect(store)
    assert con.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 40
    con.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unreadable_file_is_a_clear_error_naming_recover(store: Path, damage: str) -> None:
    con = sqlite3.connect(store)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    if damage == "garbage":
        store.write_bytes(b"\x00garbage" * 4096)
    else:
        store.write_bytes(store.read_bytes()[:60])
    before = sha256(store)
    result = run("--db", str(store), "repair")
    assert result.exit_code == 7
    assert "recover --source" in result.stdout and "--inspect-only" in result.stdout
    assert ".recover" not in result.stdout  # never the sqlite3 shell on the live file
    assert sha256(store) == before


def test_fixing_refuses_while_another_process_holds_the_store(store: Path) -> None:
    con = sqlite3.connect(store)
    with con:
        con.execute("DROP TABLE hs_fts")
    con.close()
    with held_by_other_process(store) as pid:
        code, doc = run_json("--db", str(store), "repair")
        assert code == 5
        assert doc["error"]["code"] == "held"
        assert pid in [h[0] for h in doc["error"]["holders"]]
    assert _backups(store) == []


def test_repair_of_a_missing_store_exits_3(tmp_path: Path) -> None:
    assert run("--db", str(tmp_path / "none.db"), "repair").exit_code == 3


def test_an_index_out_of_step_with_its_table_is_reindexed(store: Path) -> None:
    con = sqlite3.connect(store)
    con.execute("PRAGMA writable_schema=ON")
    with con:  # the index's definition no longer matches the entries it holds
        con.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX idx_messages_session "
                    "ON messages(role, timestamp)' WHERE name = 'idx_messages_session'")
    con.close()
    code, doc = run_json("--db", str(store), "repair", "--check-only", "--full")
    assert code == 7
    assert not next(p for p in doc["probes"] if p["name"] == "integrity_check")["ok"]
    code, doc = run_json("--db", str(store), "repair", "--full")
    assert code == 0, doc
    assert "REINDEX" in doc["actions"]


# --------------------------------------------------------------------------- missing layout objects

WORD_INDEX = ["hs_fts", "hs_fts_ai", "hs_fts_bd", "hs_fts_bu", "hs_fts_au"]
CJK_INDEX = ["hs_cjk", "hs_cjk_pending", "hs_fts_cjk", "hs_cjk_ai", "hs_cjk_ad", "hs_cjk_au",
             "hs_cjk_pending_ai", "hs_cjk_pending_au", "hs_cjk_ad_messages"]
# Words, a prefix, a phrase, Chinese and Japanese terms of 1 to 5 characters (every index).
QUERIES = ("recursive", "recurs*", '"cargo check"', "FnMut", "闭包", "线程", "鍵", "ファイル",
           "署名が適用")


def _drop(path: Path, names: list[str]) -> None:
    con = sqlite3.connect(path)
    kinds = dict(con.execute("SELECT name, type FROM sqlite_master"))
    with con:
        for name in names:
            if name in kinds:  # a side table's triggers go with it
                con.execute(f'DROP {kinds[name].upper()} IF EXISTS "{name}"')
    con.close()


def _indexed_rows(path: Path) -> dict[str, int]:
    con = sqlite3.connect(path)
    try:
        return {t: con.execute(f'SELECT count(*) FROM "{t}_docsize"').fetchone()[0]
                for t in ("hs_fts", "hs_fts_trigram", "hs_fts_cjk")}
    finally:
        con.close()


def _fts_integrity_errors(path: Path) -> dict[str, str]:
    con = sqlite3.connect(path)
    errors = {}
    for (table,) in con.execute("SELECT name FROM sqlite_master "
                                "WHERE sql LIKE 'CREATE VIRTUAL TABLE%fts5%'").fetchall():
        try:
            con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as err:
            errors[table] = str(err)
    con.close()
    return errors


def _hits(path: Path) -> dict[str, set[int]]:
    with SessionDB(path) as db:
        found = {q: {h["id"] for h in db.search_messages(q, limit=1000)} for q in QUERIES}
    eng.dispose_all()
    return found


@pytest.fixture
def loaded(legacy_db) -> Path:
    """The v11 fixture at head (EN/中文/日本語), every index complete, CJK rows derived."""
    path = legacy_db(11)
    migrate.upgrade(path)
    storage.optimize_fts(path)
    eng.dispose_all()
    return path


@pytest.mark.parametrize("dropped", [
    pytest.param(WORD_INDEX, id="word-index-and-triggers"),
    pytest.param(["hs_search_scope"], id="view"),
    pytest.param(["hs_fts_src", "hs_search_text"], id="views-read-by-views"),
    pytest.param(CJK_INDEX, id="cjk-index-side-tables-and-triggers"),
])
def test_missing_layout_objects_are_named_then_recreated_and_reindexed(
        loaded: Path, dropped: list[str]) -> None:
    hits, indexed = _hits(loaded), _indexed_rows(loaded)
    assert all(hits.values()) and all(indexed.values())
    _drop(loaded, dropped)

    code, doc = run_json("--db", str(loaded), "repair", "--check-only")
    assert code == 7, doc
    probe = next(p for p in doc["probes"] if p["name"] == "derived_layout")
    assert probe["ok"] is False
    assert set(probe["detail"].removeprefix("missing: ").split(", ")) == set(dropped)
    assert doc["next_steps"] == [f"hermes-store --db {loaded} repair"]
    assert _backups(loaded) == []

    code, doc = run_json("--db", str(loaded), "repair")
    assert code == 0, doc
    assert all(p["ok"] for p in doc["after"])
    assert {f"recreated {name} (head layout)" for name in dropped} <= set(doc["actions"])
    assert _fts_integrity_errors(loaded) == {}
    assert _indexed_rows(loaded) == indexed
    assert _hits(loaded) == hits


def test_repaired_indexes_follow_new_writes(loaded: Path) -> None:
    _drop(loaded, WORD_INDEX + CJK_INDEX)
    assert run("--db", str(loaded), "repair").exit_code == 0
    with SessionDB(loaded) as db:
        sid = db.create_session("20260103_000000_cccccccc", "cli")
        new_id = db.append_message(sid, "user", "encapsulation 数据库迁移")
        assert new_id in {h["id"] for h in db.search_messages("encapsulation")}
        assert new_id in {h["id"] for h in db.search_messages("迁移")}
    eng.dispose_all()
    assert _fts_integrity_errors(loaded) == {}


def test_a_store_below_head_is_not_held_to_the_head_layout(store_path: Path) -> None:
    migrate.upgrade(store_path, revision="0015_trigram_without_tools")
    probe = next(p for p in recovery.probe_store(store_path) if p.name == "derived_layout")
    assert probe.ok and "upgrade" in probe.detail
