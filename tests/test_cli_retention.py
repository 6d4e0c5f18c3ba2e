"""prune, archive, unarchive, close, pin, unpin, rename, delete: previews, spared notes,
confirmation, lineages as units."""

from __future__ import annotations

import time

import pytest
from cli_support import continues, execute, fingerprint, make_session, rows, run, run_json

from hermes_store.cli import app

OLD = "20250101_100000_old00001"
NEW = "20260101_100000_new00002"


def ids(store: str) -> set[str]:
    return {r[0] for r in rows(store, "SELECT id FROM sessions")}


def flag(store: str, sid: str, column: str) -> object:
    assert column in ("archived", "pinned", "end_reason", "title", "parent_session_id")
    return rows(store, f"SELECT {column} FROM sessions WHERE id = '{sid}'")[0][0]


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, OLD, age_days=120, source="cron")
    make_session(head_store, NEW, age_days=10)
    return head_store


def compressed_pair(store: str, root_age: float, tip_age: float, *,
                    tip_ended: bool = True) -> tuple[str, str]:
    root = make_session(store, "20250301_100000_root0001", age_days=root_age,
                        end_reason="compression")
    tip = make_session(store, "20250301_110000_tip00002", age_days=tip_age, parent=root,
                       ended=tip_ended)
    continues(store, root, tip)
    return root, tip


# --------------------------------------------------------------------------- prune


def test_prune_dry_run_lists_candidates_and_changes_nothing(seeded: str) -> None:
    before = fingerprint(seeded)
    result = run("--db", seeded, "prune", "--dry-run")
    assert result.exit_code == 0
    assert OLD in result.stdout and NEW not in result.stdout
    assert "last active before" in result.stdout and "oldest activity" in result.stdout
    code, doc = run_json("--db", seeded, "prune", "--dry-run")
    assert (code, doc["dry_run"], doc["matched"], doc["changed"], doc["ids"]) == (
        0, True, 1, 0, [OLD])
    assert fingerprint(seeded) == before and ids(seeded) == {OLD, NEW}


def test_prune_defaults_to_90_days_of_retention(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "prune", "--yes")
    assert (code, doc["changed"]) == (0, 1)
    assert ids(seeded) == {NEW}
    assert rows(seeded, f"SELECT count(*) FROM messages WHERE session_id = '{OLD}'")[0][0] == 0


def test_an_explicit_filter_replaces_the_default_cutoff(seeded: str) -> None:
    make_session(seeded, "20260201_100000_cron0003", age_days=2, source="cron")
    result = run("--db", seeded, "prune", "--source", "cron", "--dry-run")
    assert "any age" in result.stdout
    run("--db", seeded, "prune", "--source", "cron", "--yes")
    assert ids(seeded) == {NEW}


def test_prune_notes_what_it_spared_and_why(seeded: str) -> None:
    make_session(seeded, "20250102_100000_pinned03", age_days=200, pinned=True)
    make_session(seeded, "20250103_100000_archiv04", age_days=200, archived=True)
    make_session(seeded, "20250104_100000_opened05", age_days=200, ended=False)
    result = run("--db", seeded, "prune", "--dry-run")
    assert "1 pinned session also matches and will NOT be deleted (use --include-pinned)" \
        in result.stderr
    assert "--include-archived" in result.stderr
    assert "1 open session also matches but was skipped" in result.stderr
    _, doc = run_json("--db", seeded, "prune", "--dry-run")
    assert doc["spared"] == {"pinned": 1, "archived": 1, "open": 1, "busy": 0, "lineage": 0}
    _, doc = run_json("--db", seeded, "prune", "--dry-run", "--include-pinned",
                      "--include-archived")
    assert set(doc["ids"]) == {OLD, "20250102_100000_pinned03", "20250103_100000_archiv04"}


def test_prune_without_a_tty_and_without_yes_refuses(seeded: str) -> None:
    before = fingerprint(seeded)
    result = run("--db", seeded, "prune")
    assert result.exit_code == 2 and "--yes" in result.stderr
    assert fingerprint(seeded) == before


def test_prune_asks_and_a_declined_prompt_changes_nothing(seeded: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "stdin_is_tty", lambda: True)
    result = run("--db", seeded, "prune", input="n\n")
    assert result.exit_code == 1 and "Nothing changed." in result.stderr
    assert "[y/N]" in result.stderr and ids(seeded) == {OLD, NEW}
    result = run("--db", seeded, "prune", input="y\n")
    assert result.exit_code == 0 and ids(seeded) == {NEW}


def test_prune_treats_a_compression_lineage_as_one_unit(head_store: str) -> None:
    root, tip = compressed_pair(head_store, root_age=200, tip_age=5)
    _, doc = run_json("--db", head_store, "prune", "--older-than", "30d", "--dry-run")
    assert doc["ids"] == [] and doc["spared"]["lineage"] == 1
    _, doc = run_json("--db", head_store, "prune", "--older-than", "3d", "--yes")
    assert doc["ids"] == [root, tip] and ids(head_store) == set()


# --------------------------------------------------------------------------- archive


def test_archive_refuses_without_a_filter(seeded: str) -> None:
    result = run("--db", seeded, "archive", "--yes")
    assert result.exit_code == 2 and flag(seeded, OLD, "archived") == 0


def test_archive_moves_lineages_spares_pinned_and_open_and_is_idempotent(seeded: str) -> None:
    make_session(seeded, "20250102_100000_pinned03", age_days=200, pinned=True)
    make_session(seeded, "20250104_100000_opened05", age_days=200, ended=False)
    code, doc = run_json("--db", seeded, "archive", "--older-than", "30d", "--yes")
    assert code == 0 and doc["ids"] == [OLD]
    assert doc["spared"]["pinned"] == 1 and doc["spared"]["open"] == 1
    assert flag(seeded, OLD, "archived") == 1
    _, doc = run_json("--db", seeded, "archive", "--older-than", "30d", "--yes",
                      "--include-open")
    assert doc["ids"] == ["20250104_100000_opened05"] and doc["spared"]["archived"] == 1
    assert "already archived: 1" in run("--db", seeded, "archive", "--older-than", "30d",
                                        "--dry-run").stderr


def test_unarchive_takes_ids_or_filters(seeded: str) -> None:
    run("--db", seeded, "archive", "--older-than", "5d", "--yes")
    assert run("--db", seeded, "unarchive").exit_code == 2
    code, doc = run_json("--db", seeded, "unarchive", "20250101")
    assert code == 0 and doc["ids"] == [OLD] and flag(seeded, OLD, "archived") == 0
    run("--db", seeded, "unarchive", "--source", "cli", "--yes")
    assert flag(seeded, NEW, "archived") == 0


# --------------------------------------------------------------------------- close


def test_close_needs_an_age_and_ends_idle_open_sessions(head_store: str) -> None:
    idle = make_session(head_store, "20250104_100000_opened05", age_days=20, ended=False)
    fresh = make_session(head_store, "20260104_100000_opened06", age_days=0.5, ended=False)
    assert run("--db", head_store, "close", "--yes").exit_code == 2
    code, doc = run_json("--db", head_store, "close", "--older-than", "7d", "--yes")
    assert code == 0 and doc["ids"] == [idle]
    assert flag(head_store, idle, "end_reason") == "closed_idle"
    assert flag(head_store, fresh, "end_reason") is None
    _, doc = run_json("--db", head_store, "prune", "--older-than", "7d", "--dry-run")
    assert doc["ids"] == [idle]


# --------------------------------------------------------------------------- pin


def test_pin_and_unpin_by_prefix_and_pinning_unarchives(seeded: str) -> None:
    run("--db", seeded, "archive", "--older-than", "30d", "--yes")
    result = run("--db", seeded, "pin", "20250101")
    assert result.exit_code == 0 and "unarchived" in result.stderr
    assert flag(seeded, OLD, "pinned") == 1 and flag(seeded, OLD, "archived") == 0
    assert [s["id"] for s in run_json("--db", seeded, "list", "--pinned")[1]["sessions"]] \
        == [OLD]
    code, doc = run_json("--db", seeded, "unpin", OLD)
    assert code == 0 and doc["changed"] == 1 and flag(seeded, OLD, "pinned") == 0
    assert run("--db", seeded, "pin", "nothere").exit_code == 3


# --------------------------------------------------------------------------- rename


def test_rename_joins_the_words(seeded: str) -> None:
    result = run("--db", seeded, "rename", "20260101", "Fix", "the", "login")
    assert result.exit_code == 0 and flag(seeded, NEW, "title") == "Fix the login"


@pytest.mark.parametrize("title", ["", "   ", "two\nlines", "bell\x07", "x" * 101])
def test_rename_rejects_bad_titles(seeded: str, title: str) -> None:
    assert run("--db", seeded, "rename", NEW, title).exit_code == 2
    assert flag(seeded, NEW, "title") is None


def test_rename_to_a_title_in_use_exits_1_naming_the_holder(seeded: str) -> None:
    run("--db", seeded, "rename", OLD, "Taken")
    result = run("--db", seeded, "rename", NEW, "Taken")
    assert result.exit_code == 1 and OLD in result.stderr
    assert flag(seeded, NEW, "title") is None


# --------------------------------------------------------------------------- delete


def test_delete_previews_and_needs_yes_without_a_tty(seeded: str) -> None:
    result = run("--db", seeded, "delete", OLD, "--dry-run")
    assert result.exit_code == 0 and OLD in result.stdout and "1 msgs" in result.stdout
    assert run("--db", seeded, "delete", OLD).exit_code == 2
    assert OLD in ids(seeded)
    code, doc = run_json("--db", seeded, "delete", OLD, "--yes")
    assert (code, doc["changed"]) == (0, 1) and ids(seeded) == {NEW}


def test_deleting_a_pinned_session_needs_force(seeded: str) -> None:
    run("--db", seeded, "pin", OLD)
    result = run("--db", seeded, "delete", OLD, "--yes")
    assert result.exit_code == 2 and "--force" in result.stderr and OLD in ids(seeded)
    assert run("--db", seeded, "delete", OLD, "--yes", "--force").exit_code == 0
    assert OLD not in ids(seeded)


def test_delete_takes_the_lineage_and_children_unless_keep_children(head_store: str) -> None:
    root, tip = compressed_pair(head_store, root_age=20, tip_age=10)
    child = make_session(head_store, "20250401_100000_child003", age_days=5, parent=tip,
                         end_reason="delegate")
    _, doc = run_json("--db", head_store, "delete", tip, "--dry-run")
    assert doc["ids"] == [root, tip, child]
    run("--db", head_store, "delete", tip, "--yes", "--keep-children")
    assert ids(head_store) == {child} and flag(head_store, child, "parent_session_id") is None


def test_delete_refuses_a_session_in_a_live_turn(head_store: str) -> None:
    live = make_session(head_store, "20260601_100000_live0001", age_days=0, ended=False)
    result = run("--db", head_store, "delete", live, "--yes")
    assert result.exit_code == 5 and live in ids(head_store)


def _while_confirming(monkeypatch: pytest.MonkeyPatch, store: str, sql: str,
                      **params: object) -> None:
    """Another program changes the store while ``delete`` waits for its confirmation."""

    def confirm(self: app.Ctx, question: str, *, yes: bool) -> None:
        execute(store, sql, **params)

    monkeypatch.setattr(app.Ctx, "confirm", confirm)


def test_delete_refuses_a_session_pinned_while_it_asked(seeded: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _while_confirming(monkeypatch, seeded, "UPDATE sessions SET pinned = 1 WHERE id = :sid",
                      sid=OLD)
    result = run("--db", seeded, "delete", OLD, "--yes")
    assert result.exit_code == 1 and "pinned since the preview" in result.stderr
    assert OLD in ids(seeded)


def test_delete_refuses_when_a_child_appeared_while_it_asked(seeded: str,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    _while_confirming(monkeypatch, seeded, "INSERT INTO sessions (id, source, started_at, "
                      "ended_at, parent_session_id) VALUES ('20260701_100000_kid00001', 'cli', "
                      "1, 2, :sid)", sid=OLD)
    result = run("--db", seeded, "delete", OLD, "--yes")
    assert result.exit_code == 1 and "changed since the preview" in result.stderr
    assert {OLD, "20260701_100000_kid00001"} <= ids(seeded)


def test_delete_refuses_a_session_that_went_live_while_it_asked(
        seeded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _while_confirming(monkeypatch, seeded, "UPDATE sessions SET ended_at = NULL, "
                      "end_reason = NULL, last_activity_at = :now WHERE id = :sid",
                      now=time.time(), sid=OLD)
    result = run("--db", seeded, "delete", OLD, "--yes")
    assert result.exit_code == 5 and OLD in ids(seeded)


def test_archive_by_id_notes_no_ancestors_of_other_lineages(seeded: str) -> None:
    compressed_pair(seeded, root_age=200, tip_age=1)  # an unrelated lineage with an ancestor
    result = run("--db", seeded, "archive", OLD, "--dry-run")
    assert result.exit_code == 0
    assert "compressed ancestors" not in result.output
    code, doc = run_json("--db", seeded, "archive", OLD, "--dry-run")
    assert (code, doc["ids"], doc["spared"]["lineage"]) == (0, [OLD], 0)
    _, doc = run_json("--db", seeded, "prune", "--older-than", "100d", "--dry-run")
    assert doc["spared"]["lineage"] == 1  # by a filter, the old ancestor is still noted


def test_an_open_lineage_note_counts_open_sessions_as_stats_does(seeded: str) -> None:
    compressed_pair(seeded, root_age=200, tip_age=150, tip_ended=False)
    _, stats = run_json("--db", seeded, "stats")
    result = run("--db", seeded, "prune", "--dry-run")
    assert "2 sessions of lineages still open (1 never ended) also match" in result.stderr
    _, doc = run_json("--db", seeded, "prune", "--dry-run")
    assert doc["spared"]["open"] == 2  # the lineage is the unit
    assert doc["open_sessions"] == stats["sessions"]["open"] == 1
