"""The pure query side of full-text search (docs/search.md): sanitizer, CJK bigram text, term
mapping, routing, the boolean tree and its renderers, snippets.

FTS5 itself is the judge wherever validity or meaning is claimed: expressions are run with the
stdlib sqlite3 against tiny in-memory tables (unicode61, trigram, and a bigram table over
``cjk_bigram_text``).
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import string
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_store.content import MULTIMODAL_PREFIX, text_of
from hermes_store.repo.bigrams import BIGRAM_END, cjk_bigram_text, contains_cjk
from hermes_store.search.language import (
    AND,
    MAX_TERMS,
    NOT,
    OR,
    And,
    Node,
    Not,
    Or,
    Term,
    build_tree,
    evaluate_tree,
    iter_terms,
    parse_query,
    positive_terms,
    render_like,
    render_match,
    route_term,
    sanitize_query,
)
from hermes_store.search.snippets import snippet_from_text

E = BIGRAM_END
# Each Hypothesis test runs this many examples (about 3 s); the contract's 100,000
# strings are covered on every run by the seeded fuzz test below. For a long Hypothesis run:
# HERMES_FTS_EXAMPLES=100000 pytest tests/test_fts_query.py
EXAMPLES = int(os.environ.get("HERMES_FTS_EXAMPLES", "1000"))
FUZZ_STRINGS = 100_000


# --------------------------------------------------------------------------------------------
# fixtures and helpers
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def match_db() -> Iterator[sqlite3.Connection]:
    """Word (unicode61), trigram and bigram tables plus a plain table for LIKE, each with a row,
    so every expression is really executed, not only prepared."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE word USING fts5(content)")
    conn.execute("CREATE VIRTUAL TABLE tri USING fts5(content, tokenize='trigram')")
    conn.execute("CREATE VIRTUAL TABLE big USING fts5(content)")
    conn.execute("CREATE TABLE plain(content TEXT, tool_name TEXT, tool_calls TEXT)")
    sample = "docker chat-send 记忆断裂 修改youer服务端 100%完成"
    for table in ("word", "tri"):
        conn.execute(f"INSERT INTO {table}(content) VALUES (?)", (sample,))
    conn.execute("INSERT INTO big(content) VALUES (?)", (cjk_bigram_text(sample),))
    conn.execute("INSERT INTO plain VALUES (?, NULL, ?)", (sample, "[]"))
    yield conn
    conn.close()


def run_match(conn: sqlite3.Connection, table: str, expression: str) -> list[int]:
    """A syntax error raises sqlite3.OperationalError and so fails the calling test."""
    sql = f"SELECT rowid FROM {table} WHERE {table} MATCH ?"
    return [row[0] for row in conn.execute(sql, (expression,))]


@pytest.fixture(scope="module")
def bigram_db() -> Iterator[sqlite3.Connection]:
    """A bigram index over the derived text of a few CJK and mixed documents."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE doc(id INTEGER PRIMARY KEY, content TEXT)")
    conn.execute("CREATE VIRTUAL TABLE big USING fts5(derived)")
    for doc_id, text in BIGRAM_DOCS.items():
        conn.execute("INSERT INTO doc VALUES (?, ?)", (doc_id, text))
        derived = cjk_bigram_text(text)
        conn.execute("INSERT INTO big(rowid, derived) VALUES (?, ?)", (doc_id, derived))
    yield conn
    conn.close()


BIGRAM_DOCS = {
    1: "昨天和其他Agent的聊天记录，记忆断裂问题复现了",
    2: "断裂",
    3: "修改youer服务端",
    4: "A2A通信协议",
    5: "안녕하세요 여러분",
    6: "达成100%完成率",
    7: "达成100完成率",
    8: "Agent通信",
    9: "an English row about docker",
}


def bigram_hits(conn: sqlite3.Connection, query: str) -> set[int]:
    """What search would return from the bigram route: index hits, literal-checked if needed."""
    term = only_term(query)
    hits = set(run_match(conn, "big", term.bigram_match()))
    if term.needs_literal_check:
        sql = "SELECT id FROM doc WHERE content LIKE ? ESCAPE '\\'"
        hits &= {row[0] for row in conn.execute(sql, (term.like_pattern(),))}
    return hits


def only_term(query: str) -> Term:
    (term,) = parse_query(sanitize_query(query))
    assert isinstance(term, Term)
    return term


def tree_of(query: str) -> Node | None:
    return build_tree(parse_query(sanitize_query(query)))


# --------------------------------------------------------------------------------------------
# Sanitizer (docs/search.md#sanitizer): every row of the table
# --------------------------------------------------------------------------------------------

SANITIZER_TABLE = [
    ("docker deployment", "docker deployment"),
    ("hello   world\tagain", "hello world again"),
    ('"exact phrase" extra', '"exact phrase" extra'),
    ('unbalanced "quote', "unbalanced quote"),
    ('"unterminated', "unterminated"),
    ('say "hi" and "bye', 'say "hi" and bye'),
    ('""', ""),
    ('"!!" ok', "ok"),
    ("hello AND", "hello"),
    ("OR world", "world"),
    ("AND x", "x"),
    ("AND", ""),
    ("OR OR", ""),
    ("NOT", ""),
    ("x AND *", "x"),
    ("NOT java", ""),
    ("NOT java python", "python"),
    ("python NOT java", "python NOT java"),
    ("python AND NOT java", "python NOT java"),
    ("a AND OR b", "a OR b"),
    ("a OR NOT b", "a NOT b"),
    ("docker or kubernetes", "docker or kubernetes"),
    ("and cats", "and cats"),
    ("not found", "not found"),
    ("NEAR(a b, 5)", "a b"),
    ("NEAR(a b)", "a b"),
    ("near(x y)", "near x y"),
    ("NEAR", "NEAR"),
    ("chat-send", '"chat-send"'),
    ("chat-send*", '"chat-send"*'),
    ("src/main.py", 'src "main.py"'),
    ("v1.2.3", '"v1.2.3"'),
    ("P2.2", '"P2.2"'),
    ("my_var_name", '"my_var_name"'),
    ("my-app.config.ts", '"my-app.config.ts"'),
    ("e-mail", '"e-mail"'),
    ("foo--bar", '"foo--bar"'),
    ("-rf", "rf"),
    (".env", "env"),
    ("e.g.", '"e.g"'),
    ("#123", "123"),
    ("don't", "don t"),
    ("50%", "50"),
    ("a@b.com", 'a "b.com"'),
    ("ok?", "ok"),
    ("$5", "5"),
    ("a,b", "a b"),
    ("C++", "C"),
    ("C# code", "C code"),
    ("TODO: fix", "TODO fix"),
    ("foo:bar", "foo bar"),
    ("[x]", "x"),
    ("a|b", "a b"),
    ("`code`", "code"),
    ("(foo) {bar} +baz^", "foo bar baz"),
    ("(problem", "problem"),
    ("(docker OR podman) build", "docker OR podman build"),
    ("🚀 launch", "launch"),
    ("*", ""),
    ("***", ""),
    ("deploy*", "deploy*"),
    ("deploy***", "deploy*"),
    ("*deploy", "deploy"),
    ("a*b", "a b"),
    ("记忆断裂", "记忆断裂"),
    ("广西 OR 桂林", "广西 OR 桂林"),
    ("记忆，断裂", "记忆 断裂"),
    ("秃发*", "秃发*"),
    ("100%完成", '"100%完成"'),
    ("50% 完成", '"50%" 完成'),
    ("修改youer服务端", "修改youer服务端"),
]


@pytest.mark.parametrize(
    ("raw", "expected"), SANITIZER_TABLE, ids=[repr(raw) for raw, _ in SANITIZER_TABLE]
)
def test_sanitizer_table_row(raw: str, expected: str, match_db: sqlite3.Connection) -> None:
    assert sanitize_query(raw) == expected
    if expected:
        run_match(match_db, "word", expected)
        run_match(match_db, "tri", expected)


@pytest.mark.parametrize("raw", [None, "", "   ", "\t\n", b"bytes", 42])
def test_sanitizer_gives_empty_for_nothing_to_search(raw: object) -> None:
    assert sanitize_query(raw) == ""  # type: ignore[arg-type]


def test_sanitizer_uses_only_the_first_2048_characters() -> None:
    text = "a" * 2047 + " zzz"
    assert sanitize_query(text) == "a" * 2047


def test_sanitizer_keeps_at_most_64_terms_and_drops_their_operators() -> None:
    words = [f"w{i}" for i in range(70)]
    out = sanitize_query(" OR ".join(words))
    assert out == " OR ".join(words[:MAX_TERMS])
    assert out.endswith(f"w{MAX_TERMS - 1}")


def test_control_characters_are_spaces_even_inside_phrases() -> None:
    assert sanitize_query('"a\x00b\nc" d\x07e') == '"a b c" d e'


def test_lone_surrogates_never_reach_sqlite(match_db: sqlite3.Connection) -> None:
    out = sanitize_query('"ab\ud800cd" x\udfffy')
    assert out == '"ab cd" x y'
    run_match(match_db, "word", out)


def test_star_after_a_phrase_is_kept_once() -> None:
    assert sanitize_query('"chat send"** x') == '"chat send"* x'


def test_empty_phrase_drops_its_star_too() -> None:
    assert sanitize_query('"!!"* ok') == "ok"


def test_operator_words_with_a_prefix_star_are_quoted_not_read_as_operators(
    match_db: sqlite3.Connection,
) -> None:
    out = sanitize_query("x AND* y NOT* OR*")
    assert out == 'x "AND"* y "NOT"* "OR"*'
    run_match(match_db, "word", out)


def test_near_group_around_a_phrase_keeps_the_phrase() -> None:
    assert sanitize_query('NEAR("chat send" docker, 10)') == '"chat send" docker'


def test_unclosed_near_group_is_still_a_near_group() -> None:
    assert sanitize_query("NEAR(a b, 3") == "a b"


def test_near_inside_a_word_is_not_a_near_group() -> None:
    assert sanitize_query("XNEAR(a)") == "XNEAR a"


def test_percent_is_kept_only_when_the_query_has_cjk() -> None:
    assert sanitize_query("100% done") == "100 done"
    assert sanitize_query("100% done。") == '"100%" done'  # U+3002 is in the CJK set


def test_leading_not_is_dropped_with_its_term_repeatedly() -> None:
    assert sanitize_query("NOT a NOT b c") == "c"


def test_phrase_is_kept_verbatim_and_separated_from_neighbours() -> None:
    assert sanitize_query('foo"bar (baz)"qux') == 'foo "bar (baz)" qux'


# --------------------------------------------------------------------------------------------
# CJK set and bigram text (docs/search.md#cjk-bigrams)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "char",
    ["一", "鿿", "㐀", "\U00020000", "\U0002a6df", "、", "。", "あ", "カ", "가", "힣", "豈"]
    + ["\U0002a700", "\U0002ebef"],
)
def test_contains_cjk_covers_the_contract_ranges(char: str) -> None:
    assert contains_cjk(f"abc{char}")


@pytest.mark.parametrize(
    "text", ["", "docker", "café", "Ελληνικά", "🚀", "，", "\ue000", "\U0002a6e0"]
)
def test_contains_cjk_rejects_other_text(text: str) -> None:
    assert not contains_cjk(text)


def test_contains_cjk_accepts_none() -> None:
    assert contains_cjk(None) is False


@pytest.mark.parametrize(
    ("text", "derived"),
    [
        ("修改youer服务端", f"修改 改{E} youer 服务 务端 端{E}"),
        ("裂", f"裂{E}"),
        ("记忆断裂", f"记忆 忆断 断裂 裂{E}"),
        ("记忆。断裂", f"记忆 忆{E} 。 断裂 裂{E}"),  # CJK punctuation never joins a run
        ("カタ・カナ", f"カタ タ{E} ・ カナ ナ{E}"),
        ("안녕하세요 world", f"안녕 녕하 하세 세요 요{E} world"),
        ("plain text, kept", "plain text, kept"),
        ("A2A通信", f"A2A 通信 信{E}"),
        ("\U00020000\U00020001", f"\U00020000\U00020001 \U00020001{E}"),
        ("", ""),
        (None, ""),
    ],
)
def test_bigram_text_derivation(text: str | None, derived: str) -> None:
    assert cjk_bigram_text(text) == derived


def _best_of_three(text: str) -> float:
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        cjk_bigram_text(text)
        timings.append(time.perf_counter() - start)
    return min(timings)


@pytest.mark.parametrize(
    "pieces", [["记"], ["修改", "youer ", "服务端", "。", "数据", "\n"], ["lorem ", "ipsum "]]
)
def test_bigram_text_of_100_kb_takes_milliseconds(pieces: list[str]) -> None:
    rng = random.Random(7)
    if len(pieces) == 1:  # one 100,000-character run of random ideographs
        text = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(100_000))
    else:
        text = "".join(rng.choice(pieces) for _ in range(100_000))[:100_000]
    # Typically 2-6 ms; the bound leaves room for a loaded CI machine.
    assert _best_of_three(text) < 0.05


# --------------------------------------------------------------------------------------------
# Term mapping onto the bigram index (docs/search.md#routing)
# --------------------------------------------------------------------------------------------

TERM_MAPPING = [
    ("记忆断裂", '"记忆 忆断 断裂"', False),
    ("通信", '"通信"', False),
    ("안녕", '"안녕"', False),
    ("裂", '"裂"*', False),
    ("youer", "youer", False),
    ("修改youer", f'"修改 改{E} youer"', False),
    ("A2A通", '"A2A 通"*', False),
    ("100%完成", '"100% 完成"', True),
    ("秃发*", '"秃发"*', False),
    ('"记忆 断裂"', f'"记忆 忆{E} 断裂"', False),
    ("a通b", f'"a 通{E} b"', False),
    ("chat-send*", '"chat-send"*', False),
]


@pytest.mark.parametrize(("query", "match", "literal"), TERM_MAPPING)
def test_term_maps_onto_the_bigram_index(query: str, match: str, literal: bool) -> None:
    term = only_term(query)
    assert term.bigram_match() == match
    assert term.needs_literal_check is literal


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("记忆断裂", {1}),
        ("通信", {4, 8}),
        ("안녕", {5}),
        ("裂", {1, 2}),  # inside a run and at a run's end
        ("youer", {3}),  # the Latin run glued to CJK
        ("修改youer", {3}),
        ("A2A通", {4}),
        ("Agent通信", {8}),
        ("100%完成", {6}),  # the literal check rejects 达成100完成率
        ("docker", {9}),
    ],
)
def test_bigram_match_finds_the_documented_rows(
    bigram_db: sqlite3.Connection, query: str, found: set[int]
) -> None:
    assert bigram_hits(bigram_db, query) == found


def test_percent_term_without_literal_check_would_also_find_the_wrong_row(
    bigram_db: sqlite3.Connection,
) -> None:
    assert set(run_match(bigram_db, "big", only_term("100%完成").bigram_match())) == {6, 7}


def test_term_fields() -> None:
    term = only_term('"chat-send"*')
    fields = (term.text, term.phrase, term.prefix, term.is_cjk, term.length)
    assert fields == ("chat-send", True, True, False, 9)
    assert term.word_match() == '"chat-send"*'
    cjk = only_term("秃发*")
    assert (cjk.text, cjk.prefix, cjk.is_cjk, cjk.length) == ("秃发", True, True, 2)


def test_trigram_form_is_quoted_without_star() -> None:
    assert only_term("秃发*").trigram_match() == '"秃发"'
    assert Term.from_token('"say ""hi"""').trigram_match() == '"say ""hi"""'


# --------------------------------------------------------------------------------------------
# LIKE patterns
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "pattern"),
    [
        ("秃发*", "%秃发%"),
        ("deploy*", "%deploy%"),
        ("chat-send*", "%chat-send%"),
        ("100%完成", "%100\\%完成%"),
        ("my_var_name", "%my\\_var\\_name%"),
        ('"C:\\temp"', "%C:\\\\temp%"),
    ],
)
def test_like_pattern_drops_the_star_and_escapes_wildcards(query: str, pattern: str) -> None:
    assert only_term(query).like_pattern() == pattern


@pytest.mark.parametrize(
    ("query", "text", "hit"),
    [
        ("秃发*", "秃发", True),
        ("100%完成", "达成100%完成率", True),
        ("100%完成", "达成100完成率", False),
        ("my_var_name", "myXvarXname", False),
        ("my_var_name", "use MY_VAR_NAME here", True),
        ('"C:\\temp"', "C:\\temp", True),
        ('"C:\\temp"', "C:temp", False),
    ],
)
def test_like_pattern_matches_literally_in_sqlite(query: str, text: str, hit: bool) -> None:
    conn = sqlite3.connect(":memory:")
    pattern = only_term(query).like_pattern()
    (matched,) = conn.execute("SELECT ? LIKE ? ESCAPE '\\'", (text, pattern)).fetchone()
    assert bool(matched) is hit


def _unescaped_wildcards(pattern: str) -> list[str]:
    found, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] in "%_":
            found.append(pattern[i])
        i += 1
    return found


# --------------------------------------------------------------------------------------------
# Routing (docs/search.md#routing)
# --------------------------------------------------------------------------------------------

ROUTING = [
    ("go", {}, "word"),
    ("C", {}, "word"),
    ("docker*", {}, "word"),
    ("docker", {"bigram_ready": False}, "word"),
    ("docker", {"trigram_available": False, "bigram_ready": False}, "word"),
    ("记忆断裂", {}, "trigram"),
    ("Agent通信", {}, "trigram"),
    ("记忆断裂", {"bigram_ready": False}, "trigram"),
    ("记忆断裂", {"trigram_available": False}, "bigram"),
    ("记忆断裂", {"trigram_available": False, "bigram_ready": False}, "like"),
    ("通信", {}, "bigram"),
    ("裂", {}, "bigram"),
    ("a通", {}, "bigram"),
    ("秃发*", {}, "bigram"),  # length excludes the star
    ('"通信"', {}, "bigram"),  # and the quotes
    ("通信", {"trigram_available": False}, "bigram"),
    ("通信", {"bigram_ready": False}, "like"),
    ("秃发*", {"bigram_ready": False}, "like"),
    ("docker", {"tool_role": True}, "like"),
    ("记忆断裂", {"tool_role": True}, "like"),
    ("通信", {"tool_role": True}, "like"),
]


@pytest.mark.parametrize(("query", "flags", "route"), ROUTING)
def test_route_term(query: str, flags: dict[str, bool], route: str) -> None:
    assert route_term(only_term(query), **flags) == route


def test_two_cjk_words_with_or_render_as_one_trigram_match() -> None:
    tree = tree_of("记忆系统 OR 断裂连接")
    assert {route_term(term) for term in iter_terms(tree)} == {"trigram"}
    assert render_match(tree, "trigram") == '"记忆系统" OR "断裂连接"'


def test_latin_not_cjk_keeps_its_meaning_across_routes() -> None:
    tree = tree_of("docker NOT 部署")
    assert isinstance(tree, Not)
    assert [route_term(term) for term in iter_terms(tree)] == ["word", "bigram"]


def test_cjk_or_falls_back_to_like_while_bigram_is_not_ready() -> None:
    tree = tree_of("广西 OR 桂林")
    sql, params = render_like(tree, ["content"])
    assert params == ["%广西%", "%桂林%"]
    assert sql == "((content LIKE ? ESCAPE '\\') OR (content LIKE ? ESCAPE '\\'))"


# --------------------------------------------------------------------------------------------
# Precedence: the tree (docs/search.md#query-language)
# --------------------------------------------------------------------------------------------


def t(word: str) -> Term:
    return Term(word, word)


@pytest.mark.parametrize(
    ("query", "tree"),
    [
        ("a", t("a")),
        ("a b", And((t("a"), t("b")))),
        ("a b NOT c d", Not(And((t("a"), t("b"))), And((t("c"), t("d"))))),
        ("a OR b c", Or((t("a"), And((t("b"), t("c")))))),
        ("a AND b NOT c", And((t("a"), Not(t("b"), t("c"))))),
        ("a NOT b NOT c", Not(Not(t("a"), t("b")), t("c"))),
        ("a AND b c OR d", Or((And((t("a"), t("b"), t("c"))), t("d")))),
        ("(docker OR podman) build", Or((t("docker"), And((t("podman"), t("build")))))),
    ],
)
def test_tree_follows_fts5_precedence(query: str, tree: object) -> None:
    assert tree_of(query) == tree


def test_tree_of_nothing_is_none() -> None:
    assert build_tree(parse_query(sanitize_query("NOT x"))) is None
    assert evaluate_tree(None, lambda term: {1}) == set()


def test_build_tree_tolerates_stray_operators() -> None:
    assert build_tree(["AND", t("a"), "OR", "NOT", t("b"), "NOT"]) == Not(t("a"), t("b"))


def test_evaluate_tree_combines_sets() -> None:
    ids = {"a": {1, 2, 3}, "b": {2, 3}, "c": {3}, "d": {4}}
    tree = tree_of("a b NOT c OR d")
    assert evaluate_tree(tree, lambda term: ids[term.text]) == {2, 4}


def test_positive_terms_skip_the_excluded_side() -> None:
    assert [x.text for x in positive_terms(tree_of("a b NOT c OR d"))] == ["a", "b", "d"]


def test_render_match_rejects_unknown_index() -> None:
    with pytest.raises(ValueError):
        render_match(t("a"), "fulltext")


def test_render_like_needs_columns() -> None:
    with pytest.raises(ValueError):
        render_like(t("a"), [])


# Words none of which is a substring of another, so LIKE and word matching agree on them.
VOCAB = ["kiwi", "lime", "plum", "fig"]


@pytest.fixture(scope="module")
def semantics_db() -> Iterator[sqlite3.Connection]:
    """Every subset of VOCAB as a row, spread over content/tool_name with NULLs."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE m(id INTEGER PRIMARY KEY, content TEXT, tool_name TEXT)")
    conn.execute(
        "CREATE VIRTUAL TABLE w USING fts5(content, tool_name, content='m', content_rowid='id')"
    )
    for mask in range(1 << len(VOCAB)):
        words = [w for i, w in enumerate(VOCAB) if mask >> i & 1]
        content = " ".join(words[::2]) or None
        tool = " ".join(words[1::2]) or None
        conn.execute("INSERT INTO m VALUES (?, ?, ?)", (mask + 1, content, tool))
    conn.execute("INSERT INTO w(rowid, content, tool_name) SELECT id, content, tool_name FROM m")
    yield conn
    conn.close()


def _ids(conn: sqlite3.Connection, sql: str, params: list[str] | tuple[str, ...]) -> set[int]:
    return {row[0] for row in conn.execute(sql, params)}


@settings(max_examples=min(EXAMPLES, 400), deadline=None)
@given(st.lists(st.sampled_from([*VOCAB, AND, OR, NOT]), min_size=1, max_size=9).map(" ".join))
def test_tree_routes_agree_with_fts5_on_the_whole_expression(
    semantics_db: sqlite3.Connection, query: str
) -> None:
    sanitized = sanitize_query(query)
    tree = build_tree(parse_query(sanitized))
    if tree is None:
        assert sanitized == ""
        return
    conn = semantics_db
    whole = set(run_match(conn, "w", sanitized))
    per_term = evaluate_tree(tree, lambda term: set(run_match(conn, "w", term.word_match())))
    rendered = set(run_match(conn, "w", render_match(tree, "word")))
    where, params = render_like(tree, ["content", "tool_name"])
    like = _ids(conn, f"SELECT id FROM m WHERE {where}", params)
    assert whole == per_term == rendered == like


# --------------------------------------------------------------------------------------------
# the guarantee: sanitizer output is always a valid MATCH (property tests)
# --------------------------------------------------------------------------------------------

_SPECIAL = ["AND", "OR", "NOT", "NEAR(", "NEAR", '"', '"', "*", " ", " ", "AND*", ", 5)", ")"]
QUERY_PIECES = st.one_of(
    st.sampled_from(_SPECIAL),
    st.sampled_from(list(string.punctuation)),
    st.text(string.ascii_letters + string.digits, min_size=1, max_size=6),
    st.characters(categories=("Lu", "Ll", "Lo", "Lm", "Mn", "Nd", "No")),
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),
    st.characters(min_codepoint=0x3000, max_codepoint=0x30FF),
    st.characters(min_codepoint=0xAC00, max_codepoint=0xD7AF),
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),  # emoji
    st.characters(categories=("Cc", "Cf", "Zs")),
)
QUERIES = st.lists(QUERY_PIECES, max_size=40).map("".join)


# Both tables parse the expression in one statement, which halves the cost of the 100,000 runs.
_BOTH_TOKENIZERS = (
    "SELECT (SELECT count(*) FROM word WHERE word MATCH ?1),"
    " (SELECT count(*) FROM tri WHERE tri MATCH ?1)"
)


def _check_valid_everywhere(conn: sqlite3.Connection, raw: str) -> None:
    out = sanitize_query(raw)
    assert isinstance(out, str)
    if out:
        conn.execute(_BOTH_TOKENIZERS, (out,)).fetchone()  # a syntax error raises


@settings(max_examples=EXAMPLES, deadline=None)
@given(QUERIES)
def test_sanitized_output_is_a_valid_match_for_both_tokenizers(
    match_db: sqlite3.Connection, raw: str
) -> None:
    _check_valid_everywhere(match_db, raw)


@settings(max_examples=EXAMPLES, deadline=None)
@given(QUERIES)
def test_rendered_trees_are_valid_for_every_index_and_for_like(
    match_db: sqlite3.Connection, raw: str
) -> None:
    tree = build_tree(parse_query(sanitize_query(raw)))
    if tree is None:
        return
    run_match(match_db, "word", render_match(tree, "word"))
    run_match(match_db, "tri", render_match(tree, "trigram"))
    run_match(match_db, "big", render_match(tree, "bigram"))
    where, params = render_like(tree, ["content", "tool_name", "tool_calls"])
    match_db.execute(f"SELECT rowid FROM plain WHERE {where}", params).fetchall()
    snippet = snippet_from_text([raw], [term.text for term in positive_terms(tree)])
    assert isinstance(snippet, str)


@settings(max_examples=EXAMPLES, deadline=None)
@given(QUERIES)
def test_like_patterns_carry_no_fts_syntax(raw: str) -> None:
    for item in parse_query(sanitize_query(raw)):
        if not isinstance(item, Term):
            continue
        pattern = item.like_pattern()
        assert _unescaped_wildcards(pattern) == ["%", "%"]
        assert pattern.startswith("%") and pattern.endswith("%")
        if not item.phrase:  # a star inside a user's quotes is literal text, not syntax
            assert "*" not in pattern


_FUZZ_POOL = [
    *_SPECIAL,
    *string.punctuation,
    *(string.ascii_letters + string.digits),
    *"éüßñçøΩЖ가나다あいカナ々〇",
    *map(chr, range(0x4E00, 0x4E40)),
    *map(chr, (0x3000, 0x3001, 0x3002, 0xFF0C, 0xE000, 0x200B, 0xFEFF, 0xD800)),
    *map(chr, range(0x1F600, 0x1F610)),
    *map(chr, range(0x00, 0x20)),
]


def test_100000_random_strings_give_valid_matches_for_both_tokenizers(
    match_db: sqlite3.Connection,
) -> None:
    rng = random.Random(20494)
    for _ in range(FUZZ_STRINGS):
        _check_valid_everywhere(match_db, "".join(rng.choices(_FUZZ_POOL, k=rng.randint(0, 24))))


# --------------------------------------------------------------------------------------------
# Stored text: multimodal content and snippets (docs/search.md#results)
# --------------------------------------------------------------------------------------------


def multimodal(parts: object) -> str:
    return MULTIMODAL_PREFIX + json.dumps(parts)


def text_part(text: str, kind: str = "text") -> dict[str, str]:
    return {"type": kind, "text": text}


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (None, ""),
        ("", ""),
        ("plain text", "plain text"),
        (multimodal([text_part("look"), IMAGE]), "look"),
        (multimodal([text_part("a", "input_text"), "b", text_part("c", "output_text")]), "a b c"),
        (multimodal([text_part("secret", "thinking"), text_part("x", "tool_use")]), ""),
        (multimodal(text_part("one part")), "one part"),
        (multimodal([IMAGE]), ""),
        (MULTIMODAL_PREFIX + "{not json", ""),
    ],
)
def test_the_text_search_indexes_is_the_text_parts_joined(content: str | None, text: str) -> None:
    assert text_of(content) == text


def test_snippet_example_from_the_contract() -> None:
    content = "昨天和其他Agent的聊天记录，记忆断裂问题复现了"
    expected = "昨天和其他Agent的聊天记录，>>>记忆断裂<<<问题复现了"
    assert snippet_from_text([content, None, None], ["记忆断裂"]) == expected


def test_snippet_cuts_120_characters_starting_40_before_the_match() -> None:
    content = "x" * 100 + "Docker" + "y" * 100
    snippet = snippet_from_text([content], ["docker"])
    assert snippet == "..." + "x" * 40 + ">>>Docker<<<" + "y" * 74 + "..."


def test_snippet_starts_at_the_earliest_occurrence_and_marks_every_one_in_view() -> None:
    assert snippet_from_text(["b then a then b"], ["a", "b"]) == ">>>b<<< then >>>a<<< then >>>b<<<"


def test_snippet_falls_back_to_tool_name_then_tool_calls() -> None:
    assert snippet_from_text(["nothing", "MyTool", '{"q": "docker"}'], ["mytool"]) == ">>>MyTool<<<"
    tool_calls = '{"q": "docker"}'
    assert snippet_from_text(["nothing", None, tool_calls], ["docker"]) == '{"q": ">>>docker<<<"}'


def test_snippet_without_literal_occurrence_is_the_first_120_characters() -> None:
    assert snippet_from_text(["café " * 40], ["cafe"]) == ("café " * 40)[:120]
    assert snippet_from_text([None, "tool"], ["zzz"]) == "tool"
    assert snippet_from_text([None, None, None], ["zzz"]) == ""


def test_snippet_never_shows_the_multimodal_sentinel() -> None:
    content = multimodal([text_part("see the chart"), IMAGE])
    snippet = snippet_from_text([content], ["chart"])
    assert snippet == "see the >>>chart<<<"
    assert "json" not in snippet_from_text([content], ["zzz"])


# --------------------------------------------------------------------------------------------
# the same judgements on PostgreSQL (revision 0018): tsquery and the bigram tsvector column
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_query_db(pg_server) -> Iterator[object]:
    """A database at head with the bigram documents and the VOCAB rows in temporary tables,
    their tsvectors built exactly as the store builds them."""
    import psycopg

    from hermes_store.repo.bigrams import bigram_vector

    url = pg_server.head_database()
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE TABLE big (id int PRIMARY KEY, content text, v tsvector)")
    for doc_id, text in BIGRAM_DOCS.items():
        conn.execute("INSERT INTO big VALUES (%s, %s, %s::tsvector)",
                     (doc_id, text, bigram_vector(cjk_bigram_text(text), None)))
    conn.execute("CREATE TABLE m (id int PRIMARY KEY, content text, tool_name text, w tsvector)")
    for mask in range(1 << len(VOCAB)):
        words = [w for i, w in enumerate(VOCAB) if mask >> i & 1]
        conn.execute("INSERT INTO m VALUES (%s, %s, %s, to_tsvector('hs_search', "
                     "hs_word_text(COALESCE(%s, ''))) || to_tsvector('hs_search', "
                     "hs_word_text(COALESCE(%s, ''))))",
                     (mask + 1, " ".join(words[::2]) or None, " ".join(words[1::2]) or None,
                      " ".join(words[::2]) or None, " ".join(words[1::2]) or None))
    yield conn
    conn.close()
    pg_server.drop(url)


def _pg_ids(conn: object, sql: str, params: Sequence[object]) -> set[int]:
    return {row[0] for row in conn.execute(sql, params)}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("query", "found"),
    [("记忆断裂", {1}), ("通信", {4, 8}), ("안녕", {5}), ("裂", {1, 2}), ("youer", {3}),
     ("修改youer", {3}), ("A2A通", {4}), ("Agent通信", {8}), ("100%完成", {6, 7}),
     ("docker", {9})],
)
def test_bigram_tsquery_finds_the_documented_rows_on_postgresql(
    pg_query_db: object, query: str, found: set[int]
) -> None:
    """The same rows as the FTS5 bigram index (before the literal check, which is SQL's)."""
    from hermes_store.search.postgres import bigram_query

    tree = build_tree(parse_query(sanitize_query(query)))
    assert tree is not None
    assert _pg_ids(pg_query_db, "SELECT id FROM big WHERE v @@ %s::tsquery",
                   (bigram_query(tree),)) == found


@settings(max_examples=min(EXAMPLES, 200), deadline=None)
@given(st.lists(st.sampled_from([*VOCAB, AND, OR, NOT]), min_size=1, max_size=9).map(" ".join))
def test_tree_tsquery_agrees_with_like_on_postgresql(pg_query_db: object, query: str) -> None:
    """to_tsquery of the whole tree means what the per-term sets and LIKE mean (as in FTS5)."""
    from hermes_store.search.postgres import like_condition, word_query

    tree = build_tree(parse_query(sanitize_query(query)))
    if tree is None:
        return
    conn = pg_query_db
    whole = _pg_ids(conn, "SELECT id FROM m WHERE w @@ to_tsquery('hs_search', %s)",
                    (word_query(tree),))
    per_term = evaluate_tree(tree, lambda t: _pg_ids(
        conn, "SELECT id FROM m WHERE w @@ to_tsquery('hs_search', %s)", (word_query(t),)))
    where, params = like_condition(tree, ["content", "tool_name"])
    like = _pg_ids(conn, "SELECT id FROM m WHERE " + where, params)
    assert whole == per_term == like


@settings(max_examples=min(EXAMPLES, 300), deadline=None)
@given(QUERIES)
def test_rendered_trees_are_valid_tsqueries_on_postgresql(pg_query_db: object, raw: str) -> None:
    from hermes_store.search.postgres import bigram_query, word_query

    tree = build_tree(parse_query(sanitize_query(raw)))
    if tree is None:
        return
    conn: Any = pg_query_db
    conn.execute("SELECT count(*) FROM m WHERE w @@ to_tsquery('hs_search', %s)",
                 (word_query(tree),)).fetchone()
    conn.execute("SELECT count(*) FROM big WHERE v @@ %s::tsquery",
                 (bigram_query(tree),)).fetchone()


def _revision(filename: str) -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "migrations" / "versions" / filename
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_postgresql_search_ddl_is_the_revisions() -> None:
    """db/derived.py's live copy says exactly what revisions 0018, 0020 and 0022 make: 0018's
    layout, its word column replaced by 0020's, which reads the text through 0020's function,
    every name as 0022 renamed it."""
    from hermes_store.db.derived import PG_SEPARATOR_CLASS, PG_STATEMENTS, PG_WORD_SEPARATORS

    first, words = _revision("0018_pg_search_indexes.py"), _revision(
        "0020_pg_words_split_at_punctuation.py")
    head = list(first.STATEMENTS)
    column = head.index(words.OLD_WORD_COLUMN)
    head[column:column + 1] = [words.WORD_TEXT_FUNCTION, words.WORD_COLUMN]
    assert words.WORD_INDEX in head
    # Revision 0022 gave every object its name of our own.
    for _, old, new, _ in _revision("0022_derived_names_of_our_own.py").PG_RENAMES:
        head = [re.sub(rf"(?<![A-Za-z0-9_]){old}(?![A-Za-z0-9_])", new, sql) for sql in head]
    # Revision 0024 widened the substring and pending indexes to every row.
    scope = _revision("0024_one_search_scope.py")
    head = [{"CREATE INDEX hs_idx_messages_trgm": scope.PG_TRIGRAM_INDEX,
             "CREATE INDEX hs_idx_messages_cjk_pending": scope.PG_PENDING_INDEX}.get(
                 sql.partition(" ON ")[0], sql) for sql in head]
    assert head == [sql for _, sql in PG_STATEMENTS]
    assert words.SEPARATORS == PG_WORD_SEPARATORS
    assert words._separator_class(words.SEPARATORS) == PG_SEPARATOR_CLASS
