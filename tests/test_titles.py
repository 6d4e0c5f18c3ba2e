"""Title cleaning and lineage numbering (pure functions of hermes_store.repo.titles)."""

from __future__ import annotations

import pytest

from hermes_store.repo.titles import (
    MAX_TITLE_LENGTH,
    clean_lookup_title,
    next_title,
    sanitize_title,
    split_numbered,
    variant_number,
)


@pytest.mark.parametrize(("raw", "expected"), [
    ("  Fix   Docker\tBuild \n", "Fix Docker Build"),
    ("hello\x00world", "helloworld"),
    ("hello\x7fworld", "helloworld"),
    ("hello\u200bworld", "helloworld"),
    ("hello\u202eworld", "helloworld"),
    ("\ufeffhello", "hello"),
    ("a\u00a0\u00a0b", "a b"),
    ("🚀 我的项目 — Résumé #438", "🚀 我的项目 — Résumé #438"),
    ("lone \ud800surrogate", "lone surrogate"),
    ("x\u2060y\u2066z\ufffcw", "xyzw"),
    ("line\r\nbreak", "line break"),
])
def test_sanitize_title_cleans_as_documented(raw: str, expected: str) -> None:
    assert sanitize_title(raw) == expected


@pytest.mark.parametrize("raw", [None, "", "  \t\n ", "\x00\u200b\ufeff"])
def test_sanitize_title_returns_none_when_nothing_visible_remains(raw: str | None) -> None:
    assert sanitize_title(raw) is None


def test_sanitize_title_accepts_exactly_the_maximum_after_trimming() -> None:
    assert sanitize_title("A" * 100) == "A" * 100
    assert sanitize_title("  " + "A" * 100 + "  ") == "A" * 100
    assert MAX_TITLE_LENGTH == 100


def test_sanitize_title_rejects_101_characters_with_the_documented_message() -> None:
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$"):
        sanitize_title("A" * 101)


def test_sanitize_title_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        sanitize_title(123)  # type: ignore[arg-type]


def test_lookup_cleaning_never_raises() -> None:
    assert clean_lookup_title("  my project ") == "my project"
    assert clean_lookup_title("A" * 101) is None
    assert clean_lookup_title(5) is None


def test_split_numbered_takes_ascii_digits_only() -> None:
    assert split_numbered("x #3") == ("x", 3)
    assert split_numbered("x #draft") == ("x #draft", None)
    assert split_numbered("x #٣") == ("x #٣", None)
    assert split_numbered("a #1 #2") == ("a #1", 2)


def test_variant_number_is_case_sensitive() -> None:
    assert variant_number("my project #2", "my project") == 2
    assert variant_number("MY PROJECT #9", "my project") is None


@pytest.mark.parametrize(("existing", "given", "expected"), [
    ([], "my project", "my project"),
    (["my project"], "my project", "my project #2"),
    (["my project", "my project #2", "my project #3"], "my project", "my project #4"),
    (["my project", "my project #2"], "my project #2", "my project #3"),
    (["my project #2", "my project #5"], "my project", "my project #6"),
    (["x #3"], "x #3", "x #4"),
    (["test_project", "testXproject #2"], "test_project", "test_project #2"),
    (["my project", "MY PROJECT #9"], "my project", "my project #2"),
    (["my project", "my project #draft"], "my project", "my project #2"),
])
def test_next_title_follows_the_lineage_table(existing: list[str], given: str,
                                              expected: str) -> None:
    assert next_title(given, existing) == expected


def test_next_title_cuts_a_long_base_so_the_whole_title_fits() -> None:
    base = "B" * 99
    assert next_title(base, [base]) == "B" * 97 + " #2"
    spaced = "B" * 96 + " xyz"
    assert next_title(spaced, [spaced]) == "B" * 96 + " #2"  # cut, then right-trimmed
    assert len(next_title("C" * 150, [])) == 100
