"""Full-text search: the query language, the per-index statements, snippets."""
