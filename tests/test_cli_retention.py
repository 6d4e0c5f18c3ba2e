"""prune, archive, unarchive, close, pin, unpin, rename, delete: previews, spared notes,
confirmation, lineages as units."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_support import make_session, rows, run, run_json, sha256
from click.testing import CliRunner

from hermes_store.cli import app, main

OLD = "20250101_100000_old00001"
NEW = "20260101_100000_new00002"


def ids(path: Path) -> set[str]:
    return {r[0] for r in rows(path, "SELECT id FROM sessions")}


def flag(path: Path, sid: str, column: str) -> object:
    assert column in ("archived", "pinned", "end_reason", "title", "parent_session_id")
    return rows(path, f"SELECT {column} FROM sessions WHERE id = '{sid}'")[0][0]


@pytest.fixture
def store(head_db: Path) -> Path:
    make_session(head_db, OLD, age_days=120, source="cron")
    make_session(head_db, NEW, age_days=10)
    return head_db


def compressed_pair(path: Path, root_age: float, tip_age: float, *,
                    tip_ended: bool = True) -> tuple[str, str]:
    root = make_session(path, "20250301_100000_root0001", age_days=root_age,
                        end_reason="compression")
    tip = make_session(path, "20250301_110000_tip00002", age_days=tip_age, parent=root,
                       ended=tip_ended)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE sessions SET started_at = (SELECT ended_at FROM sessions "
                    "WHERE id = ?) WHERE id = ?", (root, tip))
    con.close()
    return root, tip


# --------------------------------------------------------------------------- prune


def test_prune_dry_run_lists_candidates_and_changes_nothing(store: Path) -> None:
    before = sha256(store)
    result = run("--db", str(store), "prune", "--dry-run")
    assert result.exit_code == 0
    assert OLD in result.stdout and NEW not in result.stdout
    assert "last active before" in result.stdout and "oldest activity" in result.stdout
    code, doc = run_json("--db", str(store), "prune", "--dry-run")
    assert (code, doc["dry_run"], doc["matched"], doc["changed"], doc["ids"]) == (
        0, True, 1, 0, [OLD])
    assert sha256(store) == before and ids(store) == {OLD, NEW}


def test_prune_defaults_to_90_days_of_retention(store: Path) -> None:
    code, doc = run_json("--db", str(store), "prune", "--yes")
    assert (code, doc["changed"]) == (0, 1)
    assert ids(store) == {NEW}
    assert rows(store, f"SELECT count(*) FROM messages WHERE session_id = '{OLD}'")[0][0] == 0


def test_an_explicit_filter_replaces_the_default_cutoff(store: Path) -> None:
    make_session(store, "20260201_100000_cron0003", age_days=2, source="cron")
    result = run("--db", str(store), "prune", "--source", "cron", "--dry-run")
    assert "any age" in result.stdout
    run("--db", str(store), "prune", "--source", "cron", "--yes")
    assert ids(store) == {NEW}


def test_prune_notes_what_it_spared_and_why(store: Path) -> None:
    make_session(store, "20250102_100000_pinned03", age_days=200, pinned=True)
    make_session(store, "20250103_100000_archiv04", age_days=200, archived=True)
    make_session(store, "20250104_100000_opened05", age_days=200, ended=False)
    result = run("--db", str(store), "prune", "--dry-run")
    assert "1 pinned session also matches and will NOT be deleted (use --include-pinned)" \
        in result.stderr
    assert "--include-archived" in result.stderr
    assert "1 open session also matches but was skipped" in result.stderr
    _, doc = run_json("--db", str(store), "prune", "--dry-run")
    assert doc["spared"] == {"pinned": 1, "archived": 1, "open": 1, "busy": 0, "lineage": 0}
    _, doc = run_json("--db", str(store), "prune", "--dry-run", "--include-pinned",
                      "--include-archived")
    assert set(doc["ids"]) == {OLD, "20250102_100000_pinned03", "20250103_100000_archiv04"}


def test_prune_without_a_tty_and_without_yes_refuses(store: Path) -> None:
    before = sha256(store)
    result = run("--db", str(store), "prune")
    assert result.exit_code == 2 and "--yes" in result.stderr
    assert sha256(store) == before


def test_prune_asks_and_a_declined_prompt_changes_nothing(store: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "stdin_is_tty", lambda: True)
    result = CliRunner().invoke(main, ["--db", str(store), "prune"], input="n\n")
    assert result.exit_code == 1 and "Nothing changed." in result.stderr
    assert "[y/N]" in result.stderr and ids(store) == {OLD, NEW}
    result = CliRunner().invoke(main, ["--db", str(store), "prune"], input="y\n")
    assert result.exit_code == 0 and ids(store) == {NEW}


def test_prune_treats_a_compression_lineage_as_one_unit(head_db: Path) -> None:
    root, tip = compressed_pair(head_db, root_age=200, tip_age=5)
    _, doc = run_json("--db", str(head_db), "prune", "--older-than", "30d", "--dry-run")
    assert doc["ids"] == [] and doc["spared"]["lineage"] == 1
    _, doc = run_json("--db", str(head_db), "prune", "--older-than", "3d", "--yes")
    assert doc["ids"] == [root, tip] and ids(head_db) == set()


# --------------------------------------------------------------------------- archive


def test_archive_refuses_without_a_filter(store: Path) -> None:
    result = run("--db", str(store), "archive", "--yes")
    assert result.exit_code == 2 and flag(store, OLD, "archived") == 0


def test_archive_moves_lineages_spares_pinned_and_open_and_is_idempotent(store: Path) -> None:
    make_session(store, "20250102_100000_pinned03", age_days=200, pinned=True)
    make_session(store, "20250104_100000_opened05", age_days=200, ended=False)
    code, doc = run_json("--db", str(store), "archive", "--older-than", "30d", "--yes")
    assert code == 0 and doc["ids"] == [OLD]
    assert doc["spared"]["pinned"] == 1 and doc["spared"]["open"] == 1
    assert flag(store, OLD, "archived") == 1
    _, doc = run_json("--db", str(store), "archive", "--older-than", "30d", "--yes",
                      "--include-open")
    assert doc["ids"] == ["20250104_100000_opened05"] and doc["spared"]["archived"] == 1
    assert "already archived: 1" in run("--db", str(store), "archive", "--older-than", "30d",
                                        "--dry-run").stderr


def test_unarchive_takes_ids_or_filters(store: Path) -> None:
    run("--db", str(store), "archive", "--older-than", "5d", "--yes")
    assert run("--db", str(store), "unarchive").exit_code == 2
    code, doc = run_json("--db", str(store), "unarchive", "20250101")
    assert code == 0 and doc["ids"] == [OLD] and flag(store, OLD, "archived") == 0
    run("--db", str(store), "unarchive", "--source", "cli", "--yes")
    assert flag(store, NEW, "archived") == 0


# --------------------------------------------------------------------------- close


def test_close_needs_an_age_and_ends_idle_open_sessions(head_db: Path) -> None:
    idle = make_session(head_db, "20250104_100000_opened05", age_days=20, ended=False)
    fresh = make_session(head_db, "20260104_100000_opened06", age_days=0.5, ended=False)
    assert run("--db", str(head_db), "close", "--yes").exit_code == 2
    code, doc = run_json("--db", str(head_db), "close", "--older-than", "7d", "--yes")
    assert code == 0 and doc["ids"] == [idle]
    assert flag(head_db, idle, "end_reason") == "closed_idle"
    assert flag(head_db, fresh, "end_reason") is None
    _, doc = run_json("--db", str(head_db), "prune", "--older-than", "7d", "--dry-run")
    assert doc["ids"] == [idle]


# --------------------------------------------------------------------------- pin


def test_pin_and_unpin_by_prefix_and_pinning_unarchives(store: Path) -> None:
    run("--db", str(store), "archive", "--older-than", "30d", "--yes")
    result = run("--db", str(store), "pin", "20250101")
    assert result.exit_code == 0 and "unarchived" in result.stderr
    assert flag(store, OLD, "pinned") == 1 and flag(store, OLD, "archived") == 0
    assert [s["id"] for s in run_json("--db", str(store), "list", "--pinned")[1]["sessions"]] \
        == [OLD]
    code, doc = run_json("--db", str(store), "unpin", OLD)
    assert code == 0 and doc["changed"] == 1 and flag(store, OLD, "pinned") == 0
    assert run("--db", str(store), "pin", "nothere").exit_code == 3


# --------------------------------------------------------------------------- rename


def test_rename_joins_the_words(store: Path) -> None:
    result = run("--db", str(store), "rename", "20260101", "Fix", "the", "login")
    assert result.exit_code == 0 and flag(store, NEW, "title") == "Fix the login"


@pytest.mark.parametrize("title", ["", "   ", "two\nlines", "bell\x07", "x" * 101])
def test_rename_rejects_bad_titles(store: Path, title: str) -> None:
    assert run("--db", str(store), "rename", NEW, title).exit_code == 2
    assert flag(store, NEW, "title") is None


def test_rename_to_a_title_in_use_exits_1_naming_the_holder(store: Path) -> None:
    run("--db", str(store), "rename", OLD, "Taken")
    result = run("--db", str(store), "rename", NEW, "Taken")
    assert result.exit_code == 1 and OLD in result.stderr
    assert flag(store, NEW, "title") is None


# --------------------------------------------------------------------------- delete


def test_delete_previews_and_needs_yes_without_a_tty(store: Path) -> None:
    result = run("--db", str(store), "delete", OLD, "--dry-run")
    assert result.exit_code == 0 and OLD in result.stdout and "1 msgs" in result.stdout
    assert run("--db", str(store), "delete", OLD).exit_code == 2
    assert OLD in ids(store)
    code, doc = run_json("--db", str(store), "delete", OLD, "--yes")
    assert (code, doc["changed"]) == (0, 1) and ids(store) == {NEW}


def test_deleting_a_pinned_session_needs_force(store: Path) -> None:
    run("--db", str(store), "pin", OLD)
    result = run("--db", str(store), "delete", OLD, "--yes")
    assert result.exit_code == 2 and "--force" in result.stderr and OLD in ids(store)
    assert run("--db", str(store), "delete", OLD, "--yes", "--force").exit_code == 0
    assert OLD not in ids(store)


def test_delete_takes_the_lineage_and_children_unless_keep_children(head_db: Path) -> None:
    root, tip = compressed_pair(head_db, root_age=20, tip_age=10)
    child = make_session(head_db, "20250401_100000_child003", age_days=5, parent=tip,
                         end_reason="delegate")
    _, doc = run_json("--db", str(head_db), "delete", tip, "--dry-run")
    assert doc["ids"] == [root, tip, child]
    run("--db", str(head_db), "delete", tip, "--yes", "--keep-children")
    assert ids(head_db) == {child} and flag(head_db, child, "parent_session_id") is None


def test_delete_refuses_a_session_in_a_live_turn(head_db: Path) -> None:
    live = make_session(head_db, "20260601_100000_live0001", age_days=0, ended=False)
    result = run("--db", str(head_db), "delete", live, "--yes")
    assert result.exit_code == 5 and live in ids(head_db)


def _while_confirming(monkeypatch: pytest.MonkeyPatch, sql: str, *params: object) -> None:
    """Another program changes the store while ``delete`` waits for its confirmation."""

    def confirm(self: app.Ctx, question: str, *, yes: bool) -> None:
        con = sqlite3.connect(self.db)
        with con:
            con.execute(sql, params)
        con.close()

    monkeypatch.setattr(app.Ctx, "confirm", confirm)


def test_delete_refuses_a_session_pinned_while_it_asked(store: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _while_confirming(monkeypatch, "UPDATE sessions SET pinned = 1 WHERE id = ?", OLD)
    result = run("--db", str(store), "delete", OLD, "--yes")
    assert result.exit_code == 1 and "pinned since the preview" in result.stderr
    assert OLD in ids(store)


def test_delete_refuses_when_a_child_appeared_while_it_asked(store: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    _while_confirming(monkeypatch, "INSERT INTO sessions (id, source, started_at, ended_at, "
                      "parent_session_id) VALUES ('20260701_100000_kid00001', 'cli', 1, 2, ?)",
                      OLD)
    result = run("--db", str(store), "delete", OLD, "--yes")
    assert result.exit_code == 1 and "changed since the preview" in result.stderr
    assert {OLD, "20260701_100000_kid00001"} <= ids(store)


def test_delete_refuses_a_session_that_went_live_while_it_asked(
        store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _while_confirming(monkeypatch, "UPDATE sessions SET ended_at = NULL, end_reason = NULL, "
                      "last_activity_at = strftime('%s', 'now') WHERE id = ?", OLD)
    result = run("--db", str(store), "delete", OLD, "--yes")
    assert result.exit_code == 5 and OLD in ids(store)


def test_archive_by_id_notes_no_ancestors_of_other_lineages(store: Path) -> None:
    compressed_pair(store, root_age=200, tip_age=1)  # an unrelated lineage with an ancestor
    result = run("--db", str(store), "archive", OLD, "--dry-run")
    assert result.exit_code == 0
    assert "compressed ancestors" not in result.output
    code, doc = run_json("--db", str(store), "archive", OLD, "--dry-run")
    assert (code, doc["ids"], doc["spared"]["lineage"]) == (0, [OLD], 0)
    _, doc = run_json("--db", str(store), "prune", "--older-than", "100d", "--dry-run")
    assert doc["spared"]["lineage"] == 1  # by a filter, the old ancestor is still noted


def test_an_open_lineage_note_counts_open_sessions_as_stats_does(store: Path) -> None:
    compressed_pair(store, root_age=200, tip_age=150, tip_ended=False)
    _, stats = run_json("--db", str(store), "stats")
    result = run("--db", str(store), "prune", "--dry-run")
    assert "2 sessions of lineages still open (1 never ended) also match" in result.stderr
    _, doc = run_json("--db", str(store), "prune", "--dry-run")
    assert doc["spared"]["open"] == 2  # the lineage is the unit
    assert doc["open_sessions"] == stats["sessions"]["open"] == 1
