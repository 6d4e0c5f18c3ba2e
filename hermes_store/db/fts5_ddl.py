"""What an FTS5 table's ``CREATE VIRTUAL TABLE`` statement says, read from its text.

Kept apart from :mod:`hermes_store.db.catalog`, which finds the statements: this module only
parses one it is given, and :mod:`catalog` re-exports it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_CONTENT_OPTION = re.compile(r"\bcontent\s*=\s*'([^']*)'", re.IGNORECASE)
_ROWID_OPTION = re.compile(r"\bcontent_rowid\s*=\s*'([^']*)'", re.IGNORECASE)
_TOKENIZE_OPTION = re.compile(r"\btokenize\s*=\s*'([^']*)'", re.IGNORECASE)


class Fts5Options(NamedTuple):
    """What an FTS5 table's ``CREATE`` statement says about where its text comes from."""

    content: str | None  # the external content table or view; None when it stores its own
    content_rowid: str
    tokenize: str | None


def fts5_options(sql: str) -> Fts5Options:
    content, rowid = _CONTENT_OPTION.search(sql), _ROWID_OPTION.search(sql)
    tokenize = _TOKENIZE_OPTION.search(sql)
    return Fts5Options(content.group(1) or None if content else None,
                       rowid.group(1) if rowid else "rowid",
                       tokenize.group(1) if tokenize else None)
