"""Words inside paths, URLs, host names, e-mail addresses and decimals are found alike on both
backends: PostgreSQL's word column splits text where FTS5's unicode61 does (revision 0020,
docs/search.md#postgresql), and its queries cut terms at the same places."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.db.derived import PG_SEPARATOR_CLASS
from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.search.language import build_tree, parse_query, sanitize_query
from hermes_store.search.postgres import word_pieces, word_query
from hermes_store.search.statements import search_messages

BEFORE_WORDS = "0019_index_triggers_take_agent_names"
_SURROGATES = range(0xD800, 0xE000)
_REPLACED_RE = re.compile(f"[{PG_SEPARATOR_CLASS}]")
_ASCII_SPACE = frozenset("\t\n\v\f\r ")

# (key, role, content, tool_name, tool_calls)
CORPUS = [
    ("cargo", "user", "Build failed in adder/Cargo.toml, see src/main.rs line 3", None, None),
    ("url", "assistant", "Read https://docs.example.com/guide?lang=en#setup first", None, None),
    ("host", "user", "ping api.example.org from db-01.internal", None, None),
    ("mail", "user", "write to jane.doe@mail.example.net today", None, None),
    ("numbers", "assistant", "pi is 3.14159, e is 2.71828 (v1.2.3)", None, None),
    ("snake", "user", "call parse_config_file with foo_bar=1", None, None),
    ("hyphen", "assistant", "the e-mail was well-known and state-of-the-art", None, None),
    ("apostrophe", "user", "it's the user's choice, don't worry", None, None),
    ("accents", "assistant", "Crème brûlée at a café in São Paulo", None, None),
    ("unicode", "user", "Ünïcödé—dash«quoted»text…end•list¿why", None, None),
    ("decomposed", "user", "cafe\u0301 noir", None, None),
    ("emoji", "user", "deploy🚀done", None, None),
    ("marks", "user", "हिन्दी भाषा", None, None),
    ("call", "assistant", "checking the config", "web_search",
     '[{"function": {"name": "read_file", "arguments": "{\\"path\\": \\"/etc/nginx/nginx.conf\\"}"'
     '}}]'),
]

# Every query finds exactly these rows on both backends.
EXPECTED = {
    "cargo": {"cargo"},
    "toml": {"cargo"},
    "Cargo.toml": {"cargo"},
    '"adder/Cargo.toml"': {"cargo"},
    "src/main.rs": {"cargo"},
    '"main rs"': {"cargo"},
    '"Cargo.t"*': {"cargo"},
    "example": {"url", "host", "mail"},
    "example.com": {"url"},
    '"docs example com guide"': {"url"},
    "lang": {"url"},
    "internal": {"host"},
    "db-01": {"host"},
    "01": {"host"},
    "jane": {"mail"},
    "jane.doe@mail": {"mail"},
    "example.ne*": {"mail"},
    "3.14159": {"numbers"},
    "14159": {"numbers"},
    "3.1*": {"numbers"},
    "v1.2": {"numbers"},
    "parse_config_file": {"snake"},
    "config": {"snake", "call"},
    "parse_con*": {"snake"},
    "foo_bar": {"snake"},
    "bar": {"snake"},
    "e-mail": {"hyphen"},
    '"e mail"': {"hyphen"},
    "mail": {"hyphen", "mail"},
    "state-of-the-art": {"hyphen"},
    "known": {"hyphen"},
    "it's": {"apostrophe"},
    "don't": {"apostrophe"},
    "user": {"apostrophe"},
    "creme brulee": {"accents"},
    "São": {"accents"},
    "quoted": {"unicode"},
    '"dash«quoted»text"': {"unicode"},
    "end list why": {"unicode"},
    "unicode": {"unicode"},
    "café": {"accents", "decomposed"},
    "noir": {"decomposed"},
    "deploy done": {"emoji"},
    "हिन्दी": {"marks"},
    "web_search": {"call"},
    "search": {"call"},
    "nginx.conf": {"call"},
    "etc": {"call"},
    "read_file": {"call"},
    "toml OR nginx": {"cargo", "call"},
    "example NOT internal": {"url", "mail"},
    '"3.14"': set(),
    "main.py": set(),
}


def _fill(location: str) -> dict[int, str]:
    def write(conn) -> dict[int, str]:
        conn.execute(text("INSERT INTO sessions (id, source, started_at) "
                          "VALUES ('s', 'cli', 1.0)"))
        keys = {}
        for n, (key, role, content, tool_name, tool_calls) in enumerate(CORPUS):
            row_id = conn.execute(text(
                "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
                "timestamp) VALUES ('s', :r, :c, :n, :k, :t) RETURNING id"),
                {"r": role, "c": content, "n": tool_name, "k": tool_calls,
                 "t": 100.0 + n}).scalar_one()
            keys[row_id] = key
        return keys

    return run_write(open_engine(location), write)


def _found(location: str, keys: dict[int, str], query: str) -> set[str]:
    with reading(open_engine(location)) as conn:
        return {keys[h["id"]] for h in search_messages(conn, query, limit=100)}


def test_words_split_at_punctuation_are_found_alike(head_store: str) -> None:
    keys = _fill(head_store)
    assert {q: _found(head_store, keys, q) for q in EXPECTED} == EXPECTED


@pytest.fixture
def c_ctype_store(pg_server) -> Iterator[str]:
    """A database whose LC_CTYPE is C: there the parser reads every non-ASCII character as a
    letter ("dash«quoted»text" one word) unless the separators are spaces first."""
    name = f"{pg_server.prefix}_c_ctype"
    pg_server.conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\' '
                           "LC_CTYPE 'C' LC_COLLATE 'C'")
    url = pg_server.url_for(name)
    yield url
    engine_mod.dispose_all()
    pg_server.drop(url)


def test_words_split_at_punctuation_are_found_alike_under_a_c_ctype(c_ctype_store: str) -> None:
    migrate.upgrade(c_ctype_store)
    keys = _fill(c_ctype_store)
    assert {q: _found(c_ctype_store, keys, q) for q in EXPECTED} == EXPECTED


def _fts5_separators() -> set[int]:
    """Every code point FTS5's unicode61 splits ``a?b`` at, asked of FTS5 itself."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)",
                     ((code, f"a{chr(code)}b") for code in range(1, 0x110000)
                      if code not in _SURROGATES))
    found = {row[0] for row in conn.execute("SELECT doc FROM v WHERE term = 'b'")}
    conn.close()
    return found


def _replaced() -> set[int]:
    return {code for code in range(1, 0x110000)
            if code not in _SURROGATES and _REPLACED_RE.match(chr(code))}


def test_the_separators_are_unicode61s_at_every_code_point() -> None:
    """The table and ASCII white space (where the parser splits already) are FTS5's separators;
    a query term is cut at exactly those."""
    table = _replaced()
    assert table.isdisjoint(map(ord, _ASCII_SPACE))
    assert table | set(map(ord, _ASCII_SPACE)) == _fts5_separators()
    every = "".join(chr(code) for code in sorted(table)) + "".join(sorted(_ASCII_SPACE))
    assert word_pieces(f"a{every}b") == ["a", "b"]


def test_the_word_text_function_replaces_the_table_alone(pg_store: str) -> None:
    """PostgreSQL reads the escaped class as Python does, at every code point."""
    changed = run_write(open_engine(pg_store), lambda c: c.execute(text(
        "SELECT array_agg(i), array_agg(DISTINCT w) FROM ("
        "  SELECT i, hs_word_text('a' || chr(i) || 'b') AS w"
        "  FROM generate_series(1, 1114111) AS i WHERE i NOT BETWEEN 55296 AND 57343) AS t "
        "WHERE w <> 'a' || chr(i) || 'b'")).one())
    assert set(changed[0]) == _replaced()
    assert changed[1] == ["a b"]


@pytest.mark.parametrize(("query", "tsquery"), [
    ("cargo", "'cargo'"),
    ("Cargo.toml", "('Cargo' <-> 'toml')"),
    ('"src/main.rs"', "('src' <-> 'main' <-> 'rs')"),
    ('"Cargo.t"*', "('Cargo' <-> 't':*)"),
    ("parse_con*", "('parse' <-> 'con':*)"),
    ("deploy*", "'deploy':*"),
    ("e-mail OR it", "(('e' <-> 'mail')) | ('it')"),
    ("\u19b0", "' '"),  # New Tai Lue vowel sign: letters to Python, separators to unicode61
])
def test_query_terms_are_cut_into_phrases_of_their_words(query: str, tsquery: str) -> None:
    tree = build_tree(parse_query(sanitize_query(query)))
    assert tree is not None
    assert word_query(tree) == tsquery


def test_word_pieces_keep_letters_digits_and_diacritics() -> None:
    assert word_pieces("a@b.org/x_y—z«w»3.14") == ["a", "b", "org", "x", "y", "z", "w", "3", "14"]
    assert word_pieces("cafe\u0301 n²o ...") == ["cafe\u0301", "n²o"]


def _messages(location: str) -> list[tuple]:
    with reading(open_engine(location)) as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT id, session_id, role, content, tool_name, tool_calls, timestamp "
            "FROM messages ORDER BY id"))]


def _word_column_finds(location: str, word: str, *, head: bool = True) -> bool:
    # Below revision 0022 the column and configuration had their former names.
    column, config = ("hs_search_words", "hs_search") if head else ("search_words", "hermes_search")
    with reading(open_engine(location)) as conn:
        return bool(conn.execute(text(
            f"SELECT count(*) FROM messages WHERE {column} @@ "
            f"to_tsquery('{config}', :w)"), {"w": word}).scalar_one())


def test_a_store_written_at_0019_finds_the_words_after_the_upgrade(pg_empty_store: str) -> None:
    migrate.upgrade(pg_empty_store, BEFORE_WORDS)
    keys = _fill(pg_empty_store)
    before = _messages(pg_empty_store)
    assert not _word_column_finds(pg_empty_store, "cargo", head=False)  # one "file" token at 0019

    migrate.upgrade(pg_empty_store)
    assert _messages(pg_empty_store) == before
    assert migrate.check(pg_empty_store) == []
    found = {q: _found(pg_empty_store, keys, q) for q in ("cargo", "main", "example", "14159")}
    assert found == {"cargo": {"cargo"}, "main": {"cargo"}, "example": {"url", "host", "mail"},
                     "14159": {"numbers"}}
    assert _word_column_finds(pg_empty_store, "cargo")


def test_the_word_column_goes_back_to_0018s_on_downgrade(pg_empty_store: str) -> None:
    from alembic import command

    migrate.upgrade(pg_empty_store)
    keys = _fill(pg_empty_store)
    before = _messages(pg_empty_store)
    command.downgrade(migrate.make_config(pg_empty_store), BEFORE_WORDS)
    assert _messages(pg_empty_store) == before
    assert not _word_column_finds(pg_empty_store, "cargo", head=False)
    assert _word_column_finds(pg_empty_store, "adder/Cargo.toml", head=False)
    migrate.upgrade(pg_empty_store)
    assert _found(pg_empty_store, keys, "cargo") == {"cargo"}

