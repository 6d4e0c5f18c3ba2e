"""Reads on a replica, writes on the primary, and read-your-writes between them.

A store with a read location (``SessionDB(url, read_url=…)``, ``$HERMES_STORE_READ_URL``,
``--read-db``) sends searches and listings to a hot standby and everything else to the primary.
A standby replays the primary's WAL some milliseconds behind it, so a process that has just
written would not find its own rows there. The fence that prevents it:

* every write this process commits on the primary marks the primary's engine
  (:func:`note_write`: a time stamp, no round trip);
* the next replica read after such a mark first takes the primary's current WAL position
  (``pg_current_wal_lsn()``; it is at or past the commit of every write that has returned);
* a replica read checks ``pg_last_wal_replay_lsn()`` against that position inside its own
  snapshot: replayed, and the replica serves the read and the fence is dropped, so later reads
  cost nothing extra until the next write; not yet, and that read goes to the primary.

Other processes' writes reach this process's replica reads when the standby has replayed them,
as with any replica. docs/scale-out.md#read-replicas has the figures.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator

from sqlalchemy import Connection, Engine, text

from hermes_store.db import engine as engine_mod
from hermes_store.db import engine_info

_LAST_WRITE = "hermes_last_write"
_PRIMARY_POSITION = text("SELECT pg_current_wal_lsn()::text")
# NULL when the read location is not in recovery (a primary itself): it has every commit.
_REPLAYED = text("SELECT coalesce(pg_last_wal_replay_lsn() >= CAST(:lsn AS pg_lsn), true)")


def note_write(primary: Engine) -> None:
    """This process committed a write on ``primary`` (called once the write returned)."""
    engine_info.info_of(primary)[_LAST_WRITE] = time.monotonic()


class ReadRoute:
    """Where one store's replica-eligible reads go: ``replica`` unless it may not have replayed
    this process's latest write yet, then ``primary``."""

    def __init__(self, primary: Engine, replica: Engine) -> None:
        self.primary = primary
        self.replica = replica
        self.served: Counter[str] = Counter()  # reads each side served (tests, diagnostics)
        self._lock = threading.Lock()
        self._fence: str | None = None
        self._fenced_at = float("-inf")

    def _pending_fence(self) -> str | None:
        last = engine_info.info_of(self.primary).get(_LAST_WRITE)
        with self._lock:
            if last is not None and last >= self._fenced_at:
                taken = time.monotonic()
                with engine_mod.reading(self.primary) as conn:
                    self._fence = conn.execute(_PRIMARY_POSITION).scalar_one()
                self._fenced_at = taken
            return self._fence

    def _passed(self, fence: str) -> None:
        with self._lock:
            if self._fence == fence:
                self._fence = None

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction on the replica, or on the primary while the fence holds."""
        fence = self._pending_fence()
        with engine_mod.reading(self.replica) as conn:
            if fence is None or conn.execute(_REPLAYED, {"lsn": fence}).scalar():
                if fence is not None:
                    self._passed(fence)
                self.served["replica"] += 1
                yield conn
                return
        self.served["primary"] += 1
        with engine_mod.reading(self.primary) as conn:
            yield conn
