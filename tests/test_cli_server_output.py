"""On PostgreSQL, ``current`` and ``stats`` describe the server, not SQLite; a refused login
has its own message and exit code, apart from a server that cannot be reached."""

from __future__ import annotations

from cli_support import run
from sqlalchemy.engine import make_url

from hermes_store.db import names


def test_current_names_the_server_version_and_no_sqlite_journal(pg_store: str) -> None:
    result = run("--db", pg_store, "current")
    assert result.exit_code == 0, result.output
    assert "server:   PostgreSQL 1" in result.stdout
    assert "sqlite:" not in result.stdout and "journal" not in result.stdout


def test_stats_names_the_gin_indexes_it_lists(pg_store: str) -> None:
    result = run("--db", pg_store, "stats")
    assert result.exit_code == 0, result.output
    layout = next(line for line in result.stdout.splitlines() if line.startswith("layout"))
    assert "indexes: none" not in layout and names.PG_WORD_INDEX in layout  # GIN by name


def test_a_refused_login_is_not_an_unreachable_server(pg_store: str) -> None:
    url = make_url(pg_store)
    result = run("--db", url.set(username="no_such_role_h20").render_as_string(
        hide_password=False), "stats")
    assert result.exit_code == 10, result.output
    assert "refused the login" in result.stderr and "cannot reach" not in result.stderr
    down = run("--db", url.set(port=1).render_as_string(hide_password=False), "stats")
    assert down.exit_code == 9 and "cannot reach" in down.stderr
