"""A store on Citus: ``upgrade`` distributes ``sessions`` and ``messages`` by lineage root, and
the library's operations run on the distributed tables (docs/scale-out.md#citus).

The Citus tests need a coordinator with workers; CI has none, so they run only when
``HERMES_STORE_TEST_CITUS_URL`` names a database on one (each test takes a fresh database
there). The reshaping itself runs on every PostgreSQL: it is checked on plain servers in a
transaction that is rolled back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url

from hermes_store import SessionDB
from hermes_store.db import distribution
from hermes_store.db import engine as engine_mod

CITUS_URL = os.environ.get("HERMES_STORE_TEST_CITUS_URL")
PKEY = """SELECT a.attname FROM pg_index AS i
JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY a.attname"""


def _columns(conn: Any, table: str) -> list[str]:
    return [r[0] for r in conn.exec_driver_sql(PKEY, (table,))]


# --------------------------------------------------------------------------- any PostgreSQL


def test_the_reshape_runs_on_a_plain_server_and_keys_both_tables_by_root(pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    with SessionDB(pg_store) as db:
        db.create_session("root", "cli")
        db.create_session("child", "cli", parent_session_id="root")
        db.append_message("child", "user", content="hello")
    with engine.connect() as conn:
        with conn.begin() as txn:
            for statement in distribution.statements(conn):
                if statement not in distribution.DISTRIBUTE:
                    conn.exec_driver_sql(statement)
            assert _columns(conn, "sessions") == ["id", "root_session_id"]
            assert _columns(conn, "messages") == ["id", "root_session_id"]
            rooted = conn.exec_driver_sql("SELECT root_session_id FROM messages").scalars().all()
            assert rooted == ["root"]
            txn.rollback()
        assert _columns(conn, "sessions") == ["id"]


def test_a_plain_server_is_not_distributed_and_its_messages_carry_no_root(pg_store: str) -> None:
    with SessionDB(pg_store) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", content="hello")
    with engine_mod.open_engine(pg_store).connect() as conn:
        assert not distribution.distributed(conn)
        assert distribution.distribute(conn) == []
        names = conn.exec_driver_sql(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'messages' AND table_schema = current_schema()").scalars().all()
    assert "root_session_id" not in names


# --------------------------------------------------------------------------- on Citus


def upgrade(url: str) -> str:
    done = subprocess.run([str(Path(sys.executable).parent / "hermes-store"), "--db", url, "upgrade"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def citus_store() -> Iterator[str]:
    """A fresh database on the Citus coordinator, the extension installed, brought to head by
    ``upgrade`` (which distributes it)."""
    if not CITUS_URL:
        pytest.skip("HERMES_STORE_TEST_CITUS_URL is not set: no Citus cluster (CI has none)")
    base = make_url(CITUS_URL)
    name = f"hs_citus_{uuid.uuid4().hex[:10]}"
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = base.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(base.set(drivername="postgresql", database=name)
                         .render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION citus")
    upgrade(url)
    yield url
    engine_mod.dispose_all()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_upgrade_distributes_sessions_and_messages_by_root(citus_store: str) -> None:
    with engine_mod.open_engine(citus_store).connect() as conn:
        placed = dict(conn.exec_driver_sql(
            "SELECT logicalrelid::text, column_to_column_name(logicalrelid, partkey) "
            "FROM pg_dist_partition WHERE partmethod = 'h'").all())
        assert distribution.distributed(conn)
    assert placed == {"sessions": "root_session_id", "messages": "root_session_id"}
    upgrade(citus_store)  # once distributed, a second upgrade has nothing to do
