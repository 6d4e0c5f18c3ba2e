"""v21 API (docs/v21.md#other): ``export_session_lineage``: a compressed conversation as one document."""

from __future__ import annotations

from v21_stores import BASE_TS, make

from hermes_store import SessionDB


def chain(store: SessionDB) -> None:
    make(store, "a", ended_at=BASE_TS + 10, end_reason="compression", messages=2)
    make(store, "b", parent="a", started_at=BASE_TS + 10, ended_at=BASE_TS + 20,
         end_reason="compression", messages=1)
    make(store, "c", parent="b", started_at=BASE_TS + 20, messages=3, title="Fix build #2")


def test_a_lineage_exports_as_its_tip_with_every_segment(db: SessionDB) -> None:
    chain(db)
    for start in ("a", "b", "c"):
        doc = db.export_session_lineage(start)
        assert doc["id"] == "c"
        assert doc["title"] == "Fix build #2"
        assert doc["lineage_session_ids"] == ["a", "b", "c"]
        assert [s["id"] for s in doc["segments"]] == ["a", "b", "c"]
        assert doc["segments"][0] == db.export_session("a")
        assert doc["message_count"] == 6
        assert [m["session_id"] for m in doc["messages"]] == ["a"] * 2 + ["b"] + ["c"] * 3
        assert [m["content"] for m in doc["messages"]][:2] == ["turn 0 of a", "turn 1 of a"]


def test_a_session_without_lineage_exports_alone(db: SessionDB) -> None:
    make(db, "solo", messages=2)
    make(db, "p", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "branch", parent="p", started_at=BASE_TS + 20, messages=1,
         markers={"_branched_from": "p"})
    solo = db.export_session_lineage("solo")
    assert solo["lineage_session_ids"] == ["solo"]
    assert solo["message_count"] == 2
    assert solo["messages"] == db.export_session("solo")["messages"]
    assert db.export_session_lineage("branch")["lineage_session_ids"] == ["branch"]


def test_nothing_to_export_is_none(db: SessionDB) -> None:
    assert db.export_session_lineage("ghost") is None
    assert db.export_session_lineage(None) is None
    assert db.export_session_lineage("") is None


def test_the_v21_agents_lineage_exports_whole(v21_db: SessionDB) -> None:
    doc = v21_db.export_session_lineage("20260707_060600_e4ca3a")
    assert doc["lineage_session_ids"] == ["20260707_060600_e4ca3a", "20260808_070700_219dc0"]
    assert doc["id"] == "20260808_070700_219dc0"
    assert doc["message_count"] == 6 + 42 == len(doc["messages"])
