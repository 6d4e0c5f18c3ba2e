"""hermes-store recover: offline salvage into a new file; the source is never modified."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_support import held_by_other_process, run, run_json, sha256

from hermes_store.db import migrate


def _count(path: Path, table: str) -> int:
    con = sqlite3.connect(path)
    n = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    con.close()
    return n


def _damage_message_pages(path: Path, how_many: int = 2) -> None:
    """Overwrite interior leaf pages of the messages table with garbage, as a bad disk would."""
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    leaves = [r[0] for r in con.execute(
        "SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' ORDER BY pageno")]
    con.close()
    assert len(leaves) > how_many + 2
    middle = leaves[len(leaves) // 2: len(leaves) // 2 + how_many]
    with open(path, "r+b") as fh:
        for page in middle:
            fh.seek((page - 1) * page_size)
            fh.write(b"\xde\xad\xbe\xef" * (page_size // 4))


@pytest.mark.parametrize("version", [1, 6, 11, 21])
def test_a_legacy_store_is_recovered_completely_into_a_store_at_head(legacy_db, tmp_path: Path,
                                                                    version: int) -> None:
    source = legacy_db(version)
    before = sha256(source)
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out))
    assert code == 0, doc
    assert doc["status"] == "complete"
    assert sha256(source) == before
    assert doc["fingerprint_before"] == doc["fingerprint_after"]
    assert migrate.status(out).at_head
    assert (_count(out, "sessions"), _count(out, "messages")) == (16, 358)
    report = json.loads(Path(f"{out}.recovery.json").read_text())
    assert report["tables"]["messages"] == {"read": 358, "written": 358, "skipped": 0}
    assert report["sqlite_version"] and report["next_steps"]
    assert run("--db", str(out), "repair", "--check-only").exit_code == 0  # indexes consistent


def test_lineage_links_survive_recovery(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(11)
    out = tmp_path / "new.db"
    assert run("recover", "--source", str(source), "--output", str(out)).exit_code == 0
    query = "SELECT id, parent_session_id FROM sessions ORDER BY id"
    con_a, con_b = sqlite3.connect(source), sqlite3.connect(out)
    assert con_a.execute(query).fetchall() == con_b.execute(query).fetchall()
    con_a.close(), con_b.close()


def test_damaged_pages_fail_without_allow_partial_and_leave_no_output(legacy_db,
                                                                      tmp_path: Path) -> None:
    source = legacy_db(11)
    _damage_message_pages(source)
    before = sha256(source)
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out))
    assert code == 7
    assert doc["ok"] is False and doc["status"] == "damaged"
    assert "--allow-partial" in doc["error"]["message"]
    assert not out.exists()
    assert sha256(source) == before


def test_allow_partial_salvages_every_readable_row_and_reports_the_rest(legacy_db,
                                                                       tmp_path: Path) -> None:
    source = legacy_db(11)
    _damage_message_pages(source)
    before = sha256(source)
    out, report_file = tmp_path / "new.db", tmp_path / "report.json"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out),
                         "--allow-partial", "--chunk-size", "64", "--report", str(report_file))
    assert code == 8, doc
    assert doc["status"] == "partial"
    assert sha256(source) == before
    messages = doc["tables"]["messages"]
    written = _count(out, "messages")
    assert written == messages["written"] and 0 < written < 358
    assert doc["tables"]["sessions"]["written"] == 16
    ranges = [r for r in doc["skipped_ranges"] if r["table"] == "messages"]
    assert ranges and all(r["first_rowid"] <= r["last_rowid"] for r in ranges)
    skipped = sum(r["last_rowid"] - r["first_rowid"] + 1 for r in ranges)
    assert messages["skipped"] == skipped
    assert written + skipped >= 358  # every row is either salvaged or accounted for
    assert json.loads(report_file.read_text())["status"] == "partial"


def test_messages_whose_session_is_lost_go_to_a_recovered_placeholder(legacy_db,
                                                                      tmp_path: Path) -> None:
    source = legacy_db(11)
    con = sqlite3.connect(source)
    victim, n = con.execute("SELECT session_id, COUNT(*) FROM messages GROUP BY session_id "
                            "ORDER BY 2 DESC LIMIT 1").fetchone()
    with con:
        con.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?",
                    (victim,))
        con.execute("DELETE FROM sessions WHERE id = ?", (victim,))
    con.close()
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out))
    assert code == 0, doc
    assert doc["placeholder_sessions"] == [victim]
    con = sqlite3.connect(out)
    row = con.execute("SELECT source, message_count FROM sessions WHERE id = ?", (victim,)).fetchone()
    assert row == ("recovered", n)
    con.close()


def test_a_destroyed_first_page_is_nothing_salvageable(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(6)
    with open(source, "r+b") as fh:
        fh.write(b"\x00" * 4096)
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out))
    assert code == 7
    assert doc["status"] == "nothing" and "nothing can be salvaged" in doc["error"]["message"]
    assert not out.exists()
    assert Path(f"{out}.recovery.json").exists()


def test_inspect_only_writes_only_the_report(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(10)
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out),
                         "--inspect-only")
    assert code == 0
    assert doc["inspection"]["tables"]["messages"]["rows"] == 358
    assert not out.exists() and Path(f"{out}.recovery.json").exists()


def test_an_existing_output_or_report_is_a_usage_error(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(10)
    out = tmp_path / "new.db"
    out.write_bytes(b"keep me")
    assert run("recover", "--source", str(source), "--output", str(out)).exit_code == 2
    assert out.read_bytes() == b"keep me"
    other = tmp_path / "other.db"
    Path(f"{other}.recovery.json").write_text("{}")
    assert run("recover", "--source", str(source), "--output", str(other)).exit_code == 2
    assert not other.exists()


def test_a_held_source_is_refused_unless_forced(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(10)
    with held_by_other_process(source):
        code, doc = run_json("recover", "--source", str(source), "--output",
                             str(tmp_path / "a.db"))
        assert code == 5 and doc["error"]["code"] == "held"
        result = run("recover", "--source", str(source), "--output", str(tmp_path / "b.db"),
                     "--force")
        assert result.exit_code == 0, result.output


def test_the_work_dir_keeps_the_copy_and_sidecars(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(10)
    work = tmp_path / "work"
    result = run("recover", "--source", str(source), "--output", str(tmp_path / "n.db"),
                 "--work-dir", str(work))
    assert result.exit_code == 0
    assert (work / source.name).exists()


def test_a_lost_parent_with_messages_keeps_its_lineage_through_the_placeholder(
        legacy_db, tmp_path: Path) -> None:
    source = legacy_db(11)
    con = sqlite3.connect(source)
    parent, child = con.execute(
        "SELECT p.id, c.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
        "WHERE EXISTS (SELECT 1 FROM messages m WHERE m.session_id = p.id) LIMIT 1").fetchone()
    with con:
        con.execute("PRAGMA foreign_keys = OFF")
        con.execute("DELETE FROM sessions WHERE id = ?", (parent,))
    con.close()
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out))
    assert code == 0, doc
    assert parent in doc["placeholder_sessions"] and doc["detached_parents"] == 0
    con = sqlite3.connect(out)
    assert con.execute("SELECT parent_session_id FROM sessions WHERE id = ?",
                       (child,)).fetchone() == (parent,)
    con.close()


def test_progress_is_noted_on_stderr_unless_quiet(legacy_db, tmp_path: Path) -> None:
    source = legacy_db(10)
    result = run("recover", "--source", str(source), "--output", str(tmp_path / "a.db"),
                 "--chunk-size", "100")
    assert "messages: 358/358" in result.stderr
    assert "358/358" not in result.stdout
    quiet = run("-q", "recover", "--source", str(source), "--output", str(tmp_path / "b.db"))
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_a_row_the_new_schema_rejects_is_reported_and_its_messages_kept(legacy_db,
                                                                        tmp_path: Path) -> None:
    source = legacy_db(11)
    con = sqlite3.connect(source)
    first, second = [r[0] for r in con.execute(
        "SELECT id FROM sessions WHERE id IN (SELECT session_id FROM messages) "
        "AND parent_session_id IS NULL AND id NOT IN (SELECT parent_session_id FROM sessions "
        "WHERE parent_session_id IS NOT NULL) ORDER BY rowid LIMIT 2")]
    with con:  # a title clash the damaged file allowed but the store's unique index does not
        con.execute("DROP INDEX IF EXISTS idx_sessions_title_unique")
        con.execute("UPDATE sessions SET title = 'same' WHERE id IN (?, ?)", (first, second))
    con.close()
    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(source), "--output", str(out),
                         "--allow-partial")
    assert code == 8, doc
    assert doc["tables"]["sessions"] == {"read": 16, "written": 15, "skipped": 1}
    assert any(second in e and "UNIQUE" in e for e in doc["errors"])
    assert doc["placeholder_sessions"] == [second]
    assert _count(out, "messages") == 358


def _forward_readable(path: Path, table: str) -> int:
    """Rows the stock sqlite3 module reads in rowid order before the first unreadable page."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema = ON")
    n = 0
    try:
        for _ in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid"):
            n += 1
    except sqlite3.DatabaseError:
        return n  # the truncation point: what came before is the baseline
    finally:
        con.close()
    return n


def test_allow_partial_salvages_a_truncated_copy(head_db: Path, tmp_path: Path) -> None:
    con = sqlite3.connect(head_db)
    with con:
        for i in range(40):
            sid = f"20260101_10{i:04d}_trunc{i:03d}"
            con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
                        (sid, 1.7e9 + i))
            con.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES (?, 'user', ?, ?)",
                [(sid, f"line {j} " + "word " * (20 + (i * 7 + j * 13) % 200), 1.7e9 + j)
                 for j in range(50)])
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    truncated = tmp_path / "truncated.db"
    data = head_db.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    baseline = _forward_readable(truncated, "messages")
    assert 0 < baseline < 2000
    # Which sessions rows sit in the kept half depends on the page layout (the lineage-root
    # trigger rewrites each new row); every one a plain forward read still reaches comes back.
    sessions_readable = _forward_readable(truncated, "sessions")

    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(truncated), "--output", str(out),
                         "--allow-partial")
    assert code == 8, doc
    assert doc["status"] == "partial"
    assert _count(out, "sessions") >= sessions_readable
    assert _count(out, "messages") >= baseline
    assert doc["skipped_ranges"]
    assert run("--db", str(out), "repair", "--check-only").exit_code == 0


def _flip_bytes_in_overflow_pages(path: Path, marker: bytes) -> int:
    """Overwrite bytes inside the overflow pages that hold ``marker`` (message text longer than
    a page), as a bad disk would: the b-tree stays sound, the text stops being UTF-8."""
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    overflow = {r[0] for r in con.execute(
        "SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'overflow'")}
    con.close()
    data = bytearray(path.read_bytes())
    flipped = 0
    for page in sorted(overflow):
        start = (page - 1) * page_size
        at = data.find(marker, start, start + page_size)
        if at >= 0:
            data[at:at + 4] = b"\xff\xfe\xc3\x28"  # never valid UTF-8
            flipped += 1
    path.write_bytes(bytes(data))
    return flipped


def test_recover_keeps_rows_whose_text_was_damaged_as_the_bytes_they_are(
        head_db: Path, tmp_path: Path) -> None:
    from hermes_store import SessionDB
    from hermes_store.db import engine as eng

    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        for i in range(40):
            db.append_message("s1", "user", f"message {i} " + "filler text " * 800
                              + f"OVERFLOWMARK{i:02d} tail")
    eng.dispose_all()  # checkpointed: every page is in the main file
    assert _flip_bytes_in_overflow_pages(head_db, b"OVERFLOWMARK") >= 10
    damaged = {r[0]: r[1] for r in sqlite3.connect(head_db).execute(
        "SELECT id, CAST(content AS BLOB) FROM messages")}
    assert sum(b"\xff\xfe" in v for v in damaged.values()) >= 10
    with SessionDB(head_db, readonly=True) as db:
        assert len(db.get_messages("s1")) == 40  # the live store still reads every row

    out = tmp_path / "new.db"
    code, doc = run_json("recover", "--source", str(head_db), "--output", str(out),
                         "--allow-partial")
    assert code == 0, doc
    report = json.loads(Path(f"{out}.recovery.json").read_text())
    assert report["tables"]["messages"] == {"read": 40, "written": 40, "skipped": 0}
    con = sqlite3.connect(out)
    kept = {r[0]: (r[1], r[2]) for r in con.execute(
        "SELECT id, CAST(content AS BLOB), typeof(content) FROM messages")}
    con.close()
    assert {i: v for i, (v, _) in kept.items()} == damaged  # byte for byte
    assert {t for _, t in kept.values()} == {"text"}
