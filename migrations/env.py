"""Alembic environment for the Hermes store (SQLite and PostgreSQL).

* The database is the connection handed over by ``hermes_store.db.migrate`` (Alembic cookbook:
  sharing a connection), else ``-x db=PATH`` or ``-x db=URL``, else ``$HERMES_STORE_URL``, else
  ``$HERMES_HOME/state.db`` or ``~/.hermes/state.db``. Connections come from
  ``hermes_store.db.engine``, so pragmas, file modes and our own ``BEGIN`` apply here as
  everywhere.
* DDL is transactional on both: the whole upgrade is one transaction (``BEGIN IMMEDIATE`` on
  SQLite; on PostgreSQL one transaction behind an advisory lock), so a revision that fails
  midway leaves the store at the revision it started from.
* Before an upgrade, a legacy store (``schema_version`` without ``alembic_version``) is stamped at
  the revision equal to its number, and orphan FTS5 shadow tables are dropped, inside the same
  transaction. An upgrade to head first adds the columns the models declare that the file's
  existing tables lack, whatever its stamp says, since revisions of any number index or read
  them (a hand-made file stamped 10 may lack ``sessions.user_id``).
* Revisions see the set of revisions the run goes through as the context option
  ``hermes_upgrade_through``: the legacy index revisions skip building what a later revision of
  the same run retires.
* After an upgrade that reached head, ``hermes_store.ops.adoption.after_upgrade`` runs in the same
  transaction: missing tables and columns, the agent's one-time data steps, and the agent's
  ``schema_version`` stamp (docs/v21.md#open-time-behaviour). Every way of upgrading (the facade,
  ``hermes-store upgrade``, ``alembic upgrade``) so leaves the same file.
* Autogenerate compares only the modelled tables: FTS5 virtual tables and their shadow tables,
  views, the legacy ``schema_version``, the PostgreSQL search columns and indexes, and tables or
  columns a newer upstream release added are not ours to diff (or drop).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine
from hermes_store.db.models import Base

config = context.config
target_metadata = Base.metadata

# The alembic command line gets its log lines ("Running upgrade …"); library callers keep theirs.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _is_upgrade() -> bool:
    if config.attributes.get("hermes_adopt"):
        return True
    cmd = getattr(config.cmd_opts, "cmd", None) if config.cmd_opts is not None else None
    return bool(cmd) and getattr(cmd[0], "__name__", "") == "upgrade"


def _destination_path() -> frozenset[str]:
    """Every revision at or below the upgrade's destination. A legacy revision reads it (as the
    ``hermes_upgrade_through`` option) to leave unbuilt an index that a later revision of the
    same run retires (docs/contracts.md#legacy-stores)."""
    destination = context.get_revision_argument()
    if not _is_upgrade() or not destination:
        return frozenset()
    if isinstance(destination, (tuple, list)):
        destination = destination[0]
    try:
        # A relative "+N" counts from base here: fewer revisions than the run applies, so a
        # revision may build what it could have skipped, never skip what nothing rebuilds.
        return frozenset(r.revision
                         for r in context.script.iterate_revisions(destination, "base"))
    except Exception:  # noqa: BLE001 - alembic raises several kinds for odd arguments
        return frozenset()


def _run(connection) -> None:
    through = _destination_path()
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        transactional_ddl=True,
        include_name=migrate.include_name,
        include_object=migrate.include_object,
        compare_type=True,
        hermes_upgrade_through=through,
    )
    with context.begin_transaction():
        upgrading = _is_upgrade()
        if upgrading:
            migrate.prepare_for_upgrade(connection, context.get_context(), context.script,
                                        to_head=context.script.get_current_head() in through)
        context.run_migrations()
        if upgrading and context.get_context().get_current_revision() == \
                context.script.get_current_head():
            from hermes_store.ops import adoption

            adoption.after_upgrade(connection)


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = open_engine(migrate.location_from_config(config))
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn = conn.execution_options(hermes_begin="IMMEDIATE")
        else:
            conn = conn.execution_options(isolation_level="READ COMMITTED")
        _run(conn)
        if conn.in_transaction():
            conn.commit()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) mode is not supported: the legacy adoption needs the database")
run_migrations_online()
