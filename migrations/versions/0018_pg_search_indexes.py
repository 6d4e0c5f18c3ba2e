"""PostgreSQL's search indexes: the word, substring and CJK indexes of SQLite, without triggers.

The same three indexes as the FTS5 layout (revisions 0014–0016), over the same text
(docs/search.md#postgresql):

* ``hermes_search_text(content)`` is the text the SQLite view ``messages_search_text`` reads:
  plain content as is, multimodal content (the escaped NUL marker plus JSON) by its text parts,
  anything unreadable as ''. An IMMUTABLE function, so generated columns and expression indexes
  may call it.
* word index: ``messages.search_words``, a generated ``tsvector`` in the ``hermes_search``
  configuration (``simple`` plus ``unaccent``: no stemming, diacritics folded, as FTS5's
  unicode61), over tool output by its 8,192-character prefix and other text bounded so that
  ``to_tsvector`` never meets its 1 MB limit; GIN-indexed.
* substring: a ``pg_trgm`` GIN index on the trigram scope's text (no tool rows; cron and
  subagent sessions are left out by the query, since an index cannot read ``sessions``).
* CJK: ``messages.search_cjk``, the bigram tokens the library derives (a tsvector literal,
  written with the row by the library); NULL while a row written by another program waits for
  ``catch_up``, with a partial index over those ids.

``pg_trgm`` and ``unaccent`` ship with PostgreSQL and are trusted extensions. Nothing here runs
on SQLite.

Revision ID: 0018_pg_search_indexes
Revises: 0017_v21_tables
"""

from alembic import op

revision = "0018_pg_search_indexes"
down_revision = "0017_v21_tables"
branch_labels = None
depends_on = None

# A literal copy of db/derived.py's PG_* statements: revisions never import the package.
STATEMENTS = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE EXTENSION IF NOT EXISTS unaccent",
    """CREATE TEXT SEARCH CONFIGURATION hermes_search (COPY = simple)""",
    """ALTER TEXT SEARCH CONFIGURATION hermes_search
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
    WITH unaccent, simple""",
    """CREATE FUNCTION hermes_search_text(content text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc jsonb;
BEGIN
    IF content IS NULL THEN
        RETURN '';
    END IF;
    IF left(content, 7) IS DISTINCT FROM U&'\\FFFF' || '0json:' THEN
        RETURN content;
    END IF;
    BEGIN
        doc := substr(content, 8)::jsonb;
    EXCEPTION WHEN others THEN
        RETURN '';
    END;
    IF jsonb_typeof(doc) <> 'array' THEN
        doc := jsonb_build_array(doc);
    END IF;
    RETURN COALESCE((
        SELECT string_agg(CASE
            WHEN jsonb_typeof(e) = 'string' THEN e #>> '{}'
            WHEN jsonb_typeof(e) = 'object'
                 AND COALESCE(e ->> 'type', 'text') IN ('text', 'input_text', 'output_text')
                 AND jsonb_typeof(e -> 'text') = 'string'
            THEN e ->> 'text' END, ' ' ORDER BY n)
        FROM jsonb_array_elements(doc) WITH ORDINALITY AS t(e, n)), '');
END
$$""",
    """ALTER TABLE messages ADD COLUMN search_words tsvector GENERATED ALWAYS AS (
    to_tsvector('hermes_search'::regconfig, left(CASE WHEN role = 'tool'
        THEN left(hermes_search_text(content), 8192)
        ELSE hermes_search_text(content) END, 200000))
    || to_tsvector('hermes_search'::regconfig, left(COALESCE(tool_name, ''), 1000))
    || to_tsvector('hermes_search'::regconfig, left(COALESCE(tool_calls, ''), 40000))
) STORED""",
    "ALTER TABLE messages ADD COLUMN search_cjk tsvector",
    "CREATE INDEX idx_messages_search_words ON messages USING gin (search_words)",
    """CREATE INDEX idx_messages_search_trgm ON messages USING gin (
    (hermes_search_text(content) || E'\\n' || COALESCE(tool_name, '')) gin_trgm_ops)
    WHERE role IS DISTINCT FROM 'tool'""",
    "CREATE INDEX idx_messages_search_cjk ON messages USING gin (search_cjk)",
    """CREATE INDEX idx_messages_search_pending ON messages (id)
    WHERE search_cjk IS NULL AND role IS DISTINCT FROM 'tool'""",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite's search layout is FTS5 (revisions 0014-0016)
    for stmt in STATEMENTS:
        op.execute(stmt)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for stmt in ("DROP INDEX IF EXISTS idx_messages_search_pending",
                 "DROP INDEX IF EXISTS idx_messages_search_cjk",
                 "DROP INDEX IF EXISTS idx_messages_search_trgm",
                 "DROP INDEX IF EXISTS idx_messages_search_words",
                 "ALTER TABLE messages DROP COLUMN IF EXISTS search_cjk",
                 "ALTER TABLE messages DROP COLUMN IF EXISTS search_words",
                 "DROP FUNCTION IF EXISTS hermes_search_text(text)",
                 "DROP TEXT SEARCH CONFIGURATION IF EXISTS hermes_search"):
        op.execute(stmt)
