"""Which triggers write to our derived indexes: ours by name and definition, or another program's.

A trigger of another name writing into one of our indexes is a second writer (usually an agent of
another release, docs/mixed-fleets.md): every write then indexes a row twice, or indexes what the
head layout leaves out. A trigger writing into any FTS5 table makes every write fail on a runtime
without FTS5. ``check``, ``doctor``, ``repair`` and adoption ask these questions here.
"""

from __future__ import annotations

import re

from sqlalchemy import Connection

from hermes_store.db import catalog, engine
from hermes_store.db import names as N
from hermes_store.db.derived import expected_objects

# Tables our triggers keep in step with ``messages``: a trigger of another name writing to one
# of them is a second writer (another program's, usually an agent of another release).
INDEX_TABLES = (N.WORD_INDEX, N.TRIGRAM_INDEX, N.CJK_INDEX, N.CJK_SIDE, N.CJK_PENDING,
                N.PART_TEXT)
_VIRTUAL = re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE\b.*?\bUSING\s+(\w+)",
                      re.IGNORECASE | re.DOTALL)
# Tables a trigger body writes to: INSERT INTO t, DELETE FROM t, UPDATE t, REPLACE INTO t.
_WRITES = re.compile(
    r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|REPLACE\s+INTO|DELETE\s+FROM|UPDATE(?:\s+OR\s+\w+)?)"
    r"\s+(?:main\s*\.\s*)?[\"`\[]?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def is_fts5(table_sql: str | None) -> bool:
    """Whether a table's ``CREATE`` statement makes an FTS5 virtual table."""
    found = _VIRTUAL.match(table_sql or "")
    return found is not None and found.group(1).lower() == engine.FTS5_MODULE.lower()


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def written_tables(trigger_sql: str) -> set[str]:
    """Lower-cased names of the tables a trigger's body writes to."""
    body = re.split(r"\bBEGIN\b", trigger_sql or "", maxsplit=1, flags=re.IGNORECASE)
    return {t.lower() for t in _WRITES.findall(body[1] if len(body) > 1 else "")}


def foreign_index_triggers(conn: Connection) -> list[str]:
    """Triggers writing to one of our indexes that are not the head layout's own (by name and
    definition): each makes every write index a row a second time, or what we leave out."""
    ours = {o.name: _normal(o.sql) for o in expected_objects() if o.type == "trigger"}
    found = []
    for name, sql in catalog.triggers(conn):
        if ours.get(name) == _normal(sql or ""):
            continue
        if written_tables(sql or "") & set(INDEX_TABLES):
            found.append(name)
    return sorted(found)


def fts5_writers(conn: Connection) -> list[str]:
    """Triggers writing to an FTS5 table: each makes a write fail on a runtime without FTS5."""
    fts5 = {n.lower() for n, sql in catalog.table_definitions(conn).items() if is_fts5(sql)}
    return sorted(name for name, sql in catalog.triggers(conn)
                  if written_tables(sql or "") & fts5)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote_name(name: str) -> str:
    """A schema object's name, double-quoted; anything but a plain identifier is refused."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"refusing a schema object with an odd name: {name!r}")
    return f'"{name}"'


def drop_triggers(conn: Connection, names: list[str]) -> None:
    for name in names:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quote_name(name)}")
