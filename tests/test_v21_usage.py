"""v21 API (docs/v21.md#behaviour-changes): ``update_token_counts`` settles the billing route on
accounted calls and rolls usage up per model into ``session_model_usage``."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import delete, select

from hermes_store import SessionDB
from hermes_store.db.models import SessionModelUsage
from hermes_store.repo import usage

usage_table = SessionModelUsage.__table__


def rows(db: SessionDB, session_id: str) -> list[dict]:
    return db._read(lambda c: usage.usage_rows(c, session_id))


def route(db: SessionDB, session_id: str) -> tuple:
    row = db.get_session(session_id)
    return (row["model"], row["billing_provider"], row["billing_base_url"], row["billing_mode"])


# --------------------------------------------------------------------------- the billing route


def test_a_metadata_only_call_never_fills_the_billing_route(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", model="m", billing_provider="openrouter",
                           billing_base_url="https://or", billing_mode="api")
    assert route(db, "s") == ("m", None, None, None)


def test_an_accounted_call_fills_the_billing_route_while_it_is_empty(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m")
    db.update_token_counts("s", input_tokens=5, model="m", billing_provider="openrouter",
                           billing_base_url="https://or", billing_mode="api", api_call_count=1)
    db.update_token_counts("s", input_tokens=5, model="m", billing_provider="other",
                           billing_base_url="https://x", billing_mode="sub", api_call_count=1)
    assert route(db, "s") == ("m", "openrouter", "https://or", "api")


@pytest.mark.parametrize("figures", [{"output_tokens": 1}, {"api_call_count": 1},
                                     {"estimated_cost_usd": 0.01}, {"actual_cost_usd": 0.02}])
def test_any_non_zero_figure_makes_a_call_accounted(db: SessionDB, figures: dict) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", billing_provider="p", **figures)
    assert db.get_session("s")["billing_provider"] == "p"


def test_the_first_accounted_route_replaces_the_requested_one(db: SessionDB) -> None:
    db.create_session("s", "cli", model="requested", billing_provider="asked",
                      billing_base_url="https://asked", billing_mode="api")
    db.update_token_counts("s", input_tokens=10, model="served", billing_provider="real",
                           billing_base_url=None, api_call_count=1)
    assert route(db, "s") == ("served", "real", None, None)
    db.update_token_counts("s", input_tokens=10, model="later", billing_provider="again",
                           api_call_count=1)
    assert route(db, "s") == ("served", "real", None, None)
    assert db.get_session("s")["input_tokens"] == 20


def test_the_route_is_not_replaced_without_a_model_and_provider(db: SessionDB) -> None:
    db.create_session("s", "cli", model="requested", billing_provider="asked")
    db.update_token_counts("s", input_tokens=1, billing_provider="real")
    db.update_token_counts("s", input_tokens=1, model="served")
    assert route(db, "s")[:2] == ("requested", "asked")


def test_callers_that_never_pass_api_call_count_keep_qualifying(db: SessionDB) -> None:
    db.create_session("s", "cli", model="a", billing_provider="pa")
    db.update_token_counts("s", input_tokens=1, model="b", billing_provider="pb")
    db.update_token_counts("s", input_tokens=1, model="c", billing_provider="pc")
    assert route(db, "s")[:2] == ("c", "pc")


def test_the_row_is_ensured_with_the_model_and_a_null_model_filled(db: SessionDB) -> None:
    db.update_token_counts("new", model="m")
    assert (db.get_session("new")["source"], db.get_session("new")["model"]) == ("unknown", "m")
    db.create_session("bare", "cli")
    db.update_token_counts("bare", model="filled")
    assert db.get_session("bare")["model"] == "filled"


# --------------------------------------------------------------------------- per-model roll-up


def test_usage_rolls_up_per_model_and_route(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", input_tokens=10, output_tokens=2, cache_read_tokens=3,
                           cache_write_tokens=4, reasoning_tokens=5, model="m1",
                           billing_provider="p", estimated_cost_usd=0.5, actual_cost_usd=0.25,
                           api_call_count=1, cost_status="estimated")
    db.update_token_counts("s", input_tokens=1, model="m1", billing_provider="p",
                           estimated_cost_usd=0.5, api_call_count=1, cost_source="table")
    db.update_token_counts("s", input_tokens=7, model="m2", billing_provider="p",
                           api_call_count=1)
    found = {r["model"]: r for r in rows(db, "s")}
    assert set(found) == {"m1", "m2"}
    m1 = found["m1"]
    assert (m1["input_tokens"], m1["output_tokens"], m1["cache_read_tokens"],
            m1["cache_write_tokens"], m1["reasoning_tokens"], m1["api_call_count"]) == (
        11, 2, 3, 4, 5, 2)
    assert (m1["estimated_cost_usd"], m1["actual_cost_usd"]) == (1.0, 0.25)
    assert (m1["cost_status"], m1["cost_source"]) == ("estimated", "table")
    assert (m1["billing_provider"], m1["billing_base_url"], m1["billing_mode"]) == ("p", "", "")
    assert m1["first_seen"] <= m1["last_seen"]
    assert found["m2"]["input_tokens"] == 7


def test_the_usage_key_falls_back_to_the_session_row_then_to_unknown(db: SessionDB) -> None:
    db.create_session("routed", "cli", model="row-model", billing_provider="row-provider",
                      billing_mode="row-mode")
    db.update_token_counts("routed", input_tokens=3)
    [row] = rows(db, "routed")
    assert (row["model"], row["billing_provider"], row["billing_base_url"],
            row["billing_mode"]) == ("row-model", "row-provider", "", "row-mode")
    db.create_session("bare", "cli")
    db.update_token_counts("bare", output_tokens=3)
    [row] = rows(db, "bare")
    assert (row["model"], row["billing_provider"]) == ("unknown", "")


@pytest.mark.parametrize("call", [
    {"input_tokens": 5, "absolute": True},
    {"actual_cost_usd": 1.0},
    {"model": "m", "billing_provider": "p"},
])
def test_calls_that_write_no_usage_row(db: SessionDB, call: dict) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", **call)
    assert rows(db, "s") == []


def test_concurrent_calls_add_every_token_exactly_once(db: SessionDB) -> None:
    db.create_session("s", "cli")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with SessionDB(db.location) as mine:
                for _ in range(10):
                    mine.update_token_counts("s", input_tokens=1, model="m", api_call_count=1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    [row] = rows(db, "s")
    assert (row["input_tokens"], row["api_call_count"]) == (40, 40)
    assert db.get_session("s")["input_tokens"] == 40


def test_a_v21_store_keeps_adding_to_its_own_usage_rows(v21_db: SessionDB) -> None:
    sid = "20260101_000000_cea663"
    [before] = rows(v21_db, sid)
    v21_db.update_token_counts(sid, input_tokens=100, api_call_count=1)
    [after] = rows(v21_db, sid)
    assert after["model"] == before["model"] == "anthropic/claude-sonnet-4.6"
    assert after["input_tokens"] == before["input_tokens"] + 100
    assert after["first_seen"] == before["first_seen"]


def test_deleting_a_session_removes_its_usage_rows(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", input_tokens=1, model="m")
    assert db.delete_session("s")
    assert db._read(lambda c: c.execute(select(usage_table)).all()) == []


# --------------------------------------------------------------------------- the one-time seed


def test_the_seed_inserts_one_row_per_session_with_tokens_once(v21_db: SessionDB) -> None:
    v21_db._write(lambda c: c.execute(delete(usage_table)))
    v21_db.create_session("no_tokens", "cli")
    inserted = v21_db._write(usage.seed_from_sessions)
    seeded = v21_db._read(lambda c: c.execute(select(usage_table)).mappings().all())
    assert inserted == len(seeded) == 16
    sid = "20260404_030300_1b83fd"
    row = next(r for r in seeded if r["session_id"] == sid)
    session = v21_db.get_session(sid)
    assert (row["model"], row["input_tokens"], row["output_tokens"]) == (
        session["model"], session["input_tokens"], session["output_tokens"])
    assert row["first_seen"] == session["started_at"]
    assert row["last_seen"] == (session["ended_at"] or session["started_at"])
    assert v21_db._write(usage.seed_from_sessions) == 0
