"""PostgreSQL's word index splits words where SQLite's does: at punctuation, symbols and marks.

FTS5's unicode61 tokenizer takes letters and digits as word characters and splits at everything
else, so on SQLite ``src/main.rs`` holds the words src, main, rs. PostgreSQL's default
text-search parser keeps file paths (``adder/Cargo.toml``), host names (``example.com``), URLs,
e-mail addresses (``a@b.org``), versions and decimals (``3.14``) as single tokens, so "cargo",
"toml", "main", "example" or "14" found nothing there that SQLite finds (issue 10 asks for the
same results; docs/search.md promises that punctuation splits words). Under a ``C`` LC_CTYPE it
also reads every non-ASCII character as a letter, so "a—b" or "a。b" stayed one word.

``hermes_word_text(text)`` (IMMUTABLE, so a generated column may call it) turns every run of
unicode61's separators into one space before ``to_tsvector`` parses the text: the ASCII
punctuation, and the marks, punctuation, symbols and spaces of FTS5's own Unicode tables (the
hex ranges below, read from FTS5; tests/test_search_words.py checks every code point against
it; ASCII white space is left alone, the parser splits there already). The parser then meets
only letters, digits and spaces. The inputs are cut as before and only then split (a run of
separators becomes one space, never longer), so ``to_tsvector`` stays under its 1 MB limit.
Query terms are cut at the same places (``search.postgres``).

PostgreSQL 15 cannot change a generated column's expression, so ``messages.search_words`` and
its GIN index are dropped and added again: this rewrites the ``messages`` table and computes
every row's vector anew, inside the upgrade's transaction: ``messages`` is locked (ACCESS
EXCLUSIVE) until it commits, about 10 s per 20,000 messages (75 MB of text) on a two-core
machine, so minutes on a large store. Rows are not otherwise touched.

Nothing here runs on SQLite.

Revision ID: 0020_pg_words_split_at_punctuation
Revises: 0019_index_triggers_take_agent_names
"""

from alembic import op

revision = "0020_pg_words_split_at_punctuation"
down_revision = "0019_index_triggers_take_agent_names"
branch_labels = None
depends_on = None

# A literal copy of db/derived.py's PG_WORD_SEPARATORS: revisions never import the package.
SEPARATORS = """
0001-0008 000e-001f 0021-002f 003a-0040 005b-0060 007b-00a9 00ab-00b1 00b4 00b6-00b8 00bb 00bf 00d7
00f7 02c2-02c5 02d2-02df 02e5-02eb 02ed 02ef-02ff 0305 030d-030e 0310 0312-031a 031c-0322 0329-032c
032f 0332-036f 0375 037e 0384-0385 0387 03f6 0482-0489 055a-055f 0589-058a 058f 0591-05c7 05f3-05f4
0600-0604 0606-061b 061e-061f 064b-065f 066a-066d 0670 06d4 06d6-06e4 06e7-06ed 06fd-06fe 0700-070d
070f 0711 0730-074a 07a6-07b0 07eb-07f3 07f6-07f9 0816-0819 081b-0823 0825-0827 0829-082d 0830-083e
0859-085b 085e 08e4-08fe 0900-0903 093a-093c 093e-094f 0951-0957 0962-0965 0970 0981-0983 09bc
09be-09c4 09c7-09c8 09cb-09cd 09d7 09e2-09e3 09f2-09f3 09fa-09fb 0a01-0a03 0a3c 0a3e-0a42 0a47-0a48
0a4b-0a4d 0a51 0a70-0a71 0a75 0a81-0a83 0abc 0abe-0ac5 0ac7-0ac9 0acb-0acd 0ae2-0ae3 0af0-0af1
0b01-0b03 0b3c 0b3e-0b44 0b47-0b48 0b4b-0b4d 0b56-0b57 0b62-0b63 0b70 0b82 0bbe-0bc2 0bc6-0bc8
0bca-0bcd 0bd7 0bf3-0bfa 0c01-0c03 0c3e-0c44 0c46-0c48 0c4a-0c4d 0c55-0c56 0c62-0c63 0c7f 0c82-0c83
0cbc 0cbe-0cc4 0cc6-0cc8 0cca-0ccd 0cd5-0cd6 0ce2-0ce3 0d02-0d03 0d3e-0d44 0d46-0d48 0d4a-0d4d 0d57
0d62-0d63 0d79 0d82-0d83 0dca 0dcf-0dd4 0dd6 0dd8-0ddf 0df2-0df4 0e31 0e34-0e3a 0e3f 0e47-0e4f
0e5a-0e5b 0eb1 0eb4-0eb9 0ebb-0ebc 0ec8-0ecd 0f01-0f1f 0f34-0f3f 0f71-0f87 0f8d-0f97 0f99-0fbc
0fbe-0fcc 0fce-0fda 102b-103e 104a-104f 1056-1059 105e-1060 1062-1064 1067-106d 1071-1074 1082-108d
108f 109a-109f 10fb 135d-1368 1390-1399 1400 166d-166e 1680 169b-169c 16eb-16ed 1712-1714 1732-1736
1752-1753 1772-1773 17b4-17d6 17d8-17db 17dd 1800-180e 18a9 1920-192b 1930-193b 1940 1944-1945
19b0-19c0 19c8-19c9 19de-19ff 1a17-1a1b 1a1e-1a1f 1a55-1a5e 1a60-1a7c 1a7f 1aa0-1aa6 1aa8-1aad
1b00-1b04 1b34-1b44 1b5a-1b7c 1b80-1b82 1ba1-1bad 1be6-1bf3 1bfc-1bff 1c24-1c37 1c3b-1c3f 1c7e-1c7f
1cc0-1cc7 1cd0-1ce8 1ced 1cf2-1cf4 1dc0-1de6 1dfc-1dff 1fbd 1fbf-1fc1 1fcd-1fcf 1fdd-1fdf 1fed-1fef
1ffd-1ffe 2000-2064 206a-206f 207a-207e 208a-208e 20a0-20b9 20d0-20f0 2100-2101 2103-2106 2108-2109
2114 2116-2118 211e-2123 2125 2127 2129 212e 213a-213b 2140-2144 214a-214d 214f 2190-23f3 2400-2426
2440-244a 249c-24e9 2500-26ff 2701-2775 2794-2b4c 2b50-2b59 2ce5-2cea 2cef-2cf1 2cf9-2cfc 2cfe-2cff
2d70 2d7f 2de0-2e2e 2e30-2e3b 2e80-2e99 2e9b-2ef3 2f00-2fd5 2ff0-2ffb 3000-3004 3008-3020 302a-3030
3036-3037 303d-303f 3099-309c 30a0 30fb 3190-3191 3196-319f 31c0-31e3 3200-321e 322a-3247 3250
3260-327f 328a-32b0 32c0-32fe 3300-33ff 4dc0-4dff a490-a4c6 a4fe-a4ff a60d-a60f a66f-a67e a69f
a6f0-a6f7 a700-a716 a720-a721 a789-a78a a802 a806 a80b a823-a82b a836-a839 a874-a877 a880-a881
a8b4-a8c4 a8ce-a8cf a8e0-a8f1 a8f8-a8fa a926-a92f a947-a953 a95f a980-a983 a9b3-a9cd a9de-a9df
aa29-aa36 aa43 aa4c-aa4d aa5c-aa5f aa77-aa79 aa7b aab0 aab2-aab4 aab7-aab8 aabe-aabf aac1 aade-aadf
aaeb-aaf1 aaf5-aaf6 abe3-abed fb1e fb29 fbb2-fbc1 fd3e-fd3f fdfc-fdfd fe00-fe19 fe20-fe26 fe30-fe52
fe54-fe66 fe68-fe6b feff ff01-ff0f ff1a-ff20 ff3b-ff40 ff5b-ff65 ffe0-ffe6 ffe8-ffee fff9-ffff
10100-10102 10137-1013f 10179-10189 10190-1019b 101d0-101fd 1039f 103d0 10857 1091f 1093f
10a01-10a03 10a05-10a06 10a0c-10a0f 10a38-10a3a 10a3f 10a50-10a58 10a7f 10b39-10b3f 11000-11002
11038-1104d 11080-11082 110b0-110c1 11100-11102 11127-11134 11140-11143 11180-11182 111b3-111c0
111c5-111c8 116ab-116b7 12470-12473 16f51-16f7e 16f8f-16f92 1d000-1d0f5 1d100-1d126 1d129-1d1dd
1d200-1d245 1d300-1d356 1d6c1 1d6db 1d6fb 1d715 1d735 1d74f 1d76f 1d789 1d7a9 1d7c3 1eef0-1eef1
1f000-1f02b 1f030-1f093 1f0a0-1f0ae 1f0b1-1f0be 1f0c1-1f0cf 1f0d1-1f0df 1f110-1f12e 1f130-1f16b
1f170-1f19a 1f1e6-1f202 1f210-1f23a 1f240-1f248 1f250-1f251 1f300-1f320 1f330-1f335 1f337-1f37c
1f380-1f393 1f3a0-1f3c4 1f3c6-1f3ca 1f3e0-1f3f0 1f400-1f43e 1f440 1f442-1f4f7 1f4f9-1f4fc
1f500-1f53d 1f540-1f543 1f550-1f567 1f5fb-1f640 1f645-1f64f 1f680-1f6c5 1f700-1f773 e0001
e0020-e007f e0100-e01ef
"""


def _escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _separator_class(table: str) -> str:
    ranges = (item.partition("-") for item in table.split())
    return "".join(_escape(int(lo, 16)) + (f"-{_escape(int(hi, 16))}" if hi else "")
                   for lo, _, hi in ranges)


# An E'' string: its escapes mean the same whatever standard_conforming_strings says.
_SQL_SEPARATORS = _separator_class(SEPARATORS).replace("\\", "\\\\")
WORD_TEXT_FUNCTION = f"""CREATE FUNCTION hermes_word_text(content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT regexp_replace(content, E'[{_SQL_SEPARATORS}]+', ' ', 'g')
$$"""
WORD_COLUMN = """ALTER TABLE messages ADD COLUMN search_words tsvector GENERATED ALWAYS AS (
    to_tsvector('hermes_search'::regconfig, hermes_word_text(left(CASE WHEN role = 'tool'
        THEN left(hermes_search_text(content), 8192)
        ELSE hermes_search_text(content) END, 200000)))
    || to_tsvector('hermes_search'::regconfig,
        hermes_word_text(left(COALESCE(tool_name, ''), 1000)))
    || to_tsvector('hermes_search'::regconfig,
        hermes_word_text(left(COALESCE(tool_calls, ''), 40000)))
) STORED"""
WORD_INDEX = "CREATE INDEX idx_messages_search_words ON messages USING gin (search_words)"
# Revision 0018's column, put back by the downgrade.
OLD_WORD_COLUMN = """ALTER TABLE messages ADD COLUMN search_words tsvector GENERATED ALWAYS AS (
    to_tsvector('hermes_search'::regconfig, left(CASE WHEN role = 'tool'
        THEN left(hermes_search_text(content), 8192)
        ELSE hermes_search_text(content) END, 200000))
    || to_tsvector('hermes_search'::regconfig, left(COALESCE(tool_name, ''), 1000))
    || to_tsvector('hermes_search'::regconfig, left(COALESCE(tool_calls, ''), 40000))
) STORED"""
DROP_WORD_COLUMN = ("DROP INDEX IF EXISTS idx_messages_search_words",
                    "ALTER TABLE messages DROP COLUMN IF EXISTS search_words")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite's word index is FTS5's unicode61 already
    for stmt in (*DROP_WORD_COLUMN, WORD_TEXT_FUNCTION, WORD_COLUMN, WORD_INDEX):
        op.execute(stmt)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for stmt in (*DROP_WORD_COLUMN, "DROP FUNCTION IF EXISTS hermes_word_text(text)",
                 OLD_WORD_COLUMN, WORD_INDEX):
        op.execute(stmt)
