"""Reading commands do not load the migration machinery: Alembic is imported only to migrate
(the schema state comes from the scripts' text, db.schema_state). Timing itself is
benchmarks/bench_startup.py's."""

from __future__ import annotations

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
print("\\nALEMBIC" if "alembic" in sys.modules else "\\nNO-ALEMBIC", code)
"""


@pytest.mark.parametrize("args", [["search", "hello"], ["list"], ["stats"], ["current"],
                                  ["show", "2026"]], ids=lambda a: a[0])
def test_a_reading_command_never_imports_alembic(head_db: Path, args: list[str]) -> None:
    make_session(head_db, "20260801_120000_aaaa11", texts=("hello there",))
    done = subprocess.run([sys.executable, "-c", _PROBE, "--db", str(head_db), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.splitlines()[-1] == "NO-ALEMBIC 0", done.stdout + done.stderr


def test_the_state_read_without_alembic_names_the_pending_revisions(legacy_db) -> None:
    from alembic.script import ScriptDirectory

    from hermes_store.db import migrate, revisions, schema_state

    path = legacy_db(11)
    migrate.upgrade(path, "0011_v11_inline_fts")
    st = schema_state.status(path)
    script = ScriptDirectory(revisions.script_location())
    assert st.state == "behind"
    assert st.pending == [s.revision for s in script.iterate_revisions("head", st.current)][::-1]
