"""A look at a store this code cannot read as it stands (a legacy store the agent still
writes, or one behind the code) without changing it: an upgraded temporary copy.

The copy is taken through the online backup API from a read-only open (so the agent keeps
writing while it is taken), upgraded to head, read, and removed when the caller is done. A
SQLite file only: a server's store is upgraded in place or read by a newer hermes_store.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.ops.backup import backup_store


@contextlib.contextmanager
def upgraded_snapshot(path: Path) -> Iterator[Path]:
    """An upgraded copy of the store at ``path`` in a private temporary directory, removed
    (with this process's engines on it) when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="hermes-store-snapshot-"))
    try:
        copy = backup_store(path, dest_dir=folder, label="snapshot").path
        migrate.upgrade(copy)
        yield copy
    finally:
        for file in folder.iterdir():
            engine_mod.forget(file)
        shutil.rmtree(folder, ignore_errors=True)
