"""Telegram DM topic mode (the v21 API): opt-in tables, chat switches, topic↔session bindings."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc, inspect, select, update

from hermes_store import SessionDB
from hermes_store.db import migrate
from hermes_store.db import topics as topics_ddl
from hermes_store.db.models import ChatSession, TelegramTopicBinding, TelegramTopicMode
from hermes_store.ops.recover import recover_store

MODE_TABLE, BINDINGS_TABLE = "telegram_dm_topic_mode", "telegram_dm_topic_bindings"
MODE, BINDINGS = TelegramTopicMode.__table__, TelegramTopicBinding.__table__
SESSIONS = ChatSession.__table__
META_KEY = "telegram_dm_topic_schema_version"


def tables_of(store: SessionDB) -> set[str]:
    return set(inspect(store.engine).get_table_names())


def mode_row(store: SessionDB, chat_id: str) -> dict[str, Any] | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(MODE).where(MODE.c.chat_id == chat_id)).mappings().first()
    return dict(row) if row is not None else None


def set_columns(store: SessionDB, sid: str, **values: Any) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(SESSIONS).where(SESSIONS.c.id == sid).values(**values))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Pin the wall clock the facade reads (``set(t)``), so stored times are exact."""
    now = [1_800_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])

    def set_now(value: float) -> None:
        now[0] = value

    return set_now


def telegram(store: SessionDB, sid: str, user: str = "42", **kw: Any) -> str:
    return store.create_session(sid, kw.pop("source", "telegram"), user_id=user, **kw)


# --------------------------------------------------------------------------- opt-in tables


def test_ordinary_opens_never_create_the_topic_tables(db: SessionDB) -> None:
    assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(db)
    db.close()
    with SessionDB(db.location) as again:
        assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(again)


def test_readers_answer_neutral_values_while_the_tables_are_absent(db: SessionDB) -> None:
    telegram(db, "s1")
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=2) is None
    assert db.get_telegram_topic_binding_by_session(session_id="s1") is None
    assert db.list_telegram_topic_bindings_for_chat(chat_id=1) == []
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is False
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id=42) is False
    assert db.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id=42) == []
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=2) == 0
    assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(db)


def test_disable_without_the_tables_is_a_no_op_that_creates_nothing(db: SessionDB) -> None:
    db.disable_telegram_topic_mode(chat_id=1)
    db.disable_telegram_topic_mode(chat_id=1, clear_bindings=False)
    assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(db)


def test_the_migration_creates_both_tables_indexes_and_stamps_the_meta_key(
        db: SessionDB) -> None:
    db.apply_telegram_topic_migration()
    assert {MODE_TABLE, BINDINGS_TABLE} <= tables_of(db)
    indexes = {i["name"]: i for i in inspect(db.engine).get_indexes(BINDINGS_TABLE)}
    assert indexes["idx_telegram_dm_topic_bindings_session"]["unique"]
    assert indexes["idx_telegram_dm_topic_bindings_session"]["column_names"] == ["session_id"]
    assert indexes["idx_telegram_dm_topic_bindings_user"]["column_names"] == ["user_id",
                                                                              "chat_id"]
    assert db.get_meta(META_KEY) == "2"
    db.apply_telegram_topic_migration()  # idempotent
    assert db.get_meta(META_KEY) == "2"
    assert migrate.check(db.engine) == []


def test_schema_check_ignores_the_absent_tables_but_compares_present_ones(
        db: SessionDB) -> None:
    assert migrate.check(db.engine) == []
    db.apply_telegram_topic_migration()
    with db.engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX idx_telegram_dm_topic_bindings_user")
    diffs = migrate.check(db.engine)
    assert [(d[0], d[1].name) for d in diffs] == [
        ("add_index", "idx_telegram_dm_topic_bindings_user")]


def test_the_models_create_what_the_agents_ddl_creates(db: SessionDB) -> None:
    """Backends other than SQLite create the tables from the models: same columns, keys,
    indexes and cascade as the agent's statements, so the schema check and every reader
    agree whichever way they came."""
    with db.engine.begin() as conn:
        topics_ddl.create_from_models(conn)
        assert topics_ddl.present(conn) and topics_ddl.bindings_cascade(conn)
    assert migrate.check(db.engine) == []
    telegram(db, "s1")
    db.apply_telegram_topic_migration()
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k", session_id="s1")
    # SQLite says "NOT NULL constraint failed", PostgreSQL "violates not-null constraint".
    with pytest.raises(exc.IntegrityError, match="(?i)not[ -]null"), \
            db.engine.begin() as conn:
        conn.execute(MODE.insert().values(chat_id="9", user_id=None, activated_at=1.0,
                                              updated_at=1.0))
    assert db.delete_session("s1") is True
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=2) is None


def test_the_v21_fixture_opens_without_topic_tables_and_adopts_them_on_opt_in(
        legacy_db: Callable[[int], Path]) -> None:
    path = legacy_db(21)
    with SessionDB(path) as store:
        assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(store)
        sid = store.search_sessions(limit=1)[0]["id"]
        store.bind_telegram_topic(chat_id=-100, thread_id=3, user_id=9, session_key="agent:k",
                                  session_id=sid)
        assert store.get_telegram_topic_binding_by_session(session_id=sid)["thread_id"] == "3"
        assert migrate.check(store.engine) == []
        assert store.delete_session(sid) is True
        assert store.get_telegram_topic_binding(chat_id=-100, thread_id=3) is None


@pytest.mark.sqlite_only  # recover salvages a damaged file
def test_a_recovered_file_keeps_its_topic_tables_whole(db: SessionDB, tmp_path: Path) -> None:
    telegram(db, "s1")
    db.enable_telegram_topic_mode(chat_id=1, user_id=42)
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k", session_id="s1")
    binding = db.get_telegram_topic_binding(chat_id=1, thread_id=2)
    db.close()
    out = tmp_path / "recovered.db"
    assert recover_store(db.db_path, out).status == "complete"
    with SessionDB(out) as recovered:
        assert migrate.check(recovered.engine) == []
        assert recovered.get_telegram_topic_binding(chat_id=1, thread_id=2) == binding
        assert recovered.is_telegram_topic_mode_enabled(chat_id=1, user_id=42) is True


# --------------------------------------------------------------------------- cascade rebuild

OLD_BINDINGS = """CREATE TABLE telegram_dm_topic_bindings (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    topic_title TEXT,
    topic_rank INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (chat_id, thread_id)
)"""


def old_layout(store: SessionDB, meta: str | None) -> None:
    """The early agent release's bindings table: no cascade, plus a column of its own."""
    telegram(store, "s1")
    telegram(store, "s2")
    raw = store._conn
    raw.execute(OLD_BINDINGS)
    raw.execute("CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session "
                "ON telegram_dm_topic_bindings(session_id)")
    raw.executemany("INSERT INTO telegram_dm_topic_bindings VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [("c", "1", "42", "k1", "s1", "auto", 10.0, 11.0, "first", 5),
                     ("c", "2", "42", "k2", "s2", "manual", 20.0, 21.0, None, 0)])
    if meta is not None:
        store.set_meta(META_KEY, meta)


def cascades(store: SessionDB) -> bool:
    keys = store._conn.execute(f"PRAGMA foreign_key_list({BINDINGS_TABLE})").fetchall()
    return [k["on_delete"] for k in keys] == ["CASCADE"]


@pytest.mark.sqlite_only
@pytest.mark.parametrize("meta", [None, "1", "not-a-number"])
def test_a_sqlite_bindings_table_without_cascade_is_rebuilt_keeping_rows_and_columns(
        db: SessionDB, meta: str | None) -> None:
    old_layout(db, meta)
    before = [dict(r) for r in db._conn.execute(
        "SELECT * FROM telegram_dm_topic_bindings ORDER BY thread_id")]
    db.apply_telegram_topic_migration()
    assert cascades(db)
    after = [dict(r) for r in db._conn.execute(
        "SELECT * FROM telegram_dm_topic_bindings ORDER BY thread_id")]
    assert after == before
    rank = [c for c in db._conn.execute(f"PRAGMA table_info({BINDINGS_TABLE})")
            if c["name"] == "topic_rank"]
    assert [(c["type"], c["notnull"], c["dflt_value"]) for c in rank] == [("INTEGER", 1, "0")]
    assert db.get_meta(META_KEY) == "2"
    assert migrate.check(db.engine) == []
    assert db.delete_session("s1") is True  # refused by the old key, cascades now
    assert db.get_telegram_topic_binding(chat_id="c", thread_id="1") is None
    assert db.get_telegram_topic_binding(chat_id="c", thread_id="2")["managed_mode"] == "manual"


@pytest.mark.sqlite_only
@pytest.mark.parametrize("meta", ["2", "3"])
def test_a_stamped_sqlite_store_is_not_rebuilt_and_keeps_its_stamp(db: SessionDB,
                                                                   meta: str) -> None:
    old_layout(db, meta)
    db.apply_telegram_topic_migration()
    assert not cascades(db)
    assert len(db.list_telegram_topic_bindings_for_chat(chat_id="c")) == 2
    assert db.get_meta(META_KEY) == meta


@pytest.mark.sqlite_only
def test_the_sqlite_rebuild_drops_only_bindings_of_deleted_sessions_and_says_so(
        db: SessionDB, caplog: pytest.LogCaptureFixture) -> None:
    old_layout(db, None)
    raw = db._conn
    raw.execute("PRAGMA foreign_keys = OFF")
    raw.execute("INSERT INTO telegram_dm_topic_bindings VALUES "
                "('c', '3', '42', 'k3', 'gone', 'auto', 30.0, 31.0, NULL, 0)")
    raw.execute("PRAGMA foreign_keys = ON")
    with caplog.at_level(logging.WARNING, logger="hermes_store.db.topics"):
        db.apply_telegram_topic_migration()
    assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(chat_id="c")] \
        == ["2", "1"]
    assert "dropped 1 binding(s) of deleted sessions" in caplog.text


# --------------------------------------------------------------------------- chat switches


def test_enable_stores_the_chat_with_string_ids_and_both_capability_flags(
        db: SessionDB, clock: Callable[[float], None]) -> None:
    db.enable_telegram_topic_mode(chat_id=-1001, user_id=42, has_topics_enabled=True,
                                  allows_users_to_create_topics=False)
    assert mode_row(db, "-1001") == {
        "chat_id": "-1001", "user_id": "42", "enabled": 1, "activated_at": 1_800_000_000.0,
        "updated_at": 1_800_000_000.0, "has_topics_enabled": 1,
        "allows_users_to_create_topics": 0, "capability_checked_at": 1_800_000_000.0,
        "intro_message_id": None, "pinned_message_id": None}
    assert db.is_telegram_topic_mode_enabled(chat_id=-1001, user_id=42) is True
    assert db.is_telegram_topic_mode_enabled(chat_id="-1001", user_id="42") is True


def test_enabling_again_keeps_the_activation_time_and_overwrites_the_flags(
        db: SessionDB, clock: Callable[[float], None]) -> None:
    db.enable_telegram_topic_mode(chat_id=7, user_id=1, has_topics_enabled=True,
                                  allows_users_to_create_topics=True)
    db.disable_telegram_topic_mode(chat_id=7)
    clock(1_800_000_500.0)
    db.enable_telegram_topic_mode(chat_id=7, user_id=2)
    row = mode_row(db, "7")
    assert row is not None
    assert (row["user_id"], row["enabled"], row["activated_at"], row["updated_at"],
            row["capability_checked_at"]) == ("2", 1, 1_800_000_000.0, 1_800_000_500.0,
                                              1_800_000_500.0)
    assert (row["has_topics_enabled"], row["allows_users_to_create_topics"]) == (None, None)
    assert db.is_telegram_topic_mode_enabled(chat_id=7, user_id=1) is False
    assert db.is_telegram_topic_mode_enabled(chat_id=7, user_id=2) is True


def test_disable_switches_off_and_clears_bindings_unless_asked_to_keep_them(
        db: SessionDB, clock: Callable[[float], None]) -> None:
    telegram(db, "s1")
    telegram(db, "s2")
    db.enable_telegram_topic_mode(chat_id=7, user_id=42)
    db.bind_telegram_topic(chat_id=7, thread_id=1, user_id=42, session_key="k", session_id="s1")
    clock(1_800_000_100.0)
    db.disable_telegram_topic_mode(chat_id=7, clear_bindings=False)
    row = mode_row(db, "7")
    assert row is not None and (row["enabled"], row["updated_at"]) == (0, 1_800_000_100.0)
    assert db.is_telegram_topic_mode_enabled(chat_id=7, user_id=42) is False
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is True
    db.disable_telegram_topic_mode(chat_id=7)
    assert db.list_telegram_topic_bindings_for_chat(chat_id=7) == []


def test_writers_refuse_a_missing_id_and_readers_answer_neutral(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="chat_id is required"):
        db.enable_telegram_topic_mode(chat_id=None, user_id=1)
    with pytest.raises(ValueError, match="session_id is required"):
        db.bind_telegram_topic(chat_id=1, thread_id=1, user_id=1, session_key="k",
                               session_id="")
    assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(db)
    db.apply_telegram_topic_migration()
    assert db.is_telegram_topic_mode_enabled(chat_id=None, user_id=1) is False
    assert db.get_telegram_topic_binding(chat_id="", thread_id=1) is None
    assert db.get_telegram_topic_binding_by_session(session_id=None) is None
    assert db.list_telegram_topic_bindings_for_chat(chat_id=None) == []
    assert db.is_telegram_session_linked_to_topic(session_id="") is False
    assert db.delete_telegram_topic_binding(chat_id=None, thread_id=1) == 0
    assert db.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id=None) == []


# --------------------------------------------------------------------------- bindings


def test_bind_migrates_and_returns_the_whole_binding_row(
        db: SessionDB, clock: Callable[[float], None]) -> None:
    telegram(db, "s1")
    db.bind_telegram_topic(chat_id=-5, thread_id=11, user_id=42, session_key="agent:main",
                           session_id="s1")
    expected = {"chat_id": "-5", "thread_id": "11", "user_id": "42",
                "session_key": "agent:main", "session_id": "s1", "managed_mode": "auto",
                "linked_at": 1_800_000_000.0, "updated_at": 1_800_000_000.0}
    assert db.get_telegram_topic_binding(chat_id=-5, thread_id=11) == expected
    assert db.get_telegram_topic_binding_by_session(session_id="s1") == expected
    assert db.list_telegram_topic_bindings_for_chat(chat_id="-5") == [expected]
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is True
    assert db.get_meta(META_KEY) == "2"


def test_a_topic_moves_to_another_session_keeping_its_link_time(
        db: SessionDB, clock: Callable[[float], None]) -> None:
    telegram(db, "s1")
    telegram(db, "s2")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k1",
                           session_id="s1")
    clock(1_800_000_060.0)
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=43, session_key="k2",
                           session_id="s2", managed_mode="manual")
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=2) == {
        "chat_id": "1", "thread_id": "2", "user_id": "43", "session_key": "k2",
        "session_id": "s2", "managed_mode": "manual", "linked_at": 1_800_000_000.0,
        "updated_at": 1_800_000_060.0}
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is False


def test_rebinding_a_session_to_its_own_topic_is_an_update(db: SessionDB) -> None:
    telegram(db, "s1")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k",
                           session_id="s1")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k2",
                           session_id="s1")
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=2)["session_key"] == "k2"


def test_a_session_bound_elsewhere_is_refused_and_nothing_changes(db: SessionDB) -> None:
    telegram(db, "s1")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k",
                           session_id="s1")
    with pytest.raises(ValueError, match="already linked"):
        db.bind_telegram_topic(chat_id=1, thread_id=3, user_id=42, session_key="k",
                               session_id="s1")
    with pytest.raises(ValueError, match="already linked"):
        db.bind_telegram_topic(chat_id=9, thread_id=2, user_id=42, session_key="k",
                               session_id="s1")
    assert [(b["chat_id"], b["thread_id"]) for b in db.list_telegram_topic_bindings_for_chat(
        chat_id=1)] == [("1", "2")]
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=3) is None


def test_binding_an_unknown_session_fails_the_key_and_leaves_the_store_as_it_was(
        db: SessionDB) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k",
                               session_id="nope")
    assert not {MODE_TABLE, BINDINGS_TABLE} & tables_of(db)
    assert db.get_meta(META_KEY) is None


def test_bindings_of_a_chat_list_the_most_recently_updated_first(
        db: SessionDB, clock: Callable[[float], None]) -> None:
    for n, sid in enumerate(("s1", "s2", "s3")):
        telegram(db, sid)
        clock(1_800_000_000.0 + n)
        db.bind_telegram_topic(chat_id=1, thread_id=n, user_id=42, session_key="k",
                               session_id=sid)
    telegram(db, "other")
    db.bind_telegram_topic(chat_id=2, thread_id=0, user_id=42, session_key="k",
                           session_id="other")
    clock(1_800_000_010.0)
    db.bind_telegram_topic(chat_id=1, thread_id=0, user_id=42, session_key="k2",
                           session_id="s1")
    assert [b["session_id"] for b in db.list_telegram_topic_bindings_for_chat(chat_id=1)] == [
        "s1", "s3", "s2"]


def test_of_concurrent_binds_of_one_session_exactly_one_wins(db: SessionDB) -> None:
    telegram(db, "s1")
    db.apply_telegram_topic_migration()
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def bind(thread: int) -> None:
        with SessionDB(db.location) as mine:
            start.wait()
            try:
                mine.bind_telegram_topic(chat_id=1, thread_id=thread, user_id=42,
                                         session_key="k", session_id="s1")
                result = "won"
            except ValueError as err:
                result = "already linked" if "already linked" in str(err) else repr(err)
        with lock:
            outcomes.append(result)

    workers = [threading.Thread(target=bind, args=(t,)) for t in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(outcomes) == ["already linked"] * 5 + ["won"]
    assert len(db.list_telegram_topic_bindings_for_chat(chat_id=1)) == 1


def test_deleting_a_binding_switches_the_chat_off_with_its_last_binding(
        db: SessionDB) -> None:
    telegram(db, "s1")
    telegram(db, "s2")
    db.enable_telegram_topic_mode(chat_id=1, user_id=42)
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id=42, session_key="k", session_id="s1")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k", session_id="s2")
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=1) == 1
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id=42) is True
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=1) == 0
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id=42) is True
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=2) == 1
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id=42) is False


@pytest.mark.parametrize("how", ["delete_session", "prune_sessions"])
def test_deleting_a_session_takes_its_binding_along(db: SessionDB, how: str) -> None:
    telegram(db, "s1")
    telegram(db, "s2")
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id=42, session_key="k", session_id="s1")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id=42, session_key="k", session_id="s2")
    if how == "delete_session":
        assert db.delete_session("s1") is True
    else:
        db.end_session("s1", "user_exit")
        assert db.prune_sessions(older_than_days=0) == 1
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=1) is None
    assert db.is_telegram_session_linked_to_topic(session_id="s2") is True


# --------------------------------------------------------------------------- unlinked sessions


def test_unlinked_sessions_are_the_users_unbound_telegram_sessions_by_activity(
        db: SessionDB) -> None:
    base = round(time.time()) - 10_000.0  # activity inside the plausible-time window
    for sid, started in (("old", base - 500), ("mid", base - 300), ("new", base - 100),
                         ("bound", base - 50)):
        telegram(db, sid)
        set_columns(db, sid, started_at=started)
    db.append_message("old", "user", "still talking\nhere", timestamp=base - 10)
    telegram(db, "cli", source="cli")
    telegram(db, "stranger", user="7")
    telegram(db, "child", parent_session_id="mid")
    set_columns(db, "child", started_at=base - 400, archived=1)
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id=42, session_key="k",
                           session_id="bound")
    rows = db.list_unlinked_telegram_sessions_for_user(chat_id=999, user_id=42)
    assert [r["id"] for r in rows] == ["old", "new", "mid", "child"]
    first = rows[0]
    assert first["preview"] == "still talking here"
    assert first["last_active"] == base - 10
    assert rows[1]["last_active"] == base - 100 and rows[1]["preview"] == ""
    assert first["source"] == "telegram" and "handoff_state" in first
    assert [r["id"] for r in db.list_unlinked_telegram_sessions_for_user(
        chat_id=1, user_id=42, limit=2)] == ["old", "new"]
    assert db.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id=42, limit=0) == []


def test_unlinked_sessions_with_equal_activity_order_by_start(db: SessionDB) -> None:
    db.apply_telegram_topic_migration()
    for sid, started in (("a", 1_700_000_100.0), ("b", 1_700_000_200.0)):
        telegram(db, sid)
        set_columns(db, sid, started_at=started)
        db.append_message(sid, "user", "x", timestamp=1_700_000_300.0)
    assert [r["id"] for r in db.list_unlinked_telegram_sessions_for_user(
        chat_id=1, user_id=42)] == ["b", "a"]
