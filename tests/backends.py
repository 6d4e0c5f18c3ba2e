"""The PostgreSQL server the two-backend tests use, and helpers that work on either backend.

Where the server comes from, in order:

1. ``$HERMES_STORE_TEST_PG_URL`` (a role that may CREATE DATABASE);
2. the server on 127.0.0.1:5432 as role ``postgres`` (trust auth on this project's machines);
3. a throwaway cluster started from installed binaries (``initdb``/``pg_ctl``, as
   pytest-postgresql does), stopped when the session ends;
4. none: the PostgreSQL variants skip, saying why, unless ``HERMES_STORE_REQUIRE_PG=1`` (CI),
   which turns the skip into a failure.

Each test gets its own database, dropped after it. Databases at head are cloned from a template
that one ``upgrade`` builds per session (a clone costs a fraction of an upgrade).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, make_url

from hermes_store.db import engine as engine_mod
from hermes_store.paths import resolve_location

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REQUIRE_ENV = "HERMES_STORE_REQUIRE_PG"
URL_ENV = "HERMES_STORE_TEST_PG_URL"
BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def closed_port() -> int:
    """A local TCP port nothing listens on (a server that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0")


def _admin(url: URL) -> Any:
    import psycopg  # the postgres extra: imported only when a server is wanted

    return psycopg.connect(host=url.host, port=url.port or 5432, user=url.username,
                           password=url.password, dbname=url.database or "postgres",
                           autocommit=True, connect_timeout=3)


@dataclass
class Cluster:
    """A throwaway cluster in a temporary directory (stopped and removed at the end)."""

    root: Path
    port: int
    bindir: Path
    user: str | None = None

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user:  # initdb refuses to run as root
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    @classmethod
    def _make(cls) -> Cluster:
        bindir = next((d for d in BIN_DIRS if (d / "initdb").exists()), None)
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
        root = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
        user = "postgres" if os.geteuid() == 0 else None
        if user:
            shutil.chown(root, user)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return cls(root, port, bindir, user)

    @classmethod
    def start(cls) -> Cluster:
        cluster = cls._make()
        # initdb -A trust also trusts local replication connections (a standby's).
        cluster._run("initdb", "-D", str(cluster.root / "data"), "-U", "postgres", "-A",
                     "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        cluster._launch()
        return cluster

    def _launch(self) -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-w", "-l", str(self.root / "log"),
                  "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                  "-c fsync=off", "start")

    def standby(self) -> Cluster:
        """A hot standby of this cluster, streaming from it (``pg_basebackup -R``)."""
        standby = type(self)._make()
        try:
            standby._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U",
                         "postgres", "-D", str(standby.root / "data"), "-R", "-X", "stream",
                         "-c", "fast", "--no-sync")
            standby._launch()
        except Exception:
            standby.stop()
            raise
        return standby

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@dataclass
class PgServer:
    """Creates and drops one database per test on a server we may administer."""

    admin_url: URL
    conn: Any
    cluster: Cluster | None = None
    template: str | None = None
    # With HERMES_STORE_TEST_VIA=pgbouncer the stores' URLs go through this pooler; creating
    # and dropping databases stays direct.
    pooler: Pooler | None = None
    prefix: str = field(default_factory=lambda: f"hermes_test_{uuid.uuid4().hex[:8]}")
    _counter: Iterator[int] = field(default_factory=itertools.count)

    @classmethod
    def find(cls) -> tuple[PgServer | None, str]:
        """The server to use, or None and the reason there is none."""
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return None, "psycopg is not installed (pip install 'hermes-store[postgres]')"
        reasons = []
        candidates = [os.environ[URL_ENV]] if os.environ.get(URL_ENV) else [LOCAL_URL]
        for raw in candidates:
            url = make_url(raw)
            try:
                return cls(url, _admin(url)), ""
            except Exception as err:  # noqa: BLE001 - any failure: try the next source
                reasons.append(f"{url.render_as_string(hide_password=True)}: {err}".strip())
        try:
            cluster = Cluster.start()
        except Exception as err:  # noqa: BLE001
            reasons.append(f"throwaway cluster: {err}")
            return None, "no PostgreSQL server: " + "; ".join(reasons)
        url = make_url(cluster.url)
        return cls(url, _admin(url), cluster=cluster), ""

    def direct_url_for(self, name: str) -> str:
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def url_for(self, name: str) -> str:
        direct = self.direct_url_for(name)
        return self.pooler.url_for(direct) if self.pooler is not None else direct

    def _create(self, template: str) -> str:
        name = f"{self.prefix}_{next(self._counter)}"
        self.conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def empty_database(self) -> str:
        return self.url_for(self._create("template0"))

    def head_database(self) -> str:
        if self.template is None:
            from hermes_store.db import migrate

            name = self._create("template0")
            migrate.upgrade(self.direct_url_for(name))  # a pooler would keep connections
            engine_mod.dispose_all()  # a template must have no connections
            self.template = name
        return self.url_for(self._create(self.template))

    def drop(self, url: str) -> None:
        name = make_url(url).database
        self.conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        if self.pooler is not None:
            self.pooler.stop()
        with contextlib.suppress(Exception):
            if self.template:
                self.conn.execute(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
            self.conn.close()
        if self.cluster is not None:
            self.cluster.stop()


# --------------------------------------------------------------------------- either backend


@contextlib.contextmanager
def holding_write_lock(location: str) -> Iterator[Any]:
    """Another process's writer in mid-transaction, until the block ends: it holds what every
    writer needs (SQLite's write lock; on PostgreSQL the tables, locked against writes but not
    reads). Yields the holder's ``execute`` (plain SQL without parameters)."""
    found = resolve_location(location)
    if found.path is not None:
        holder = sqlite3.connect(found.path, isolation_level=None, timeout=0)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield holder.execute
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    holder = _admin(found.url)
    holder.autocommit = False
    holder.execute("LOCK TABLE sessions, messages, state_meta IN EXCLUSIVE MODE")
    try:
        yield holder.execute
    finally:
        holder.rollback()
        holder.close()



def sql(target: Any, statement: str, **params: Any) -> list[Any]:
    """Run one statement (named ``:params``) in its own committed transaction on a store or an
    Engine, and return its rows (none for a write). Tests use it to set up odd data."""
    eng = target if hasattr(target, "dialect") else target.engine

    def unit(conn: Any) -> list[Any]:
        result = conn.execute(text(statement), params)
        return list(result) if result.returns_rows else []

    return engine_mod.run_write(eng, unit)


def table_names(location: Any) -> set[str]:
    with engine_mod.reading(engine_mod.open_engine(location, readonly=True)) as conn:
        return set(inspect(conn).get_table_names())


def column_names(location: Any, table: str) -> list[str]:
    with engine_mod.reading(engine_mod.open_engine(location, readonly=True)) as conn:
        return [c["name"] for c in inspect(conn).get_columns(table)]


def sql_many(target: Any, statement: str, rows: list[dict[str, Any]]) -> None:
    """One statement run for each of ``rows`` (executemany), committed together."""
    eng = target if hasattr(target, "dialect") else target.engine
    engine_mod.run_write(eng, lambda conn: conn.execute(text(statement), rows))


# --------------------------------------------------------------------------- pgbouncer

POOLER_ENV = "HERMES_STORE_TEST_VIA"  # "pgbouncer": the PostgreSQL variants go through one


def pooled_run() -> bool:
    return os.environ.get(POOLER_ENV, "").strip().lower() == "pgbouncer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pooler:
    """Debian's pgbouncer in transaction mode on a free port, in front of ``server`` (its
    config, log and pid file in a temporary directory; stopped and removed at the end)."""

    root: Path
    port: int
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, server: URL) -> Pooler:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed (apt-get install -y pgbouncer)")
        root = Path(tempfile.mkdtemp(prefix="hermes-pgbouncer-"))
        port = free_port()
        user = server.username or "postgres"
        (root / "users.txt").write_text(f'"{user}" ""\n')
        (root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
            "pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 5\n"
            "server_reset_query =\nignore_startup_parameters = extra_float_digits,options\n"
            "log_connections = 0\nlog_disconnections = 0\n"
            f"logfile = {root / 'log'}\npidfile = {root / 'pid'}\n")
        cmd = [binary, str(root / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            shutil.chown(root, "postgres")
            for child in root.iterdir():
                shutil.chown(child, "postgres")
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        # Its log goes to the file only: a pipe nobody reads would stop it once full.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pooler = cls(root, port, proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = root / "log"
                err = log.read_text()[-2000:] if log.exists() else ""
                shutil.rmtree(root, ignore_errors=True)
                raise RuntimeError(f"pgbouncer exited: {err.strip()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return pooler
            time.sleep(0.05)
        pooler.stop()
        raise RuntimeError("pgbouncer did not start listening within 10 s")

    def url_for(self, direct: str) -> str:
        """The same database and role through the pooler."""
        url = make_url(direct).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- replicas


@dataclass
class ReplicaPair:
    """A primary and a hot standby streaming from it, both throwaway clusters on free ports
    (the machine's own server is never reconfigured)."""

    primary: Cluster
    standby: Cluster
    admin: Any = None

    @classmethod
    def start(cls) -> ReplicaPair:
        primary = Cluster.start()
        try:
            pair = cls(primary, primary.standby())
        except Exception:
            primary.stop()
            raise
        pair.admin = _admin(make_url(primary.url))
        return pair

    def urls(self, name: str) -> tuple[str, str]:
        """(primary, standby) URLs of database ``name``."""
        return (make_url(self.primary.url).set(database=name).render_as_string(False),
                make_url(self.standby.url).set(database=name).render_as_string(False))

    def standby_admin(self) -> Any:
        return _admin(make_url(self.standby.url))

    def wait_for_replay(self, timeout_s: float = 30.0) -> None:
        """Return once the standby has replayed everything the primary had committed."""
        target = self.admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with self.standby_admin() as standby:
            deadline = time.monotonic() + timeout_s
            while not standby.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                      (str(target),)).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby did not replay {target} in {timeout_s}s")
                time.sleep(0.01)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.admin.close()
        self.standby.stop()
        self.primary.stop()
