"""Full-text search: the query language, the statements, running a search (``run``), snippets."""
