"""Every command documents itself with an example; --version names the schema head."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hermes_store.cli import main
from hermes_store.db import migrate
from hermes_store.version import __version__


@pytest.mark.parametrize("name", sorted(main.commands))
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


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_takes_the_output_options_after_its_name(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert "--json" in result.output and "--quiet" in result.output


def test_json_and_quiet_after_the_command_work_like_before_it(head_db) -> None:
    after = CliRunner().invoke(main, ["--db", str(head_db), "current", "--json", "-q"])
    before = CliRunner().invoke(main, ["--db", str(head_db), "--json", "-q", "current"])
    assert after.exit_code == before.exit_code == 0
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert after.stderr == ""
