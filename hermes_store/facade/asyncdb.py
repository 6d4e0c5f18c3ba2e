"""``AsyncSessionDB``: every public method of a ``SessionDB``, awaitable (docs/v21.md#async).

For event-loop callers (the gateway): each call runs in the default executor through
``asyncio.to_thread``, so the loop never blocks on SQLite's locks. The wrapper adds nothing
else: no pooling or ordering (concurrent awaits run in parallel threads, which the store
allows), no lifecycle (it never opens or closes the store; callers keep using ``_db`` from
worker threads and at shutdown), no subclassing, and no dunders forwarded.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any


class AsyncSessionDB:
    """Wrap ``db``: attribute lookups forward to it when made, callables become coroutines."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        if name == "_db" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        value = getattr(self._db, name)
        if not callable(value):
            return value
        return _awaitable(value)

    def __repr__(self) -> str:
        return f"AsyncSessionDB({self._db!r})"


def _awaitable(fn: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return call
