"""Arbitrary text in queries, titles and messages: a clear error or a faithful result, never a
crash, a half-written row or a silently changed value."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hermes_store import SessionDB
from hermes_store.db import engine as eng
from hermes_store.db import migrate
from hermes_store.errors import SchemaMismatchError
from hermes_store.search import language

# One store per module, reused across examples (each example writes under fresh ids): a store
# per example would spend the time budget on migrations instead of inputs.
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

FTS_SYNTAX = ['"', "'", "*", "^", ":", "-", "+", "(", ")", "{", "}", "[", "]", ",", ".", "%",
              "_", "\\", "AND", "OR", "NOT", "NEAR", "NEAR(", "content:", "NEAR/2", " ", "\t",
              "\x00", "中文", "日本語の", "昨", "한국어", "🚀", "e\u0301", "\u200b", "\ufeff",
              "\ud83d", "\udc00", "kubernetes", "docker", "ö", "x" * 300]
NASTY_TEXT = st.lists(st.one_of(st.sampled_from(FTS_SYNTAX), st.characters(),
                                st.text(max_size=8)), max_size=24).map("".join)
ANY_TEXT = st.one_of(st.text(), NASTY_TEXT)
_ids = itertools.count()


def _fresh_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("bad-input") / "state.db"
    with SessionDB(path) as db:
        for sid, source in (("en", "cli"), ("zh", "telegram"), ("cron_x_1", "cron")):
            db.create_session(sid, source)
        db.append_message("en", "user", "how do I restart the kubernetes deploy?")
        db.append_message("en", "assistant", "kubectl rollout restart deploy/api")
        db.append_message("zh", "user", "昨晚的数据库备份失败了吗")
        db.append_message("zh", "tool", "docker ps: 3 containers", tool_name="terminal")
        db.append_message("cron_x_1", "assistant", "nightly backup rotated 中文")
    eng.dispose_all()
    yield path
    eng.dispose_all()


@pytest.fixture
def db(shared_store: Path) -> Iterator[SessionDB]:
    with SessionDB(shared_store) as handle:
        yield handle


# --------------------------------------------------------------------------- search


@SETTINGS
@given(query=ANY_TEXT)
@example(query='"unterminated')
@example(query="NEAR(a b")
@example(query="content:kubernetes")
@example(query="* OR *")
@example(query="\ud800")
def test_search_messages_returns_a_list_for_any_query(db: SessionDB, query: str) -> None:
    results = db.search_messages(query, limit=5)
    assert isinstance(results, list) and len(results) <= 5
    for hit in results:
        assert {"id", "session_id", "role", "snippet"} <= hit.keys()


@SETTINGS
@given(query=ANY_TEXT)
def test_sanitized_queries_are_valid_match_expressions_on_both_store_indexes(
        shared_store: Path, query: str) -> None:
    sanitized = language.sanitize_query(query)
    if not sanitized:
        return
    con = sqlite3.connect(shared_store)
    try:
        for table in ("hs_fts", "hs_fts_trigram"):  # unicode61 and trigram
            con.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                        (sanitized,)).fetchone()
    finally:
        con.close()


def test_search_finds_seeded_text_through_the_same_path(db: SessionDB) -> None:
    # The properties above would pass on a search that always returns []: this one would not.
    assert {h["session_id"] for h in db.search_messages("kubernetes")} == {"en"}
    assert {h["session_id"] for h in db.search_messages("数据库")} == {"zh"}


# --------------------------------------------------------------------------- titles


@SETTINGS
@given(title=st.one_of(ANY_TEXT, st.none(), st.integers(), st.text(min_size=95, max_size=140)))
@example(title="\x00\u200b\ufeff")
@example(title="  " + "A" * 100 + "  ")
@example(title="A" * 101)
def test_a_title_is_stored_exactly_as_sanitized_or_refused_unchanged(db: SessionDB,
                                                                     title: object) -> None:
    sid = _fresh_id("title")
    db.create_session(sid, "cli")
    db.set_session_title(sid, f"before {sid}")
    try:
        stored = db.set_session_title(sid, title)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        assert db.get_session_title(sid) == f"before {sid}"
        return
    assert stored is True
    assert db.get_session_title(sid) == SessionDB.sanitize_title(title)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- message content

CONTENT = st.one_of(
    ANY_TEXT,
    st.just("\x00json:not json at all"),
    st.text(alphabet="\x00\x01\x7f\ud800\udfff\u2028a中", max_size=50),
    st.builds(lambda ch, n: ch * n, st.sampled_from(["a", "中", "\x00", "🚀"]),
              st.integers(0, 300_000)),
)


def _rows(db: SessionDB, sid: str) -> tuple[int, int]:
    with eng.reading(db.engine) as conn:
        rows = conn.exec_driver_sql("SELECT count(*) FROM messages WHERE session_id = ?",
                                    (sid,)).scalar()
        counter = conn.exec_driver_sql("SELECT message_count FROM sessions WHERE id = ?",
                                       (sid,)).scalar()
    return int(rows), int(counter)


@SETTINGS
@given(content=CONTENT)
@example(content="nul\x00inside")
@example(content="lone \ud83d surrogate")
@example(content="\x00json:[1, 2]")
def test_message_content_reads_back_exactly_or_is_refused_whole(db: SessionDB,
                                                               content: str) -> None:
    sid = _fresh_id("content")
    db.create_session(sid, "cli")
    try:
        new_id = db.append_message(sid, "user", content)
    except (ValueError, TypeError):
        assert _rows(db, sid) == (0, 0)  # nothing half-written
        return
    [row] = db.get_messages(sid)
    assert row["id"] == new_id
    assert row["content"] == content
    assert _rows(db, sid) == (1, 1)


def test_a_lone_surrogate_is_refused_with_a_clear_error(db: SessionDB) -> None:
    db.create_session("surrogate", "cli")
    with pytest.raises(ValueError, match="surrogate"):
        db.append_message("surrogate", "user", "broken \udc00 emoji")
    assert _rows(db, "surrogate") == (0, 0)


def test_an_eight_megabyte_message_round_trips(db: SessionDB) -> None:
    big = ("日本語のログ " * 100_000 + "x" * 3_000_000)[:8_000_000]
    db.create_session("big", "cli")
    db.append_message("big", "tool", big, tool_name="terminal")
    assert db.get_messages("big")[0]["content"] == big
    assert _rows(db, "big") == (1, 1)


# --------------------------------------------------------------------------- schema behind


def test_a_readonly_open_of_a_legacy_store_says_to_run_upgrade(legacy_db) -> None:
    path = legacy_db(11)
    before = path.read_bytes()
    with pytest.raises(SchemaMismatchError, match="hermes-store upgrade") as info:
        SessionDB(path, readonly=True)
    assert info.value.exit_code == 6
    assert isinstance(info.value, sqlite3.OperationalError)
    assert path.read_bytes() == before


def test_a_readonly_open_of_a_store_one_revision_behind_says_to_run_upgrade(
        store_path: Path) -> None:
    script_heads = migrate.status(store_path).head
    migrate.upgrade(store_path, revision="0012_newer_session_columns")
    eng.dispose_all()
    with pytest.raises(SchemaMismatchError, match="upgrade") as info:
        SessionDB(store_path, readonly=True)
    assert info.value.state == "behind"
    assert info.value.head == script_heads


# --------------------------------------------------------------------------- ids and readers


@SETTINGS
@given(session_id=st.one_of(ANY_TEXT, st.integers(), st.none(), st.binary(max_size=8)))
@example(session_id="")
@example(session_id="%")
@example(session_id="a_b\\c")
@example(session_id="\ud800")
def test_any_session_id_is_stored_exactly_or_refused_and_readers_never_raise(
        db: SessionDB, session_id: object) -> None:
    # Readers answer None/[]/0 for what they cannot find, whatever the id looks like.
    if isinstance(session_id, str):
        before = db.session_count()
        assert isinstance(db.get_messages(session_id), list)
        db.get_session(session_id)
        db.resolve_session_id(session_id)
        db.get_session_title(session_id)
        db.get_messages_as_conversation(session_id, include_ancestors=True)
    unique = f"{session_id}-{next(_ids)}" if isinstance(session_id, str) and session_id \
        else session_id
    try:
        returned = db.create_session(unique, "cli")  # type: ignore[arg-type]
    except (ValueError, TypeError):
        assert not isinstance(unique, str) or db.session_count() == before
        return
    assert returned == unique
    assert db.get_session(unique)["id"] == unique  # type: ignore[index]
    if unique == unique.strip():  # type: ignore[union-attr] # (resolution strips whitespace)
        assert db.resolve_session_id(unique) == unique  # type: ignore[arg-type]


@SETTINGS
@given(timestamp=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                           st.text(max_size=5), st.none()))
def test_a_message_timestamp_is_finite_or_refused_whole(db: SessionDB, timestamp: object) -> None:
    sid = _fresh_id("ts")
    db.create_session(sid, "cli")
    try:
        db.append_message(sid, "user", "hello", timestamp=timestamp)  # type: ignore[arg-type]
    except (ValueError, TypeError, OverflowError):
        assert _rows(db, sid) == (0, 0)
        return
    [row] = db.get_messages(sid)
    assert isinstance(row["timestamp"], float) and row["timestamp"] == row["timestamp"]
    assert abs(row["timestamp"]) != float("inf")


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


OUT_OF_RANGE_INPUT = {
    "tool_calls nested 2,000 deep (JSON text)":
        lambda db: db.append_message("s", "assistant", "x", tool_calls="[" * 2000 + "]" * 2000),
    "content nested 3,000 deep":
        lambda db: db.append_message("s", "user", _nested(3000)),
    "a 1 MB session id":
        lambda db: db.create_session("a" * 1_000_000, "cli"),
    "a 1 MB session id on append":
        lambda db: db.append_message("b" * 1_000_000, "user", "x"),
    "a 1 MB platform message id":
        lambda db: db.append_message("s", "user", "x", platform_message_id="p" * 1_000_000),
    "a token count of 2**70":
        lambda db: db.append_message("s", "user", "x", token_count=2**70),
    "input tokens of 2**70":
        lambda db: db.update_token_counts("s", input_tokens=2**70),
    "an api call count of -2**70":
        lambda db: db.update_token_counts("s", api_call_count=-(2**70)),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE_INPUT))
def test_input_past_what_a_backend_can_hold_is_a_value_error_and_writes_nothing(
        store: str, case: str) -> None:
    with SessionDB(store) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "before")
        before = (db.message_count(), db.session_count(), db.get_session("s"))
        with pytest.raises(ValueError):
            OUT_OF_RANGE_INPUT[case](db)
        assert (db.message_count(), db.session_count(), db.get_session("s")) == before


def test_a_session_id_of_the_longest_allowed_length_is_stored_on_both_backends(
        store: str) -> None:
    longest = "é" * 512  # 1,024 bytes of UTF-8
    with SessionDB(store) as db:
        db.create_session(longest, "cli")
        db.append_message(longest, "user", "x", platform_message_id="p" * 1024)
        assert db.message_count(longest) == 1
