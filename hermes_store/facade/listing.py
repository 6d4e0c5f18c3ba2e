"""The v11 listing methods with their v21 signatures (docs/v21.md#parameters): the rich list,
its count, ``search_sessions`` and ``search_messages``.

Default lists show roots and branch children, never subagents, and no archived session; a
compressed conversation shows its tip (docs/v21.md#behaviour-changes). ``session_count`` takes
the list's filters, and with ``exclude_children`` counts exactly what default pages show.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from hermes_store.db import engine as engine_mod
from hermes_store.facade import arguments as args
from hermes_store.facade import opening
from hermes_store.facade.units import SessionDB, read_replica
from hermes_store.repo import listing, session_list
from hermes_store.search import SearchHit


def _sources(name: str, value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of str, not {type(value).__name__}")
    return [args.required(name, item) for item in value]


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def _needle(name: str, value: object) -> str | None:
    text = args.text(name, value)
    return text.strip().lower() or None if text is not None else None


def _filters(source: object, exclude_sources: object, cwd_prefix: object,
             min_message_count: object, include_archived: object, archived_only: object,
             visible_only: bool, include_hidden: bool = False) -> session_list.Filters:
    return session_list.Filters(
        source=args.text("source", source), exclude_sources=_sources("exclude_sources",
                                                                     exclude_sources),
        cwd_prefix=args.text("cwd_prefix", cwd_prefix),
        min_message_count=_count("min_message_count", min_message_count),
        include_archived=bool(include_archived), archived_only=bool(archived_only),
        visible_only=visible_only, include_hidden=include_hidden)


def list_sessions_rich(db: SessionDB, source: str | None = None,
                       exclude_sources: Sequence[str] | None = None,
                       cwd_prefix: str | None = None, limit: int = 20, offset: int = 0,
                       include_children: bool = False, min_message_count: int = 0,
                       project_compression_tips: bool = True, order_by_last_active: bool = False,
                       include_archived: bool = False, archived_only: bool = False,
                       id_query: str | None = None, search_query: str | None = None,
                       compact_rows: bool = False,
                       include_hidden: bool = False) -> list[dict[str, Any]]:
    """Session rows plus ``preview`` and ``last_active`` (``_lineage_root_id`` on projected
    rows). ``id_query``/``search_query`` apply only with ``order_by_last_active``; sessions the
    agent marks ``hidden`` (schema 31) only with ``include_hidden``."""
    args.page(limit, offset)
    filters = _filters(source, exclude_sources, cwd_prefix, min_message_count,
                       include_archived, archived_only, visible_only=not include_children,
                       include_hidden=bool(include_hidden))
    ids, titles = _needle("id_query", id_query), _needle("search_query", search_query)
    return read_replica(db, lambda c: session_list.list_sessions(
        c, filters, now=time.time(), limit=limit, offset=offset,
        project_compression_tips=bool(project_compression_tips),
        order_by_last_active=bool(order_by_last_active), id_query=ids, search_query=titles,
        compact_rows=bool(compact_rows)))


def session_count(db: SessionDB, source: str | None = None, cwd_prefix: str | None = None,
                  min_message_count: int = 0, include_archived: bool = False,
                  archived_only: bool = False, exclude_children: bool = False,
                  exclude_sources: Sequence[str] | None = None) -> int:
    """Sessions passing the list's filters; archived ones only when asked (v11 counted all).
    With ``exclude_children`` it counts what default pages show, so hidden sessions too are
    left out."""
    filters = _filters(source, exclude_sources, cwd_prefix, min_message_count,
                       include_archived, archived_only, visible_only=bool(exclude_children),
                       include_hidden=not exclude_children)
    return read_replica(db, lambda c: session_list.count_sessions(c, filters))


def search_sessions(db: SessionDB, source: str | None = None, limit: int = 20,
                    offset: int = 0) -> list[dict[str, Any]]:
    args.page(limit, offset)
    return read_replica(db, lambda c: listing.search_sessions(c, source=source, limit=limit,
                                                      offset=offset))


def search_messages(db: SessionDB, query: str, source_filter: Sequence[str] | None = None,
                    exclude_sources: Sequence[str] | None = None,
                    role_filter: Sequence[str] | None = None, limit: int = 20, offset: int = 0,
                    sort: str | None = None, include_inactive: bool = False,
                    syntax: str = "agent") -> list[SearchHit]:
    """Search (docs/search.md); rewound rows are hidden unless ``include_inactive``, while
    compacted ones stay findable (docs/v21.md#parameters). ``syntax="exclusions"`` reads
    ``-word`` as the command line does (an exclusion); the default keeps v11's reading."""
    args.page(limit, offset)
    if not engine_mod.is_server(db.engine) and not engine_mod.fts5_available():
        opening.note_no_fts5()
        return []
    from hermes_store.search.statements import (
        search_messages as search,  # imported on use: keeps start-up lean
    )

    return read_replica(db, lambda c: search(
        c, query, source_filter=source_filter, exclude_sources=exclude_sources,
        role_filter=role_filter, limit=limit, offset=offset, sort=sort,
        include_inactive=bool(include_inactive), syntax=syntax))
