"""v21 API (docs/v21.md#gateway): gateway peers, the expiry flag, the routing index and the lookups a gateway
resumes by."""

from __future__ import annotations

import sqlite3

import pytest
from v21_stores import BASE_TS, column, holding_write_lock, make, set_columns

from hermes_store import SessionDB


def peer(store: SessionDB, sid: str, **kw) -> None:
    kw.setdefault("source", "telegram")
    kw.setdefault("session_key", f"agent:main:{sid}")
    store.record_gateway_session_peer(sid, **kw)


# --------------------------------------------------------------------------- peer columns


def test_recording_a_peer_sets_every_peer_column(db: SessionDB) -> None:
    make(db, "s1", "cli")
    db.record_gateway_session_peer(
        "s1", source="telegram", user_id="u1", session_key="agent:main:telegram:dm:42",
        chat_id="42", chat_type="dm", thread_id="7", display_name="Ada",
        origin_json='{"platform": "telegram"}')
    row = db.get_session("s1")
    assert {k: row[k] for k in ("source", "user_id", "session_key", "chat_id", "chat_type",
                                 "thread_id", "display_name", "origin_json")} == {
        "source": "telegram", "user_id": "u1", "session_key": "agent:main:telegram:dm:42",
        "chat_id": "42", "chat_type": "dm", "thread_id": "7", "display_name": "Ada",
        "origin_json": '{"platform": "telegram"}'}


def test_none_clears_peer_columns_but_keeps_name_and_origin(db: SessionDB) -> None:
    make(db, "s1")
    peer(db, "s1", user_id="u1", chat_id="42", chat_type="dm", thread_id="7",
         display_name="Ada", origin_json="{}")
    db.record_gateway_session_peer("s1", source="discord", session_key="k2")
    row = db.get_session("s1")
    assert (row["source"], row["session_key"]) == ("discord", "k2")
    assert [row[k] for k in ("user_id", "chat_id", "chat_type", "thread_id")] == [None] * 4
    assert (row["display_name"], row["origin_json"]) == ("Ada", "{}")


def test_numeric_chat_ids_are_stored_as_text(db: SessionDB) -> None:
    make(db, "s1")
    peer(db, "s1", chat_id=-100123, thread_id=5, user_id=99)
    row = db.get_session("s1")
    assert (row["chat_id"], row["thread_id"], row["user_id"]) == ("-100123", "5", "99")


def test_a_peer_without_session_or_key_is_not_recorded(db: SessionDB) -> None:
    make(db, "s1", "cli")
    db.record_gateway_session_peer("s1", source="telegram", session_key=None, chat_id="1")
    db.record_gateway_session_peer("s1", source="telegram", session_key="", chat_id="1")
    db.record_gateway_session_peer(None, source="telegram", session_key="k", chat_id="1")
    db.record_gateway_session_peer("ghost", source="telegram", session_key="k", chat_id="1")
    assert db.get_session("s1")["source"] == "cli"
    assert db.get_session("s1")["chat_id"] is None
    assert db.get_session("ghost") is None
    with pytest.raises(TypeError):
        db.record_gateway_session_peer("s1", source=None, session_key="k")


def test_expiry_finalized_is_stored_as_one_or_zero(db: SessionDB) -> None:
    make(db, "s1")
    assert column(db, "s1", "expiry_finalized") == 0
    db.set_expiry_finalized("s1")
    assert column(db, "s1", "expiry_finalized") == 1
    db.set_expiry_finalized("s1", False)
    assert column(db, "s1", "expiry_finalized") == 0
    db.set_expiry_finalized("s1", "yes")
    assert column(db, "s1", "expiry_finalized") == 1
    db.set_expiry_finalized(None)
    db.set_expiry_finalized("")


# --------------------------------------------------------------------------- routing index


def test_routing_entries_upsert_per_scope(db: SessionDB) -> None:
    db.save_gateway_routing_entry("k1", '{"v": 1}')
    db.save_gateway_routing_entry("k1", '{"v": 2}')
    db.save_gateway_routing_entry("k1", '{"other": 1}', scope="/profiles/b")
    assert db.load_gateway_routing_entries() == {"k1": '{"v": 2}'}
    assert db.load_gateway_routing_entries(scope="/profiles/b") == {"k1": '{"other": 1}'}
    assert db.load_gateway_routing_entries(scope="/nowhere") == {}


def test_empty_routing_keys_or_entries_are_not_saved(db: SessionDB) -> None:
    db.save_gateway_routing_entry("", "{}")
    db.save_gateway_routing_entry(None, "{}")
    db.save_gateway_routing_entry("k", "")
    db.save_gateway_routing_entry("k", None)
    assert db.load_gateway_routing_entries() == {}


def test_replacing_routing_entries_rewrites_only_that_scope(db: SessionDB) -> None:
    db.save_gateway_routing_entry("old", "1")
    db.save_gateway_routing_entry("kept", "1", scope="b")
    db.replace_gateway_routing_entries({"a": "x", "b": "y", "": "z", "c": ""})
    assert db.load_gateway_routing_entries() == {"a": "x", "b": "y"}
    assert db.load_gateway_routing_entries(scope="b") == {"kept": "1"}
    db.replace_gateway_routing_entries({})
    assert db.load_gateway_routing_entries() == {}
    with pytest.raises(TypeError):
        db.replace_gateway_routing_entries([("a", "x")])


def test_deleting_routing_entries_removes_those_keys(db: SessionDB) -> None:
    db.replace_gateway_routing_entries({f"k{i}": str(i) for i in range(1200)})
    db.save_gateway_routing_entry("k1", "kept", scope="other")
    db.delete_gateway_routing_entries([f"k{i}" for i in range(1, 1200)] + ["", "k1"])
    assert db.load_gateway_routing_entries() == {"k0": "0"}
    assert db.load_gateway_routing_entries(scope="other") == {"k1": "kept"}


def test_deleting_no_routing_keys_writes_nothing(db: SessionDB, monkeypatch) -> None:
    monkeypatch.setattr("hermes_store.db.engine.WRITE_BUDGET_S", 0.2)
    with holding_write_lock(db):
        db.delete_gateway_routing_entries([])
        db.delete_gateway_routing_entries(["", None])
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            db.delete_gateway_routing_entries(["k"])


# --------------------------------------------------------------------------- listing


def test_gateway_sessions_are_the_newest_row_of_each_key(db: SessionDB) -> None:
    make(db, "old", "telegram", started_at=BASE_TS)
    make(db, "new", "telegram", started_at=BASE_TS + 10, messages=1)
    make(db, "tie_a", "discord", started_at=BASE_TS + 5)
    make(db, "tie_b", "discord", started_at=BASE_TS + 5)
    make(db, "closed", "telegram", started_at=BASE_TS + 20, ended_at=BASE_TS + 30,
         end_reason="user_exit")
    make(db, "before_closed", "telegram", started_at=BASE_TS + 1)
    make(db, "keyless", "telegram", started_at=BASE_TS + 40)
    for sid, key in (("old", "k1"), ("new", "k1"), ("tie_a", "k2"), ("tie_b", "k2"),
                     ("closed", "k3"), ("before_closed", "k3")):
        db.record_gateway_session_peer(sid, source=db.get_session(sid)["source"],
                                       session_key=key)
    rows = db.list_gateway_sessions()
    assert [r["id"] for r in rows] == ["new", "tie_b", "tie_a"]
    assert rows[0]["last_active"] == BASE_TS + 11
    assert "handoff_state" in rows[0] and "rewind_count" in rows[0]
    everything = db.list_gateway_sessions(active_only=False)
    assert [r["id"] for r in everything] == ["closed", "new", "tie_b", "tie_a"]
    assert [r["id"] for r in db.list_gateway_sessions(platform="TeleGram")] == ["new"]
    assert db.list_gateway_sessions(platform="slack") == []


# --------------------------------------------------------------------------- by origin


def origin_store(store: SessionDB) -> None:
    make(store, "a", "telegram", started_at=BASE_TS)
    make(store, "b", "telegram", started_at=BASE_TS + 10)
    peer(store, "a", chat_id="42", user_id="alice", thread_id="3")
    peer(store, "b", chat_id="42", user_id="bob")


def test_a_chat_with_one_open_session_finds_it(db: SessionDB) -> None:
    make(db, "a", "telegram")
    peer(db, "a", chat_id="42", user_id="alice")
    assert db.find_session_by_origin(platform="Telegram", chat_id=42) == "a"
    assert db.find_session_by_origin(platform="telegram", chat_id="42", user_id="bob") == "a"
    assert db.find_session_by_origin(platform="telegram", chat_id="43") is None
    assert db.find_session_by_origin(platform="discord", chat_id="42") is None
    for platform, chat in (("", "42"), (None, "42"), ("telegram", None), ("telegram", "")):
        assert db.find_session_by_origin(platform=platform, chat_id=chat) is None


def test_a_shared_chat_needs_the_user_to_decide(db: SessionDB) -> None:
    origin_store(db)
    assert db.find_session_by_origin(platform="telegram", chat_id="42") is None
    assert db.find_session_by_origin(platform="telegram", chat_id="42", user_id="alice") == "a"
    assert db.find_session_by_origin(platform="telegram", chat_id="42", user_id="bob") == "b"
    assert db.find_session_by_origin(platform="telegram", chat_id="42", user_id="eve") is None


def test_one_users_sessions_resolve_to_the_newest(db: SessionDB) -> None:
    make(db, "a", "telegram", started_at=BASE_TS)
    make(db, "b", "telegram", started_at=BASE_TS + 10)
    make(db, "c", "telegram", started_at=BASE_TS + 20)
    peer(db, "a", chat_id="42", user_id="alice")
    peer(db, "b", chat_id="42", user_id="alice")
    peer(db, "c", chat_id="42", user_id="")
    assert db.find_session_by_origin(platform="telegram", chat_id="42") == "c"
    assert db.find_session_by_origin(platform="telegram", chat_id="42", user_id="alice") == "b"


def test_a_thread_narrows_the_chat_and_blank_means_no_thread(db: SessionDB) -> None:
    origin_store(db)
    assert db.find_session_by_origin(platform="telegram", chat_id="42", thread_id=3) == "a"
    assert db.find_session_by_origin(platform="telegram", chat_id="42", thread_id="") == "b"
    assert db.find_session_by_origin(platform="telegram", chat_id="42", thread_id="9") is None


def test_ended_and_keyless_sessions_are_not_origins(db: SessionDB) -> None:
    origin_store(db)
    db.end_session("b", "user_exit")
    assert db.find_session_by_origin(platform="telegram", chat_id="42") == "a"
    make(db, "keyless", "telegram", started_at=BASE_TS + 50, chat_id="42")
    assert db.find_session_by_origin(platform="telegram", chat_id="42") == "a"


# --------------------------------------------------------------------------- by peer


def test_a_peer_resumes_its_newest_recoverable_session_with_content(db: SessionDB) -> None:
    make(db, "empty", "telegram", started_at=BASE_TS + 50)
    make(db, "exited", "telegram", started_at=BASE_TS + 40, ended_at=BASE_TS + 41,
         end_reason="user_exit", messages=1)
    make(db, "reaped", "telegram", started_at=BASE_TS + 30, ended_at=BASE_TS + 31,
         end_reason="ws_orphan_reap", messages=1)
    make(db, "older", "telegram", started_at=BASE_TS + 20, messages=1)
    make(db, "other_source", "discord", started_at=BASE_TS + 60, messages=1)
    for sid in ("empty", "exited", "reaped", "older", "other_source"):
        db.record_gateway_session_peer(sid, source=db.get_session(sid)["source"],
                                       session_key="k")
    found = db.find_latest_gateway_session_for_peer(source="telegram", session_key="k")
    assert found["id"] == "reaped"
    assert found["ended_at"] is not None  # found, never reopened
    set_columns(db, "reaped", end_reason="agent_close")
    assert db.find_latest_gateway_session_for_peer(source="telegram",
                                                   session_key="k")["id"] == "reaped"
    set_columns(db, "reaped", end_reason="user_exit")
    assert db.find_latest_gateway_session_for_peer(source="telegram",
                                                   session_key="k")["id"] == "older"


def test_a_message_row_counts_as_content_even_with_a_zero_counter(db: SessionDB) -> None:
    make(db, "s1", "telegram", messages=1)
    peer(db, "s1", session_key="k")
    set_columns(db, "s1", message_count=0)
    assert db.find_latest_gateway_session_for_peer(source="telegram",
                                                   session_key="k")["id"] == "s1"


def test_without_a_key_match_the_exact_peer_decides(db: SessionDB) -> None:
    make(db, "s1", "telegram", messages=1)
    peer(db, "s1", session_key="old-key-format", user_id="u1", chat_id="42", chat_type="dm")
    ask = {"source": "telegram", "session_key": "new-key-format", "user_id": "u1"}
    assert db.find_latest_gateway_session_for_peer(**ask, chat_id=42,
                                                   chat_type="dm")["id"] == "s1"
    assert db.find_latest_gateway_session_for_peer(**ask, chat_id="42", chat_type="dm",
                                                   thread_id="")["id"] == "s1"
    assert db.find_latest_gateway_session_for_peer(**ask, chat_id="42", chat_type="dm",
                                                   thread_id="9") is None
    assert db.find_latest_gateway_session_for_peer(**ask, chat_id="42") is None
    assert db.find_latest_gateway_session_for_peer(**ask, chat_id="42",
                                                   chat_type="group") is None
    assert db.find_latest_gateway_session_for_peer(source="telegram", session_key="",
                                                   chat_id="42", chat_type="dm") is None


def test_the_v21_agents_store_has_no_gateway_sessions_until_one_is_recorded(
        v21_db: SessionDB) -> None:
    assert v21_db.list_gateway_sessions(active_only=False) == []
    sid = "20260505_040400_c9717e"  # the fixture's open discord session, with messages
    v21_db.record_gateway_session_peer(sid, source="discord", session_key="agent:main:d:1",
                                       chat_id="1", chat_type="channel")
    assert [r["id"] for r in v21_db.list_gateway_sessions(platform="discord")] == [sid]
    assert v21_db.find_session_by_origin(platform="discord", chat_id="1") == sid
    assert v21_db.find_latest_gateway_session_for_peer(
        source="discord", session_key="agent:main:d:1")["title"] == "Deploy gateway 4"
