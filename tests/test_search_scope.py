"""One search scope for every script (docs/search.md#search-scope): a Chinese term reaches exactly
the rows an English word written beside it reaches, in cron and subagent sessions and in tool
output, through the library and the CLI, whether its rows are indexed or still pending."""

from __future__ import annotations

import pytest
from cli_support import add_message, run_json

from hermes_store import SessionDB

ENGLISH = "borrowck"
TWO = "借用"  # the bigram route
LONG = "检查器"  # the trigram route
SENTENCE = f"the {ENGLISH} says 借用检查器报错 again"
TERMS = (ENGLISH, TWO, LONG)
# A tool output whose terms lie past the 8,192 characters every index holds.
DEEP_TOOL = "x " * 4200 + SENTENCE


@pytest.fixture
def rows(head_store: str) -> tuple[str, dict[str, set[int]]]:
    """Sessions of three sources; the sentence in user and tool rows, written by the library
    (indexed) and by another program (pending for the CJK index)."""
    with SessionDB(head_store) as db:
        db.create_session("scope_cli", "cli")
        db.create_session("scope_cron", "cron")
        db.create_session("scope_sub", "subagent")
        for sid in ("scope_cli", "scope_cron", "scope_sub"):
            db.append_message(sid, "user", SENTENCE)
        db.append_message("scope_cron", "tool", SENTENCE, tool_name="terminal")
        db.append_message("scope_cli", "tool", DEEP_TOOL, tool_name="terminal")
        db.append_message("scope_cli", "assistant", "nothing to see here")
    add_message(head_store, "scope_sub", "tool", SENTENCE, tool_name="terminal")
    add_message(head_store, "scope_cron", "user", SENTENCE)
    with SessionDB(head_store) as db:
        found = {(m["session_id"], m["role"], m["content"] == DEEP_TOOL): m["id"]
                 for sid in ("scope_cli", "scope_cron", "scope_sub")
                 for m in db.get_messages(sid)}
        cron_users = {m["id"] for m in db.get_messages("scope_cron") if m["role"] == "user"}
    return head_store, {
        "cli": {found[("scope_cli", "user", False)]},
        "cron": cron_users,
        "sub": {found[("scope_sub", "user", False)]},
        "cron_tool": {found[("scope_cron", "tool", False)]},
        "sub_tool": {found[("scope_sub", "tool", False)]},
        "deep_tool": {found[("scope_cli", "tool", True)]},
    }


def _ids(ids: dict[str, set[int]], *keys: str) -> set[int]:
    return set().union(*(ids[k] for k in keys))


def _library(path: str, term: str, **kw: object) -> set[int]:
    with SessionDB(path) as db:
        return {hit["id"] for hit in db.search_messages(term, limit=50, **kw)}


def _cli(path: str, term: str, *extra: str) -> set[int]:
    code, doc = run_json("--db", path, "search", term, "--limit", "50", *extra)
    assert code == 0, doc
    return {hit["message_id"] for group in doc["results"] for hit in group["hits"]}


def test_cjk_terms_reach_cron_subagent_and_tool_rows_as_english_does(rows) -> None:
    path, ids = rows
    within_prefix = _ids(ids, "cli", "cron", "sub", "cron_tool", "sub_tool")
    for term in TERMS:
        assert _library(path, term) == within_prefix, term
        assert _library(path, term, source_filter=["cron"]) == _ids(ids, "cron", "cron_tool")
        assert _library(path, term, source_filter=["subagent"]) == _ids(ids, "sub", "sub_tool")


def test_tool_role_reads_whole_tool_bodies_for_every_script(rows) -> None:
    path, ids = rows
    tools = _ids(ids, "cron_tool", "sub_tool", "deep_tool")
    for term in TERMS:
        assert _library(path, term, role_filter=["tool"]) == tools, term


def test_cli_search_finds_the_same_rows_for_every_script(rows) -> None:
    path, ids = rows
    within_prefix = _ids(ids, "cli", "cron", "sub", "cron_tool", "sub_tool")
    for term in TERMS:
        assert _cli(path, term) == within_prefix, term
        assert _cli(path, term, "--include-tools") == within_prefix | ids["deep_tool"], term
        assert _cli(path, term, "--source", "cron") == _ids(ids, "cron", "cron_tool"), term


def test_an_upgraded_store_finds_cjk_in_rows_the_former_scope_left_out(empty_store: str) -> None:
    from cli_support import make_session

    from hermes_store.db import migrate

    migrate.upgrade(empty_store, "0023_sessions_carry_lineage_root")
    make_session(empty_store, "scope_cli", texts=(SENTENCE,))
    make_session(empty_store, "scope_cron", source="cron", texts=(SENTENCE,))
    make_session(empty_store, "scope_sub", source="subagent", texts=(SENTENCE,))
    add_message(empty_store, "scope_cli", "tool", SENTENCE, tool_name="terminal")
    add_message(empty_store, "scope_cli", "tool", "plain tool output", tool_name="terminal")
    migrate.upgrade(empty_store)
    with SessionDB(empty_store) as db:
        every = {m["id"] for sid in ("scope_cli", "scope_cron", "scope_sub")
                 for m in db.get_messages(sid) if m["content"] != "plain tool output"}
    assert len(every) == 4
    for term in TERMS:
        assert _library(empty_store, term) == every, term
        assert _cli(empty_store, term) == every, term
