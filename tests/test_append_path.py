"""One append path: a batch (imports, restores) lands, counts and is indexed exactly as the same
messages appended one by one (``repo.messages.append`` / ``append_many``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, MetaData, select

from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.db.models import ChatSession, Message
from hermes_store.repo import bigrams
from hermes_store.repo import messages as repo

S, M = ChatSession.__table__, Message.__table__
CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "部署服务之后 docker"},
    {"role": "assistant", "content": None, "tool_calls": [CALL, CALL]},
    {"role": "tool", "content": "a.py", "tool_call_id": "c1", "tool_calls": [CALL]},
    {"role": "assistant", "content": [{"type": "text", "text": "通信正常"}],
     "tool_calls": '{"id": "c3"}', "reasoning": "why"},
]


@pytest.fixture
def engine(head_db: Path) -> Engine:
    con = sqlite3.connect(head_db)
    with con:
        con.executemany("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', 1)",
                        [("one",), ("batch",), ("other",)])
    con.close()
    return open_engine(head_db)


def _prepared(sid: str) -> list[repo.PreparedMessage]:
    return [repo.prepare_message(sid, m["role"], timestamp=1_780_000_000.0 + n,
                                 **{k: v for k, v in m.items() if k != "role"})
            for n, m in enumerate(MESSAGES)]


def _state(engine: Engine, sid: str) -> tuple[tuple[int, int], list[dict[str, Any]]]:
    with reading(engine) as conn:
        counters = conn.execute(select(S.c.message_count, S.c.tool_call_count)
                                .where(S.c.id == sid)).one()
        rows = [{k: v for k, v in r.items() if k not in ("id", "session_id")}
                for r in conn.execute(select(M).where(M.c.session_id == sid)
                                      .order_by(M.c.id)).mappings()]
    return tuple(counters), rows


def test_a_batch_lands_and_counts_as_the_same_messages_appended_one_by_one(engine: Engine) -> None:
    def singles(conn: Connection) -> None:
        for message in _prepared("one"):
            repo.append(conn, message)

    run_write(engine, singles)
    ids = run_write(engine, lambda conn: repo.append_many(conn, _prepared("batch")))
    assert len(ids) == len(MESSAGES) and ids == sorted(ids)
    one, batch = _state(engine, "one"), _state(engine, "batch")
    assert one == batch
    assert one[0] == (4, 3)  # two calls, one JSON object; the tool result adds none


def test_stored_rows_count_by_the_same_rule(engine: Engine) -> None:
    rows = [dict(p.row) for p in _prepared("batch")]
    run_write(engine, lambda conn: repo.append_many(conn, [repo.stored_message(r) for r in rows]))
    assert _state(engine, "batch")[0] == (4, 3)


def test_a_batch_to_several_sessions_bumps_each_by_its_own_rows(engine: Engine) -> None:
    batch = _prepared("batch")[:2] + _prepared("other")[3:]
    run_write(engine, lambda conn: repo.append_many(conn, batch))
    assert _state(engine, "batch")[0] == (2, 2)
    assert _state(engine, "other")[0] == (1, 1)


def test_kept_ids_stay_when_free_and_fresh_ids_never_reuse_a_deleted_one(engine: Engine) -> None:
    def with_ids(*ids: int, keep: bool = True):
        def unit(conn: Connection) -> list[int]:
            rows = [dict(p.row, id=i) for p, i in zip(_prepared("batch"), ids, strict=False)]
            return repo.append_many(conn, [repo.stored_message(r) for r in rows], keep_ids=keep)
        return unit

    assert run_write(engine, with_ids(5)) == [5]
    # 5 is taken: the whole batch takes fresh consecutive ids, in order.
    assert run_write(engine, with_ids(9, 5)) == [6, 7]
    run_write(engine, lambda conn: repo.clear(conn, "batch"))
    assert run_write(engine, with_ids(1, 2, keep=False)) == [8, 9]
    assert _state(engine, "batch")[0] == (2, 2)


def test_a_batch_keeps_the_cjk_index_in_the_same_transaction(engine: Engine) -> None:
    ids = run_write(engine, lambda conn: repo.append_many(conn, _prepared("batch")))
    with reading(engine) as conn:
        assert bigrams.pending_count(conn) == 0
        side = {r[0] for r in conn.exec_driver_sql("SELECT id FROM hs_cjk")}
    assert side == {ids[0], ids[3]}


def test_a_batch_into_the_live_table_carries_columns_the_models_lack(engine: Engine,
                                                                     head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    con.execute("ALTER TABLE messages ADD COLUMN chat_id TEXT")
    con.close()

    def unit(conn: Connection) -> list[int]:
        md = MetaData()
        md.reflect(conn, only=["messages"])
        row = dict(_prepared("batch")[0].row, chat_id="chat-7", active=0, compacted=1)
        return repo.append_many(conn, [repo.stored_message(row)], into=md.tables["messages"])

    (new_id,) = run_write(engine, unit)
    con = sqlite3.connect(head_db)
    assert con.execute("SELECT chat_id, active, compacted FROM messages WHERE id = ?",
                       (new_id,)).fetchone() == ("chat-7", 0, 1)
    con.close()


def test_a_batch_for_an_unknown_session_writes_nothing(engine: Engine) -> None:
    batch = _prepared("batch") + _prepared("nobody")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        run_write(engine, lambda conn: repo.append_many(conn, batch))
    assert _state(engine, "batch") == ((0, 0), [])
