"""SessionDB and bad input: each case is stored faithfully or refused with a clear error, never
a crash, a silent truncation or a half-written row (docs/contracts.md#errors)."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_store import SessionDB

LONE = "half \ud83d of an emoji"


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        instance.create_session("s1", "cli")
        yield instance


def untouched(db: SessionDB) -> None:
    assert db.session_count() == 1 and db.message_count() == 0
    row = db.get_session("s1")
    assert (row["message_count"], row["tool_call_count"], row["title"]) == (0, 0, None)


# --------------------------------------------------------------------------- NUL bytes


def test_nul_bytes_in_message_text_are_stored_faithfully(db: SessionDB) -> None:
    text = "before\x00after\x00"
    db.append_message("s1", "user", text, tool_name="t\x00n", reasoning="r\x00")
    row = db.get_messages("s1")[0]
    assert (row["content"], row["tool_name"], row["reasoning"]) == (text, "t\x00n", "r\x00")


def test_nul_bytes_in_ids_and_prompts_round_trip(db: SessionDB) -> None:
    db.create_session("a\x00b", "cli", system_prompt="p\x00q")
    db.create_session("a", "cli")
    assert db.get_session("a\x00b")["system_prompt"] == "p\x00q"
    assert db.session_count() == 3


def test_nul_bytes_are_dropped_from_titles(db: SessionDB) -> None:
    db.set_session_title("s1", "hello\x00world")
    assert db.get_session_title("s1") == "helloworld"


# --------------------------------------------------------------------------- lone surrogates


def test_lone_surrogates_in_message_text_are_refused_before_writing(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        db.append_message("s1", "user", LONE)
    with pytest.raises(ValueError, match="reasoning"):
        db.append_message("s1", "assistant", "ok", reasoning=LONE)
    untouched(db)


def test_lone_surrogates_inside_json_values_round_trip_escaped(db: SessionDB) -> None:
    calls = [{"id": "c1", "function": {"arguments": LONE}}]
    db.append_message("s1", "assistant", "ok", tool_calls=calls, reasoning_details=[LONE])
    row = db.get_messages("s1")[0]
    assert row["tool_calls"] == calls
    assert "\\ud83d" in row["reasoning_details"]
    assert db.get_messages_as_conversation("s1")[0]["reasoning_details"] == [LONE]


def test_lone_surrogates_in_multimodal_text_parts_are_refused(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="content contains a lone surrogate"):
        db.append_message("s1", "user", [{"type": "text", "text": LONE}])
    untouched(db)


def test_lone_surrogates_in_ids_and_session_fields(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        db.create_session("id\udc00", "cli")
    with pytest.raises(ValueError):
        db.create_session("s2", "cli", system_prompt=LONE)
    with pytest.raises(ValueError):
        db.update_system_prompt("s1", LONE)
    with pytest.raises(ValueError):
        db.end_session("s1", LONE)
    # Readers and no-op writers treat an unstorable id as unknown.
    assert db.get_session("id\udc00") is None and db.get_messages("id\udc00") == []
    assert db.resolve_session_id("s\udc00") is None
    assert db.delete_session("id\udc00") is False
    db.end_session("id\udc00", "x")
    untouched(db)
    assert db.get_session("s1")["ended_at"] is None


def test_lone_surrogates_are_dropped_from_titles(db: SessionDB) -> None:
    db.set_session_title("s1", LONE)
    assert db.get_session_title("s1") == "half of an emoji"


# --------------------------------------------------------------------------- sizes


def test_a_10_mb_message_is_stored_whole(db: SessionDB) -> None:
    big = ("0123456789abcdef" * 65536) * 10  # 10 MiB
    mid = db.append_message("s1", "tool", big, tool_call_id="c1")
    row = db.get_messages("s1")[0]
    assert row["id"] == mid and len(row["content"]) == len(big) and row["content"] == big
    assert db.get_session("s1")["message_count"] == 1


def test_an_over_long_title_is_refused_not_truncated(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="Title too long"):
        db.set_session_title("s1", "x" * 500)
    untouched(db)


# ------------------------------------------------- the errors table of docs/contracts.md#errors


def test_value_errors_of_the_error_table(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.create_session("", "cli")
    with pytest.raises(ValueError):
        db.ensure_session("")
    with pytest.raises(ValueError):
        db.prune_sessions(older_than_days=-0.5)
    with pytest.raises(ValueError):
        db.append_message("s1", "user", "x", timestamp=float("nan"))
    with pytest.raises(ValueError):
        db.search_messages("x", limit=-1)
    db.create_session("s2", "cli")
    db.set_session_title("s2", "mine")
    with pytest.raises(ValueError, match="already in use by session s2"):
        db.set_session_title("s1", "mine")


def test_type_errors_of_the_error_table(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.create_session("s3", "cli", colour="red")
    with pytest.raises(TypeError):
        db.create_session(None, "cli")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.get_session(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.set_session_title("s1", ["t"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.create_session("s3", "cli", model=5)
    with pytest.raises(TypeError):
        db.append_message("s1", "user", "x", token_count="12")  # type: ignore[arg-type]
    assert db.get_session("s3") is None and db.message_count() == 0


def test_integrity_errors_of_the_error_table(db: SessionDB) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        db.append_message("ghost", "user", "x")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        db.create_session("kid", "cli", parent_session_id="ghost")
    assert db.get_session("kid") is None and db.get_session("ghost") is None


def test_a_session_cannot_be_its_own_parent(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.create_session("loop", "cli", parent_session_id="loop")


def test_non_finite_costs_are_refused(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.update_token_counts("s1", estimated_cost_usd=float("inf"))
    assert db.get_session("s1")["estimated_cost_usd"] is None


def test_never_raised_for_unknown_ids(db: SessionDB) -> None:
    assert db.get_session("ghost") is None
    assert db.get_session_title("ghost") is None
    assert db.get_messages("ghost") == [] and db.get_messages_as_conversation("ghost") == []
    assert db.export_session("ghost") is None
    assert db.resolve_session_id("ghost") is None
    assert db.resolve_session_by_title("ghost") is None
    assert db.get_session_by_title("ghost") is None
    db.end_session("ghost", "x")
    db.reopen_session("ghost")
    db.update_system_prompt("ghost", "p")
    db.clear_messages("ghost")
    assert db.session_count() == 1


@pytest.mark.parametrize("method", ["archive_session", "unarchive_session", "pin_session",
                                    "unpin_session"])
def test_keep_and_archive_methods_refuse_a_non_str_id(db: SessionDB, method: str) -> None:
    with pytest.raises(TypeError):
        getattr(db, method)(7)
    with pytest.raises(TypeError):
        getattr(db, method)(["s1"])
    row = db.get_session("s1")
    assert (row["archived"], row["pinned"]) == (0, 0)
    assert getattr(db, method)("") is False and getattr(db, method)("ghost") is False


def test_get_meta_refuses_a_non_str_key_like_set_meta(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.get_meta(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.set_meta(7, "x")  # type: ignore[arg-type]
    assert db.get_meta("absent") is None
