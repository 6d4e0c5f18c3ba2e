"""The writers' queue: an OS lock on a sidecar file, taken before SQLite's write lock.

SQLite makes a writer that finds the write lock taken sleep and poll (its busy handler), so
with several writer processes the lock goes to whoever polls at the right moment: aggregate
throughput falls below one writer's and the unlucky wait for seconds. A blocking ``flock`` on
``<store>-writer.lock`` makes the kernel hand the lock to a waiting writer the moment the
holder releases it. The file is empty and never written; it is created 0600 like the store's
other files and never deleted (removing it while a writer waits would split the queue in two).

The lock only orders this library's writers: SQLite's own lock still guards the data, so a
writer outside the library, a deleted lock file or a filesystem without ``flock`` costs
fairness, never correctness. The OS releases the lock of a process that dies, whatever killed it.
"""

from __future__ import annotations

import errno
import os
import threading
import time

try:
    import fcntl
except ImportError:  # not POSIX: writers rely on SQLite's busy timeout alone
    fcntl = None  # type: ignore[assignment]  # the module is absent off POSIX

AVAILABLE = fcntl is not None
SUFFIX = "-writer.lock"
FILE_MODE = 0o600
# flock errors meaning "this filesystem has no such lock" (some network and FUSE mounts).
_NO_OS_LOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS,
                         errno.EINVAL})


class QueueTimeout(Exception):
    """The deadline passed while an earlier writer still held the lock."""


class NoOSLock(Exception):
    """The filesystem refuses ``flock``: writers must go without the queue."""


def lock_path(path: str | os.PathLike[str]) -> str:
    return f"{path}{SUFFIX}"


def _wait(fd: int, timeout: float) -> bool:
    """Block in ``flock(LOCK_EX)`` on ``fd`` for at most ``timeout`` seconds; True when held.

    ``flock`` has no timeout, so the blocking call runs on a helper thread. When the caller
    stops waiting, ``fd`` passes to the helper, which closes it (releasing the lock at once if
    it was granted meanwhile). An OSError from ``flock`` is raised here with ``fd`` still open.
    """
    granted = threading.Event()
    guard = threading.Lock()
    abandoned = False
    failure: list[OSError] = []

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as err:
            failure.append(err)
        with guard:
            if abandoned:
                os.close(fd)
                return
            granted.set()

    threading.Thread(target=wait, name="hermes-store-writer-queue", daemon=True).start()
    granted.wait(max(0.0, timeout))
    with guard:
        if not granted.is_set():
            abandoned = True
            return False
    if failure:
        raise failure[0]
    return True


def join(path: str | os.PathLike[str], deadline: float) -> int | None:
    """Wait for the lock until ``deadline`` (``time.monotonic()``); the descriptor holding it.

    None when the lock file cannot be opened (a read-only directory, a file owned by another
    user): that write goes without the queue and the next one tries again. Raises
    :class:`QueueTimeout` when the deadline passes first, :class:`NoOSLock` when the
    filesystem has no ``flock``.
    """
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        if _wait(fd, deadline - time.monotonic()):
            return fd
    except OSError as err:
        os.close(fd)
        if err.errno in _NO_OS_LOCK:
            raise NoOSLock(str(err)) from err
        raise
    raise QueueTimeout  # fd now belongs to the waiting thread, which closes it


def leave(fd: int) -> None:
    """Release the lock and close its descriptor."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)  # explicitly: a forked child may share the descriptor
    finally:
        os.close(fd)
