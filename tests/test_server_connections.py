"""Closing a PostgreSQL store gives its server connections back: a process that opens and
closes one store per tenant (or per test) must never run the server out of connections."""

from __future__ import annotations

import psycopg
from sqlalchemy.engine import make_url

from hermes_store import SessionDB

STORES = 300
# The pool may keep a few connections while a store is open; what must not happen is one more
# left behind per store opened and closed.
SLACK = 3


def _connections(admin: psycopg.Connection, database: str) -> int:
    row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                        (database,)).fetchone()
    return int(row[0]) if row else 0


def _tenant_url(url: str, n: int) -> str:
    # Each URL is a store of its own to the library (one engine, one pool), as one database
    # per tenant would be, without creating hundreds of databases.
    return make_url(url).update_query_dict({"application_name": f"hermes-tenant-{n}"}) \
        .render_as_string(hide_password=False)


def test_opening_and_closing_many_stores_leaves_no_connection_behind(pg_store: str) -> None:
    database = make_url(pg_store).database
    admin_url = make_url(pg_store).set(database="postgres")
    with psycopg.connect(admin_url.render_as_string(hide_password=False).replace(
            "postgresql+psycopg://", "postgresql://"), autocommit=True) as admin:
        baseline = _connections(admin, database)
        for n in range(STORES):
            db = SessionDB(_tenant_url(pg_store, n))
            db.create_session(f"s{n}", "cli")
            db.close()
            held = _connections(admin, database)
            assert held <= baseline + SLACK, f"{held - baseline} connections left after {n + 1}"
        with SessionDB(pg_store) as db:
            assert db.session_count() == STORES


def test_a_store_stays_usable_while_another_on_the_same_url_closes(pg_store: str) -> None:
    first, second = SessionDB(pg_store), SessionDB(pg_store)
    first.create_session("a", "cli")
    second.close()
    first.append_message("a", "user", "still here")
    assert first.get_session("a")["message_count"] == 1
    first.close()
    with SessionDB(pg_store) as again:
        assert again.message_count("a") == 1
