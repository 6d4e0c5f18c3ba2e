"""Shared fixtures: a fresh store at head per test, and the legacy fixture files by version."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY_VERSIONS = (1, 2, 4, 6, 10, 11, 21)


@pytest.fixture(autouse=True)
def _forget_engines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # No test may touch the real ~/.hermes, and engines must not outlive their test's files.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes_home"))
    yield
    engine_mod.dispose_all()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def head_db(store_path: Path) -> Path:
    migrate.upgrade(store_path)
    return store_path


@pytest.fixture
def legacy_db(tmp_path: Path) -> Callable[[int], Path]:
    """Decompress ``state-vN.db.gz`` into a private copy (the originals stay untouched)."""

    def make(version: int) -> Path:
        target = tmp_path / f"state-v{version}.db"
        with gzip.open(FIXTURES / f"state-v{version}.db.gz", "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        target.chmod(0o600)
        return target

    return make
