"""Repositories: Core/ORM statements over a caller-owned Connection or Session."""
