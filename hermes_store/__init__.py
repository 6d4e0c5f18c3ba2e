"""hermes_store: the Hermes agent's session store on SQLAlchemy 2, Alembic and SQLite FTS5."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_store.db.engine import open_engine
    from hermes_store.db.models import Base, ChatSession, Message, StateMeta
    from hermes_store.errors import HermesStoreError
    from hermes_store.facade import SessionDB
    from hermes_store.version import __version__

__all__ = ["Base", "ChatSession", "HermesStoreError", "Message", "SessionDB", "StateMeta",
           "open_engine", "__version__"]

# The public names, each imported on first use: importing the package (as `hermes-store
# --version` does) must not load SQLAlchemy.
_HOMES = {"Base": "hermes_store.db.models", "ChatSession": "hermes_store.db.models",
          "Message": "hermes_store.db.models", "StateMeta": "hermes_store.db.models",
          "HermesStoreError": "hermes_store.errors", "SessionDB": "hermes_store.facade",
          "open_engine": "hermes_store.db.engine",
          # read from the distribution's metadata, which costs a reading command a fifth
          "__version__": "hermes_store.version"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'hermes_store' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
