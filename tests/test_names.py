"""Names of our own: every derived object of ours is ``hs_`` + a noun, and none is a name of the
agent's schemas 1-31 as docs/mixed-fleets.md lists them (the agent keeps whatever holds one of
its names, and drops its own trigger names on its recovery path)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from hermes_store.db import catalog, derived, names

DOC = Path(__file__).resolve().parent.parent / "docs" / "mixed-fleets.md"
SHADOWS = catalog.FTS_SHADOW_SUFFIXES


def agent_names() -> set[str]:
    text = DOC.read_text()
    section = text.split("### The agent's names (schemas 1–31)", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section))
    indexes = {n for n in listed if n.startswith("messages_fts") and not n.endswith("_src")
               and n.count("_") <= 3}
    return listed | {i + s for i in indexes for s in SHADOWS}


def our_names() -> set[str]:
    found = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
    found |= {v for k, v in vars(names).items() if k.isupper() and isinstance(v, tuple)
              for v in v}
    found |= {o.name for o in derived.OBJECTS}
    found |= {i + s for i in names.FTS_INDEXES + names.RETIRED_FTS_INDEXES for s in SHADOWS}
    return found - {names.PREFIX}


def test_the_doc_lists_the_agents_search_objects_and_keys() -> None:
    listed = agent_names()
    assert {"messages_fts", "messages_fts_insert", "messages_fts_cjk_src", "fts_stale",
            "fts_rebuild_high_water", "messages_fts_trigram_data"} <= listed
    assert set(catalog.AGENT_SEARCH_OBJECTS) <= listed


def test_no_name_of_ours_is_a_name_of_the_agent() -> None:
    assert our_names() & agent_names() == set()


def test_every_derived_name_of_ours_follows_the_one_rule() -> None:
    assert all(names.is_ours(n) for n in our_names())


def test_a_fresh_store_derives_nothing_under_an_agent_name(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    try:
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        keys = {r[0] for r in con.execute("SELECT key FROM state_meta")}
    finally:
        con.close()
    ours = {n for n in present if names.is_ours(n)}
    assert ours and not (present - ours) & {n for n in agent_names() if "fts" in n}
    assert not keys & agent_names()


# --------------------------------------------------------------------------- revision 0022

PARTS = '\x00json:[{"type": "text", "text": "partword 漢字"}, {"type": "image_url"}]'


def _store_at_0021(path: Path, rows: int) -> None:
    from hermes_store.db import migrate

    migrate.upgrade(path, "0021_pg_load_tuning")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
    con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('s', 'user', ?, ?)",
                    [(f"rowword {n} 通信" if n % 2 else PARTS, float(n)) for n in range(rows)])
    con.close()


def _search(path: Path, term: str) -> int:
    from hermes_store import SessionDB

    with SessionDB(path) as db:
        return len(db.search_messages(term, limit=100_000))


def _names_of(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()


def test_a_small_store_moves_to_our_names_and_keeps_its_bigram_rows(store_path: Path) -> None:
    from hermes_store.db import engine, migrate
    from hermes_store.ops import storage
    from hermes_store.repo import bigrams

    _store_at_0021(store_path, 40)
    engine.run_write(engine.open_engine(store_path), lambda c: bigrams.catch_up(c, 1000))
    con = sqlite3.connect(store_path)
    side = con.execute("SELECT id, text, calls FROM messages_cjk ORDER BY id").fetchall()
    con.close()
    engine.dispose_all()
    assert migrate.upgrade(store_path).at_head
    present = _names_of(store_path)
    assert not {n for n in present if n.startswith(("messages_fts", "messages_cjk"))}
    con = sqlite3.connect(store_path)
    assert con.execute("SELECT id, text, calls FROM hs_cjk ORDER BY id").fetchall() == side
    con.close()
    with engine.reading(engine.open_engine(store_path)) as conn:
        assert storage.integrity_problems(conn) == {}
    assert _search(store_path, "rowword") == 20 and _search(store_path, "partword") == 20
    assert _search(store_path, "漢字") == 20 and _search(store_path, "通信") == 20


def test_a_large_store_moves_through_the_resumable_backfill_window(store_path: Path) -> None:
    from hermes_store.db import engine, migrate
    from hermes_store.ops import storage

    _store_at_0021(store_path, 5002)
    assert migrate.upgrade(store_path).at_head
    with engine.reading(engine.open_engine(store_path)) as conn:
        assert storage.backfill_window(conn) == (0, 5002)
    assert _search(store_path, "rowword") == 2501 and _search(store_path, "partword") == 2501
    storage.optimize_storage(store_path, vacuum=False)
    with engine.reading(engine.open_engine(store_path)) as conn:
        assert storage.backfill_window(conn) is None
        assert storage.integrity_problems(conn) == {}
    assert _search(store_path, "rowword") == 2501 and _search(store_path, "partword") == 2501
