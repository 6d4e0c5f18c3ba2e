"""SessionDB titles: set/get, uniqueness, lookup by title and lineage numbering."""

from __future__ import annotations

import pytest
from backends import sql

from hermes_store import SessionDB
from hermes_store.repo import sessions as sessions_repo


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        yield instance


def titled(db: SessionDB, *pairs: tuple[str, str], started: list[float] | None = None) -> None:
    for i, (sid, title) in enumerate(pairs):
        db.create_session(sid, "cli")
        if started is not None:
            sql(db, "UPDATE sessions SET started_at = :t WHERE id = :id", t=started[i], id=sid)
        assert db.set_session_title(sid, title) is True


def test_set_session_title_cleans_and_stores(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    assert db.set_session_title("s1", "  Fix   Docker\tBuild \n") is True
    assert db.get_session_title("s1") == "Fix Docker Build"
    assert SessionDB.sanitize_title("hello\u200bworld") == "helloworld"


def test_too_long_is_a_value_error_even_for_an_unknown_session(db: SessionDB) -> None:
    with pytest.raises(ValueError, match=r"Title too long \(101 chars, max 100\)"):
        db.set_session_title("ghost", "A" * 101)
    db.create_session("s1", "cli")
    assert db.set_session_title("s1", "A" * 100) is True


def test_unknown_session_returns_false_before_any_conflict_check(db: SessionDB) -> None:
    titled(db, ("s1", "taken"))
    assert db.set_session_title("ghost", "taken") is False
    assert db.set_session_title("ghost", "free") is False


def test_a_title_held_by_another_session_is_refused(db: SessionDB) -> None:
    titled(db, ("s1", "Fix Build"))
    db.create_session("s2", "cli")
    with pytest.raises(ValueError, match=r"^Title 'Fix Build' is already in use by session s1$"):
        db.set_session_title("s2", " Fix  Build ")
    assert db.get_session_title("s2") is None
    assert db.set_session_title("s1", "Fix Build") is True  # its own title again


def test_titles_compare_exactly_and_untitled_sessions_are_unlimited(db: SessionDB) -> None:
    titled(db, ("s1", "Fix Build"), ("s2", "fix build"))
    for sid in ("u1", "u2", "u3"):
        db.create_session(sid, "cli")
    assert [db.get_session_title(s) for s in ("s1", "s2", "u1")] == ["Fix Build", "fix build", None]


def test_a_title_that_cleans_to_nothing_clears_the_field(db: SessionDB) -> None:
    titled(db, ("s1", "something"))
    assert db.set_session_title("s1", " \u200b ") is True
    assert db.get_session_title("s1") is None
    titled(db, ("s2", "something"))  # the old title is free again
    assert db.set_session_title("s2", None) is True and db.get_session_title("s2") is None


def test_a_race_on_the_unique_index_is_reported_as_the_same_value_error(db, monkeypatch) -> None:
    titled(db, ("s1", "contested"))
    db.create_session("s2", "cli")
    # The other writer commits between our check and our write: the check sees no holder.
    real = sessions_repo.title_holder
    calls: list[str] = []

    def check_misses_once(conn, title):
        calls.append(title)
        return None if len(calls) == 1 else real(conn, title)

    monkeypatch.setattr(sessions_repo, "title_holder", check_misses_once)
    with pytest.raises(ValueError, match=r"^Title 'contested' is already in use by session s1$"):
        db.set_session_title("s2", "contested")
    assert db.get_session_title("s2") is None and db.get_session_title("s1") == "contested"


def test_title_arguments_must_be_strings(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    with pytest.raises(TypeError):
        db.set_session_title("s1", 123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.get_session_by_title(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.resolve_session_by_title(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.get_next_title_in_lineage(None)  # type: ignore[arg-type]


def test_get_session_title_of_unknown_or_untitled_is_none(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    assert db.get_session_title("s1") is None and db.get_session_title("ghost") is None


def test_get_session_by_title_cleans_the_input_without_raising(db: SessionDB) -> None:
    titled(db, ("s1", "my project"))
    assert db.get_session_by_title("  my project ")["id"] == "s1"
    assert db.get_session_by_title("my project")["source"] == "cli"
    assert db.get_session_by_title("My Project") is None
    assert db.get_session_by_title("A" * 101) is None
    assert db.get_session_by_title("") is None


def test_resolve_by_title_prefers_the_newest_numbered_variant(db: SessionDB) -> None:
    titled(db, ("s1", "my project"), ("s2", "my project #2"), ("s3", "my project #3"),
           started=[100.0, 200.0, 300.0])
    assert db.resolve_session_by_title("my project") == "s3"
    assert db.resolve_session_by_title("my project #2") == "s2"
    assert db.resolve_session_by_title("nope") is None


def test_resolve_by_title_breaks_start_time_ties_by_the_larger_number(db: SessionDB) -> None:
    titled(db, ("a", "t"), ("b", "t #9"), ("c", "t #10"), started=[5.0, 7.0, 7.0])
    assert db.resolve_session_by_title("t") == "c"


def test_resolve_by_title_uses_start_time_not_the_number(db: SessionDB) -> None:
    titled(db, ("a", "t"), ("b", "t #5"), ("c", "t #2"), started=[1.0, 2.0, 3.0])
    assert db.resolve_session_by_title("t") == "c"


def test_resolve_by_title_takes_exact_digit_variants_case_sensitively(db: SessionDB) -> None:
    titled(db, ("s1", "my project"), ("s2", "my project #draft"), ("s3", "MY PROJECT #2"))
    assert db.resolve_session_by_title("my project") == "s1"
    titled(db, ("s4", "test_project"), ("s5", "testXproject #2"), ("s6", "50% off"),
           ("s7", "50X off #3"))
    assert db.resolve_session_by_title("test_project") == "s4"
    assert db.resolve_session_by_title("50% off") == "s6"
    assert db.resolve_session_by_title("  test_project ") == "s4"


@pytest.mark.parametrize(("existing", "given", "expected"), [
    ([], "my project", "my project"),
    (["my project"], "my project", "my project #2"),
    (["my project", "my project #2", "my project #3"], "my project", "my project #4"),
    (["my project", "my project #2"], "my project #2", "my project #3"),
    (["my project #2", "my project #5"], "my project", "my project #6"),
    (["x #3"], "x #3", "x #4"),
    (["test_project", "testXproject #2"], "test_project", "test_project #2"),
    (["my project", "MY PROJECT #9"], "my project", "my project #2"),
    (["B" * 99], "B" * 99, "B" * 97 + " #2"),
])
def test_next_title_in_lineage(db: SessionDB, existing, given, expected) -> None:
    titled(db, *[(f"s{i}", t) for i, t in enumerate(existing)])
    result = db.get_next_title_in_lineage(given)
    assert result == expected and len(result) <= 100


def test_numbering_races_surface_as_a_value_error_for_the_second_writer(db: SessionDB) -> None:
    titled(db, ("s1", "base"))
    db.create_session("s2", "cli")
    db.create_session("s3", "cli")
    nxt = db.get_next_title_in_lineage("base")
    assert db.set_session_title("s2", nxt) is True
    with pytest.raises(ValueError):
        db.set_session_title("s3", nxt)
    assert db.set_session_title("s3", db.get_next_title_in_lineage("base")) is True
    assert db.get_session_title("s3") == "base #3"
