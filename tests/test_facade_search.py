"""SessionDB.search_messages wiring: delegation, filters, and search entries moving with rows."""

from __future__ import annotations

import pytest

from hermes_store import SessionDB

# Full-text search on PostgreSQL arrives with its own revision; until then SessionDB says so
# (tests/test_server_store.py) and these run on SQLite.
pytestmark = pytest.mark.sqlite_only

KEYS = ["id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model",
        "session_started", "context"]


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        instance.create_session("cli1", "cli", model="m1")
        instance.create_session("tg1", "telegram")
        instance.append_message("cli1", "user", "how do I fix the docker deployment")
        instance.append_message("cli1", "assistant", "restart the docker daemon")
        instance.append_message("tg1", "user", "昨晚讨论了记忆系统 and docker")
        yield instance


def test_search_returns_hits_with_the_documented_keys(db: SessionDB) -> None:
    hits = db.search_messages("docker deployment")
    assert [h["session_id"] for h in hits] == ["cli1"]
    assert list(hits[0]) == KEYS
    assert ">>>" in hits[0]["snippet"] and hits[0]["source"] == "cli"
    assert hits[0]["model"] == "m1"


def test_filters_are_passed_through(db: SessionDB) -> None:
    assert {h["session_id"] for h in db.search_messages("docker")} == {"cli1", "tg1"}
    assert {h["session_id"] for h in db.search_messages("docker", source_filter=["telegram"])} \
        == {"tg1"}
    assert {h["session_id"] for h in db.search_messages("docker", exclude_sources=["cli"])} \
        == {"tg1"}
    assert {h["role"] for h in db.search_messages("docker", role_filter=["assistant"])} \
        == {"assistant"}
    newest = db.search_messages("docker", sort="newest", limit=1)
    assert len(newest) == 1 and newest[0]["session_id"] == "tg1"
    assert len(db.search_messages("docker", offset=1)) == 2


def test_cjk_text_appended_through_the_facade_is_searchable_at_once(db: SessionDB) -> None:
    assert [h["session_id"] for h in db.search_messages("记忆")] == ["tg1"]
    assert [h["session_id"] for h in db.search_messages("昨晚")] == ["tg1"]


def test_the_words_of_text_starting_with_the_multimodal_marker_are_searchable(
        db: SessionDB) -> None:
    tricky = "\x00json:the zebrafish 斑马鱼 migrates"
    db.append_message("tg1", "user", tricky)
    assert [m["content"] for m in db.get_messages("tg1")][-1] == tricky
    for word in ("zebrafish", "migrates", "斑马鱼", "zebraf*"):
        assert [h["session_id"] for h in db.search_messages(word)] == ["tg1"], word


@pytest.mark.parametrize("query", [None, "", "   ", "NOT java", '"', "((", "AND OR NOT",
                                   "\x00\ud800", "*" * 5000, "NEAR(a b, 5)"])
def test_no_query_text_makes_search_raise(db: SessionDB, query) -> None:
    assert isinstance(db.search_messages(query), list)


def test_negative_paging_is_a_value_error(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.search_messages("docker", limit=-1)
    with pytest.raises(ValueError):
        db.search_messages("docker", offset=-1)


def test_search_entries_go_with_cleared_and_deleted_messages(db: SessionDB) -> None:
    db.clear_messages("tg1")
    assert db.search_messages("记忆") == []
    db.delete_session("cli1")
    assert db.search_messages("docker") == []


def test_a_hit_whose_stored_text_is_not_utf8_reads_with_replacement_characters(
        db: SessionDB, store: str) -> None:
    import sqlite3

    with sqlite3.connect(store) as con:  # another program's bytes, not valid UTF-8
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('cli1', 'user', CAST(X'7a6562726120ff206f6b' AS TEXT), 9e9)")
    (hit,) = db.search_messages("zebra")
    assert "\ufffd" in hit["context"][-1]["content"]
    assert "zebra" in hit["snippet"]
    assert db.search_messages("zebra", sort="newest")[0]["id"] == hit["id"]
