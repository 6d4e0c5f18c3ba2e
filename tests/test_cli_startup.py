"""Reading commands do not load the migration machinery: Alembic is imported only to migrate
(the schema state comes from the scripts' text, db.schema_state). ``search``, ``list``,
``current`` and ``stats`` on a store file load no SQLAlchemy at all: they read through db.raw,
by the connection policy the engines use, and their session reads are the repo's statements
compiled once (repo.prepared_sql, run by repo.prepared_reads). Timing itself is
benchmarks/bench_startup.py's."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import make_session

_PROBE = """
import sys
from hermes_store.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    code = done.code
loaded = [m for m in ("alembic", "sqlalchemy", "sqlalchemy.orm") if m in sys.modules]
print("\\nLOADED", ",".join(loaded) or "-", code)
"""


def _loaded(db: Path, *args: str) -> tuple[set[str], object]:
    done = subprocess.run([sys.executable, "-c", _PROBE, "--db", str(db), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    _, names, code = done.stdout.splitlines()[-1].split()
    return set(names.split(",")) - {"-"}, (done.stdout + done.stderr, code)


@pytest.mark.parametrize("args", [["search", "hello"], ["list"], ["stats"], ["current"],
                                  ["show", "2026"]], ids=lambda a: a[0])
def test_a_reading_command_never_imports_alembic(head_db: Path, args: list[str]) -> None:
    make_session(head_db, "20260801_120000_aaaa11", texts=("hello there",))
    loaded, (output, code) = _loaded(head_db, *args)
    assert code == "0" and "alembic" not in loaded, output


@pytest.mark.parametrize("args", [["search", "hello"], ["search", "hello", "--limit", "1"],
                                  ["--json", "search", "hello", "--source", "cli"],
                                  ["list"], ["list", "--all", "--limit", "1"],
                                  ["--json", "list"], ["current"], ["--json", "current"],
                                  ["stats"], ["--json", "stats"]],
                         ids=lambda a: " ".join(a))
def test_reading_a_file_imports_no_sqlalchemy(head_db: Path, args: list[str]) -> None:
    make_session(head_db, "20260801_120000_aaaa11", texts=("hello there", "hello again"))
    loaded, (output, code) = _loaded(head_db, *args)
    assert code == "0" and not loaded, output


def test_the_prepared_session_reads_are_what_the_statements_compile_to() -> None:
    """Regenerate with ``python -m hermes_store.repo.prepared_build`` when this fails."""
    from hermes_store.repo import prepared_build, prepared_sql

    text = Path(prepared_sql.__file__).read_text()
    assert prepared_build.block() in text


def test_the_prepared_session_reads_give_the_repo_rows(head_db: Path) -> None:
    from hermes_store.db import raw
    from hermes_store.db.engine import open_engine, reading
    from hermes_store.repo import listing, prepared_reads

    root = make_session(head_db, "20260801_120000_aaaa11", end_reason="compression",
                        title="root", texts=("one",))
    tip = make_session(head_db, "20260801_130000_bbbb22", parent=root, age_days=0.5,
                       texts=("two",))
    alone = make_session(head_db, "20260801_140000_cccc33", ended=False, texts=())
    ids = [root, tip, alone, "no-such-session"]
    with reading(open_engine(head_db, readonly=True)) as conn:
        expected = [listing.session_with_activity(conn, sid) for sid in ids]
        through_engine = [prepared_reads.session_with_activity(conn, sid) for sid in ids]
    with raw.reading(head_db) as conn:
        through_stdlib = [prepared_reads.session_with_activity(conn, sid) for sid in ids]
    assert expected[0]["lineage_tip_id"] == tip
    assert through_engine == expected
    assert through_stdlib == expected


def _agent_layout(path: Path, hidden: str, prompt_of: str) -> None:
    """The agent's newer columns: a hidden session, and a prompt stored by hash."""
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE sessions ADD COLUMN hidden INTEGER DEFAULT 0")
        con.execute("ALTER TABLE sessions ADD COLUMN system_prompt_hash TEXT")
        con.execute("CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL)")
        con.execute("INSERT INTO system_prompts VALUES ('h1', 'be brief')")
        con.execute("UPDATE sessions SET hidden = 1 WHERE id = ?", (hidden,))
        con.execute("UPDATE sessions SET system_prompt = NULL, system_prompt_hash = 'h1' "
                    "WHERE id = ?", (prompt_of,))
    con.close()


@pytest.mark.parametrize("agent_columns", [False, True], ids=["ours", "agent-columns"])
def test_the_prepared_listing_gives_the_repo_rows(head_db: Path, agent_columns: bool) -> None:
    from hermes_store.db import raw
    from hermes_store.db.engine import open_engine, reading
    from hermes_store.repo import listing, prepared_reads
    from hermes_store.repo.filter_values import SessionFilter

    root = make_session(head_db, "20260801_120000_aaaa11", end_reason="compression",
                        title="root", texts=("one",), age_days=3)
    tip = make_session(head_db, "20260801_130000_bbbb22", parent=root, age_days=0.5,
                       texts=("two\nlines",))
    make_session(head_db, "20260801_140000_cccc33", ended=False, texts=(), pinned=True)
    make_session(head_db, "20260801_150000_dddd44", archived=True, age_days=2)
    hidden = make_session(head_db, "20260801_160000_eeee55", age_days=1.5)
    make_session(head_db, "20260801_170000_ffff66", parent=hidden, end_reason="delegate")
    if agent_columns:
        _agent_layout(head_db, hidden, prompt_of=tip)
    flt = SessionFilter()
    for show_all in (False, True):
        for limit in (2, 20):
            with reading(open_engine(head_db, readonly=True)) as conn:
                page = listing.list_matching(conn, flt, limit=limit, include_archived=show_all,
                                             include_children=show_all,
                                             include_hidden=show_all)
            with raw.reading(head_db) as conn:
                rows, more = prepared_reads.list_page(conn, limit=limit, show_all=show_all,
                                                      now=flt.now)
            assert (rows, more) == (page.rows, page.more), (show_all, limit)
    with raw.reading(head_db) as conn:
        rows, _ = prepared_reads.list_page(conn, limit=20, show_all=False, now=flt.now)
    assert rows[1]["id"] == tip and rows[1]["_lineage_root_id"] == root
    assert (hidden in [r["id"] for r in rows]) is not agent_columns
    assert rows[1]["system_prompt"] == ("be brief" if agent_columns else None)


def test_the_state_read_without_alembic_names_the_pending_revisions(legacy_db) -> None:
    from alembic.script import ScriptDirectory

    from hermes_store.db import migrate, revisions, schema_state

    path = legacy_db(11)
    migrate.upgrade(path, "0011_v11_inline_fts")
    st = schema_state.status(path)
    script = ScriptDirectory(revisions.script_location())
    assert st.state == "behind"
    assert st.pending == [s.revision for s in script.iterate_revisions("head", st.current)][::-1]
