"""The store the v21 API tests run against, in one place: a later change can parametrise
``db`` over both backends here without touching the test files that use it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_store import SessionDB


@pytest.fixture
def db(head_db: Path) -> Iterator[SessionDB]:
    """A ``SessionDB`` on a fresh store at head."""
    store = SessionDB(head_db)
    try:
        yield store
    finally:
        store.close()
