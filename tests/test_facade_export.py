"""SessionDB export: one session with its messages, every session, streamed."""

from __future__ import annotations

import pytest
from backends import sql, sql_many

from hermes_store import SessionDB

T = 1_790_000_000.0


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        yield instance


def make(db: SessionDB, sid: str, started: float, source: str = "cli") -> None:
    db.create_session(sid, source, system_prompt="prompt " * 3000)
    sql(db, "UPDATE sessions SET started_at = :t WHERE id = :id", t=started, id=sid)


def test_export_session_is_get_session_plus_messages(db: SessionDB) -> None:
    make(db, "s1", T)
    db.append_message("s1", "user", "hi", timestamp=T + 1)
    db.append_message("s1", "assistant", "yo", tool_calls=[{"id": "c"}], timestamp=T + 2)
    exported = db.export_session("s1")
    expected = dict(db.get_session("s1"), messages=db.get_messages("s1"))
    assert exported == expected
    assert exported["messages"][1]["tool_calls"] == [{"id": "c"}]
    assert exported["system_prompt"] == "prompt " * 3000


def test_export_of_an_unknown_session_is_none(db: SessionDB) -> None:
    assert db.export_session("ghost") is None


def test_export_all_follows_search_sessions_order_and_carries_last_active(db) -> None:
    make(db, "old", T)
    make(db, "new", T + 100)
    make(db, "revived", T - 100, source="telegram")
    db.append_message("revived", "user", "back", timestamp=T + 500)
    db.end_session("new", "user_exit")
    everything = db.export_all()
    assert [e["id"] for e in everything] == [r["id"] for r in db.search_sessions(limit=100)]
    assert [e["id"] for e in everything] == ["revived", "new", "old"]
    assert everything[0]["last_active"] == T + 500
    assert everything[0]["messages"][0]["content"] == "back"
    assert everything[1]["messages"] == []
    assert [e["id"] for e in db.export_all(source="telegram")] == ["revived"]
    assert db.export_all(source="nope") == []


def test_export_includes_open_archived_and_pinned_sessions(db: SessionDB) -> None:
    make(db, "open", T)
    make(db, "arch", T + 1)
    make(db, "pin", T + 2)
    db.end_session("arch", "user_exit")
    db.archive_session("arch")
    db.pin_session("pin")
    assert sorted(e["id"] for e in db.export_all()) == ["arch", "open", "pin"]


def test_export_all_has_no_silent_cap_and_iter_export_streams(db: SessionDB) -> None:
    rows = [(f"s{i:04d}", "cli", T + i) for i in range(450)]
    sql_many(db, "INSERT INTO sessions (id, source, started_at) VALUES (:id, :source, :t)",
             [{"id": sid, "source": source, "t": t} for sid, source, t in rows])
    db.append_message("s0007", "user", "x")
    stream = db.iter_export(batch=100)
    first = next(stream)
    assert first["id"] == "s0007" and first["messages"][0]["content"] == "x"
    rest = list(stream)
    assert len(rest) == 449 and len(db.export_all()) == 450


def test_export_all_returns_columns_an_adopted_store_has(legacy_db) -> None:
    with SessionDB(legacy_db(21)) as db:
        everything = db.export_all()
    assert len(everything) == 16
    assert all("session_key" in e and "messages" in e for e in everything)
    assert sum(len(e["messages"]) for e in everything) == 358
