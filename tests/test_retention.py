"""Retention verbs: lineage as the unit, spared counts with reasons, dry runs change nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, insert, select

from hermes_store.db import engine as engine_mod
from hermes_store.db.models import ChatSession, Message
from hermes_store.repo import retention

sessions = ChatSession.__table__
messages = Message.__table__
NOW = 1_800_000_000.0
DAY = 86400.0


def _days_ago(n: float) -> float:
    return NOW - n * DAY


@pytest.fixture
def eng(head_store: str) -> Engine:
    return engine_mod.open_engine(head_store)


def add(eng: Engine, sid: str, *, age: float, parent: str | None = None,
        ended: bool = True, reason: str = "user_exit", source: str = "cli", pinned: int = 0,
        archived: int = 0, msg_age: float | None = None, started_age: float | None = None) -> None:
    started = _days_ago(started_age if started_age is not None else age)
    row = dict(id=sid, source=source, started_at=started, parent_session_id=parent,
               ended_at=_days_ago(age) if ended else None, end_reason=reason if ended else None,
               pinned=pinned, archived=archived)

    def unit(conn):
        conn.execute(insert(sessions).values(**row))
        if msg_age is not None:
            conn.execute(insert(messages).values(session_id=sid, role="user", content="hi",
                                                 timestamp=_days_ago(msg_age)))

    engine_mod.run_write(eng, unit)


def compression_chain(eng: Engine, ids: list[str], ages: list[float], *, tip_open: bool = False,
                      **kw) -> None:
    """A compression lineage: each segment ends 'compression', the next starts at that end;
    each segment's last message is at its end."""
    for i, (sid, age) in enumerate(zip(ids, ages, strict=False)):
        last = i == len(ids) - 1
        add(eng, sid, age=age, started_age=ages[i - 1] if i else age + 1, msg_age=age,
            parent=ids[i - 1] if i else None, reason="user_exit" if last else "compression",
            ended=not (last and tip_open), **kw)


def ids_present(eng: Engine) -> set[str]:
    with engine_mod.reading(eng) as conn:
        return set(conn.execute(select(sessions.c.id)).scalars())


def run(eng: Engine, fn, **kw):
    return engine_mod.run_write(eng, lambda c: fn(c, now=NOW, **kw))


def test_prune_deletes_ended_sessions_idle_before_the_cutoff(eng: Engine) -> None:
    add(eng, "old", age=200, msg_age=200)
    add(eng, "recent", age=10)
    add(eng, "old_but_talking", age=200, msg_age=5)
    result = run(eng, retention.prune, older_than=_days_ago(90))
    assert result.ids == ["old"] and result.changed == 1 and result.matched == 1
    assert ids_present(eng) == {"recent", "old_but_talking"}
    with engine_mod.reading(eng) as conn:
        assert conn.execute(select(func.count()).select_from(messages)).scalar() == 1


def test_prune_decides_a_compression_lineage_by_its_tip(eng: Engine) -> None:
    compression_chain(eng, ["a", "b", "c"], [200, 150, 10])
    result = run(eng, retention.prune, older_than=_days_ago(90))
    assert result.ids == [] and ids_present(eng) == {"a", "b", "c"}
    assert result.spared.lineage == 2  # a and b would qualify alone


def test_prune_deletes_a_whole_old_lineage_oldest_activity_first(eng: Engine) -> None:
    compression_chain(eng, ["a", "b", "c"], [300, 250, 200])
    add(eng, "solo", age=400)
    add(eng, "branch", age=5, parent="b", started_age=260, msg_age=5)  # began before b ended
    result = run(eng, retention.prune, older_than=_days_ago(90))
    assert result.ids == ["solo", "a", "b", "c"]
    assert [c.tip_id for c in result.candidates] == ["solo", "c"]
    assert ids_present(eng) == {"branch"}
    with engine_mod.reading(eng) as conn:
        assert conn.execute(select(sessions.c.parent_session_id)
                            .where(sessions.c.id == "branch")).scalar() is None


def test_prune_spares_open_pinned_archived_and_busy_lineages_with_counts(eng: Engine) -> None:
    compression_chain(eng, ["o1", "o2"], [300, 200], tip_open=True)
    compression_chain(eng, ["p1", "p2"], [300, 200])
    engine_mod.run_write(eng, lambda c: c.execute(
        sessions.update().where(sessions.c.id == "p1").values(pinned=1)))
    add(eng, "arch", age=200, archived=1)
    add(eng, "busy", age=200, msg_age=0.0001)  # written seconds ago
    add(eng, "gone", age=200)
    result = run(eng, retention.prune, older_than=_days_ago(0))
    assert result.ids == ["gone"]
    assert (result.spared.open, result.spared.pinned, result.spared.archived,
            result.spared.busy) == (2, 2, 1, 1)
    assert result.as_dict()["spared"] == {"pinned": 2, "archived": 1, "open": 2, "busy": 1,
                                          "lineage": 0}


def test_prune_includes_pinned_and_archived_only_when_asked(eng: Engine) -> None:
    add(eng, "pin", age=200, pinned=1)
    add(eng, "arch", age=200, archived=1)
    result = run(eng, retention.prune, older_than=_days_ago(90), include_pinned=True,
                 include_archived=True)
    assert sorted(result.ids) == ["arch", "pin"] and ids_present(eng) == set()


def test_prune_dry_run_reports_the_same_plan_and_changes_nothing(eng: Engine) -> None:
    add(eng, "old", age=200)
    add(eng, "pin", age=200, pinned=1)
    plan = run(eng, retention.prune, older_than=_days_ago(90), dry_run=True)
    assert plan.dry_run and plan.ids == ["old"] and plan.changed == 0
    assert plan.spared.pinned == 1
    assert ids_present(eng) == {"old", "pin"}


def test_prune_applies_the_extra_where_clause_to_the_tip(eng: Engine) -> None:
    compression_chain(eng, ["a", "b"], [300, 200], source="telegram")
    engine_mod.run_write(eng, lambda c: c.execute(
        sessions.update().where(sessions.c.id == "a").values(source="cli")))
    add(eng, "c", age=300, source="cli")
    result = run(eng, retention.prune, older_than=_days_ago(90),
                 where=sessions.c.source == "telegram")
    assert result.ids == ["a", "b"]  # the tip b is telegram; a moves with it
    assert ids_present(eng) == {"c"}


def test_prune_can_be_limited_to_given_ids_and_a_newer_than_bound(eng: Engine) -> None:
    add(eng, "x", age=200)
    add(eng, "y", age=100)
    result = run(eng, retention.prune, older_than=_days_ago(90), newer_than=_days_ago(150))
    assert result.ids == ["y"]
    result = run(eng, retention.prune, older_than=_days_ago(90), ids=["nothing"])
    assert result.ids == [] and ids_present(eng) == {"x"}


def test_archive_moves_whole_lineages_and_is_idempotent(eng: Engine) -> None:
    compression_chain(eng, ["a", "b"], [300, 200])
    add(eng, "pin", age=200, pinned=1)
    add(eng, "open", age=200, ended=False)
    first = run(eng, retention.archive, older_than=_days_ago(90))
    assert first.ids == ["a", "b"] and first.changed == 2
    assert (first.spared.pinned, first.spared.open) == (1, 1)
    again = run(eng, retention.archive, older_than=_days_ago(90))
    assert again.ids == [] and again.spared.archived == 2
    with_open = run(eng, retention.archive, older_than=_days_ago(90), include_open=True)
    assert with_open.ids == ["open"]


def test_unarchive_restores_whole_lineages_given_any_segment(eng: Engine) -> None:
    compression_chain(eng, ["a", "b"], [300, 200], archived=1)
    add(eng, "other", age=300, archived=1)
    result = run(eng, retention.unarchive, ids=["a"])
    assert result.ids == ["a", "b"] and result.changed == 2
    with engine_mod.reading(eng) as conn:
        flags = dict(conn.execute(select(sessions.c.id, sessions.c.archived)).all())
    assert flags == {"a": 0, "b": 0, "other": 1}


def test_pin_unarchives_the_lineage_and_unpin_clears_the_flag(eng: Engine) -> None:
    compression_chain(eng, ["a", "b"], [300, 200], archived=1)
    result = engine_mod.run_write(eng, lambda c: retention.pin(c, ["b", "missing"]))
    assert result.ids == ["b"] and result.changed == 1 and result.unarchived == ["a", "b"]
    with engine_mod.reading(eng) as conn:
        rows = dict(conn.execute(
            select(sessions.c.id, sessions.c.archived + 10 * sessions.c.pinned)).all())
    assert rows == {"a": 0, "b": 10}
    pruned = run(eng, retention.prune, older_than=_days_ago(0))
    assert pruned.ids == [] and pruned.spared.pinned == 2  # the pin covers the lineage
    undone = engine_mod.run_write(eng, lambda c: retention.unpin(c, ["b"]))
    assert undone.changed == 1


def test_close_idle_ends_open_sessions_and_spares_pinned_and_busy(eng: Engine) -> None:
    add(eng, "stale", age=30, ended=False)
    add(eng, "pinned", age=30, ended=False, pinned=1)
    add(eng, "live", age=30, ended=False, msg_age=0.0001)
    add(eng, "fresh", age=1, ended=False)
    add(eng, "done", age=30)
    plan = run(eng, retention.close_idle, older_than=NOW, dry_run=True)
    assert plan.ids == ["stale", "fresh"] and plan.spared.busy == 1 and plan.changed == 0
    result = run(eng, retention.close_idle, older_than=_days_ago(7))
    assert result.ids == ["stale"] and result.changed == 1 and result.spared.pinned == 1
    with engine_mod.reading(eng) as conn:
        row = conn.execute(select(sessions.c.ended_at, sessions.c.end_reason)
                           .where(sessions.c.id == "stale")).one()
    assert row == (NOW, "closed_idle")
    follow_up = run(eng, retention.prune, older_than=_days_ago(7))
    assert follow_up.ids == ["done", "stale"]


def test_delete_session_orphans_children_and_reports_unknown_ids(eng: Engine) -> None:
    add(eng, "p", age=5)
    add(eng, "kid", age=4, parent="p", msg_age=4)
    assert engine_mod.run_write(eng, lambda c: retention.delete_session(c, "p")) is True
    assert engine_mod.run_write(eng, lambda c: retention.delete_session(c, "p")) is False
    with engine_mod.reading(eng) as conn:
        assert conn.execute(select(sessions.c.parent_session_id)).scalars().all() == [None]


def test_a_lineage_cycle_in_bad_data_does_not_break_retention(eng: Engine) -> None:
    add(eng, "x", age=200, reason="compression")
    add(eng, "y", age=200, parent="x", reason="compression", started_age=200)
    engine_mod.run_write(eng, lambda c: c.execute(
        sessions.update().where(sessions.c.id == "x").values(parent_session_id="y")))
    result = run(eng, retention.prune, older_than=_days_ago(90))
    assert sorted(result.ids) == ["x", "y"] and ids_present(eng) == set()


def test_many_sessions_are_deleted_in_parameter_sized_chunks(eng: Engine) -> None:
    rows = [dict(id=f"s{i:05d}", source="cli", started_at=_days_ago(200),
                 ended_at=_days_ago(200), end_reason="user_exit") for i in range(2000)]
    engine_mod.run_write(eng, lambda c: c.execute(insert(sessions), rows))
    result = run(eng, retention.prune, older_than=_days_ago(90))
    assert result.changed == 2000 and ids_present(eng) == set()
