"""Where the store lives: an explicit path, else $HERMES_HOME/state.db, else ~/.hermes/state.db."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hermes_store.errors import StoreNotFoundError, UsageError

DB_FILENAME = "state.db"
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def hermes_home() -> Path:
    """The agent's home directory; resolved on every call so a changed environment is honoured."""
    home = os.environ.get("HERMES_HOME", "").strip()
    return Path(home).expanduser() if home else Path.home() / ".hermes"


def default_db_path() -> Path:
    return hermes_home() / DB_FILENAME


def resolve_db_path(db: str | os.PathLike[str] | None = None, profile: str | None = None) -> Path:
    """The store to use: ``db`` if given, else the profile's store under the home, else the
    default. Both at once, or a profile name that is not a plain name, is a UsageError."""
    explicit = db is not None and str(db) != ""
    if explicit and profile:
        raise UsageError("give --db or --profile, not both")
    if explicit:
        return Path(db).expanduser()  # type: ignore[arg-type]
    if profile:
        if not _PROFILE_NAME.match(profile):
            raise UsageError(f"--profile {profile!r}: a profile name is letters, digits, '.', "
                             "'_' and '-', starting with a letter or digit")
        return hermes_home() / "profiles" / profile / DB_FILENAME
    return default_db_path()


def require_parent(path: Path) -> None:
    """Only the default home is created on demand. A store anywhere else needs an existing
    directory, so a mistyped ``--db`` is reported (StoreNotFoundError) instead of creating a
    directory tree or reading as an empty store."""
    parent = path.expanduser().parent
    if parent.is_dir():
        return
    if parent.exists():
        raise StoreNotFoundError(f"{parent} is not a directory (for the store {path})")
    if parent.absolute() == hermes_home().absolute():
        return
    raise StoreNotFoundError(f"no directory {parent} for the store {path}: check the path "
                             f"(only {hermes_home()} is created on demand)")
