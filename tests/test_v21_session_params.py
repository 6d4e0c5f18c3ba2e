"""v21 API (docs/v21.md#parameters): the gateway keywords of ``create_session`` and
``ensure_session``, and ``resolve_session_id``'s parameter name."""

from __future__ import annotations

import pytest

from hermes_store import SessionDB

PEER = {"session_key": "agent:main:telegram:dm:42", "chat_id": "42", "chat_type": "dm",
        "thread_id": "7", "cwd": "/work/repo"}


def test_create_session_takes_the_gateway_keywords(db: SessionDB) -> None:
    db.create_session("s", "telegram", **PEER)
    row = db.get_session("s")
    assert {k: row[k] for k in PEER} == PEER


def test_the_keywords_fill_only_what_is_empty(db: SessionDB) -> None:
    db.create_session("s", "telegram", session_key="first")
    db.ensure_session("s", "telegram", session_key="second", chat_id="9", thread_id=None)
    row = db.get_session("s")
    assert (row["session_key"], row["chat_id"], row["thread_id"]) == ("first", "9", None)


def test_numeric_chat_and_thread_ids_are_stored_as_text(db: SessionDB) -> None:
    db.ensure_session("s", "telegram", chat_id=-1001234, thread_id=17)
    row = db.get_session("s")
    assert (row["chat_id"], row["thread_id"]) == ("-1001234", "17")


def test_other_keywords_are_refused(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.create_session("s", "cli", display_name="x")
    with pytest.raises(TypeError):
        db.ensure_session("s", "cli", session_key=["x"])
    assert db.get_session("s") is None


def test_resolve_session_id_takes_its_v21_parameter_name(db: SessionDB) -> None:
    db.create_session("20260802_120000_fff666", "cli")
    assert db.resolve_session_id(session_id_or_prefix="20260802") == "20260802_120000_fff666"
    assert db.resolve_session_id("20260802_12") == "20260802_120000_fff666"
