"""v21 API (docs/v21.md#messages, docs/v21.md#bulk): windows, the anchored view, rewind and
restore, replace_messages, in-place compaction, recent user messages, platform message ids."""

from __future__ import annotations

import sqlite3
import time

import pytest
from v21_stores import BASE_TS, column

from hermes_store import SessionDB


def conversation(db: SessionDB, sid: str = "s", roles: str = "uatuatua") -> list[int]:
    """One row per letter: u(ser), a(ssistant), t(ool), s(ystem), e(mpty assistant)."""
    db.create_session(sid, "cli")
    names = {"u": "user", "a": "assistant", "t": "tool", "s": "system", "e": "assistant"}
    return [db.append_message(sid, names[r], "" if r == "e" else f"{r}{n}",
                              tool_call_id="c" if r == "t" else None, timestamp=BASE_TS + n)
            for n, r in enumerate(roles)]


def contents(rows: list[dict]) -> list:
    return [r["content"] for r in rows]


# --------------------------------------------------------------------------- windows


def test_messages_around_an_anchor(db: SessionDB) -> None:
    ids = conversation(db)
    view = db.get_messages_around("s", ids[4], window=2)
    assert [m["id"] for m in view["window"]] == ids[2:7]
    assert (view["messages_before"], view["messages_after"]) == (2, 2)
    near = db.get_messages_around("s", ids[1], 5)
    assert (near["messages_before"], near["messages_after"]) == (1, 5)
    only = db.get_messages_around("s", ids[1], -3)
    assert [m["id"] for m in only["window"]] == [ids[1]]


def test_an_anchor_of_another_session_gives_an_empty_window(db: SessionDB) -> None:
    ids = conversation(db)
    conversation(db, "other", "ua")
    empty = {"window": [], "messages_before": 0, "messages_after": 0}
    assert db.get_messages_around("other", ids[4]) == empty
    assert db.get_messages_around("s", 10_000) == empty
    assert db.get_messages_around(None, ids[4]) == empty


def test_the_window_shows_rows_of_every_state(db: SessionDB) -> None:
    ids = conversation(db)
    db.rewind_to_message("s", ids[3])
    assert len(db.get_messages_around("s", ids[3], 10)["window"]) == len(ids)


def test_the_anchored_view_filters_the_window_but_not_its_counts(db: SessionDB) -> None:
    ids = conversation(db, roles="usuatuatuaeuau")
    view = db.get_anchored_view("s", ids[6], window=2, bookend=2)
    assert contents(view["window"]) == ["u5", "a6", "u8"]
    assert (view["messages_before"], view["messages_after"]) == (2, 2)
    assert contents(view["bookend_start"]) == ["u0", "u2"]
    assert contents(view["bookend_end"]) == ["a12", "u13"]
    wide = db.get_anchored_view("s", ids[7], window=1, bookend=3, keep_roles=None)
    assert contents(wide["window"]) == ["a6", "t7", "u8"]
    assert contents(wide["bookend_start"]) == ["u0", "s1", "u2"]
    assert contents(wide["bookend_end"]) == ["u11", "a12", "u13"]


def test_the_anchor_stays_and_bookends_stop_at_the_window(db: SessionDB) -> None:
    ids = conversation(db, roles="uatua")
    view = db.get_anchored_view("s", ids[2], window=10, bookend=3)
    assert contents(view["window"]) == ["u0", "a1", "t2", "u3", "a4"]
    assert view["bookend_start"] == [] and view["bookend_end"] == []
    none = db.get_anchored_view("s", ids[2], window=0, bookend=-1, keep_roles=("user",))
    assert contents(none["window"]) == ["t2"] and none["bookend_start"] == []
    missing = db.get_anchored_view("s", 10_000)
    assert missing == {"window": [], "messages_before": 0, "messages_after": 0,
                       "bookend_start": [], "bookend_end": []}


def test_bookends_skip_empty_content(db: SessionDB) -> None:
    ids = conversation(db, roles="euauauau")
    view = db.get_anchored_view("s", ids[6], window=1, bookend=2)
    assert contents(view["bookend_start"]) == ["u1", "a2"]


# --------------------------------------------------------------------------- rewind


def test_rewind_flips_the_target_and_everything_after(db: SessionDB) -> None:
    ids = conversation(db, roles="uauau")
    db.append_message("s", "assistant", None, tool_calls=[{"id": "x"}], timestamp=BASE_TS + 9)
    out = db.rewind_to_message("s", ids[2])
    assert out["rewound_count"] == 4 and out["new_head_id"] == ids[1]
    assert out["target_message"]["id"] == ids[2]
    assert out["target_message"]["content"] == "u2"
    assert contents(db.get_messages("s")) == ["u0", "a1"]
    assert db.get_session("s")["message_count"] == 6
    assert column(db, "s", "rewind_count") == 1
    assert db.search_messages("u4") == []


def test_rewind_counts_even_when_nothing_changes(db: SessionDB) -> None:
    ids = conversation(db, roles="ua")
    assert db.rewind_to_message("s", ids[0])["rewound_count"] == 2
    again = db.rewind_to_message("s", ids[0])
    assert (again["rewound_count"], again["new_head_id"]) == (0, None)
    assert column(db, "s", "rewind_count") == 2


def test_rewind_returns_the_targets_tool_calls_as_stored(db: SessionDB) -> None:
    db.create_session("s", "cli")
    mid = db.append_message("s", "user", [{"type": "text", "text": "hi"}],
                            tool_calls=[{"id": "odd"}], timestamp=BASE_TS)
    target = db.rewind_to_message("s", mid)["target_message"]
    assert target["content"] == [{"type": "text", "text": "hi"}]
    assert target["tool_calls"] == '[{"id": "odd"}]'


@pytest.mark.parametrize("which", ["assistant", "other_session", "missing", "no_session"])
def test_rewind_refuses_a_target_that_is_not_a_user_message_here(db: SessionDB,
                                                                  which: str) -> None:
    ids = conversation(db, roles="ua")
    other = conversation(db, "o", "u")
    target, sid = {"assistant": (ids[1], "s"), "other_session": (other[0], "s"),
                   "missing": (10_000, "s"), "no_session": (ids[0], None)}[which]
    with pytest.raises(ValueError):
        db.rewind_to_message(sid, target)
    assert len(db.get_messages("s")) == 2 and column(db, "s", "rewind_count") == 0


def test_restore_revives_rewound_rows_but_never_compacted_ones(db: SessionDB) -> None:
    ids = conversation(db, roles="uaua")
    db.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    new = db.append_message("s", "user", "after", timestamp=BASE_TS + 20)
    db.append_message("s", "assistant", "reply", timestamp=BASE_TS + 21)
    db.rewind_to_message("s", new)
    assert contents(db.get_messages("s")) == ["summary"]
    assert db.restore_rewound("s", ids[0]) == 2
    assert contents(db.get_messages("s")) == ["summary", "after", "reply"]
    assert db.restore_rewound("s", ids[0]) == 0
    assert db.restore_rewound("", ids[0]) == 0


# --------------------------------------------------------------------------- rewrite


def test_replace_messages_rewrites_history_and_counters(db: SessionDB) -> None:
    conversation(db, roles="uat")
    before = time.time()
    db.replace_messages("s", [
        {"role": "user", "content": "hello", "message_id": 17, "observed": 1,
         "reasoning": "not kept on user rows"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}],
         "reasoning": "kept", "finish_reason": "tool_calls", "timestamp": BASE_TS},
        {"content": "no role", "platform_message_id": "p9", "message_id": "ignored"},
        {"role": "tool", "content": "out", "tool_call_id": "a", "tool_calls": [{"id": "z"}],
         "effect_disposition": "applied", "token_count": 3},
    ])
    rows = db.get_messages("s")
    assert [r["role"] for r in rows] == ["user", "assistant", "unknown", "tool"]
    assert (rows[0]["platform_message_id"], rows[0]["observed"], rows[0]["reasoning"]) == (
        "17", 1, None)
    assert rows[1]["reasoning"] == "kept" and rows[2]["platform_message_id"] == "p9"
    assert (rows[3]["effect_disposition"], rows[3]["token_count"]) == ("applied", 3)
    assert before <= rows[0]["timestamp"] <= time.time()
    assert rows[1]["timestamp"] == BASE_TS
    assert rows[0]["timestamp"] < rows[2]["timestamp"] < rows[3]["timestamp"]
    session = db.get_session("s")
    assert (session["message_count"], session["tool_call_count"]) == (4, 2)
    assert db.search_messages("hello")[0]["session_id"] == "s"
    assert db.search_messages("u0") == []


def test_replace_active_only_keeps_the_record(db: SessionDB) -> None:
    ids = conversation(db, roles="uaua")
    db.rewind_to_message("s", ids[2])
    db.replace_messages("s", [{"role": "user", "content": "fresh"}], active_only=True)
    assert contents(db.get_messages("s")) == ["fresh"]
    assert contents(db.get_messages("s", include_inactive=True)) == ["u2", "a3", "fresh"]
    db.replace_messages("s", [])
    assert db.get_messages("s", include_inactive=True) == []


def test_replace_on_an_unknown_session(db: SessionDB) -> None:
    db.replace_messages("ghost", [])
    with pytest.raises(sqlite3.IntegrityError):
        db.replace_messages("ghost", [{"role": "user", "content": "x"}])
    assert db.get_session("ghost") is None
    with pytest.raises(TypeError):
        db.replace_messages("ghost", ["not a dict"])


def test_archive_and_compact_keeps_the_summarised_rows_searchable(db: SessionDB) -> None:
    ids = conversation(db, roles="uatua")
    db.rewind_to_message("s", ids[3])
    assert db.has_archived_messages("s") is True
    assert db.archive_and_compact("s", [
        {"role": "user", "content": "summary of it all"},
        {"role": "assistant", "content": "ok", "tool_calls": [{"id": "k"}]}]) == 2
    assert contents(db.get_messages("s")) == ["summary of it all", "ok"]
    everything = db.get_messages("s", include_inactive=True)
    states = {r["content"]: (r["active"], r["compacted"]) for r in everything}
    assert states["u0"] == states["t2"] == (0, 1)
    assert states["u3"] == (0, 0)  # rewound rows are not compacted
    session = db.get_session("s")
    assert (session["message_count"], session["tool_call_count"]) == (2, 1)
    assert [h["id"] for h in db.search_messages("a1")] == [ids[1]]
    assert db.search_messages("u3") == []
    assert db.restore_rewound("s", ids[0]) == 2


def test_archive_and_compact_on_an_unknown_session(db: SessionDB) -> None:
    assert db.archive_and_compact("ghost", []) == 0
    with pytest.raises(sqlite3.IntegrityError):
        db.archive_and_compact("ghost", [{"role": "user", "content": "x"}])
    assert db.has_archived_messages("ghost") is False
    assert db.archive_and_compact(None, [{"role": "user"}]) == 0


# --------------------------------------------------------------------------- lookups


def test_recent_user_messages_newest_first_with_previews(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "  spaced\n\tout   text ", timestamp=BASE_TS)
    db.append_message("s", "assistant", "not a user row", timestamp=BASE_TS + 1)
    db.append_message("s", "user", [{"type": "text", "text": "look"}, {"type": "image_url"}],
                      timestamp=BASE_TS + 2)
    db.append_message("s", "user", [{"type": "image_url", "image_url": "x"}],
                      timestamp=BASE_TS + 3)
    last = db.append_message("s", "user", "x" * 81, timestamp=BASE_TS + 4)
    rows = db.list_recent_user_messages("s")
    assert [r["preview"] for r in rows] == ["x" * 77 + "...", "[multimodal content]", "look",
                                            "spaced out text"]
    assert rows[0] == {"id": last, "timestamp": BASE_TS + 4, "preview": "x" * 77 + "..."}
    assert len(db.list_recent_user_messages("s", limit=2)) == 2
    db.rewind_to_message("s", first)
    assert db.list_recent_user_messages("s") == []
    assert len(db.list_recent_user_messages("s", include_inactive=True)) == 4


def test_platform_message_ids_are_found_in_any_state(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.create_session("o", "telegram")
    mid = db.append_message("s", "user", "hi", platform_message_id=501)
    db.append_message("o", "user", "hi", platform_message_id="777")
    assert db.has_platform_message_id("s", "501") is True
    assert db.has_platform_message_id("s", 501) is True
    assert db.has_platform_message_id("s", "777") is False
    assert db.has_platform_message_id("s", "50") is False
    db.rewind_to_message("s", mid)
    assert db.has_platform_message_id("s", "501") is True
    assert db.has_platform_message_id("s", None) is False
    assert db.has_platform_message_id(None, "501") is False


def test_a_v21_store_rewinds_and_compacts(v21_db: SessionDB) -> None:
    sid = "20260909_080800_9a213a"
    rows = v21_db.get_messages(sid)
    first_user = next(r for r in rows if r["role"] == "user")
    out = v21_db.rewind_to_message(sid, first_user["id"])
    assert out["rewound_count"] == len([r for r in rows if r["id"] >= first_user["id"]])
    assert v21_db.restore_rewound(sid, first_user["id"]) == out["rewound_count"]
    assert v21_db.archive_and_compact(sid, [{"role": "user", "content": "sum"}]) == 1
    assert v21_db.has_archived_messages(sid) is True
    assert len(v21_db.get_messages(sid, include_inactive=True)) == len(rows) + 1
