"""Every command documents itself with an example; --version names the schema head."""

from __future__ import annotations

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
