"""Copies of the store taken before a change: online backups and sidecar-preserving file copies.

``backup_store`` uses SQLite's online backup API from a read-only connection, so it sees one
consistent snapshot even while the agent writes. CPython's ``Connection.backup`` retries BUSY
and LOCKED forever; a pre-update backup that never returns is a known failure (docs/lessons.md#wal),
so every step is checked against a deadline from the progress callback, which aborts the copy.

``copy_with_sidecars`` is for files that may not open at all (``repair``): it copies bytes, the
``-wal``/``-shm``/``-journal`` included, since committed transactions may live only in the WAL.

``require_free_space`` is the disk preflight every heavy write runs first.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock tells a live partial from a stale one
    fcntl = None  # type: ignore[assignment]  # the module is absent off POSIX

from hermes_store.db.engine import FILE_MODE, open_engine
from hermes_store.db.sqlite_driver import dbapi_of
from hermes_store.errors import StoreBusyError, StoreFullError, StoreNotFoundError
from hermes_store.ops.holders import DATA_SUFFIXES, store_files

BACKUP_DEADLINE_S = 30.0
PAGES_PER_STEP = 1024


@dataclass(frozen=True)
class BackupResult:
    path: Path
    bytes: int
    seconds: float


class _DeadlineExceeded(Exception):
    pass


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def backup_path(path: Path, label: str, dest_dir: Path | None = None) -> Path:
    """``state.db`` -> ``<dir>/state.db.<label>-20260915T074937Z``, never an existing name."""
    folder = dest_dir or path.parent
    base = folder / f"{path.name}.{label}-{_stamp()}"
    candidate, n = base, 1
    while candidate.exists() or Path(f"{candidate}.partial").exists():
        n += 1
        candidate = Path(f"{base}.{n}")
    return candidate


def store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in store_files(path))


def require_free_space(folder: Path, needed: int, what: str) -> None:
    """Raise StoreFullError when ``folder``'s filesystem has less than ``needed`` bytes free."""
    folder = folder if folder.is_dir() else folder.parent
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise StoreFullError(
            f"{what} needs about {needed:,} bytes free in {folder}, but only {free:,} are; "
            "free some space first (nothing was changed)")


def backup_store(path: str | os.PathLike[str], *, dest_dir: Path | None = None,
                 label: str = "backup", deadline_s: float = BACKUP_DEADLINE_S) -> BackupResult:
    """A consistent copy of a live store through the online backup API, within ``deadline_s``.

    The copy is written under a ``.partial`` name and renamed when complete, so a timed-out or
    failed backup never leaves a file that looks usable. The writer holds an OS lock on its
    partial while it copies; partials of the same store whose lock nobody holds were left by a
    process that died (a killed upgrade) and are removed first, so they never pile up.
    """
    src_path = Path(path)
    if not src_path.exists():
        raise StoreNotFoundError(f"no store at {src_path}")
    target = backup_path(src_path, label, dest_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(src_path, target.parent)
    require_free_space(target.parent, store_bytes(src_path), "the backup")
    partial = Path(f"{target}.partial")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    try:
        _hold(fd)
        return _backup_into(src_path, partial, target, deadline_s)
    finally:
        os.close(fd)  # releases the lock: a partial still here is a failure's, and stale


def _hold(fd: int) -> None:
    if fcntl is not None:
        with contextlib.suppress(OSError):  # no flock here: stale partials stay, as before
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_stale_partials(path: Path, folder: Path) -> list[Path]:
    """Delete ``<store name>.*.partial`` backups in ``folder`` that no live backup holds."""
    removed = []
    for partial in folder.glob(f"{glob.escape(path.name)}.*.partial"):
        try:
            fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if fcntl is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a backup in progress, or no flock on this filesystem
            partial.unlink(missing_ok=True)
            Path(f"{partial}-journal").unlink(missing_ok=True)  # the copy's own, if it had one
            removed.append(partial)
        finally:
            os.close(fd)
    return removed


def _backup_into(src_path: Path, partial: Path, target: Path,
                 deadline_s: float) -> BackupResult:
    start = time.monotonic()

    def check_deadline(status: int, remaining: int, total: int) -> None:
        if time.monotonic() - start > deadline_s:
            raise _DeadlineExceeded

    engine = open_engine(src_path, readonly=True)
    raw = engine.raw_connection()
    # The destination is a new private file, not a store: a plain connection is the right tool.
    dest = sqlite3.connect(partial)
    try:
        dbapi_of(raw).backup(dest, pages=PAGES_PER_STEP, progress=check_deadline)
    except _DeadlineExceeded:
        dest.close()
        partial.unlink(missing_ok=True)
        raise StoreBusyError(
            f"backup of {src_path} did not finish within {deadline_s:.0f}s (the store stayed "
            "busy); nothing was changed", waited_s=time.monotonic() - start) from None
    except BaseException:
        dest.close()
        partial.unlink(missing_ok=True)
        raise
    finally:
        raw.close()
    dest.close()
    os.replace(partial, target)
    return BackupResult(target, target.stat().st_size, time.monotonic() - start)


def copy_with_sidecars(path: str | os.PathLike[str], dest: Path) -> list[Path]:
    """Byte copies of the store and its journals as ``dest`` and ``dest-wal`` etc.

    Not a snapshot: callers use it only when no other process holds the store, or on a store
    that does not open at all. The writers' lock file holds no data and is not copied.
    """
    src = Path(path)
    if not src.exists():
        raise StoreNotFoundError(f"no store at {src}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    require_free_space(dest.parent, store_bytes(src), "the copy")
    copied = []
    for suffix in ("", *DATA_SUFFIXES):
        source = Path(f"{src}{suffix}")
        if source.exists():
            target = Path(f"{dest}{suffix}")
            shutil.copy2(source, target)
            os.chmod(target, FILE_MODE)
            copied.append(target)
    return copied
