"""Where the store lives: an explicit path, else $HERMES_HOME/state.db, else ~/.hermes/state.db."""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "state.db"


def hermes_home() -> Path:
    """The agent's home directory; resolved on every call so a changed environment is honoured."""
    home = os.environ.get("HERMES_HOME", "").strip()
    return Path(home).expanduser() if home else Path.home() / ".hermes"


def default_db_path() -> Path:
    return hermes_home() / DB_FILENAME


def resolve_db_path(db: str | os.PathLike[str] | None = None, profile: str | None = None) -> Path:
    """The store to use: ``db`` if given, else the profile's store, else the default."""
    if db is not None and str(db) != "":
        return Path(db).expanduser()
    if profile:
        return Path.home() / ".hermes" / "profiles" / profile / DB_FILENAME
    return default_db_path()
