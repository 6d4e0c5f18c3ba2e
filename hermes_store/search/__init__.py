"""Full-text search: the query language, running a search (``statements``), SQLite's SQL
(``sqlite``), snippets."""
