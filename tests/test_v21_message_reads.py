"""v21 API (docs/v21.md#parameters, docs/v21.md#behaviour-changes): message provenance on
append, paged reads of the live context, conversation dicts with timestamps, and the
background-review harness left out of replays."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import update
from v21_stores import BASE_TS

from hermes_store import Message, SessionDB

messages = Message.__table__
REVIEW_SKILLS = "Review the conversation above and update the skill library."
REVIEW_MEMORY = "Review the conversation above and consider saving to memory."


def flag(db: SessionDB, ids: list[int], *, active: int, compacted: int = 0) -> None:
    db._write(lambda c: c.execute(update(messages).where(messages.c.id.in_(ids))
                                  .values(active=active, compacted=compacted)))


def turns(db: SessionDB, sid: str, n: int) -> list[int]:
    return [db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"m{i}",
                              timestamp=BASE_TS + i) for i in range(n)]


# --------------------------------------------------------------------------- append


def test_append_takes_the_v21_parameters_in_order(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    mid = db.append_message("s", "user", "hi", None, None, None, None, None, None, None, None,
                            None, None, "4711", True, "delivered", BASE_TS)
    [row] = db.get_messages("s")
    assert row["id"] == mid
    assert (row["platform_message_id"], row["observed"], row["effect_disposition"],
            row["timestamp"], row["active"], row["compacted"]) == (
        "4711", 1, "delivered", BASE_TS, 1, 0)


def test_append_stores_numbers_as_text_flags_as_int_and_datetimes_as_epochs(db) -> None:
    db.create_session("s", "telegram")
    moment = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
    db.append_message("s", "user", "a", platform_message_id=99, observed=0, timestamp=moment)
    [row] = db.get_messages("s")
    assert (row["platform_message_id"], row["observed"]) == ("99", 0)
    assert row["timestamp"] == moment.timestamp()
    with pytest.raises(ValueError):
        db.append_message("s", "user", "b", timestamp=float("nan"))
    with pytest.raises(TypeError):
        db.append_message("s", "user", "b", platform_message_id=["x"])


# --------------------------------------------------------------------------- get_messages


def test_get_messages_returns_the_live_context_unless_asked(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = turns(db, "s", 4)
    flag(db, [ids[1]], active=0)
    flag(db, [ids[2]], active=0, compacted=1)
    assert [m["id"] for m in db.get_messages("s")] == [ids[0], ids[3]]
    assert [m["id"] for m in db.get_messages("s", include_inactive=True)] == ids
    assert db.message_count("s") == 4


def test_get_messages_pages_after_the_active_filter(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = turns(db, "s", 6)
    flag(db, [ids[0], ids[2]], active=0)
    live = [ids[1], ids[3], ids[4], ids[5]]
    assert [m["id"] for m in db.get_messages("s", limit=2)] == live[:2]
    assert [m["id"] for m in db.get_messages("s", False, 2, 1)] == live[1:3]
    assert [m["id"] for m in db.get_messages("s", offset=3)] == live[3:]
    assert [m["id"] for m in db.get_messages("s", include_inactive=True, limit=1,
                                             offset=2)] == [ids[2]]
    assert db.get_messages("s", limit=0) == []


@pytest.mark.parametrize("paging", [{"limit": -1}, {"offset": -1}])
def test_negative_paging_is_refused(db: SessionDB, paging: dict) -> None:
    with pytest.raises(ValueError):
        db.get_messages("s", **paging)


def test_exports_carry_the_live_context_only(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = turns(db, "s", 3)
    flag(db, [ids[0]], active=0)
    assert [m["id"] for m in db.export_session("s")["messages"]] == ids[1:]
    [exported] = db.export_all()
    assert [m["id"] for m in exported["messages"]] == ids[1:]


def test_clear_messages_removes_inactive_rows_too(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = turns(db, "s", 3)
    flag(db, ids[:2], active=0)
    db.clear_messages("s")
    assert db.get_messages("s", include_inactive=True) == []
    assert db.get_session("s")["message_count"] == 0


# --------------------------------------------------------------------------- conversation


def test_conversation_dicts_carry_timestamp_and_truthy_provenance(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.append_message("s", "user", "hello", platform_message_id="m1", observed=True,
                      timestamp=BASE_TS)
    db.append_message("s", "assistant", None, tool_calls=[{"id": "c1"}], timestamp=BASE_TS + 1)
    db.append_message("s", "tool", "done", tool_call_id="c1", tool_name="terminal",
                      effect_disposition="applied", timestamp=BASE_TS + 2)
    db.append_message("s", "user", "quiet", tool_call_id="", platform_message_id="",
                      timestamp=BASE_TS + 3)
    assert db.get_messages_as_conversation("s") == [
        {"role": "user", "content": "hello", "timestamp": BASE_TS, "message_id": "m1",
         "observed": True},
        {"role": "assistant", "content": None, "timestamp": BASE_TS + 1,
         "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "content": "done", "timestamp": BASE_TS + 2, "tool_call_id": "c1",
         "tool_name": "terminal", "effect_disposition": "applied"},
        {"role": "user", "content": "quiet", "timestamp": BASE_TS + 3},
    ]
    assert list(db.get_messages_as_conversation("s")[2]) == [
        "role", "content", "timestamp", "tool_call_id", "tool_name", "effect_disposition"]


def test_conversation_replays_active_rows_unless_asked(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = turns(db, "s", 4)
    flag(db, ids[2:], active=0)
    assert [t["content"] for t in db.get_messages_as_conversation("s")] == ["m0", "m1"]
    assert [t["content"] for t in db.get_messages_as_conversation(
        "s", include_inactive=True)] == ["m0", "m1", "m2", "m3"]
    db.create_session("child", "cli", parent_session_id="s")
    db.append_message("child", "user", "next", timestamp=BASE_TS + 10)
    assert [t["content"] for t in db.get_messages_as_conversation(
        "child", include_ancestors=True)] == ["m0", "m1", "next"]
    assert [t["content"] for t in db.get_messages_as_conversation(
        "child", True, True)] == ["m0", "m1", "m2", "m3", "next"]


@pytest.mark.parametrize("prompt", [REVIEW_SKILLS, REVIEW_MEMORY, "  \n" + REVIEW_MEMORY])
@pytest.mark.parametrize("role", ["user", "system"])
def test_the_review_harness_and_its_answer_are_left_out(db: SessionDB, prompt: str,
                                                        role: str) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "real question", timestamp=BASE_TS)
    db.append_message("s", "assistant", "real answer", timestamp=BASE_TS + 1)
    db.append_message("s", role, prompt, timestamp=BASE_TS + 2)
    db.append_message("s", "assistant", "saved two memories", timestamp=BASE_TS + 3)
    db.append_message("s", "user", "thanks", timestamp=BASE_TS + 4)
    assert [t["content"] for t in db.get_messages_as_conversation("s")] == [
        "real question", "real answer", "thanks"]
    assert len(db.get_messages("s")) == 5


def test_only_the_exact_harness_prompt_followed_by_an_assistant_goes(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", REVIEW_MEMORY.lower(), timestamp=BASE_TS)
    db.append_message("s", "assistant", "kept: not the prompt", timestamp=BASE_TS + 1)
    db.append_message("s", "tool", REVIEW_MEMORY, tool_call_id="c", timestamp=BASE_TS + 2)
    db.append_message("s", "user", REVIEW_SKILLS, timestamp=BASE_TS + 3)
    db.append_message("s", "user", "kept: a user turn follows", timestamp=BASE_TS + 4)
    assert [t["content"] for t in db.get_messages_as_conversation("s")] == [
        REVIEW_MEMORY.lower(), "kept: not the prompt", REVIEW_MEMORY,
        "kept: a user turn follows"]


def test_a_v21_store_replays_with_timestamps(v21_db: SessionDB) -> None:
    sid = "20260101_000000_cea663"
    replay = v21_db.get_messages_as_conversation(sid)
    assert len(replay) == len(v21_db.get_messages(sid)) > 0
    assert all(isinstance(turn["timestamp"], float) for turn in replay)
    assert all(m["active"] == 1 for m in v21_db.get_messages(sid))
