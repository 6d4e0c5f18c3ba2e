"""CJK bigram index maintenance (owned by the search work; see search.md §4).

``sync_messages(conn, ids)`` brings the derived bigram rows of the given messages up to date inside
the caller's transaction. Until the index exists (before its revision runs) it does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection


def sync_messages(conn: Connection, ids: Iterable[int]) -> None:
    """Derive and store the bigram text of these messages (no-op until the index exists)."""
    return None
