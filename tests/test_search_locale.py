"""check and doctor warn when a PostgreSQL database's LC_CTYPE makes pg_trgm blind to CJK."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from hermes_store.cli.app import main
from hermes_store.db import catalog, migrate
from hermes_store.db.engine import open_engine, reading
from hermes_store.ops import stats


@pytest.fixture
def c_locale_store(pg_server) -> Iterator[str]:
    name = f"{pg_server.prefix}_c_locale"
    pg_server.conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 '
                           "LC_CTYPE 'C' LC_COLLATE 'C' ENCODING 'UTF8'")
    url = pg_server.url_for(name)
    migrate.upgrade(url)
    yield url
    pg_server.drop(url)


def _finding(location: str) -> stats.Finding | None:
    with reading(open_engine(location)) as conn:
        return stats.trigram_locale(conn)


def test_a_c_locale_database_is_warned_about(c_locale_store: str) -> None:
    found = _finding(c_locale_store)
    assert found is not None and found.status == "warn"
    assert "LC_CTYPE is C" in found.detail and "CJK" in found.detail
    assert found.fix and "--locale" in found.fix


def test_a_utf8_locale_database_is_fine(pg_store: str) -> None:
    found = _finding(pg_store)
    assert found is not None and found.status == "ok"


def test_sqlite_has_no_locale_question(head_db) -> None:
    assert _finding(str(head_db)) is None


@pytest.mark.parametrize(("ctype", "blind"), [("C", True), ("POSIX", True), ("c", True),
                                              ("C.UTF-8", False), ("en_US.UTF-8", False),
                                              (None, False)])
def test_which_ctypes_are_blind(ctype: str | None, blind: bool) -> None:
    assert catalog.trigram_blind_to_cjk(ctype) is blind


def test_check_prints_the_warning_and_keeps_its_exit_code(c_locale_store: str) -> None:
    result = CliRunner().invoke(main, ["--db", c_locale_store, "--json", "check"])
    payload = json.loads(result.output)
    assert result.exit_code == 0, result.output
    assert payload["ok_schema"] is True
    assert len(payload["warnings"]) == 1 and "pg_trgm" in payload["warnings"][0]


def test_substring_search_still_finds_cjk_under_the_c_locale(c_locale_store: str) -> None:
    from hermes_store import SessionDB

    with SessionDB(c_locale_store) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "昨晚讨论了记忆系统")
        assert len(db.search_messages("记忆系统")) == 1
