"""The built wheel carries what an installed package needs beside its modules: ``py.typed``, so a
user's type checker reads our annotations (PEP 561), and the Alembic scripts, so it can migrate."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_wheel_ships_py_typed_and_the_migrations(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("hermes_store-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hermes_store/py.typed" in names
    assert "hermes_store/migrations/env.py" in names
    assert any(n.startswith("hermes_store/migrations/versions/0024_") for n in names)
