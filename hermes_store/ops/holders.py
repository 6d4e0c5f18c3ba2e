"""Who else holds the store: processes with the database or its sidecars open.

Whole-file operations (VACUUM, repair fixes, upgrade, recover's source copy) must not run under a
live holder: replacing or rewriting the file while another process keeps the old ``-wal``/``-shm``
inodes is how stores lose writes (docs/lessons.md#wal). On Linux we read ``/proc/*/fd`` and compare
device and inode numbers (robust to symlinks and relative paths); elsewhere we ask ``lsof``.
Processes we may not inspect are invisible to us, which is why ``--force`` exists and why the
check is advisory rather than a lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from hermes_store.db import writer_queue
from hermes_store.errors import StoreHeldError

# The files beside a store: SQLite's journals, which may hold committed transactions, and the
# writers' lock file, which holds nothing but is open in every process writing.
DATA_SUFFIXES = ("-wal", "-shm", "-journal")
SIDECAR_SUFFIXES = (*DATA_SUFFIXES, writer_queue.SUFFIX)
_PROC = Path("/proc")


def store_files(path: str | os.PathLike[str]) -> list[Path]:
    """The database file and whichever of its sidecars exist."""
    p = Path(path)
    return [f for f in (p, *(Path(f"{p}{s}") for s in SIDECAR_SUFFIXES)) if f.exists()]


def _identities(files: Iterable[Path]) -> set[tuple[int, int]]:
    ids = set()
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids


def _cmdline(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or "?"


def _scan_proc(ids: set[tuple[int, int]], exclude: set[int]) -> list[tuple[int, str]]:
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # gone, or not ours to inspect
            continue
        for fd in fds:
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in ids:
                found.append((int(entry.name), _cmdline(int(entry.name))))
                break
    return sorted(found)


def _scan_lsof(files: list[Path], exclude: set[int]) -> list[tuple[int, str]]:
    lsof = shutil.which("lsof")
    if lsof is None or not files:
        return []
    try:
        out = subprocess.run([lsof, "-F", "pc", "--", *map(str, files)], capture_output=True,
                             text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found: dict[int, str] = {}
    pid = None
    for line in out.splitlines():
        if line.startswith("p"):
            pid = int(line[1:])
        elif line.startswith("c") and pid is not None and pid not in exclude:
            found[pid] = line[1:]
    return sorted(found.items())


def find_holders(path: str | os.PathLike[str], *,
                 exclude_pids: Iterable[int] = ()) -> list[tuple[int, str]]:
    """Other processes holding the store or its sidecars, as ``[(pid, command line)]``."""
    files = store_files(path)
    exclude = {os.getpid(), *exclude_pids}
    if _PROC.is_dir() and (_PROC / "self" / "fd").is_dir():
        return _scan_proc(_identities(files), exclude)
    return _scan_lsof(files, exclude)


def ensure_not_held(path: str | os.PathLike[str], *, force: bool = False,
                    what: str = "this operation") -> list[tuple[int, str]]:
    """Refuse (StoreHeldError, exit 5) when another process holds the store, unless ``force``.

    Returns the holders found (so a forced run can still say who it overrode).
    """
    holders = find_holders(path)
    if holders and not force:
        listing = "; ".join(f"pid {pid}: {cmd}" for pid, cmd in holders)
        raise StoreHeldError(
            f"{path} is held by {len(holders)} other process(es) ({listing}); stop them before "
            f"{what}, or pass --force", holders=holders)
    return holders
