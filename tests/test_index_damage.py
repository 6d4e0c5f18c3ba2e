"""Damage to a derived search index is an error or the undamaged answer, never fewer hits in
silence; ``doctor`` sees it and ``repair`` rebuilds it from the messages (docs/search.md#damage).

Every store here is the v11 fixture upgraded to head with its CJK side rows derived, damaged
with plain SQL as another program (or a bad disk) would. Table names come from the catalog.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_json

from hermes_store import SessionDB
from hermes_store.db import catalog, migrate
from hermes_store.db import engine as eng
from hermes_store.errors import SearchIndexDamagedError, StoreDamagedError
from hermes_store.ops import repair as recovery
from hermes_store.ops import storage
from hermes_store.repo import index_health
from hermes_store.search import sqlite as sqlite_search

pytestmark = pytest.mark.sqlite_only

FIXTURES = Path(__file__).parent / "fixtures"
WORD, TRIGRAM, CJK = catalog.WORD_FTS, catalog.TRIGRAM_FTS, catalog.CJK_FTS
# Each query and its hits on the undamaged store: a Latin word, a phrase, two CJK characters
# (the bigram index) and four (the trigram index).
UNDAMAGED = {"Rust": 60, '"raise ValueError"': 20, "类型": 9, "闭包": 3, "生命周期": 1}


def _shadow(index: str, suffix: str) -> str:
    return dict(zip(catalog.FTS_SHADOW_SUFFIXES, catalog.shadow_tables(index), strict=True))[suffix]


def _zero_leaves(index: str) -> str:
    return f"UPDATE {_shadow(index, '_data')} SET block = zeroblob(length(block)) WHERE id > 10"


DAMAGE = {
    "word-leaves-zeroed": _zero_leaves(WORD),
    "word-structure-zeroed":
        f"UPDATE {_shadow(WORD, '_data')} SET block = zeroblob(length(block)) WHERE id = 10",
    "word-config-version": f"UPDATE {_shadow(WORD, '_config')} SET v = 5 WHERE k = 'version'",
    "word-term-table-emptied": f"DELETE FROM {_shadow(WORD, '_idx')}",
    "trigram-leaves-zeroed": _zero_leaves(TRIGRAM),
    "cjk-leaves-zeroed": _zero_leaves(CJK),
    "cjk-side-rows-deleted": f"DELETE FROM {catalog.CJK_SIDE_TABLE}",
    "cjk-index-does-not-load": f"DROP TABLE {_shadow(CJK, '_config')}",
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("index-damage") / "pristine.db"
    with gzip.open(FIXTURES / "state-v11.db.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    migrate.upgrade(path)
    storage.optimize_storage(path)  # derives the CJK side rows the upgrade left pending
    eng.dispose_all()
    yield path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    shutil.copy(pristine, path)
    return path


def _damage(path: Path, sql: str) -> None:
    con = sqlite3.connect(path)
    try:
        con.execute(sql)
        con.commit()
    finally:
        con.close()


def _answers(path: Path) -> dict[str, int | StoreDamagedError]:
    out: dict[str, int | StoreDamagedError] = {}
    with SessionDB(path) as db:
        for query in UNDAMAGED:
            try:
                out[query] = len(db.search_messages(query, limit=1000))
            except StoreDamagedError as err:
                out[query] = err
    eng.dispose_all()
    return out


def test_the_undamaged_store_gives_the_known_counts(store: Path) -> None:
    assert _answers(store) == UNDAMAGED
    code, doc = run_json("--db", str(store), "doctor")
    assert code == 0, doc["findings"]


@pytest.mark.parametrize("damage", list(DAMAGE.values()), ids=list(DAMAGE))
def test_index_damage_is_an_error_or_the_right_answer_and_repair_restores_every_count(
        store: Path, damage: str) -> None:
    _damage(store, damage)
    # doctor first: a read-write open may already heal what it finds (lost CJK side rows are
    # derived again), and the damage must be reported on the store as it was left.
    code, doc = run_json("--db", str(store), "doctor")
    assert code == 7
    assert any(f["status"] == "damage" and f["fix"] == "hermes-store repair"
               for f in doc["findings"] if f["check"].startswith(("index:", "fts:")))

    answers = _answers(store)
    for query, answer in answers.items():
        if isinstance(answer, StoreDamagedError):
            assert isinstance(answer, SearchIndexDamagedError)
            assert isinstance(answer, sqlite3.OperationalError)  # what a v11 caller catches
            assert "hermes-store repair" in str(answer)
        else:
            assert answer == UNDAMAGED[query], f"{query}: fewer hits in silence"

    report = recovery.repair_store(store)
    assert report.healthy, report.to_dict()
    eng.dispose_all()
    assert _answers(store) == UNDAMAGED
    assert run_json("--db", str(store), "doctor", "--full")[0] == 0


@pytest.mark.parametrize("damage", ["word-config-version", "cjk-index-does-not-load",
                                    "word-structure-zeroed"])
def test_an_append_into_a_broken_index_raises_the_documented_error(
        store: Path, damage: str) -> None:
    _damage(store, DAMAGE[damage])
    with SessionDB(store) as db:
        sid = db.list_sessions_rich(limit=1)[0]["id"]
        before = len(db.get_messages(sid))
        with pytest.raises(SearchIndexDamagedError, match="hermes-store repair") as info:
            db.append_message(sid, "user", "not stored while the index is broken 安全")
        assert isinstance(info.value, sqlite3.OperationalError)
        assert len(db.get_messages(sid)) == before


def test_an_index_that_does_not_load_stops_only_the_routes_that_read_it(store: Path) -> None:
    # The bigram index: the trigram route never reads it; the word route reads it for the rows
    # holding CJK text, so a Latin word raises rather than miss the hits in those rows.
    _damage(store, DAMAGE["cjk-index-does-not-load"])
    answers = _answers(store)
    assert answers["生命周期"] == UNDAMAGED["生命周期"]
    for query in ("Rust", "闭包"):
        assert isinstance(answers[query], SearchIndexDamagedError)
        assert answers[query].indexes == (CJK,)


def test_a_word_index_that_does_not_load_leaves_both_cjk_routes_working(store: Path) -> None:
    _damage(store, f"DROP TABLE {_shadow(WORD, '_config')}")
    answers = _answers(store)
    assert answers["闭包"] == UNDAMAGED["闭包"] and answers["生命周期"] == UNDAMAGED["生命周期"]
    assert isinstance(answers["Rust"], SearchIndexDamagedError)
    assert answers["Rust"].indexes == (WORD,)


def test_only_what_fts5_says_of_a_query_means_no_hits() -> None:
    query_errors = ['fts5: syntax error near "AND"', "unterminated string",
                    "no such column: tool", "fts5: parser stack overflow"]
    damage = ["invalid fts5 file format (found 5, expected 4) - run 'rebuild'",
              "vtable constructor failed: " + CJK, "database disk image is malformed"]
    for text in query_errors:
        assert sqlite_search.is_match_error(sqlite3.OperationalError(text)), text
    for text in damage:
        assert not sqlite_search.is_match_error(sqlite3.OperationalError(text)), text


def test_the_probe_runs_once_per_connection_and_write_generation(
        store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = index_health.probe

    def counted(conn, index, window=None):  # type: ignore[no-untyped-def]
        calls.append(index)
        return real(conn, index, window)

    monkeypatch.setattr(index_health, "probe", counted)
    with SessionDB(store) as db:
        db.engine.dispose()
        db.search_messages("nothingmatchesthis")
        first = len(calls)
        assert first >= 1
        db.search_messages("nothingmatchesthiseither")
        db.search_messages("Rust", limit=5)  # a full page needs no probe
        assert len(calls) == first
        sid = db.list_sessions_rich(limit=1)[0]["id"]
        db.append_message(sid, "user", "a write moves the generation")
        db.search_messages("nothingmatchesthis")
        assert len(calls) > first


def test_doctor_full_compares_each_index_with_its_content(store: Path) -> None:
    # One old row taken out of the word index and one old CJK side row deleted: the bounded
    # checks look at the newest rows, the full check at every row.
    _damage(store, f"INSERT INTO {WORD} ({WORD}, rowid, content, tool_name, tool_calls) "
                   f"SELECT 'delete', rowid, content, tool_name, tool_calls FROM {WORD} "
                   "WHERE rowid = 5")
    _damage(store, f"DELETE FROM {catalog.CJK_SIDE_TABLE} WHERE id = (SELECT min(id) FROM "
                   f"{catalog.CJK_SIDE_TABLE})")
    assert run_json("--db", str(store), "doctor")[0] == 0
    code, doc = run_json("--db", str(store), "doctor", "--full")
    assert code == 7
    damaged = {f["check"]: f["detail"] for f in doc["findings"] if f["status"] == "damage"}
    assert "missing or miscounted" in damaged[f"index:{WORD}"]
    assert "no bigram side row" in damaged[f"index:{CJK}"]

    assert recovery.repair_store(store, full=True).healthy
    assert run_json("--db", str(store), "doctor", "--full")[0] == 0
