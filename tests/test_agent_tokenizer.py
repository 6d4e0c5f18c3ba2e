"""The agent's native CJK tokenizer beside us (docs/mixed-fleets.md#the-agents-cjk-tokenizer).

Where the agent's library is installed it keeps its own CJK index, whose triggers make every write
to ``messages`` fail on a connection that has not loaded ``cjk_unicode61``. These tests build a
stand-in library (tests/native/cjk_standin.c, unicode61 under the agent's name) with the
machine's C compiler and SQLite headers, and load it from Debian's ``/usr/bin/python3``, whose
sqlite3 can load extensions (the project's default Python cannot). Both are part of CI
(.ci/run installs libsqlite3-dev): a machine without them fails these tests, it does not skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sysconfig
import textwrap
from pathlib import Path

import pytest
from agent_today import build, cjk_sql
from cli_support import run

from hermes_store import SessionDB
from hermes_store.db import catalog
from hermes_store.db import engine as engine_mod
from hermes_store.errors import AgentTokenizerError

pytestmark = pytest.mark.sqlite_only

ROOT = Path(__file__).resolve().parent.parent
STANDIN = Path(__file__).resolve().parent / "native" / "cjk_standin.c"
LOADING_PYTHON = Path("/usr/bin/python3")


@pytest.fixture(scope="session")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in tokenizer, compiled for this machine's SQLite."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not Path("/usr/include/sqlite3ext.h").is_file():
        pytest.fail("a C compiler and libsqlite3-dev's headers are needed "
                    "(apt-get install -y gcc libsqlite3-dev)")
    target = tmp_path_factory.mktemp("agentlib") / "libfts5_cjk.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(STANDIN)],
                   check=True)
    return target


@pytest.fixture(scope="session")
def loading_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of Debian's python3 (its sqlite3 loads extensions) that imports this worktree and
    the test run's own dependencies."""
    probe = [str(LOADING_PYTHON), "-c",
             "import sqlite3; assert hasattr(sqlite3.connect(':memory:'), 'enable_load_extension')"]
    if not LOADING_PYTHON.is_file() or subprocess.run(probe, check=False).returncode != 0:
        pytest.fail(f"{LOADING_PYTHON} with an sqlite3 that can load extensions is needed")
    venv = tmp_path_factory.mktemp("loadvenv") / "venv"
    subprocess.run([str(LOADING_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", purelib], check=True, capture_output=True,
                          text=True)
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site.stdout.strip(), "hermes_store_dev.pth").write_text(
        "\n".join([str(ROOT), *sorted(ours)]) + "\n")
    return python


def _in_loading_python(python: Path, library: Path, script: str) -> str:
    env = {**os.environ, "HERMES_FTS5_CJK_SO": str(library)}
    done = subprocess.run([str(python), "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _add_agent_cjk(python: Path, library: Path, path: Path) -> None:
    """The agent's reopen where its library loads: its CJK objects, then 'rebuild'."""
    _in_loading_python(python, library, f"""
        import os, sqlite3
        con = sqlite3.connect({str(path)!r}, isolation_level=None)
        con.enable_load_extension(True)
        con.load_extension(os.environ["HERMES_FTS5_CJK_SO"])
        con.executescript({cjk_sql()!r})
        con.execute("INSERT INTO messages_fts_cjk (messages_fts_cjk) VALUES ('rebuild')")
        con.close()
    """)


@pytest.fixture
def shared(tmp_path: Path, library: Path, loading_python: Path) -> Path:
    """A schema-31 file of the agent with its native CJK objects, adopted by us."""
    path = tmp_path / "state.db"
    build(path, 31)
    _add_agent_cjk(loading_python, library, path)
    assert run("--db", str(path), "upgrade").exit_code == 0
    engine_mod.dispose_all()
    return path


def _objects(path: Path) -> set[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return {(o.type, o.name) for o in catalog.objects(con)}


AGENT_CJK = {("table", "messages_fts_cjk"), ("view", "messages_fts_cjk_src"),
             ("trigger", "messages_fts_cjk_insert"), ("trigger", "messages_fts_cjk_delete"),
             ("trigger", "messages_fts_cjk_update")}


def test_adoption_keeps_the_agents_cjk_objects(shared: Path) -> None:
    assert _objects(shared) >= AGENT_CJK
    assert ("table", "hs_fts_cjk") in _objects(shared)


def test_a_python_that_loads_the_library_writes_beside_the_agent(
        shared: Path, library: Path, loading_python: Path) -> None:
    out = _in_loading_python(loading_python, library, f"""
        import os, sqlite3, time
        from hermes_store import SessionDB
        path = {str(shared)!r}
        con = sqlite3.connect(path, isolation_level=None)  # the agent's own write
        con.enable_load_extension(True)
        con.load_extension(os.environ["HERMES_FTS5_CJK_SO"])
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('cli-1', 'user', 'agentword 漢字です', ?)", (time.time(),))
        con.close()
        with SessionDB(path) as db:
            db.append_message("cli-1", "user", "ourword 通信 written through hermes_store")
            for term in ("agentword", "ourword", "漢字", "通信"):
                print(term, [h["session_id"] for h in db.search_messages(term)])
        con = sqlite3.connect(path)
        con.enable_load_extension(True)
        con.load_extension(os.environ["HERMES_FTS5_CJK_SO"])
        con.execute("INSERT INTO messages_fts_cjk (messages_fts_cjk) VALUES ('integrity-check')")
        print("agent rows", con.execute("SELECT count(*) FROM messages_fts_cjk "
                                        "WHERE messages_fts_cjk MATCH 'ourword'").fetchone()[0])
    """)
    assert out.splitlines() == ["agentword ['cli-1']", "ourword ['cli-1']", "漢字 ['cli-1']",
                                "通信 ['cli-1']", "agent rows 1"]


def test_without_the_library_a_write_is_refused_with_both_ways_out(
        shared: Path, library: Path, monkeypatch) -> None:
    # The project's default Python cannot load extensions: the library is there and still not
    # loaded. On a Python that can, the library is taken away instead.
    can_load = hasattr(sqlite3.connect(":memory:"), "enable_load_extension")
    monkeypatch.setenv("HERMES_FTS5_CJK_SO", str(library.with_name("absent.so") if can_load
                                                 else library))
    engine_mod.dispose_all()
    with SessionDB(shared) as db:
        before = len(db.get_messages("cli-1"))
        with pytest.raises(AgentTokenizerError) as info:
            db.append_message("cli-1", "user", "refused before it was written")
        assert isinstance(info.value, sqlite3.OperationalError)
        text = str(info.value)
        assert "cjk_unicode61" in text and "load extensions" in text
        assert ("is not at" if can_load else "cannot load extensions") in text
        assert "hermes-store repair --drop-agent-cjk" in text
        assert len(db.get_messages("cli-1")) == before  # nothing written
        assert [h["session_id"] for h in db.search_messages("kubernetes")] == ["cli-1"]
        assert {h["session_id"] for h in db.search_messages("日志")} == {"tg-1"}


def test_repair_reports_it_and_drop_agent_cjk_removes_only_the_agents_objects(
        shared: Path) -> None:
    check = run("--db", str(shared), "repair", "--check-only")
    assert check.exit_code == 7 and "--drop-agent-cjk" in check.stdout
    doctor = run("--db", str(shared), "doctor")
    assert "agent_cjk" in doctor.stdout and "--drop-agent-cjk" in doctor.stdout
    ours = {o for o in _objects(shared) if o[1].startswith("hs_")}
    rows = sqlite3.connect(shared).execute("SELECT count(*) FROM messages").fetchone()[0]

    fixed = run("--db", str(shared), "repair", "--drop-agent-cjk")
    assert fixed.exit_code == 0, fixed.stdout
    assert not AGENT_CJK & _objects(shared)
    assert {o for o in _objects(shared) if o[1].startswith("hs_")} == ours
    engine_mod.dispose_all()
    with SessionDB(shared) as db:
        db.append_message("cli-1", "user", "written after the drop 通信")
        assert len(db.search_messages("通信")) == 1
    after = sqlite3.connect(shared).execute("SELECT count(*) FROM messages").fetchone()[0]
    assert after == rows + 1


def test_a_plain_repair_never_drops_the_agents_objects(shared: Path) -> None:
    run("--db", str(shared), "repair")
    assert _objects(shared) >= AGENT_CJK


def test_the_library_is_found_where_the_agent_keeps_it(tmp_path: Path, monkeypatch) -> None:
    from hermes_store.db import sqlite_driver

    monkeypatch.delenv("HERMES_FTS5_CJK_SO", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    assert sqlite_driver.agent_tokenizer_library() == tmp_path / "lib" / "libfts5_cjk.so"
    monkeypatch.setenv("HERMES_FTS5_CJK_SO", str(tmp_path / "elsewhere.so"))
    assert sqlite_driver.agent_tokenizer_library() == tmp_path / "elsewhere.so"
