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
