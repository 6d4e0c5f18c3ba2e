"""hermes_store.db.derived is the live definition of the head layout: it must not drift from what
the revisions create, or ``repair`` would put back something else than ``upgrade`` built."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from hermes_store.db import derived as layout
from hermes_store.db.engine import open_engine, run_write

# What counts as derived: every view, every FTS5 table, every trigger on the tables search
# derives from, and every other object under our prefix (side tables, their triggers), FTS5's
# shadow tables aside.
_DERIVED = """
SELECT type, name FROM sqlite_master
WHERE type = 'view'
   OR (type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%')
   OR (type = 'trigger' AND tbl_name IN ('messages', 'sessions'))
   OR (name LIKE 'hs\\_%' ESCAPE '\\' AND NOT (type = 'table' AND sql LIKE 'CREATE TABLE ''%'))
"""


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def _schema(path: Path, query: str, *params: str) -> list[tuple[str, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(query, params).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("obj", layout.expected_objects(), ids=lambda o: o.name)
def test_each_object_is_created_by_the_revisions_with_the_same_sql(
        head_db: Path, obj: layout.LayoutObject) -> None:
    rows = _schema(head_db, "SELECT type, sql FROM sqlite_master WHERE name = ?", obj.name)
    assert rows, f"{obj.name} is in layout.py but a fresh upgrade does not create it"
    (kind, sql), = rows
    assert kind == obj.type
    assert _normal(sql) == _normal(obj.sql)


def test_the_derived_objects_of_a_fresh_store_are_exactly_the_layout(head_db: Path) -> None:
    derived = {(t, n) for t, n in _schema(head_db, _DERIVED)}
    assert derived == {(o.type, o.name) for o in layout.expected_objects()}


def test_a_fresh_store_misses_nothing_and_recreating_changes_nothing(head_db: Path) -> None:
    before = _schema(head_db, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
    engine = open_engine(head_db)
    assert run_write(engine, layout.missing_objects) == []
    assert run_write(engine, layout.recreate_missing) == []
    assert _schema(head_db, "SELECT type, name, sql FROM sqlite_master ORDER BY name") == before


def test_dropped_objects_come_back_with_the_head_definition(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    with con:
        con.execute("DROP TABLE hs_fts")
        con.execute("DROP TRIGGER hs_fts_ai")
        con.execute("DROP VIEW hs_search_scope")
    con.close()
    engine = open_engine(head_db)
    assert run_write(engine, layout.missing_objects) == [
        "hs_search_scope", "hs_fts", "hs_fts_ai"]
    assert run_write(engine, layout.recreate_missing) == [
        "hs_search_scope", "hs_fts", "hs_fts_ai"]
    assert run_write(engine, layout.missing_objects) == []
