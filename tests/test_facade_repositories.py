"""The layers under SessionDB are usable directly: repositories and queries take a caller-owned
ORM Session (or Connection), never commit, and the caller's rollback undoes their work."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hermes_store import ChatSession, Message
from hermes_store.db import engine as engine_mod
from hermes_store.repo import lineage, listing, messages, retention, sessions

T = 1_790_000_000.0


@pytest.fixture
def eng(head_store: str) -> Engine:
    return engine_mod.open_engine(head_store)


def test_repositories_work_inside_an_orm_session_the_caller_commits(eng: Engine) -> None:
    def unit(session: Session) -> int:
        sessions.create_or_fill(session, "s1", "cli", {"model": "m"}, T)
        prepared = messages.prepare_message("s1", "user", content="记忆 hello", timestamp=T + 1)
        message_id = messages.append(session, prepared)
        sessions.set_title(session, "s1", "orm title")
        return message_id

    message_id = engine_mod.run_write_session(eng, unit)
    with engine_mod.read_session(eng) as session:
        row = session.get(ChatSession, "s1")
        assert (row.title, row.message_count, row.model) == ("orm title", 1, "m")
        assert [m.id for m in row.messages] == [message_id]
        assert listing.list_sessions_rich(session)[0]["preview"] == "记忆 hello"
        assert lineage.tip_of(session, "s1") == "s1"


def test_repositories_never_commit_behind_the_caller(eng: Engine) -> None:
    with Session(eng) as session:
        sessions.create_or_fill(session, "s1", "cli", {}, T)
        messages.append(session, messages.prepare_message("s1", "user", content="x",
                                                          timestamp=T))
        retention.pin(session, ["s1"])
        session.rollback()
    with engine_mod.read_session(eng) as session:
        assert session.execute(select(ChatSession.id)).all() == []
        assert session.execute(select(Message.id)).all() == []


def test_retention_plans_through_an_orm_session(eng: Engine) -> None:
    def setup(session: Session) -> None:
        session.add_all([
            ChatSession(id="old", source="cli", started_at=T, ended_at=T + 1,
                        end_reason="user_exit"),
            ChatSession(id="new", source="cli", started_at=T + 500, ended_at=T + 501,
                        end_reason="user_exit"),
        ])

    engine_mod.run_write_session(eng, setup)
    with engine_mod.read_session(eng) as session:
        plan = retention.prune(session, older_than=T + 100, where=ChatSession.source == "cli",
                               now=T + 1000, dry_run=True)
    assert plan.ids == ["old"] and plan.changed == 0
