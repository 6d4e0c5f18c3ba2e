"""A store on Citus: ``upgrade`` distributes ``sessions`` and ``messages`` by lineage root, and
the library's operations run on the distributed tables (docs/scale-out.md#distributing-citus-by-lineage-root).

The Citus tests need a coordinator with workers; CI has none, so they run only when
``HERMES_STORE_TEST_CITUS_URL`` names a database on one (each test takes a fresh database
there). The reshaping itself runs on every PostgreSQL: it is checked on plain servers in a
transaction that is rolled back.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url, select
from sqlalchemy.dialects import postgresql

from hermes_store import SessionDB
from hermes_store.db import distribution
from hermes_store.db import engine as engine_mod
from hermes_store.repo import lineage
from hermes_store.search import postgres as search_postgres

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
    """A fresh database on the Citus cluster: created on the coordinator and on each worker
    that ``HERMES_STORE_TEST_CITUS_URL``'s database lists, the extension installed on each,
    the workers added; then brought to head by ``hermes-store upgrade`` (which distributes)."""
    if not CITUS_URL:
        pytest.skip("HERMES_STORE_TEST_CITUS_URL is not set: no Citus cluster (CI has none)")
    base = make_url(CITUS_URL)
    name = f"hs_citus_{uuid.uuid4().hex[:10]}"

    def dsn(port: int | None, database: str | None) -> str:
        url = base.set(drivername="postgresql", database=database)
        url = url.set(port=port) if port is not None else url
        return url.render_as_string(hide_password=False)

    with psycopg.connect(dsn(None, base.database), autocommit=True) as conn:
        workers = conn.execute("SELECT nodename, nodeport FROM pg_dist_node "
                               "WHERE groupid <> 0 AND noderole = 'primary'").fetchall()
    assert workers, f"{CITUS_URL} has no workers (citus_add_node)"
    nodes = [None, *(port for _, port in workers)]
    for port in nodes:
        with psycopg.connect(dsn(port, base.database), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(dsn(port, name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION citus")
    with psycopg.connect(dsn(None, name), autocommit=True) as conn:
        conn.execute("SELECT citus_set_coordinator_host(%s, %s)",
                     (base.host or "127.0.0.1", base.port or 5432))
        for host, port in workers:
            conn.execute("SELECT citus_add_node(%s, %s)", (host, port))
    url = base.set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    yield url
    engine_mod.dispose_all()
    for port in nodes:
        with psycopg.connect(dsn(port, base.database), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_upgrade_distributes_sessions_and_messages_by_root(citus_store: str) -> None:
    with engine_mod.open_engine(citus_store).connect() as conn:
        placed = dict(conn.exec_driver_sql(
            "SELECT logicalrelid::text, column_to_column_name(logicalrelid, partkey) "
            "FROM pg_dist_partition WHERE partmethod = 'h'").all())
        assert distribution.distributed(conn)
    assert placed == {"sessions": "root_session_id", "messages": "root_session_id"}
    upgrade(citus_store)  # once distributed, a second upgrade has nothing to do
    checked = _cli("--db", citus_store, "check")  # the reshape is not drift
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_append_to_an_unknown_session_on_citus_is_the_stores_integrity_error(
        citus_store: str) -> None:
    with SessionDB(citus_store) as db:
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            db.append_message("nobody", "user", content="lost")
        assert db.message_count() == 0


def scenario(location: str) -> dict[str, Any]:
    """The library's operations on one store; what each answered, by ids and texts (never
    timestamps), so a distributed store can be compared with a single server."""
    out: dict[str, Any] = {}
    with SessionDB(location) as db:
        # A compressed lineage a -> b -> c, a delegate d under b, an unrelated e.
        db.create_session("a", "cli", model="m")
        db.append_message("a", "user", content="the walrus sings in Paris")
        db.append_message("a", "assistant", content="東京の天気は晴れです")
        db.end_session("a", "compression")
        db.create_session("b", "cli", parent_session_id="a")
        db.append_message("b", "user", content="continue about walruses")
        db.end_session("b", "compression")
        db.create_session("c", "cli", parent_session_id="b")
        db.append_message("c", "tool", content="walrus tool output", tool_name="shell")
        db.create_session("d", "delegate", parent_session_id="b")
        db.append_message("d", "user", content="delegated walrus errand")
        db.create_session("e", "telegram")
        db.append_message("e", "user", content="unrelated penguin chat")
        out["get"] = {sid: (s["id"], s["source"], s["parent_session_id"], s["message_count"])
                      for sid in "abcde" if (s := db.get_session(sid))}
        out["messages"] = [m["content"] for m in db.get_messages("a")]
        out["conversation"] = [m["content"] for m in
                               db.get_messages_as_conversation("c", include_ancestors=True)]
        out["titles"] = [db.set_session_title("a", "Walrus talk"), db.get_session_title("c"),
                         db.get_session_by_title("Walrus talk")["id"],
                         db.get_next_title_in_lineage("Walrus talk")]
        out["tip"] = [db.get_lineage_tip("a"), db.get_compression_tip("a")]
        out["lineage"] = db.get_compression_lineage("c")
        out["export_lineage"] = [s["id"] for s in db.export_session_lineage("c")["segments"]]
        out["search"] = {
            f"{query} {kw}": sorted(h["session_id"] for h in db.search_messages(query, **kw))
            for query, kw in [("walrus", {}), ("walrus*", {}), ('"walrus sings"', {}),
                              ("天気", {}), ("walrus", {"role_filter": ["tool"]}),
                              ("walrus", {"source_filter": ["delegate"]}),
                              ("walrus", {"include_inactive": True}),
                              ("walrus -penguin", {"syntax": "exclusions"})]}
        out["search_sessions"] = sorted(s["id"] for s in db.search_sessions(limit=50))
        out["by_id"] = sorted(s["id"] for s in db.search_sessions_by_id("a"))
        out["listing"] = [s["id"] for s in db.list_sessions_rich(limit=50)]
        out["listing_all"] = sorted(s["id"] for s in db.list_sessions_rich(
            limit=50, include_children=True, project_compression_tips=False))
        out["listing_search"] = [s["id"] for s in db.list_sessions_rich(search_query="walrus")]
        out["count"] = [db.session_count(), db.message_count()]
        db.end_session("e", "user_exit")
        out["prune_candidates"] = sorted(s["id"] for s in db.list_prune_candidates(
            older_than_days=0))
        out["pruned"] = db.prune_sessions(older_than_days=0, source="telegram")
        out["pin_archive"] = [db.pin_session("a"), db.archive_session("c"),
                              db.get_session("c")["archived"]]
        out["deleted"] = [db.delete_session("d"), db.get_session("d")]
        out["after"] = sorted(s["id"] for s in db.list_sessions_rich(
            limit=50, include_children=True, project_compression_tips=False))
    return out


def test_the_library_answers_on_citus_what_it_answers_on_one_server(
        citus_store: str, pg_store: str) -> None:
    assert scenario(citus_store) == scenario(pg_store)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "hermes-store"), *argv],
                          capture_output=True, text=True, check=False)


def test_copy_moves_a_store_onto_citus_and_back_verified(citus_store: str,
                                                         tmp_path: Path) -> None:
    source, back = str(tmp_path / "source.db"), str(tmp_path / "back.db")
    with SessionDB(source) as db:
        db.create_session("a", "cli")
        db.append_message("a", "user", content="the walrus sings")
        db.end_session("a", "compression")
        db.create_session("b", "cli", parent_session_id="a")
        db.append_message("b", "assistant", content="東京の天気")
    into = _cli("--db", source, "copy", "--to", citus_store)
    assert into.returncode == 0, into.stdout + into.stderr
    with SessionDB(citus_store) as db:
        assert [m["content"] for m in db.get_messages_as_conversation(
            "b", include_ancestors=True)] == ["the walrus sings", "東京の天気"]
        assert [h["session_id"] for h in db.search_messages("walrus")] == ["a"]
        db.append_message("b", "user", content="after the move")
    out = _cli("--db", citus_store, "copy", "--to", back)
    assert out.returncode == 0, out.stdout + out.stderr
    with SessionDB(back) as db:
        assert [m["content"] for m in db.get_messages("b")] == ["東京の天気", "after the move"]
        assert db.get_session("b")["parent_session_id"] == "a"


def test_messages_correlate_by_root_only_in_a_distributed_stores_statements() -> None:
    plain, spread = postgresql.dialect(), postgresql.dialect()
    spread.hermes_distributed = True
    newest = select(lineage.newest_message_at(lineage.sessions.c.id, 0.0,
                                              lineage.sessions.c.root_session_id))
    assert "root_session_id" not in str(newest.compile(dialect=plain))
    assert "messages.root_session_id = sessions.root_session_id" in str(
        newest.compile(dialect=spread))
    page = search_postgres.rooted(search_postgres._PAGE)
    assert page.count("root_session_id = m.root_session_id") == 3
