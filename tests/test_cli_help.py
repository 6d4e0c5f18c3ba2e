"""Every command documents itself with an example; --version names the schema head."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from hermes_store.cli import main
from hermes_store.cli.app import COMMANDS, HIDDEN_COMMANDS
from hermes_store.db import migrate
from hermes_store.version import __version__

EVERY_COMMAND = sorted([*COMMANDS, *HIDDEN_COMMANDS])


@pytest.mark.parametrize("name", EVERY_COMMAND)
def test_every_command_has_help_with_an_example(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    assert "hermes-store" in result.output.split("Example:", 1)[1]


def test_the_group_help_has_an_example() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output


def test_version_prints_package_version_and_head_revision() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output
    assert migrate.head_revision() in result.output


@pytest.mark.parametrize("name", EVERY_COMMAND)
def test_every_command_takes_the_output_options_after_its_name(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert "--json" in result.output and "--quiet" in result.output


def test_json_and_quiet_after_the_command_work_like_before_it(head_db) -> None:
    after = CliRunner().invoke(main, ["--db", str(head_db), "current", "--json", "-q"])
    before = CliRunner().invoke(main, ["--db", str(head_db), "--json", "-q", "current"])
    assert after.exit_code == before.exit_code == 0
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert after.stderr == ""


# --------------------------------------------------------------------------- lazy loading


def test_the_group_knows_every_command_without_loading_it() -> None:
    ctx = click.Context(main)
    for name in EVERY_COMMAND:
        command = main.get_command(ctx, name)
        assert command is not None and command.name in (name, "compact"), name
        if name in COMMANDS:
            assert COMMANDS[name][1] == command.get_short_help_str(limit=300), name
    assert sorted(main.commands) == EVERY_COMMAND  # nothing registered outside the table
    assert main.list_commands(ctx) == sorted(COMMANDS)


def test_constants_kept_beside_the_cli_match_the_library() -> None:
    from hermes_store.cli import copy, render, repair, transfer
    from hermes_store.ops.copy import DEFAULT_BATCH
    from hermes_store.ops.recover import DEFAULT_CHUNK
    from hermes_store.repo import lineage
    from hermes_store.transfer.export import FORMATS

    assert transfer.EXPORT_FORMATS == FORMATS
    assert repair.RECOVER_CHUNK == DEFAULT_CHUNK
    assert copy.COPY_BATCH == DEFAULT_BATCH
    assert (render.SANE_MIN_TS, render.SANE_FUTURE_S) == (lineage.SANE_MIN_TS,
                                                          lineage.SANE_FUTURE_S)


_LOADED = """
import contextlib
import sys
from hermes_store.cli import run
sys.argv = ["hermes-store", *sys.argv[1:]]
with contextlib.suppress(SystemExit):
    run()
print(sorted(m for m in ("sqlalchemy", "alembic", "rich") if m in sys.modules),
      file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["list", "--help"],
                                  ["search", "--help"], ["export", "--help"],
                                  ["copy", "--help"]])
def test_version_and_help_load_no_database_library(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout  # it answered
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_shell_completion_loads_no_database_library() -> None:
    env = {**os.environ, "_HERMES_STORE_COMPLETE": "bash_complete",
           "COMP_WORDS": "hermes-store list --li", "COMP_CWORD": "2"}
    proc = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True,
                          env=env, timeout=60)
    assert "--limit" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]"


_INTERRUPTED = """
import sys
from importlib import metadata

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            raise KeyboardInterrupt  # what a Ctrl-C during start-up does
        return None

sys.meta_path.insert(0, CtrlC())
(script,) = [e for e in metadata.entry_points(group="console_scripts") if e.name == "hermes-store"]
sys.argv = ["hermes-store", "--version"]
script.load()()
"""


def test_ctrl_c_during_start_up_exits_130_without_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "interrupted" in proc.stderr
