"""``SessionDB``: the documented session API (docs/contracts.md#session-api) as a thin layer.

Each method validates and serialises its arguments, then runs one repository call in one
transaction: writes through ``engine.run_write`` (``BEGIN IMMEDIATE``, retried as a whole
within a time budget), reads through ``engine.reading`` (short read transactions). The logic
lives in ``sessions``, ``messages``, ``titles``, ``lineage``, ``queries`` and ``retention``.
v11 methods whose behaviour v21 changed live by noun in ``facade/`` (messages, listing, bulk),
bound here like the v21 methods.
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection

from hermes_store.content import check_text
from hermes_store.db import engine as engine_mod
from hermes_store.db import replica
from hermes_store.db.sqlite_driver import dbapi_of
from hermes_store.errors import BackendNotSupportedError
from hermes_store.facade import (
    arguments,
    bulk,
    compression,
    gateway,
    handoff,
    history,
    importing,
    lineage_export,
    lookup,
    opening,
    topics,
    upkeep,
    workspace,
)
from hermes_store.facade import listing as facade_listing
from hermes_store.facade import messages as facade_messages
from hermes_store.paths import StoreLocation, resolve_location
from hermes_store.repo import bigrams, lineage, messages, retention, sessions, titles, usage
from hermes_store.repo import compression as repo_compression
from hermes_store.repo import listing as queries
from hermes_store.search import language

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLOSED = "Cannot operate on a closed database."


def _now() -> float:
    return time.time()


class SessionDB:
    """A Hermes session store: drop-in for the agent's v11 ``SessionDB``."""

    MAX_TITLE_LENGTH = titles.MAX_TITLE_LENGTH
    _WRITE_MAX_RETRIES = engine_mod.MIN_ATTEMPTS
    _WRITE_RETRY_MIN_S = engine_mod.RETRY_MIN_S
    _WRITE_RETRY_MAX_S = engine_mod.RETRY_MAX_S
    _CHECKPOINT_EVERY_N_WRITES = engine_mod.CHECKPOINT_EVERY_N_WRITES
    _OPTIMIZE_EVERY_N_WRITES = upkeep.EVERY_N_WRITES

    def __init__(self, db_path: str | os.PathLike[str] | StoreLocation | None = None,
                 read_only: bool = False, *, readonly: bool | None = None,
                 read_url: str | StoreLocation | None = None) -> None:
        """Open (creating, upgrading or adopting) the store: docs/v21.md#open-time-behaviour.

        ``db_path``: a file path or a URL (``postgresql://…``); ``db_path`` the attribute is
        the file (None on a server) and ``location`` the store either way. ``read_only`` (the
        v21 keyword; ``readonly`` is the older spelling) opens the store read-only: no schema
        work, no write lock, and a store behind head is refused. ``read_url`` (else
        ``$HERMES_STORE_READ_URL``): a PostgreSQL replica that serves searches and listings,
        with read-your-writes for this process (docs/scale-out.md#read-replicas).
        """
        self._closed = True
        self._raw: PoolProxiedConnection | None = None
        self._route: replica.ReadRoute | None = None
        self._write_count = itertools.count(1)
        try:
            self._open(db_path, bool(read_only or readonly))
            self._route = opening.read_route(self._engine, self.location, read_url)
        except Exception as exc:
            opening._set_last_init_error(exc)
            raise
        self._closed = False

    def _open(self, db_path: str | os.PathLike[str] | StoreLocation | None,
              read_only: bool) -> None:
        self.location = resolve_location(db_path)
        self.db_path = self.location.path
        self.read_only = self.readonly = read_only
        self._engine = opening.open_store(self.location, read_only=read_only)

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """PASSIVE checkpoint (best effort), then release the connections (on a server, the
        last ``SessionDB`` on a URL closes its pool); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._raw is not None:
            try:
                dbapi_of(self._raw).row_factory = None
                self._raw.close()
            except Exception:  # noqa: BLE001 - closing must not fail
                pass
            self._raw = None
        if not self.readonly:
            engine_mod.checkpoint(self._engine, "PASSIVE")
        opening.close_store(self._engine)

    @property
    def engine(self) -> Engine:
        if self._closed:
            raise sqlite3.ProgrammingError(_CLOSED)
        return self._engine

    @property
    def _conn(self) -> sqlite3.Connection:
        """A raw autocommit ``sqlite3`` connection with ``Row`` rows (for v11-era tests)."""
        eng = self._sqlite_only("the raw sqlite3 connection (_conn)")
        if self._raw is None:
            self._raw = eng.raw_connection()
            dbapi_of(self._raw).row_factory = sqlite3.Row
        return dbapi_of(self._raw)

    def _sqlite_only(self, what: str) -> Engine:
        eng = self.engine
        if engine_mod.is_server(eng):
            raise BackendNotSupportedError(f"{what} exists for a SQLite store only; "
                                           f"{self.location} is a PostgreSQL database")
        return eng

    def _write(self, fn: Callable[[Connection], T], *, append: bool = False,
               what: str = "write") -> T:
        # Appends and session creation are atomic statements only (INSERT, upsert, counter
        # increments): on PostgreSQL they need no serializable isolation and never conflict.
        budget = engine_mod.APPEND_BUDGET_S if append else engine_mod.WRITE_BUDGET_S
        isolation = engine_mod.READ_COMMITTED if append else None
        result = engine_mod.run_write(self.engine, fn, budget=budget, what=what,
                                      isolation=isolation)
        replica.note_write(self._engine)
        upkeep.after_write(self, next(self._write_count))
        return result

    def _read(self, fn: Callable[[Connection], T], *, replica_ok: bool = False) -> T:
        """One read transaction; ``replica_ok`` reads (searches, listings) go to the read
        location when there is one."""
        route = self._route if replica_ok else None
        with (engine_mod.reading(self.engine) if route is None
              else route.reading()) as conn:
            return fn(conn)

    def _execute_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(raw sqlite3 connection)`` in one write transaction; return its result."""
        self._sqlite_only("_execute_write (a raw sqlite3 connection)")

        def unit(conn: Connection) -> T:
            raw = dbapi_of(conn.connection)
            raw.row_factory = sqlite3.Row
            try:
                return fn(raw)
            finally:
                raw.row_factory = None

        return self._write(unit)

    @staticmethod
    def _sanitize_fts5_query(query: str | None) -> str:
        return language.sanitize_query(query)

    @staticmethod
    def _contains_cjk(text: str | None) -> bool:
        return bigrams.contains_cjk(text)

    @staticmethod
    def sanitize_title(title: str | None) -> str | None:
        return titles.sanitize_title(title)

    # ----------------------------------------------------------------- sessions

    def create_session(self, session_id: str, source: str, **kwargs: Any) -> str:
        sessions.check_session_id(session_id)
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, not {type(source).__name__}")
        check_text("source", source)
        values = sessions.prepare_create_fields(session_id, kwargs)
        now = _now()
        return self._write(lambda c: sessions.create_or_fill(c, session_id, source, values, now),
                           append=True, what="create_session")

    def ensure_session(self, session_id: str, source: str = "unknown", model: str | None = None,
                       **kwargs: Any) -> str:
        if model is not None:
            kwargs["model"] = model
        return self.create_session(session_id, source, **kwargs)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session's row, or None. A plain dict: it is every column ``sessions`` has in
        this store, and the agent's newer releases add columns we do not know of."""
        if not self._id_ok(session_id):
            return None
        return self._read(lambda c: sessions.get_session(c, session_id))

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        ref = (session_id_or_prefix.strip() if isinstance(session_id_or_prefix, str)
               else session_id_or_prefix)
        if not self._id_ok(ref):
            return None
        return self._read(lambda c: sessions.resolve_session_id(c, ref))

    def get_lineage_tip(self, session_id: str) -> str | None:
        """The newest segment of the compression lineage holding ``session_id`` (resume there:
        after compression the messages live under the tip); None for an unknown id."""
        if not self._id_ok(session_id):
            return None
        return self._read(lambda c: lineage.tip_of(c, session_id))

    def end_session(self, session_id: str, end_reason: str) -> None:
        if not self._id_ok(session_id):
            return
        check_text("end_reason", end_reason)
        now = _now()
        self._write(lambda c: sessions.end_session(c, session_id, end_reason, now),
                    what="end_session")

    def reopen_session(self, session_id: str) -> None:
        if self._id_ok(session_id):
            self._write(lambda c: sessions.reopen_session(c, session_id), what="reopen_session")

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        if not self._id_ok(session_id):
            return
        check_text("system_prompt", system_prompt)
        self._write(lambda c: sessions.update_system_prompt(c, session_id, system_prompt),
                    what="update_system_prompt")

    def update_token_counts(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0,
                            model: str | None = None, cache_read_tokens: int = 0,
                            cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                            estimated_cost_usd: float | None = None,
                            actual_cost_usd: float | None = None, cost_status: str | None = None,
                            cost_source: str | None = None, pricing_version: str | None = None,
                            billing_provider: str | None = None,
                            billing_base_url: str | None = None, billing_mode: str | None = None,
                            api_call_count: int | None = None, absolute: bool = False) -> None:
        """Move the usage counters (docs/v21.md#behaviour-changes): accounted calls fill or
        replace the billing route, incremental ones also add to the per-model usage rows."""
        sessions.check_session_id(session_id)
        sessions.check_finite("estimated_cost_usd", estimated_cost_usd)
        sessions.check_finite("actual_cost_usd", actual_cost_usd)
        tokens = {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_read_tokens": cache_read_tokens,
                  "cache_write_tokens": cache_write_tokens, "reasoning_tokens": reasoning_tokens}
        for name, value in (*tokens.items(), ("api_call_count", api_call_count)):
            sessions.check_count(name, value)
        call = usage.UsageCall(
            session_id, _now(), model=model, tokens=tokens, estimated_cost_usd=estimated_cost_usd,
            actual_cost_usd=actual_cost_usd, cost_status=cost_status, cost_source=cost_source,
            pricing_version=pricing_version,
            route={"billing_provider": billing_provider, "billing_base_url": billing_base_url,
                   "billing_mode": billing_mode},
            api_call_count=api_call_count, absolute=absolute)
        self._write(lambda c: usage.record(c, call), what="update_token_counts")

    # Readers and no-op writers: a non-str is a TypeError, an unstorable id simply unknown.
    _id_ok = staticmethod(arguments.known_id)

    # ----------------------------------------------------------------- titles

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        cleaned = titles.sanitize_title(title)
        if not self._id_ok(session_id):
            return False
        # A continued segment's title moves here (docs/v21.md#behaviour-changes).
        return self._write(lambda c: repo_compression.set_title(c, session_id, cleaned),
                           what="set_session_title")

    def get_session_title(self, session_id: str) -> str | None:
        if not self._id_ok(session_id):
            return None
        return self._read(lambda c: sessions.get_title(c, session_id))

    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """The row (as :meth:`get_session`) of the session with that title, or None."""
        cleaned = titles.clean_lookup_title(self._title_arg(title))
        if cleaned is None:
            return None
        return self._read(lambda c: sessions.session_by_title(c, cleaned))

    def resolve_session_by_title(self, title: str) -> str | None:
        cleaned = titles.clean_lookup_title(self._title_arg(title))
        if cleaned is None:
            return None
        return self._read(lambda c: sessions.resolve_by_title(c, cleaned))

    def get_next_title_in_lineage(self, base_title: str) -> str:
        raw = self._title_arg(base_title)
        if raw is None:
            raise TypeError("base_title must be a str")
        base = titles.clean_unbounded(raw) or raw
        return self._read(lambda c: sessions.next_title_in_lineage(c, base))

    @staticmethod
    def _title_arg(title: object) -> str | None:
        if title is not None and not isinstance(title, str):
            raise TypeError(f"a title must be a str or None, not {type(title).__name__}")
        return title

    # ----------------------------------------------------------------- messages
    # v11 methods with their v21 parameters (facade/messages.py)
    append_message = facade_messages.append_message
    get_messages = facade_messages.get_messages
    get_messages_as_conversation = facade_messages.get_messages_as_conversation
    clear_messages = facade_messages.clear_messages
    message_count = facade_messages.message_count

    # ----------------------------------------------------------------- listing
    # v11 methods with their v21 signatures (facade/listing.py)
    list_sessions_rich = facade_listing.list_sessions_rich
    search_sessions = facade_listing.search_sessions
    session_count = facade_listing.session_count
    search_messages = facade_listing.search_messages

    # ----------------------------------------------------------------- export

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """The session's row (as :meth:`get_session`, so a plain dict) with its active
        ``messages``, or None."""
        if not self._id_ok(session_id):
            return None

        def read(conn: Connection) -> dict[str, Any] | None:
            row = sessions.get_session(conn, session_id)
            if row is None:
                return None
            row["messages"] = messages.get_messages(conn, session_id, include_inactive=False)
            return row

        return self._read(read)

    def iter_export(self, source: str | None = None, *,
                    batch: int = 200) -> Iterator[dict[str, Any]]:
        """``export_all`` one session at a time, reading in short transactions of ``batch``.
        Each is the session's row (as :meth:`get_session`, so a plain dict) with
        ``last_active`` and ``messages``."""
        order = self._read(lambda c: queries.iter_session_ids_for_export(c, source=source))
        for start in range(0, len(order), batch):
            page = order[start:start + batch]
            ids = [sid for sid, _ in page]

            def read(conn: Connection,
                     ids: list[str] = ids) -> tuple[dict[str, Any], dict[str, Any]]:
                rows = {r["id"]: r for r in queries.sessions_by_id(conn, ids)}
                return rows, messages.messages_of(conn, ids)

            rows, msgs = self._read(read)
            for sid, last_active in page:
                row = rows.get(sid)
                if row is None:  # deleted meanwhile
                    continue
                row["last_active"] = last_active
                row["messages"] = msgs.get(sid, [])
                yield row

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        return list(self.iter_export(source))

    # ----------------------------------------------------------------- maintenance

    # v11 methods with their v21 behaviour (facade/bulk.py)
    prune_sessions = bulk.prune_sessions
    delete_session = bulk.delete_session

    def archive_session(self, session_id: str) -> bool:
        """Archive the session's whole lineage (pinned lineages are spared)."""
        if not self._id_ok(session_id):
            return False
        result = self._write(lambda c: retention.archive(c, ids=[session_id], include_open=True),
                             what="archive")
        return result.changed > 0

    def unarchive_session(self, session_id: str) -> bool:
        if not self._id_ok(session_id):
            return False
        result = self._write(lambda c: retention.unarchive(c, ids=[session_id]), what="unarchive")
        return result.changed > 0

    def pin_session(self, session_id: str) -> bool:
        """Set the keep flag (pinning an archived session unarchives its lineage)."""
        if not self._id_ok(session_id):
            return False
        result = self._write(lambda c: retention.pin(c, [session_id]), what="pin")
        return bool(result.ids)

    def unpin_session(self, session_id: str) -> bool:
        if not self._id_ok(session_id):
            return False
        result = self._write(lambda c: retention.unpin(c, [session_id]), what="unpin")
        return result.changed > 0

    def vacuum(self) -> int:
        """Merge the search indexes, VACUUM, then a TRUNCATE checkpoint (in that order, so the
        WAL VACUUM wrote is emptied rather than left at the size of the file); returns
        ``optimize_fts()``'s count (docs/v21.md#behaviour-changes)."""
        return upkeep.vacuum(self)

    optimize_fts = upkeep.optimize_fts

    # ----------------------------------------------------------------- meta

    def get_meta(self, key: str) -> str | None:
        if not isinstance(key, str):
            raise TypeError("a meta key must be a str")
        return self._read(lambda c: sessions.get_meta(c, key))

    def set_meta(self, key: str, value: object) -> None:
        if not isinstance(key, str):
            raise TypeError("a meta key must be a str")
        self._write(lambda c: sessions.set_meta(c, key, value), what="set_meta")

    # ----------------------------------------------------------------- v21 API
    # The v21 contract's methods are functions of facade/<noun>.py taking the SessionDB first,
    # bound here so that this class body lists the whole public surface. One section a noun.

    # compression (facade/compression.py)
    record_compression_failure_cooldown = compression.record_compression_failure_cooldown
    get_compression_failure_cooldown = compression.get_compression_failure_cooldown
    clear_compression_failure_cooldown = compression.clear_compression_failure_cooldown
    get_compression_fallback_streak = compression.get_compression_fallback_streak
    set_compression_fallback_streak = compression.set_compression_fallback_streak
    try_acquire_compression_lock = compression.try_acquire_compression_lock
    refresh_compression_lock = compression.refresh_compression_lock
    release_compression_lock = compression.release_compression_lock
    get_compression_lock_holder = compression.get_compression_lock_holder
    finalize_orphaned_compression_sessions = compression.finalize_orphaned_compression_sessions
    get_compression_tip = compression.get_compression_tip
    get_compression_lineage = compression.get_compression_lineage

    # gateway (facade/gateway.py)
    record_gateway_session_peer = gateway.record_gateway_session_peer
    set_expiry_finalized = gateway.set_expiry_finalized
    save_gateway_routing_entry = gateway.save_gateway_routing_entry
    replace_gateway_routing_entries = gateway.replace_gateway_routing_entries
    load_gateway_routing_entries = gateway.load_gateway_routing_entries
    delete_gateway_routing_entries = gateway.delete_gateway_routing_entries
    list_gateway_sessions = gateway.list_gateway_sessions
    find_session_by_origin = gateway.find_session_by_origin
    find_latest_gateway_session_for_peer = gateway.find_latest_gateway_session_for_peer

    # handoff (facade/handoff.py)
    request_handoff = handoff.request_handoff
    claim_handoff = handoff.claim_handoff
    complete_handoff = handoff.complete_handoff
    fail_handoff = handoff.fail_handoff
    get_handoff_state = handoff.get_handoff_state
    list_pending_handoffs = handoff.list_pending_handoffs

    # bulk delete, prune, archive, maintenance (facade/bulk.py)
    delete_sessions = bulk.delete_sessions
    delete_session_if_empty = bulk.delete_session_if_empty
    count_empty_sessions = bulk.count_empty_sessions
    delete_empty_sessions = bulk.delete_empty_sessions
    prune_empty_ghost_sessions = bulk.prune_empty_ghost_sessions
    list_prune_candidates = bulk.list_prune_candidates
    archive_sessions = bulk.archive_sessions
    set_session_archived = bulk.set_session_archived
    maybe_auto_prune_and_vacuum = bulk.maybe_auto_prune_and_vacuum
    archive_and_compact = history.archive_and_compact
    has_archived_messages = history.has_archived_messages

    # messages (facade/history.py)
    get_messages_around = history.get_messages_around
    get_anchored_view = history.get_anchored_view
    rewind_to_message = history.rewind_to_message
    restore_rewound = history.restore_rewound
    replace_messages = history.replace_messages
    list_recent_user_messages = history.list_recent_user_messages
    has_platform_message_id = history.has_platform_message_id

    # finding a session (facade/lookup.py)
    resolve_resume_session_id = lookup.resolve_resume_session_id
    search_sessions_by_id = lookup.search_sessions_by_id
    list_cron_job_runs = lookup.list_cron_job_runs

    # what a session ran in and with (facade/workspace.py)
    distinct_session_cwds = workspace.distinct_session_cwds
    backfill_repo_roots = workspace.backfill_repo_roots
    update_session_cwd = workspace.update_session_cwd
    update_session_model = workspace.update_session_model
    update_session_billing_route = workspace.update_session_billing_route
    update_session_meta = workspace.update_session_meta

    # a compressed conversation as one document (facade/lineage_export.py)
    export_session_lineage = lineage_export.export_session_lineage

    # Telegram DM topic mode (facade/topics.py)
    apply_telegram_topic_migration = topics.apply_telegram_topic_migration
    enable_telegram_topic_mode = topics.enable_telegram_topic_mode
    disable_telegram_topic_mode = topics.disable_telegram_topic_mode
    is_telegram_topic_mode_enabled = topics.is_telegram_topic_mode_enabled
    bind_telegram_topic = topics.bind_telegram_topic
    get_telegram_topic_binding = topics.get_telegram_topic_binding
    get_telegram_topic_binding_by_session = topics.get_telegram_topic_binding_by_session
    list_telegram_topic_bindings_for_chat = topics.list_telegram_topic_bindings_for_chat
    is_telegram_session_linked_to_topic = topics.is_telegram_session_linked_to_topic
    delete_telegram_topic_binding = topics.delete_telegram_topic_binding
    list_unlinked_telegram_sessions_for_user = topics.list_unlinked_telegram_sessions_for_user

    # import (facade/importing.py)
    _IMPORT_MAX_SESSIONS = importing.MAX_SESSIONS
    _IMPORT_MAX_MESSAGES_PER_SESSION = importing.MAX_MESSAGES_PER_SESSION
    _IMPORT_MAX_TOTAL_MESSAGES = importing.MAX_TOTAL_MESSAGES
    _IMPORT_MAX_SESSION_BYTES = importing.MAX_SESSION_BYTES
    _IMPORT_MAX_TOTAL_BYTES = importing.MAX_TOTAL_BYTES
    import_sessions = importing.import_sessions

