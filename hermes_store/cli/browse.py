"""Reading sessions: ``list``, ``show`` and ``search`` (docs/cli.md#reading). Read-only."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_store.cli import formats
from hermes_store.cli.app import Ctx, StoreCommand, filter_options, main, open_read, record_options
from hermes_store.cli.render import (
    ITEM_KEYS,
    iso,
    out_console,
    say,
    session_item,
    source_label,
    visible,
    when,
)
from hermes_store.errors import SessionNotFoundError

if TYPE_CHECKING:
    from hermes_store.repo.filter_values import SessionFilter
    from hermes_store.search import SearchHit
    from hermes_store.transfer.reader import StoreReader

TOOL_RESULT_CHARS = 2000
QUERY_ECHO = 80  # characters of the query repeated back in "no messages match"
LIST_KEYS = (*ITEM_KEYS, "preview", "workspace")
SEARCH_KEYS = ("session_id", "message_id", "role", "timestamp", "tool_name", "snippet", "matches",
               "title", "source")
SHOW_KEYS = ("id", "session_id", "role", "timestamp", "tool_name", "tool_call_id", "compacted",
             "content", "tool_calls")
NARROW = 80  # below this many columns, times print as their age alone ("2h ago")
LIST_COLUMNS = (formats.Column("title", 12), formats.Column("workspace", 8),
                formats.Column("last active"), formats.Column("source", 6),
                formats.Column("id", own_line=True))


# --------------------------------------------------------------------------- list


def _workspace(row: dict[str, Any]) -> str:
    place = row.get("git_repo_root") or row.get("cwd") or ""
    return os.path.basename(str(place).rstrip("/")) if place else ""


@main.command("list")
@filter_options
@record_options
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many sessions to show.")
@click.option("--all", "show_all", is_flag=True,
              help="Archived and hidden sessions and compressed ancestors too.")
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
    from hermes_store.repo import prepared_reads

    # With no filter and none of the narrowing flags, a file is listed through the standard
    # library (db.raw) by the compiled statements; the rest are built by the repo.
    stdlib = prepared_reads.listable(flt, archived=archived, pinned=pinned, only_open=only_open)
    store = open_read(obj, stdlib=stdlib)
    rows: list[dict[str, Any]] = []
    more = False
    if store is not None:
        with _reading(store) as conn:
            if isinstance(store, Path):
                rows, more = prepared_reads.list_page(conn, limit=limit, show_all=show_all,
                                                      now=flt.moment)
            else:
                from hermes_store.repo import listing

                page = listing.list_matching(
                    conn, flt, limit=limit, include_archived=show_all,
                    include_children=show_all, include_hidden=show_all,
                    only_archived=archived, only_pinned=pinned, only_open=only_open)
                rows, more = page.rows, page.more
    items = [session_item(r, r["id"]) for r in rows]
    for item, row in zip(items, rows, strict=True):
        item["preview"] = row.get("preview") or ""
        item["workspace"] = _workspace(row)

    def render() -> None:
        if not rows:
            say("no sessions match")
            return
        short = formats.terminal_width() < NARROW
        cells = [[visible(str(c)) for c in (
            ("* " if row.get("pinned") else "") + (row.get("title") or row.get("preview") or "—"),
            _workspace(row), when(row.get("last_active"), short=short), source_label(row),
            row["id"])]
            for row in rows]
        for line in formats.table_lines(LIST_COLUMNS, cells, headers=obj.headers):
            say(line)
        if more:
            say("… more sessions match (use --limit or filters)")

    obj.emit("list", {"sessions": items, "count": len(items), "more": more,
                      "filter": flt.describe()}, render, records=(LIST_KEYS, items))


# --------------------------------------------------------------------------- show


def _message_text(msg: dict[str, Any], full: bool) -> list[str]:
    """Lines for one message: content, tool calls as name + pretty JSON, results cut."""
    from hermes_store.content import text_of

    lines: list[str] = []
    text = text_of(msg.get("content"), display=True)
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
        with contextlib.suppress(TypeError, ValueError):
            args = json.dumps(json.loads(args) if isinstance(args, str) else args, indent=2,
                              ensure_ascii=False)
        name = fn.get("name") if isinstance(fn, dict) else None
        lines.append(f"→ tool call {name or '?'}:\n{args if args is not None else ''}")
    return lines


def _prompt_line(prompt: Any) -> str | None:
    """The system prompt's first line, cut, with its size (``--json`` carries it whole)."""
    if not isinstance(prompt, str) or not prompt.strip():
        return None
    first = prompt.strip().splitlines()[0]
    cut = first if len(first) <= 60 else first[:60] + "…"
    return f"{cut} ({len(prompt):,} characters)"


def _select_messages(reader: StoreReader, ids: Iterable[str], include_compacted: bool,
                     tail: int | None) -> list[dict[str, Any]]:
    kept: collections.deque[dict[str, Any]] = collections.deque(maxlen=tail)
    for sid in ids:
        for msg in reader.iter_messages(sid):
            if msg.get("compacted") and not include_compacted:
                continue
            kept.append(msg)
    return list(kept)


@main.command()
@click.argument("session")
@click.option("--tail", type=click.IntRange(min=1), default=None, help="Only the last N messages.")
@click.option("--full", is_flag=True, help="Tool results uncut (default: 2,000 characters).")
@click.option("--include-compacted", is_flag=True, help="Rows replaced by a compaction summary.")
@click.option("--lineage", "whole_lineage", is_flag=True,
              help="Every compression segment, root to tip.")
@click.option("--tip", is_flag=True, help="Follow a compressed session to its lineage tip.")
@record_options
@click.pass_obj
def show(obj: Ctx, session: str, tail: int | None, full: bool, include_compacted: bool,
         whole_lineage: bool, tip: bool) -> None:
    """One session: a header, then its messages with role and time.

    SESSION is a full id, a unique prefix of at least 4 characters, or `latest` (the
    session with the newest activity).

    \b
    Example:
      hermes-store show 20260915_0749 --tail 20
      hermes-store --json show 20260915_074937_3cf8aa23 --lineage
    """
    from rich.markup import escape

    from hermes_store.content import text_of
    from hermes_store.db.engine import reading
    from hermes_store.repo import listing
    from hermes_store.transfer.reader import StoreReader

    engine = open_read(obj)
    if engine is None:
        raise SessionNotFoundError(session)
    with reading(engine) as conn:
        sid = listing.resolve_ref(conn, session)
        tip_id = listing.lineage_tip(conn, sid)
        if tip:
            sid = tip_id
        reader = StoreReader.reflect(conn)
        row = reader.session(sid) or {}
        last = row["last_active"] = listing.last_active_of(conn, sid)
        chain = reader.lineage_ids(sid)
        children = listing.children_of(conn, sid)
        ids = chain if whole_lineage else [sid]
        msgs = _select_messages(reader, ids, include_compacted, tail)
    item = session_item(row, tip_id)
    item.update(provider=row.get("billing_provider"), input_tokens=row.get("input_tokens"),
                output_tokens=row.get("output_tokens"),
                cost_usd=row.get("actual_cost_usd") or row.get("estimated_cost_usd"),
                children=children, lineage_session_ids=chain,
                system_prompt=row.get("system_prompt"))
    out_msgs = [{"id": m.get("id"), "session_id": m.get("session_id"), "role": m.get("role"),
                 "timestamp": iso(m.get("timestamp")),
                 "content": text_of(m.get("content"), display=True),
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
                ("prompt", _prompt_line(row.get("system_prompt"))),
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
        segment = None
        for m in msgs:
            if whole_lineage and len(chain) > 1 and m.get("session_id") != segment:
                segment = m.get("session_id")
                number = chain.index(segment) + 1 if segment in chain else "?"
                con.print(f"\n══ segment {number} of {len(chain)}: {segment} ══", markup=False)
            extra = f" [{m.get('tool_name') or ''} {m.get('tool_call_id') or ''}]".rstrip() \
                if m.get("role") == "tool" else ""
            flag = " (compacted)" if m.get("compacted") else ""
            con.print(f"\n── {m.get('role')}{extra} · {when(m.get('timestamp'))}{flag}",
                      markup=False)
            for line in _message_text(m, full):
                con.print(line, markup=False)

    obj.emit("show", {"session": item, "messages": out_msgs}, render,
             records=(SHOW_KEYS, out_msgs))


# --------------------------------------------------------------------------- search


class _QueryCommand(StoreCommand):
    """``search unsafe -Rust``: a word that starts with one ``-`` and is none of the command's
    options is part of the query (an exclusion), not a usage error. Unknown ``--long``
    options are still reported, so a mistyped flag never turns into search words."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        params = [p for p in self.get_params(ctx) if isinstance(p, click.Option)]
        known = {o for p in params for o in (*p.opts, *p.secondary_opts)}
        valued = {o for p in params if not p.is_flag and not p.count for o in p.opts}
        options: list[str] = []
        words: list[str] = []
        i = 0
        while i < len(args):
            arg, name = args[i], args[i].split("=", 1)[0]
            if arg == "--":
                words += args[i + 1:]
                break
            if name in known or arg.startswith("--"):
                takes = name in valued and "=" not in arg and i + 1 < len(args)
                options += args[i:i + 2] if takes else [arg]
                i += 1 if takes else 0
            else:
                words.append(arg)
            i += 1
        return super().parse_args(ctx, [*options, "--", *words])


@main.command("search", cls=_QueryCommand)
@click.argument("query", nargs=-1, required=True)
@click.option("--source", "sources", multiple=True, help="Only these sources (repeatable).")
@click.option("--session", "session_ref", default=None,
              help="Only this session's lineage (id or prefix).")
@click.option("--role", "roles", multiple=True,
              type=click.Choice(["user", "assistant", "tool", "system"]), help="Only these roles.")
@click.option("--newer-than", default=None, metavar="AGE", help="Sessions active since AGE/TIME.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many hits to show.")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True,
              help="Skip this many hits (the next page: --offset 20).")
@click.option("--include-tools", is_flag=True,
              help="Also search whole tool outputs (the index holds their first 8 KiB).")
@click.option("--no-archived", is_flag=True, help="Leave archived sessions out.")
@click.option("--model", default=None, metavar="TEXT",
              help="Only sessions whose model contains TEXT (case-insensitive).")
@click.option("--markers", is_flag=True,
              help="Keep the >>>hit<<< markers in --json/--nl/--csv/--tsv snippets (default: "
                   "plain text plus each hit's [start, end] under matches).")
@record_options
@click.pass_obj
def search_cmd(obj: Ctx, query: tuple[str, ...], sources: tuple[str, ...],
               session_ref: str | None, roles: tuple[str, ...], newer_than: str | None,
               limit: int, offset: int, include_tools: bool, no_archived: bool,
               model: str | None, markers: bool) -> None:
    """Full-text search over messages; results grouped by session.

    Words are ANDed; "phrase", OR, NOT/-word and prefix* work; CJK terms of any length.
    A query FTS cannot parse is retried as literal words, never shown as an error.
    A word starting with - excludes it (search unsafe -Rust), as NOT does; the Python API
    reads -word as a word unless given syntax="exclusions". Put -- before a query whose
    words could be read as options (search -- -q).

    \b
    Example:
      hermes-store search "flaky test" --source cli --newer-than 30d
      hermes-store --json search 数据库 --limit 50
    """
    from rich.markup import escape

    from hermes_store.search import results

    text = " ".join(query)
    flt = None
    if newer_than is not None:
        from hermes_store.repo.filter_values import SessionFilter

        flt = SessionFilter(newer_than=newer_than)
    # A file is searched on the standard library (db.raw); --session resolves a reference
    # and the title hint lists sessions, which the repo's SQLAlchemy statements do.
    store = open_read(obj, stdlib=session_ref is None)
    found = results.SessionHits()
    titled = 0
    if store is not None:
        with _reading(store) as conn:
            scope = None
            if session_ref is not None:
                from hermes_store.repo import listing

                scope = results.lineage_scope(conn, listing.resolve_ref(conn, session_ref))
            found = results.search_sessions_hits(
                conn, text, syntax="exclusions", sources=list(sources) or None, roles=list(roles) or None,
                limit=limit, offset=offset, scope=scope,
                active_after=flt.window().active_after if flt is not None else None,
                no_archived=no_archived, include_tools=include_tools, model=model)
        if not (found.hits or offset):
            with _reading(store, engine=True) as conn:
                titled = results.title_matches(conn, text)
    hits, meta, groups = found.hits, found.sessions, found.grouped()
    from hermes_store.search.snippets import unmark

    def snippet_fields(hit: SearchHit) -> dict[str, Any]:
        plain, spans = unmark(" ".join(str(hit.get("snippet") or "").split()))
        return {"snippet": hit.get("snippet") if markers else plain,
                "matches": [list(s) for s in spans]}

    payload = [{"session": session_item(meta[sid], meta[sid].get("lineage_tip_id")),
                "hits": [{"message_id": h["id"], "role": h["role"],
                          "timestamp": iso(h.get("timestamp")), **snippet_fields(h),
                          "tool_name": h.get("tool_name")} for h in group]}
               for sid, group in groups.items()]

    more = found.more
    footer = ""
    if more:
        bound = "" if found.exact else "at least "
        footer = (f"… {bound}{more:,} more {_plural(more, 'hit')} "
                  f"(--offset {offset + len(hits)} shows the next)")

    def render() -> None:
        if not hits:
            for line in _no_hits(text, offset, limit, found, titled):
                say(line)
            return
        con = out_console()
        width = formats.terminal_width()
        short = width < NARROW
        for sid, group in groups.items():
            row = meta[sid]
            label = " [archived]" if row.get("archived") else ""
            title = formats.cut(visible(row.get("title") or "(untitled)"), width - len(label))
            con.print(f"[bold]{escape(title)}[/bold]{escape(label)}")
            about = f"{source_label(row)}  last active {when(row.get('last_active'), short=short)}"
            # The id stays whole (it is what `show` takes): on a narrow terminal, its own line.
            for line in ([f"  {sid}  {about}"] if len(sid) + len(about) + 4 <= width
                         else [f"  {sid}", f"  {formats.cut(about, width - 2)}"]):
                con.print(line, markup=False)
            for h in group:
                head = f"    {h['role']:<9} {when(h.get('timestamp'), short=short)}  "
                con.print(_snippet_line(head, " ".join(str(h.get("snippet") or "").split()),
                                        bold=sys.stdout.isatty()))
        if footer:
            say(footer)

    flat = [{"session_id": h["session_id"], "message_id": h["id"], "role": h["role"],
             "timestamp": iso(h.get("timestamp")), "tool_name": h.get("tool_name"),
             **snippet_fields(h), "title": meta[h["session_id"]].get("title"),
             "source": meta[h["session_id"]].get("source")} for h in hits]
    obj.emit("search", {"query": text, "count": len(hits), "offset": offset,
                        "total": found.total, "total_exact": found.exact, "more": more > 0,
                        "results": payload}, render, records=(SEARCH_KEYS, flat))


def _reading(store: Any, *, engine: bool = False) -> Any:
    """A read transaction on what ``open_read`` gave: a file's path through ``db.raw`` (or
    through an engine when ``engine``), an engine as it is."""
    if isinstance(store, Path) and not engine:
        from hermes_store.db import raw

        return raw.reading(store)
    from hermes_store.db.engine import open_engine, reading

    return reading(open_engine(store, readonly=True) if isinstance(store, Path) else store)


def _snippet_line(head: str, snippet: str, *, bold: bool) -> Any:
    """One hit's line, cut to the output's width: in a terminal the hits in bold, elsewhere
    between the markers (plain text that survives a pipe)."""
    from rich.text import Text

    from hermes_store.search.snippets import MARK_CLOSE, MARK_OPEN, unmark

    room = max(10, formats.terminal_width() - len(head))
    plain, spans = unmark(visible(snippet))
    if not bold:  # the markers take room too
        room = max(10, room - (len(MARK_OPEN) + len(MARK_CLOSE)) * min(len(spans), 2))
    if len(plain) > room:  # keep the first hit in view: start a little before it
        start = max(0, min(spans[0][0] - 20 if spans else 0, len(plain) - room))
        plain = ("…" if start else "") + plain[start:start + room - 2] + "…"
        shift = start - (1 if start else 0)
        spans = [(max(0, s - shift), min(len(plain) - 1, e - shift)) for s, e in spans
                 if e - shift > 0 and s - shift < len(plain) - 1]
    line = Text(head)
    at = 0
    for s, e in spans:
        line.append(plain[at:s])
        line.append(plain[s:e], style="bold") if bold else line.append(
            f"{MARK_OPEN}{plain[s:e]}{MARK_CLOSE}")
        at = e
    line.append(plain[at:])
    return line


def _no_hits(text: str, offset: int, limit: int, found: Any, titled: int) -> list[str]:
    """"no messages match", with why when it can be told: a query of exclusions alone, an
    offset past the last hit, or the words found in session titles instead."""
    from hermes_store.search import results

    shown = text if len(text) <= QUERY_ECHO else text[:QUERY_ECHO] + "…"
    if offset and found.total:
        bound = "" if found.exact else "at least "
        return [(f"no hits after the first {offset:,}: {shown!r} matches {bound}"
                 f"{found.total:,} {_plural(found.total, 'message')} (--offset "
                 f"{max(0, found.total - 1) // limit * limit} shows the last page)")]
    lines = [f"no messages match {shown!r}" + (f" after the first {offset:,}" if offset else "")]
    if results.exclusions_only(text):
        lines.append("hint: the query only excludes words (-word, NOT word), and exclusions "
                     "alone match nothing; add a word to look for")
    if titled:
        count = f"{titled}+" if titled >= 20 else str(titled)
        lines.append(f"hint: search reads messages, not titles; {count} session "
                     f"{_plural(titled, 'title')} contain it: hermes-store list --title "
                     f"{shown!r}")
    return lines


def _plural(n: int, word: str) -> str:
    return word if n == 1 else f"{word}s"
