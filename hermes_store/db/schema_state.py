"""Where a store's schema stands (``status``), read without loading Alembic.

Every reading command asks this before it reads, so it must cost a query, not an import of the
migration machinery: the head and the chain of revisions come from the scripts' text
(:mod:`hermes_store.db.revisions`). The states are described in :mod:`hermes_store.db.migrate`,
which re-exports these names and is imported only to migrate.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hermes_store.db import catalog, revisions
from hermes_store.paths import StoreLocation, resolve_location

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.engine import URL
    from typing_extensions import TypeIs

    Target = str | os.PathLike[str] | URL | StoreLocation | Engine | None


@dataclass
class SchemaStatus:
    state: str
    current: str | None
    head: str
    pending: list[str] = field(default_factory=list)
    legacy_version: int | None = None

    @property
    def at_head(self) -> bool:
        return self.state == "up-to-date"

    def describe(self) -> str:
        if self.state == "behind":
            return f"behind ({len(self.pending)} pending: {', '.join(self.pending)})"
        if self.state == "legacy":
            if self.legacy_version is None:
                return "legacy (Hermes schema_version empty)"
            return f"legacy (Hermes schema_version={self.legacy_version})"
        if self.state == "ahead":
            return f"ahead (unknown revision {self.current})"
        return self.state


def status_of(conn: Connection, location: str | None = None) -> SchemaStatus:
    head = revisions.head(location)
    tables = catalog.relations(conn)
    if "alembic_version" in tables:
        current = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        if current == head:
            return SchemaStatus("up-to-date", current, head)
        pending = revisions.pending(current, location)
        if pending is None:
            return SchemaStatus("ahead", current, head)
        return SchemaStatus("behind", current, head, pending)
    if "schema_version" in tables:
        version = conn.exec_driver_sql("SELECT MAX(version) FROM schema_version").scalar()
        return SchemaStatus("legacy", None, head, legacy_version=version)
    if tables - {"sqlite_sequence"}:
        return SchemaStatus("unknown", None, head)
    return SchemaStatus("empty", None, head)


def status(target: Target = None) -> SchemaStatus:
    """Where the store stands; reads only (a missing file is reported, not created). A file
    no engine of this process holds is read on the standard library (``db.raw``): the reading
    commands ask this first, and it must not be what loads SQLAlchemy."""
    if _is_engine(target):
        engine = target
    else:
        location = resolve_location(target)
        if location.path is not None and not location.path.exists():
            return SchemaStatus("missing", None, revisions.head())
        from hermes_store.db import raw

        if location.path is not None and not raw.held(location.path):
            with raw.reading(location.path) as conn:
                return status_of(conn)
        from hermes_store.db.engine import open_engine

        engine = open_engine(location, readonly=True)
    from hermes_store.db.engine import reading

    with reading(engine) as conn:
        return status_of(conn)


def _is_engine(target: object) -> TypeIs[Engine]:
    sa = sys.modules.get("sqlalchemy")  # not loaded: nothing can be an Engine
    return sa is not None and isinstance(target, sa.Engine)


def current(target: Target = None) -> str | None:
    return status(target).current
