"""Record whether any row of the CJK bigram index holds Latin glued to CJK, so Latin terms skip that index while none does.

A Latin word glued to CJK letters (``修改youer服务端``) is one token of the word index, so only the
bigram index, which splits CJK runs off, finds ``youer`` there. Search therefore read a Latin term
from both indexes, and the second read was most of what a word or phrase search cost beyond the
agent's own store, for every store, including those where no such row exists.

From here ``state_meta`` holds ``hs_cjk_glued_latin``: ``'0'`` while no row of the bigram index may
hold a letter or digit glued to a CJK letter, ``'1'`` once one may. Without a glued row the bigram
index answers a Latin expression exactly as the word index does on the same rows, so search reads
the word index alone (docs/search.md#the-row-split). The library sets ``'1'`` in the transaction
that writes such a side row (``repo.bigrams``); nothing sets it back. A missing key reads as
``'1'``. This revision scans the side rows present (their source text in ``hs_search_scope``) and
stops at the first glued one; rows still pending are judged when the library derives them.

The test is this revision's own copy of ``repo.bigrams.glued`` (revisions never import the
library): a CJK letter next to a character that is neither a CJK letter nor surely a unicode61
separator. It errs towards "glued", which only costs speed.

SQLite only: PostgreSQL's word route is its own (docs/search.md#postgresql).

Revision ID: 0025_track_glued_latin
Revises: 0024_one_search_scope
"""

import re
import unicodedata

from alembic import op

revision = "0025_track_glued_latin"
down_revision = "0024_one_search_scope"
branch_labels = None
depends_on = None

KEY = "hs_cjk_glued_latin"
RUN = ("\u3041-\u309a\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
       "\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002a6df\U0002a700-\U0002ebef")
BLOCKS = (range(0xA0, 0xC0), range(0x2000, 0x2070), range(0x3000, 0x3040), range(0xFF00, 0xFF66))
SEPARATORS = re.escape("".join(chr(c) for c in range(128) if not chr(c).isalnum())
                       + "".join(chr(c) for block in BLOCKS for c in block
                                 if unicodedata.category(chr(c))[0] in "PZ"))
GLUED = re.compile(f"[{RUN}][^{RUN}{SEPARATORS}]|[^{RUN}{SEPARATORS}][{RUN}]")
SIDE_ROWS = ("SELECT sc.text, sc.tool_name FROM hs_cjk AS c "
             "JOIN hs_search_scope AS sc ON sc.id = c.id")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        return
    present = {row[0] for row in bind.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE name IN ('hs_cjk', 'hs_search_scope')")}
    if len(present) < 2:
        return  # no bigram index (no FTS5): nothing reads the key
    rows = bind.exec_driver_sql(SIDE_ROWS)
    try:
        found = any(GLUED.search(text or "") or GLUED.search(tool_name or "")
                    for text, tool_name in rows)
    finally:
        rows.close()
    bind.exec_driver_sql("INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?)",
                         (KEY, "1" if found else "0"))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute(f"DELETE FROM state_meta WHERE key = '{KEY}'")
