"""Reading sessions: ``list``, ``show`` and ``search`` (cli-and-formats.md §3.2). Read-only."""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable
from typing import Any

import click
from rich.markup import escape
from rich.table import Table
from sqlalchemy import Connection, and_, select

from hermes_store.cli.app import (
    Ctx,
    filter_clause,
    filter_options,
    iso,
    main,
    open_read,
    out_console,
    resolve_session,
    session_item,
    source_label,
    tip_of,
    when,
)
from hermes_store.db.engine import reading
from hermes_store.errors import SessionNotFoundError
from hermes_store.repo import lineage, listing
from hermes_store.repo.filters import SessionFilter
from hermes_store.search import statements as search
from hermes_store.transfer.reader import StoreReader, content_text

TOOL_RESULT_CHARS = 2000
SEARCH_PAGES = 20  # bound on pages read while post-filtering search hits
_s = lineage.sessions


# --------------------------------------------------------------------------- list


def _workspace(row: dict[str, Any]) -> str:
    place = row.get("git_repo_root") or row.get("cwd") or ""
    return os.path.basename(str(place).rstrip("/")) if place else ""


@main.command("list")
@filter_options
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many sessions to show.")
@click.option("--all", "show_all", is_flag=True,
              help="Archived sessions and compressed ancestors too.")
@click.option("--archived", is_flag=True, help="Only archived sessions.")
@click.option("--pinned", is_flag=True, help="Only pinned sessions.")
@click.option("--open", "only_open", is_flag=True, help="Only sessions that never ended.")
@click.pass_obj
def list_cmd(obj: Ctx, flt: SessionFilter, limit: int, show_all: bool, archived: bool,
             pinned: bool, only_open: bool) -> None:
    """Sessions, pinned first, then by last activity; lineage tips only, full ids.

    \b
    Example:
      hermes-store list --source cli --newer-than 7d
      hermes-store --json list --all --limit 200
    """
    engine = open_read(obj)
    rows: list[dict[str, Any]] = []
    if engine is not None:
        with reading(engine) as conn:
            clauses = [c for c in (filter_clause(conn, flt, by_lineage=True),) if c is not None]
            if archived:
                clauses.append(_s.c.archived != 0)
            elif not show_all:
                clauses.append(_s.c.archived == 0)
            if pinned:
                clauses.append(_s.c.pinned != 0)
            if only_open:
                clauses.append(_s.c.ended_at.is_(None))
            rows = listing.list_sessions_rich(
                conn, limit=limit + 1, include_children=show_all, order_by_last_active=True,
                pinned_first=True, where=and_(*clauses) if clauses else None, now=flt.now)
    more = len(rows) > limit
    rows = rows[:limit]
    items = [session_item(r, r["id"]) for r in rows]
    for item, row in zip(items, rows):
        item["preview"] = row.get("preview") or ""
        item["workspace"] = _workspace(row)

    def render() -> None:
        if not rows:
            click.echo("no sessions match")
            return
        table = Table("title", "workspace", "last active", "source", box=None)
        table.add_column("id", no_wrap=True)
        for row in rows:
            mark = "* " if row.get("pinned") else ""
            cells = (mark + (row.get("title") or row.get("preview") or "—"), _workspace(row),
                     when(row.get("last_active")), source_label(row), row["id"])
            table.add_row(*(escape(str(c)) for c in cells))
        out_console().print(table)
        if more:
            click.echo("… more sessions match (use --limit or filters)")

    obj.emit("list", {"sessions": items, "count": len(items), "more": more,
                      "filter": flt.describe()}, render)


# --------------------------------------------------------------------------- show


def _message_text(msg: dict[str, Any], full: bool) -> list[str]:
    """Lines for one message: content, tool calls as name + pretty JSON, results cut."""
    lines: list[str] = []
    text = content_text(msg.get("content"))
    if msg.get("role") == "tool" and not full and len(text) > TOOL_RESULT_CHARS:
        text = text[:TOOL_RESULT_CHARS] + f"\n… ({len(text) - TOOL_RESULT_CHARS:,} more "\
            "characters; --full shows them)"
    if text:
        lines.append(text)
    raw = msg.get("tool_calls")
    try:
        calls = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        calls = raw
    for call in calls if isinstance(calls, list) else ([calls] if calls else []):
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments") if isinstance(fn, dict) else None
        try:
            args = json.dumps(json.loads(args) if isinstance(args, str) else args, indent=2,
                              ensure_ascii=False)
        except (TypeError, ValueError):
            pass
        name = fn.get("name") if isinstance(fn, dict) else None
        lines.append(f"→ tool call {name or '?'}:\n{args if args is not None else ''}")
    return lines


def _select_messages(reader: StoreReader, ids: Iterable[str], include_compacted: bool,
                     tail: int | None) -> list[dict[str, Any]]:
    kept: collections.deque[dict[str, Any]] = collections.deque(maxlen=tail)
    for sid in ids:
        for msg in reader.iter_messages(sid):
            if msg.get("compacted") and not include_compacted:
                continue
            kept.append(msg)
    return list(kept)


def _children(conn: Connection, session_id: str) -> list[str]:
    return list(conn.execute(select(_s.c.id).where(_s.c.parent_session_id == session_id)
                             .order_by(_s.c.started_at, _s.c.id)).scalars())


@main.command()
@click.argument("session")
@click.option("--tail", type=click.IntRange(min=1), default=None, help="Only the last N messages.")
@click.option("--full", is_flag=True, help="Tool results uncut (default: 2,000 characters).")
@click.option("--include-compacted", is_flag=True, help="Rows replaced by a compaction summary.")
@click.option("--lineage", "whole_lineage", is_flag=True,
              help="Every compression segment, root to tip.")
@click.option("--tip", is_flag=True, help="Follow a compressed session to its lineage tip.")
@click.pass_obj
def show(obj: Ctx, session: str, tail: int | None, full: bool, include_compacted: bool,
         whole_lineage: bool, tip: bool) -> None:
    """One session: a header, then its messages with role and time.

    SESSION is a full id or a unique prefix of at least 4 characters.

    \b
    Example:
      hermes-store show 20260915_0749 --tail 20
      hermes-store --json show 20260915_074937_3cf8aa23 --lineage
    """
    engine = open_read(obj)
    if engine is None:
        raise SessionNotFoundError(session)
    with reading(engine) as conn:
        sid = resolve_session(conn, session)
        tip_id = tip_of(conn, sid)
        if tip:
            sid = tip_id
        reader = StoreReader.reflect(conn)
        row = reader.session(sid) or {}
        last = conn.execute(select(lineage.last_activity(_s)).where(_s.c.id == sid)).scalar()
        row["last_active"] = last
        chain = reader.lineage_ids(sid)
        children = _children(conn, sid)
        ids = chain if whole_lineage else [sid]
        msgs = _select_messages(reader, ids, include_compacted, tail)
    item = session_item(row, tip_id)
    item.update(provider=row.get("billing_provider"), input_tokens=row.get("input_tokens"),
                output_tokens=row.get("output_tokens"),
                cost_usd=row.get("actual_cost_usd") or row.get("estimated_cost_usd"),
                children=children, lineage_session_ids=chain)
    out_msgs = [{"id": m.get("id"), "session_id": m.get("session_id"), "role": m.get("role"),
                 "timestamp": iso(m.get("timestamp")), "content": content_text(m.get("content")),
                 "tool_calls": m.get("tool_calls"), "tool_call_id": m.get("tool_call_id"),
                 "tool_name": m.get("tool_name"), "compacted": bool(m.get("compacted"))}
                for m in msgs]

    def render() -> None:
        con = out_console()
        con.print(f"[bold]{escape(row.get('title') or '(untitled)')}[/bold]")
        for label, value in (
                ("id", sid), ("source", source_label(row)),
                ("model", " / ".join(str(v) for v in (row.get("model"),
                                                      row.get("billing_provider")) if v)),
                ("cwd", " @ ".join(str(v) for v in (row.get("cwd"), row.get("git_branch")) if v)),
                ("started", when(row.get("started_at"))),
                ("ended", when(row.get("ended_at")) if row.get("ended_at") is not None
                 else "open"),
                ("end reason", row.get("end_reason")), ("last active", when(last)),
                ("messages", f"{row.get('message_count') or 0:,} "
                             f"({row.get('tool_call_count') or 0:,} tool calls)"),
                ("tokens", f"{row.get('input_tokens') or 0:,} in, "
                           f"{row.get('output_tokens') or 0:,} out"),
                ("cost", item["cost_usd"]),
                ("flags", ", ".join(f for f in ("pinned", "archived") if row.get(f))),
                ("parent", row.get("parent_session_id")),
                ("children", ", ".join(children)), ("lineage", " → ".join(chain)
                                                    if len(chain) > 1 else None)):
            if value not in (None, ""):
                con.print(f"{label:<12} {value}", markup=False)
        if tip_id != sid:
            con.print(f"continued in {tip_id} (use --tip)", markup=False)
        for m in msgs:
            extra = f" [{m.get('tool_name') or ''} {m.get('tool_call_id') or ''}]".rstrip() \
                if m.get("role") == "tool" else ""
            flag = " (compacted)" if m.get("compacted") else ""
            con.print(f"\n── {m.get('role')}{extra} · {when(m.get('timestamp'))}{flag}",
                      markup=False)
            for line in _message_text(m, full):
                con.print(line, markup=False)

    obj.emit("show", {"session": item, "messages": out_msgs}, render)


# --------------------------------------------------------------------------- search


@main.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--source", "sources", multiple=True, help="Only these sources (repeatable).")
@click.option("--session", "session_ref", default=None,
              help="Only this session's lineage (id or prefix).")
@click.option("--role", "roles", multiple=True,
              type=click.Choice(["user", "assistant", "tool", "system"]), help="Only these roles.")
@click.option("--newer-than", default=None, metavar="AGE", help="Sessions active since AGE/TIME.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--include-tools", is_flag=True,
              help="Also search whole tool outputs (the index holds their first 8 KiB).")
@click.option("--no-archived", is_flag=True, help="Leave archived sessions out.")
@click.pass_obj
def search_cmd(obj: Ctx, query: tuple[str, ...], sources: tuple[str, ...],
               session_ref: str | None, roles: tuple[str, ...], newer_than: str | None,
               limit: int, include_tools: bool, no_archived: bool) -> None:
    """Full-text search over messages; results grouped by session.

    Words are ANDed; "phrase", OR, NOT/-word and prefix* work; CJK terms of any length.
    A query FTS cannot parse is retried as literal words, never shown as an error.

    \b
    Example:
      hermes-store search "flaky test" --source cli --newer-than 30d
      hermes-store --json search 数据库 --limit 50
    """
    text = " ".join(query)
    flt = SessionFilter(newer_than=newer_than)
    role_filter = list(roles) or None
    # Tool rows are indexed up to an 8 KiB prefix; role 'tool' makes the library search their
    # full bodies with LIKE, bounded by the same page size and the same filters.
    tool_pass = include_tools and (not roles or "tool" in roles)
    engine = open_read(obj)
    hits: list[dict[str, Any]] = []
    meta: dict[str, dict[str, Any]] = {}
    if engine is not None:
        with reading(engine) as conn:
            scope = None
            if session_ref is not None:
                sid = resolve_session(conn, session_ref)
                scope = set(StoreReader.reflect(conn).lineage_ids(sid))
            hits, meta = _search(conn, text, list(sources) or None, role_filter, limit,
                                 scope, flt, no_archived)
            if tool_pass and len(hits) < limit:
                seen = {h["id"] for h in hits}
                more, extra = _search(conn, text, list(sources) or None, ["tool"], limit,
                                      scope, flt, no_archived)
                hits += [h for h in more if h["id"] not in seen][:limit - len(hits)]
                meta.update(extra)
    groups: dict[str, list[dict[str, Any]]] = {}
    for hit in hits:
        groups.setdefault(hit["session_id"], []).append(hit)
    payload = [{"session": session_item(meta[sid], meta[sid].get("lineage_tip_id")),
                "hits": [{"message_id": h["id"], "role": h["role"],
                          "timestamp": iso(h.get("timestamp")), "snippet": h.get("snippet"),
                          "tool_name": h.get("tool_name")} for h in group]}
               for sid, group in groups.items()]

    def render() -> None:
        if not hits:
            click.echo(f"no messages match {text!r}")
            return
        con = out_console()
        for sid, group in groups.items():
            row = meta[sid]
            label = " \\[archived]" if row.get("archived") else ""
            con.print(f"[bold]{escape(row.get('title') or '(untitled)')}[/bold]{label}")
            con.print(f"  {sid}  {source_label(row)}  last active "
                      f"{when(row.get('last_active'))}", markup=False)
            for h in group:
                snippet = " ".join(str(h.get("snippet") or "").split())
                con.print(f"    {h['role']:<9} {when(h.get('timestamp'))}  {snippet}",
                          markup=False)

    obj.emit("search", {"query": text, "count": len(hits), "results": payload}, render)


def _search(conn: Connection, text: str, sources: list[str] | None, roles: list[str] | None,
            limit: int, scope: set[str] | None, flt: SessionFilter,
            no_archived: bool) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Pages of ``search_messages`` kept when their session passes the session-level filters
    (lineage scope, activity, archived), at most ``SEARCH_PAGES`` pages deep."""
    since = flt.window().active_after
    meta: dict[str, dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    page = limit if scope is None and since is None and not no_archived else max(limit, 100)
    for n in range(SEARCH_PAGES):
        batch = search.search_messages(conn, text, source_filter=sources, role_filter=roles,
                                       limit=page, offset=n * page)
        for hit in batch:
            sid = hit["session_id"]
            if sid not in meta:
                meta[sid] = _session_meta(conn, sid)
            row = meta[sid]
            if scope is not None and sid not in scope:
                continue
            if no_archived and row.get("archived"):
                continue
            if since is not None and (row.get("last_active") or 0) < since:
                continue
            kept.append(hit)
            if len(kept) >= limit:
                return kept, meta
        if len(batch) < page:
            break
    return kept, meta


def _session_meta(conn: Connection, sid: str) -> dict[str, Any]:
    row = conn.execute(select(_s, lineage.last_activity(_s).label("last_active"))
                       .where(_s.c.id == sid)).mappings().first()
    item = dict(row) if row is not None else {"id": sid}
    item["lineage_tip_id"] = tip_of(conn, sid)
    return item
