"""Where the store lives: a file path or a SQLAlchemy URL.

A location is given explicitly (``--db``, ``SessionDB(db_path)``, ``alembic -x db=…``), else it is
``$HERMES_STORE_URL`` when set, else ``$HERMES_HOME/state.db``, else ``~/.hermes/state.db``.

Anything shaped ``scheme://…`` is a URL and never a file name (``Path("postgresql://h/db")``
would quietly become the relative directory ``postgresql:/h``). ``sqlite:///PATH`` names a file
and is treated exactly like ``PATH``; ``postgresql://`` and ``postgres://`` mean psycopg 3,
spelled ``postgresql+psycopg`` internally because SQLAlchemy 2.0 and 2.1 pick different drivers
for a bare ``postgresql://``. A location is shown only through :attr:`StoreLocation.display`,
which hides the password.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_store.errors import StoreNotFoundError, StoreUnopenableError, UsageError

if TYPE_CHECKING:  # SQLAlchemy is imported on use: `hermes-store --version` must not load it
    from sqlalchemy.engine import URL

DB_FILENAME = "state.db"
# The first 16 bytes of every SQLite database file (an empty file is a new database too).
SQLITE_HEADER = b"SQLite format 3\x00"
STORE_URL_ENV = "HERMES_STORE_URL"
READ_URL_ENV = "HERMES_STORE_READ_URL"
PG_DRIVER = "postgresql+psycopg"
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

# Two or more characters before "://": a one-letter "scheme" is a Windows drive ("C://x").
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+://")
_PG_NAMES = {"postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg"}
_SQLITE_NAMES = {"sqlite", "sqlite+pysqlite"}
# Query parameters that carry secrets: masked like the password wherever a location is shown.
_SECRET_QUERY_KEYS = ("password", "sslpassword")


def hermes_home() -> Path:
    """The agent's home directory; resolved on every call so a changed environment is honoured."""
    home = os.environ.get("HERMES_HOME", "").strip()
    return Path(home).expanduser() if home else Path.home() / ".hermes"


def default_db_path() -> Path:
    return hermes_home() / DB_FILENAME


def looks_like_url(text: str) -> bool:
    return bool(_URL_RE.match(text.strip()))


@dataclass(frozen=True)
class StoreLocation:
    """One store: ``url`` for SQLAlchemy, ``path`` for a file (``None`` on a server) and the
    password-free ``display`` used in every message, log line and JSON document."""

    server_url: URL | None = field(repr=False)
    path: Path | None
    display: str

    @property
    def url(self) -> URL:
        """The SQLAlchemy URL; a file's is built on use, so that resolving where the store is
        (every command does) never loads SQLAlchemy for ``--help``."""
        if self.server_url is not None:
            return self.server_url
        from sqlalchemy.engine import URL

        return URL.create("sqlite+pysqlite", database=str(self.path))

    @property
    def is_file(self) -> bool:
        return self.path is not None

    @property
    def dialect(self) -> str:
        return "sqlite" if self.path is not None else self.url.get_backend_name()

    @property
    def host(self) -> str:
        return self.url.host or "localhost"

    @property
    def database(self) -> str:
        return self.url.database or ""

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"StoreLocation({self.display!r})"

    @classmethod
    def for_path(cls, path: str | os.PathLike[str]) -> StoreLocation:
        p = Path(path).expanduser()
        return cls(None, p, str(p))

    @classmethod
    def for_url(cls, url: str | URL) -> StoreLocation:
        parsed = _parse_url(url)
        name = parsed.drivername.lower()
        if name in _SQLITE_NAMES:
            if not parsed.database or parsed.database == ":memory:":
                raise UsageError("an in-memory SQLite database cannot hold a store; "
                                 "give a file path or sqlite:///PATH")
            return cls.for_path(parsed.database)
        if name in _PG_NAMES:
            parsed = parsed.set(drivername=PG_DRIVER)
            if not parsed.database:
                raise UsageError(f"{_shown(parsed)}: name the database "
                                 "(postgresql://USER@HOST/DATABASE)")
            return cls(parsed, None, _shown(parsed))
        raise UsageError(
            f"unsupported store URL {_shown(parsed)!r}: use a file path, sqlite:///PATH or "
            "postgresql://USER@HOST/DATABASE (psycopg 3)")


def _parse_url(url: str | URL) -> URL:
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError

    if isinstance(url, URL):
        return url
    try:
        return make_url(url.strip())
    except (ArgumentError, ValueError):
        scheme = url.strip().split("://", 1)[0]
        raise UsageError(f"cannot parse the store URL ({scheme}://…)") from None


def _shown(url: URL) -> str:
    """The URL with its password (and secret query parameters) masked."""
    secrets = {k: "***" for k in _SECRET_QUERY_KEYS if k in url.query}
    if secrets:
        url = url.update_query_dict(secrets)
    return url.render_as_string(hide_password=True)


def resolve_location(db: str | os.PathLike[str] | URL | StoreLocation | None = None,
                     profile: str | None = None) -> StoreLocation:
    """The store to use: ``db`` if given, else the profile's store, else ``$HERMES_STORE_URL``,
    else the default file."""
    explicit = db is not None and str(db) != ""
    if explicit and profile:
        raise UsageError("give --db or --profile, not both")
    if isinstance(db, StoreLocation):
        return db
    if db is not None and not isinstance(db, (str, os.PathLike)):
        return StoreLocation.for_url(db)  # a SQLAlchemy URL
    if explicit and db is not None:
        if isinstance(db, str) and looks_like_url(db):
            return StoreLocation.for_url(db)
        return StoreLocation.for_path(db)
    if profile:
        if not _PROFILE_NAME.match(profile):
            raise UsageError(f"--profile {profile!r}: a profile name is letters, digits, '.', "
                             "'_' and '-', starting with a letter or digit")
        return StoreLocation.for_path(hermes_home() / "profiles" / profile / DB_FILENAME)
    env = os.environ.get(STORE_URL_ENV, "").strip()
    if env:
        return StoreLocation.for_url(env) if looks_like_url(env) else StoreLocation.for_path(env)
    return StoreLocation.for_path(default_db_path())


def resolve_read_location(read: str | URL | StoreLocation | None,
                          store: StoreLocation) -> StoreLocation | None:
    """Where searches and listings may be read (a replica of ``store``): ``read`` if given,
    else ``$HERMES_STORE_READ_URL``, else nowhere else. Only a PostgreSQL store has one: a
    read location given for a file is a usage error, the variable is ignored for one."""
    if isinstance(read, StoreLocation):
        found: StoreLocation | None = read
    elif read is not None and str(read).strip():
        found = StoreLocation.for_url(read)
    else:
        env = os.environ.get(READ_URL_ENV, "").strip()
        found = StoreLocation.for_url(env) if env and store.path is None else None
    if found is None:
        return None
    if found.path is not None or store.path is not None:
        raise UsageError(f"a read location ({found.display}) needs a PostgreSQL store and a "
                         f"PostgreSQL replica of it; the store is {store.display}")
    return found


def resolve_db_path(db: str | os.PathLike[str] | None = None, profile: str | None = None) -> Path:
    """The store's file; a server URL here is a usage error (the caller needs a file)."""
    location = resolve_location(db, profile)
    if location.path is None:
        raise UsageError(f"{location.display} is a database server, not a file")
    return location.path


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


def writable_place(path: Path) -> bool:
    """Whether this process may write the file and create its sidecars (``-wal``, ``-shm``,
    ``-journal``) next to it."""
    parent = path.expanduser().absolute().parent
    return os.access(parent, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))


def open_problem(path: Path, *, write: bool,
                 header: bool = True) -> StoreNotFoundError | StoreUnopenableError | None:
    """Why the store file at ``path`` cannot be opened (for writing when ``write``), or None.

    Decided from the file system before SQLite sees the path, because SQLite's own words for
    these cases ("disk I/O error" for a directory, "unable to open database file", "attempt to
    write a readonly database", "file is not a database") name neither the cause nor the fix.
    A missing file is StoreNotFoundError for a read; a write creates it.
    """
    path = path.expanduser()
    if path.is_dir():
        return StoreUnopenableError(f"{path} is a directory, not a store file: give the "
                                    f"file's path (such as {path / DB_FILENAME})",
                                    reason="directory")
    if not path.exists():
        return None if write else StoreNotFoundError(f"no store at {path}")
    if not os.access(path, os.R_OK):
        return StoreUnopenableError(f"{path}: permission denied (this user may not read it)",
                                    reason="permission")
    head = b""
    try:
        if header:  # not when the caller's process has the file open already (see db.engine)
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_HEADER))
    except IsADirectoryError:  # pragma: no cover - raced with the check above
        head = b""
    except PermissionError:
        return StoreUnopenableError(f"{path}: permission denied (this user may not read it)",
                                    reason="permission")
    # A first page of NULs is a store whose page 1 was lost (damage that ``recover`` works
    # on), not some other kind of file.
    if head and head != SQLITE_HEADER and head.strip(b"\0"):
        return StoreUnopenableError(
            f"{path} is not an SQLite database (it does not start with SQLite's header); "
            "check the path", reason="not_sqlite")
    if write and not writable_place(path):
        return StoreUnopenableError(
            f"{path} is read-only: opened for reading only (this user may not write the file "
            "or its directory); reading commands work, changing it needs write access",
            reason="read_only")
    return None
