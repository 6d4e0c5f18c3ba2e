"""Damaged stores, at the library level: derived damage is repaired (by ``upgrade`` or
``repair``), anything else refuses to open with an error naming the command to run, and a store
that cannot persist never pretends it did. (The CLI side is tests/test_cli_repair.py.)"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import event

from hermes_store import SessionDB
from hermes_store.db import engine as eng
from hermes_store.db import migrate
from hermes_store.errors import StoreDamagedError, StoreReplacedError, StoreUnopenableError
from hermes_store.ops import repair as recovery

FIXTURES = Path(__file__).parent / "fixtures"
SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")


def _schema(path: Path) -> dict[str, str]:
    con = sqlite3.connect(path)
    try:
        return {r[0]: r[1] for r in con.execute("SELECT name, type FROM sqlite_master")}
    finally:
        con.close()


def _fts_tables(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%fts5%'")]
    finally:
        con.close()


def _fts_integrity_errors(path: Path) -> dict[str, str]:
    errors = {}
    con = sqlite3.connect(path)
    try:
        for table in _fts_tables(path):
            try:
                con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            except sqlite3.DatabaseError as err:
                errors[table] = str(err)
    finally:
        con.close()
    return errors


@pytest.fixture
def loaded_store(tmp_path: Path) -> Path:
    """A store at head holding the v11 fixture's 16 sessions and 358 messages."""
    path = tmp_path / "loaded.db"
    with gzip.open(FIXTURES / "state-v11.db.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    migrate.upgrade(path)
    eng.dispose_all()  # closing the last connection folds the WAL into the file
    return path


# --------------------------------------------------------------------------- refusing to open


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(64 * 1024))


def _text(path: Path) -> None:
    path.write_text("[session]\nid = 20260802_120000_fff666\n" * 500)


def _header_wiped(path: Path) -> None:
    # What an OOM kill mid-write did upstream: page 1 gone, everything after it intact.
    with open(path, "r+b") as f:
        f.write(b"\0" * 4096)


def _truncated(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2 // 4096 * 4096)


@pytest.mark.parametrize("damage", [_header_wiped, _truncated],
                         ids=["header-wiped", "truncated"])
def test_a_file_that_is_not_a_usable_store_refuses_to_open_and_names_the_command(
        loaded_store: Path, damage: Callable[[Path], None]) -> None:
    damage(loaded_store)
    before = loaded_store.read_bytes()

    for open_store in (lambda: SessionDB(loaded_store),
                       lambda: SessionDB(loaded_store, readonly=True)):
        with pytest.raises(StoreDamagedError, match="hermes-store recover"):
            open_store()
    with pytest.raises(StoreDamagedError) as info:
        migrate.upgrade(loaded_store)

    message = str(info.value)
    assert "hermes-store repair" in message and "hermes-store recover" in message
    assert message.count("hermes-store recover") == 1  # the advice is given once
    assert isinstance(info.value, sqlite3.DatabaseError)  # what v11 callers catch
    assert info.value.exit_code == 7
    # Fail closed: nothing was initialised over the file, not a byte changed.
    assert loaded_store.read_bytes() == before


@pytest.mark.parametrize("damage", [_garbage, _text], ids=["garbage", "text-file"])
def test_a_file_that_is_not_sqlite_at_all_is_named_so_not_damaged(
        loaded_store: Path, damage: Callable[[Path], None]) -> None:
    damage(loaded_store)
    before = loaded_store.read_bytes()
    for open_store in (lambda: SessionDB(loaded_store),
                       lambda: SessionDB(loaded_store, readonly=True),
                       lambda: migrate.upgrade(loaded_store), lambda: migrate.status(loaded_store)):
        with pytest.raises(StoreUnopenableError, match="not an SQLite database") as info:
            open_store()
        assert isinstance(info.value, sqlite3.DatabaseError)  # what v11 callers catch
    assert loaded_store.read_bytes() == before


# --------------------------------------------------------------------------- derived damage


def test_orphan_fts_shadow_tables_are_dropped_by_upgrade(legacy_db) -> None:
    # An interrupted DROP of the trigram index left its shadow tables behind; re-creating the
    # index used to fail forever with "table messages_fts_trigram_data already exists".
    path = legacy_db(6)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE messages_fts_trigram_data(id INTEGER PRIMARY KEY, block BLOB)")
    con.execute("CREATE TABLE messages_fts_trigram_idx(segid, term, pgno, "
                "PRIMARY KEY(segid, term))")
    con.execute("CREATE TABLE messages_fts_trigram_config(k PRIMARY KEY, v)")
    con.execute("INSERT INTO messages_fts_trigram_data VALUES (1, x'00')")
    con.commit()
    con.close()

    assert migrate.upgrade(path).state == "up-to-date"

    schema = _schema(path)
    fts = set(_fts_tables(path))
    orphans = [name for name in schema for suffix in SHADOW_SUFFIXES
               if name.endswith(suffix) and name[: -len(suffix)] not in fts
               and name[: -len(suffix)].startswith(("messages_fts", "hs_fts"))]
    assert orphans == []
    assert _fts_integrity_errors(path) == {}


def _like_ids(path: Path, word: str) -> set[int]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT id FROM messages WHERE content LIKE ?",
                                          (f"%{word}%",))}
    finally:
        con.close()


def _search_ids(db: SessionDB, word: str) -> set[int]:
    return {hit["id"] for hit in db.search_messages(word, limit=1000)}


def _rows_and_counters(path: Path) -> tuple[int, dict[str, int]]:
    con = sqlite3.connect(path)
    try:
        total = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        counters = dict(con.execute(
            "SELECT id, message_count - (SELECT count(*) FROM messages m "
            "WHERE m.session_id = sessions.id) FROM sessions"))
    finally:
        con.close()
    return total, {sid: gap for sid, gap in counters.items() if gap}


def test_an_index_whose_triggers_outlived_it_fails_appends_loudly_until_repair(
        loaded_store: Path) -> None:
    # Dropped under a running store (an open puts a missing index back: it would not fail).
    with SessionDB(loaded_store) as db:
        con = sqlite3.connect(loaded_store)
        con.execute("DROP TABLE hs_fts")  # its triggers on messages stay behind
        con.commit()
        con.close()
        total_before, _ = _rows_and_counters(loaded_store)
        sid = db.list_sessions_rich(limit=1)[0]["id"]  # reads still work
        with pytest.raises(sqlite3.OperationalError, match="hermes-store repair") as info:
            db.append_message(sid, "user", "lost unless the error is loud")
        assert isinstance(info.value, StoreDamagedError)
    assert _rows_and_counters(loaded_store) == (total_before, {})
    eng.dispose_all()

    report = recovery.repair_store(loaded_store)
    assert report.healthy, report.to_dict()
    eng.dispose_all()
    with SessionDB(loaded_store) as db:
        new_id = db.append_message(sid, "user", "saved after repair: encapsulation")
        assert new_id in _search_ids(db, "encapsulation")
        assert _search_ids(db, "encapsulation") == _like_ids(loaded_store, "encapsulation")
    assert _fts_integrity_errors(loaded_store) == {}


def test_a_corrupt_index_is_reported_as_damage_never_as_no_results_and_repair_rebuilds_it(
        loaded_store: Path) -> None:
    con = sqlite3.connect(loaded_store)
    con.execute("UPDATE hs_fts_data SET block = randomblob(length(block)) WHERE id > 10")
    con.commit()
    con.close()
    assert "hs_fts" in _fts_integrity_errors(loaded_store)

    with (SessionDB(loaded_store) as db,
          pytest.raises(StoreDamagedError, match="hermes-store repair")):
        db.search_messages("encapsulation")
    eng.dispose_all()

    report = recovery.repair_store(loaded_store)
    assert report.healthy and report.backup  # the damaged file was kept aside first
    eng.dispose_all()
    assert _fts_integrity_errors(loaded_store) == {}
    with SessionDB(loaded_store) as db:
        assert _search_ids(db, "encapsulation") == _like_ids(loaded_store, "encapsulation") != set()


def test_search_stays_complete_when_an_index_is_missing_altogether(loaded_store: Path) -> None:
    # Derived data is never needed for correctness: without the word index (table and
    # triggers gone), appends work and search still finds every matching row.
    con = sqlite3.connect(loaded_store)
    for (trigger,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' "
            "AND name GLOB 'hs_fts_[ab][diu]'").fetchall():
        con.execute(f'DROP TRIGGER "{trigger}"')
    con.execute("DROP TABLE hs_fts")
    con.commit()
    con.close()

    with SessionDB(loaded_store) as db:
        sid = db.list_sessions_rich(limit=1)[0]["id"]
        new_id = db.append_message(sid, "user", "written without a word index: encapsulation")
        hits = _search_ids(db, "encapsulation")
    assert new_id in hits
    assert hits == _like_ids(loaded_store, "encapsulation")


# --------------------------------------------------------------------------- never pretend


def test_a_store_deleted_under_a_running_writer_refuses_the_write(loaded_store: Path) -> None:
    with SessionDB(loaded_store) as db:
        db.create_session("live", "telegram")
        db.append_message("live", "user", "saved")
        os.unlink(loaded_store)  # in WAL mode SQLite keeps "committing" into the unlinked inode

        with pytest.raises(StoreReplacedError, match="deleted or replaced") as info:
            db.append_message("live", "assistant", "would be lost")
        assert isinstance(info.value, sqlite3.OperationalError)  # what v11 callers catch
        with pytest.raises(StoreReplacedError):
            db.create_session("next", "telegram")


def test_a_store_replaced_under_a_running_writer_refuses_the_write(loaded_store: Path,
                                                                   tmp_path: Path) -> None:
    with SessionDB(loaded_store) as db:
        db.create_session("live", "cli")
        replacement = tmp_path / "restored.db"
        shutil.copy(loaded_store, replacement)
        os.replace(replacement, loaded_store)  # e.g. a backup restored over the live file

        with pytest.raises(StoreReplacedError):
            db.append_message("live", "user", "would go to the old inode")
    eng.dispose_all()
    con = sqlite3.connect(loaded_store)
    try:
        assert con.execute("SELECT count(*) FROM messages WHERE content = 'would go to the old "
                           "inode'").fetchone()[0] == 0
    finally:
        con.close()
    with SessionDB(loaded_store) as db:  # a new process opens the file that is there now
        db.append_message("live", "user", "saved in the restored file")
        assert db.get_session("live")["message_count"] == 1


def test_a_store_that_became_read_only_raises_on_append_and_keeps_no_row(
        loaded_store: Path) -> None:
    with SessionDB(loaded_store) as db:
        db.create_session("live", "cli")
        db.engine.dispose()
        # Root ignores file modes, so the read-only medium is simulated on the connection.
        event.listen(db.engine, "connect",
                     lambda dbapi, _rec: dbapi.execute("PRAGMA query_only=ON"))
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.append_message("live", "user", "not saved")
        assert db.get_messages("live") == []
        assert db.get_session("live")["message_count"] == 0
