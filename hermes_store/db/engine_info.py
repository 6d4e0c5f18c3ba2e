"""The ``info`` dict hermes_store keeps on each Engine it opens (location, read-only flag, the
file's identity, what the server's connections reported, the holders of a shared engine).

SQLAlchemy gives a Connection and a pool record an ``info`` dict but declares none on Engine;
ours lives in the instance's ``__dict__`` under that name (so ``engine.info`` still reads it),
and these two functions are the one typed way in and out.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

_KEY = "info"


def attach(engine: Engine, info: dict[str, Any]) -> dict[str, Any]:
    """Give a newly made ``engine`` its ``info``; returns it."""
    vars(engine)[_KEY] = info
    return info


def info_of(engine: Engine) -> dict[str, Any]:
    """The ``info`` of an engine opened by ``open_engine``."""
    info = vars(engine).get(_KEY)
    if not isinstance(info, dict):
        raise AttributeError(f"{engine!r} was not opened by hermes_store (it has no store info)")
    return info
