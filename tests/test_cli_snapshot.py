"""A legacy store (or one behind the code) is refused for reading with exit 6, and the message
offers ``--snapshot``: reading commands then read an upgraded temporary copy, leaving the
agent's file byte for byte as it was and nothing behind."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from cli_support import run, sha256


def _snapshots() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("hermes-store-snapshot-*")}


def test_a_legacy_store_is_refused_with_an_offer_of_snapshot(legacy_db) -> None:
    result = run("--db", str(legacy_db(6)), "search", "chapter")
    assert result.exit_code == 6
    assert "hermes-store upgrade" in result.stderr and "--snapshot" in result.stderr


@pytest.mark.parametrize("args", [["search", "chapter"], ["list"], ["stats"],
                                  ["show", "20260303_020200"], ["export", "-"]],
                         ids=lambda a: a[0])
def test_snapshot_reads_a_legacy_store_without_changing_it(legacy_db, args) -> None:
    path = legacy_db(6)
    before, snapshots = sha256(path), _snapshots()
    result = run("--snapshot", "--db", str(path), *args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() and "temporary copy" in result.stderr
    assert sha256(path) == before
    assert not list(path.parent.glob("*snapshot*"))
    assert _snapshots() == snapshots  # the copy is gone with the command


def test_snapshot_finds_what_the_legacy_store_holds(legacy_db) -> None:
    result = run("--json", "--snapshot", "--db", str(legacy_db(6)), "search", "chapter")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["count"] > 0


def test_snapshot_on_a_store_at_head_reads_the_store_itself(head_db: Path) -> None:
    result = run("--snapshot", "--db", str(head_db), "list")
    assert result.exit_code == 0 and "temporary copy" not in result.stderr
