"""Full-text search: the query language, running a search (``statements``), the shape both
dialects share (``shape``: statements, filters, page columns, the hit a search returns), SQLite's
SQL (``sqlite``), PostgreSQL's (``postgres``), snippets."""

from hermes_store.search.shape import ContextMessage, SearchHit

__all__ = ["ContextMessage", "SearchHit"]
