"""The drop-in for the agent's store module (docs/v21.md#module-names).

An agent whose ``hermes_state.py`` becomes ``from hermes_store.compat import *`` runs unchanged:
this module exports exactly the names that module's callers use, and nothing of its own but the
path default. ``_db_opens_cleanly`` is private there, yet the agent's CLI imports it by name from
that module, so it is in ``__all__``: without it, ``from hermes_state import _db_opens_cleanly``
would fail on a star-imported stand-in.

The agent's tests also reach two private names of that module: ``_set_last_init_error`` (to
reset the last open failure) and ``_repair_attempted_paths`` (the paths an open has tried to
repair). Both are the facade's own objects, and rebinding either here (``monkeypatch.setattr``)
rebinds it where the open path reads it.

``DEFAULT_DB_PATH`` is resolved at import; a path-less ``SessionDB()`` uses it when it was
rebound here (``hermes_store.compat.DEFAULT_DB_PATH = …``), else resolves the default when it is
constructed (``$HERMES_HOME`` as it is then). A star import copies the name, so rebinding the
copy in another module is not seen.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from hermes_store.db.agent_schema import DEFERRED_INDEX_SQL, FTS_SQL, FTS_TRIGRAM_SQL, SCHEMA_SQL
from hermes_store.db.engine import apply_wal_with_fallback, is_malformed_db_error
from hermes_store.db.migrate import AGENT_SCHEMA_VERSION as SCHEMA_VERSION
from hermes_store.facade import opening, session_db
from hermes_store.facade.asyncdb import AsyncSessionDB
from hermes_store.facade.opening import (
    _repair_attempted_paths,
    _set_last_init_error,
    format_session_db_unavailable,
    get_last_init_error,
)
from hermes_store.ops.schema_repair import db_opens_cleanly as _db_opens_cleanly
from hermes_store.ops.schema_repair import repair_state_db_schema
from hermes_store.paths import default_db_path
from hermes_store.repo.workspace import workspace_key
from hermes_store.search.language import MAX_QUERY_CHARS as MAX_FTS5_QUERY_CHARS

__all__ = [
    "DEFAULT_DB_PATH",
    "DEFERRED_INDEX_SQL",
    "FTS_SQL",
    "FTS_TRIGRAM_SQL",
    "MAX_FTS5_QUERY_CHARS",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "AsyncSessionDB",
    "SessionDB",
    "_db_opens_cleanly",
    "_repair_attempted_paths",
    "_set_last_init_error",
    "apply_wal_with_fallback",
    "format_session_db_unavailable",
    "get_last_init_error",
    "is_malformed_db_error",
    "repair_state_db_schema",
    "workspace_key",
]

DEFAULT_DB_PATH = default_db_path()
_IMPORTED_DEFAULT = DEFAULT_DB_PATH


class SessionDB(session_db.SessionDB):
    """``hermes_store.SessionDB``, with a path-less open honouring a rebound
    ``DEFAULT_DB_PATH``."""

    def __init__(self, db_path: str | os.PathLike[str] | None = None, read_only: bool = False,
                 **kwargs: Any) -> None:
        if db_path is None and DEFAULT_DB_PATH is not _IMPORTED_DEFAULT:
            db_path = DEFAULT_DB_PATH
        super().__init__(db_path, read_only, **kwargs)



_SHARED_WITH_OPENING = frozenset({"_repair_attempted_paths", "_set_last_init_error"})


class _Module(types.ModuleType):
    """This module's type: rebinding a name it shares with the open path rebinds it there too,
    so a test's patch reaches the code that opens stores."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHARED_WITH_OPENING:
            setattr(opening, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Module
