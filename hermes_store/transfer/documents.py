"""Human-readable exports: verified Markdown/Quarto and self-contained HTML (docs/formats.md).

Both stream message by message into a temporary file (see :func:`exporters.open_output`).
Markdown ends with an ``## Export verification`` section whose last line holds the file's own
SHA-256, computed over the file as it would read with that value set to ``pending``; writing the
hash last lets it be computed while streaming, and :func:`verify_markdown` checks it later.
HTML escapes every stored value: transcripts are untrusted input.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from hermes_store.content import calls_of, iso_utc, sane_time, text_of
from hermes_store.errors import OutputExistsError, UsageError
from hermes_store.transfer.manifest import Manifest
from hermes_store.transfer.output import (
    EXPORTER,
    ExportOptions,
    ExportResult,
    Progress,
    Scrub,
    default_export_dir,
    dumps,
    is_dir_target,
    open_output,
    slug,
    tick,
)
from hermes_store.transfer.reader import StoreReader

__all__ = ["verify_markdown", "write_html", "write_markdown"]

HASH_LINE_PREFIX = "- File SHA-256 (with this value read as `pending`): `"
_HASH_LINE = re.compile(
    r"^- File SHA-256 \(with this value read as `pending`\): `([0-9a-f]{64}|pending)`\n?\Z"
)


def _display(value: Any) -> str:
    """A cell for humans: sane times as ISO, bad ones as their raw value, bytes decoded."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return "" if value is None else str(value)


def _when(value: Any) -> str:
    return iso_utc(value) or (f"? ({value!r})" if value is not None else "?")


def _fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    ticks = "`" * (longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}\n"


def _pretty_args(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
        except ValueError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False, indent=2, default=str)


# --------------------------------------------------------------------------- markdown

class _HashingWriter:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.file_digest = hashlib.sha256()  # the bytes as written: the manifest's checksum

    def write(self, text: str) -> None:
        self.out.write(text)
        self.digest.update(text.encode("utf-8"))
        self.file_digest.update(text.encode("utf-8"))

    def finish(self) -> str:
        """Write the hash line last: hashed as ``pending``, written with the real value."""
        self.digest.update(f"{HASH_LINE_PREFIX}pending`\n".encode())
        value = self.digest.hexdigest()
        line = f"{HASH_LINE_PREFIX}{value}`\n"
        self.out.write(line)
        self.file_digest.update(line.encode("utf-8"))
        return value


def verify_markdown(path: str | os.PathLike[str]) -> bool:
    """True when the file's recorded SHA-256 matches its content (read with the value as ``pending``)."""
    data = Path(path).read_bytes()
    head, sep, last = data.rstrip(b"\n").rpartition(b"\n")
    m = _HASH_LINE.match(last.decode("utf-8", errors="replace"))
    if not m or m.group(1) == "pending":
        return False
    pending = head + sep + f"{HASH_LINE_PREFIX}pending`\n".encode()
    return hashlib.sha256(pending).hexdigest() == m.group(1)


def _markdown_groups(reader: StoreReader, ids: Sequence[str], logical: bool) -> list[list[str]]:
    if not logical:
        return [[sid] for sid in ids]
    groups: dict[str, list[str]] = {}
    for sid in ids:
        lineage = reader.lineage_ids(sid)
        groups.setdefault(lineage[-1], lineage)
    return list(groups.values())


def write_markdown(reader: StoreReader, ids: Sequence[str], output: str | os.PathLike[str] | None,
                   options: ExportOptions, scrub: Scrub, result: ExportResult,
                   progress: Progress | None) -> None:
    """One verified file per session (or per lineage with ``lineage='logical'``) plus a manifest."""
    ext = options.format
    with reader.scope():
        groups = _markdown_groups(reader, ids, options.lineage == "logical")
    if output is None:
        directory, single = default_export_dir(), None
    elif is_dir_target(output):
        directory, single = Path(output), None
    elif len(groups) == 1:
        directory, single = Path(output).parent, Path(output)
    else:
        raise UsageError(
            f"{ext} export of {len(groups)} sessions needs a directory (end OUTPUT with '/')")
    plans: list[tuple[list[str], list[str], dict[str, Any], Path]] = []
    for group in groups:
        with reader.scope():
            lineage = group if len(group) > 1 else reader.lineage_ids(group[-1])
            tip = reader.session(group[-1]) or {"id": group[-1]}
        meta = scrub.session(tip)
        name = "-".join(p for p in (group[-1], slug(meta.get("title"))) if p) + f".{ext}"
        target = single or directory / name
        if target.exists() and not options.force:
            raise OutputExistsError(str(target))
        plans.append((group, lineage, meta, target))
    manifest = Manifest(directory, mode=options.file_mode) if plans else None
    for group, lineage, meta, target in plans:
        with (open_output(target, force=options.force, mode=options.file_mode) as out,
              reader.scope()):
            writer = _HashingWriter(out)
            exported, stored = _write_markdown_body(reader, group, lineage, meta, writer, options,
                                                    scrub)
            writer.finish()
        result.files.append(str(target))
        result.messages += exported
        result.sessions += len(group)
        record = {"session_id": group[-1], "lineage_session_ids": lineage, "path": target.name,
                  "format": ext, "message_count": exported,
                  "sha256": writer.file_digest.hexdigest(), "exported_at": options.exported_at}
        assert manifest is not None
        manifest.record(target.name, dumps(record))
        if stored != exported:
            result.notes.append(f"{group[-1]}: exported {exported} messages, store has {stored}")
        tick(progress, group[-1], result.sessions)
    if manifest is not None:
        result.manifest = str(manifest.path)


def _front_matter(meta: dict[str, Any], group: list[str], stored: int, newest: Any,
                  options: ExportOptions) -> str:
    fields = {
        "session_id": meta.get("id"), "title": _display(meta.get("title")) or None,
        "source": meta.get("source"), "created_at": iso_utc(meta.get("started_at")),
        "updated_at": iso_utc(newest), "ended_at": iso_utc(meta.get("ended_at")),
        "model": meta.get("model"), "provider": meta.get("billing_provider"),
        "cwd": _display(meta.get("cwd")) or None, "archived": bool(meta.get("archived")),
        "pinned": bool(meta.get("pinned")), "message_count": stored,
        "tool_call_count": meta.get("tool_call_count"), "lineage_session_ids": group,
        "format": options.format, "exported_at": options.exported_at, "exporter": EXPORTER,
    }
    # JSON scalars and lists are valid YAML flow values, and quote whatever needs quoting.
    lines = [f"{k}: {json.dumps(v, ensure_ascii=False, default=str)}" for k, v in fields.items()]
    return "---\n" + "\n".join(lines) + "\n---\n\n"


def _write_markdown_body(reader: StoreReader, group: list[str], lineage: list[str],
                         meta: dict[str, Any], w: _HashingWriter, options: ExportOptions,
                         scrub: Scrub) -> tuple[int, int]:
    stats = [reader.message_stats(sid) for sid in group]
    stored = sum(n for n, _ in stats)
    newest = max((t for _, t in stats if t is not None and sane_time(t) is not None),
                 default=None)
    w.write(_front_matter(meta, lineage, stored, newest, options))
    title = _display(meta.get("title")) or meta.get("id")
    w.write(f"# {title}\n\n- Session ID: `{meta.get('id')}`\n- Source: {meta.get('source')}\n")
    if meta.get("cwd"):
        w.write(f"- Working directory: `{_display(meta.get('cwd'))}`\n")
    w.write("\n## Messages\n\n")
    exported = 0
    for sid in group:
        if len(group) > 1:
            w.write(f"## Compression segment: {sid}\n\n")
        for msg in reader.iter_messages(sid):
            _write_markdown_message(w, scrub.message(msg))
            exported += 1
    w.write("## Export verification\n\n")
    w.write(f"- Exported messages: {exported}\n- Messages in store: {stored}\n")
    return exported, stored


def _write_markdown_message(w: _HashingWriter, msg: dict[str, Any]) -> None:
    role = _display(msg.get("role")) or "?"
    when = _when(msg.get("timestamp"))
    label = (" (compacted)" if msg.get("compacted")
             else " (inactive)" if msg.get("active") == 0 else "")
    if role == "tool":
        w.write(f"### Tool — {_display(msg.get('tool_name')) or 'tool'} — {when}{label}\n\n")
        if msg.get("tool_call_id"):
            w.write(f"Result of `{_display(msg.get('tool_call_id'))}`\n\n")
        w.write(_fence(text_of(msg.get("content"), display=True), "text") + "\n")
        return
    w.write(f"### {role.capitalize()} — {when}{label}\n\n")
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip():
        w.write("Reasoning:\n\n" + _fence(reasoning, "text") + "\n")
    text = text_of(msg.get("content"), display=True)
    if text:
        w.write(text.rstrip("\n") + "\n\n")
    for call in calls_of(msg.get("tool_calls")):
        w.write(f"Tool call `{call['name']}` (`{call['id']}`):\n\n")
        w.write(_fence(_pretty_args(call["arguments"]), "json") + "\n")


# --------------------------------------------------------------------------- html

_CSS = """
body{margin:0;font:15px/1.5 system-ui,sans-serif;color:#1d1d1f;background:#f5f5f7;display:flex}
nav{width:260px;flex:none;height:100vh;overflow:auto;position:sticky;top:0;background:#fff;
border-right:1px solid #ddd;padding:12px;box-sizing:border-box}
nav a{display:block;padding:4px 6px;color:#0a58ca;text-decoration:none;border-radius:4px}
nav a:hover{background:#eef}
main{flex:1;max-width:960px;margin:0 auto;padding:16px}
section{margin-bottom:48px}
.meta{color:#555;font-size:13px}
.msg{border-radius:10px;padding:8px 12px;margin:10px 0;background:#fff;border:1px solid #e3e3e3}
.msg.user{background:#e8f0fe}.msg.assistant{background:#fff}.msg.tool{background:#f3f3f3}
.msg.system{background:#fff8e1}.msg.compacted{opacity:.6}
.head{font-size:12px;color:#666;margin-bottom:4px}
.body{white-space:pre-wrap;word-wrap:break-word}
pre{white-space:pre-wrap;word-wrap:break-word;background:#fafafa;padding:8px;border-radius:6px;
margin:4px 0;font-size:13px}
details summary{cursor:pointer;color:#444}
"""


def _e(value: Any) -> str:
    return html.escape(_display(value), quote=True)


def write_html(reader: StoreReader, ids: Sequence[str], target: Path, options: ExportOptions,
               scrub: Scrub, result: ExportResult, progress: Progress | None) -> None:
    """One self-contained page: inline CSS, no script or network fetch, a sidebar for several sessions."""
    with reader.scope():
        heads = [(sid, scrub.session(reader.session(sid) or {"id": sid})) for sid in ids]
    page_title = (_display(heads[0][1].get("title")) or heads[0][0]) if len(heads) == 1 else (
        f"{len(heads)} Hermes sessions" if heads else "No Hermes sessions")
    with open_output(target, force=options.force, mode=options.file_mode) as out:
        out.write("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                  f"<title>{_e(page_title)}</title><style>{_CSS}</style></head><body>\n")
        if len(heads) > 1:
            out.write("<nav><strong>Sessions</strong>\n")
            for sid, meta in heads:
                out.write(f"<a href=\"#s-{_e(sid)}\">{_e(meta.get('title') or sid)}</a>\n")
            out.write("</nav>\n")
        out.write("<main>\n")
        for sid, meta in heads:
            with reader.scope():
                result.messages += _write_html_session(reader, sid, meta, out, scrub)
            result.sessions += 1
            tick(progress, sid, result.sessions)
        out.write("</main></body></html>\n")
    result.files.append(str(target))


def _write_html_session(reader: StoreReader, sid: str, meta: dict[str, Any], out: TextIO,
                        scrub: Scrub) -> int:
    out.write(f"<section id=\"s-{_e(sid)}\"><h1>{_e(meta.get('title') or sid)}</h1>\n")
    facts = [("ID", sid), ("Source", meta.get("source")), ("Model", meta.get("model")),
             ("Working directory", meta.get("cwd")), ("Branch", meta.get("git_branch")),
             ("Started", _when(meta.get("started_at"))),
             ("Ended", _when(meta.get("ended_at")) if meta.get("ended_at") is not None else "open")]
    out.write("<p class=\"meta\">" + " · ".join(
        f"{_e(k)}: {_e(v)}" for k, v in facts if v not in (None, "")) + "</p>\n")
    count = 0
    for raw in reader.iter_messages(sid):
        msg = scrub.message(raw)
        role = _display(msg.get("role")) or "unknown"
        css = re.sub(r"[^a-z]", "", role.lower()) or "unknown"
        extra = " compacted" if msg.get("compacted") else ""
        out.write(f"<div class=\"msg {css}{extra}\"><div class=\"head\">{_e(role)}")
        if role == "tool" and msg.get("tool_name"):
            out.write(f" · {_e(msg.get('tool_name'))}")
        out.write(f" · {_e(_when(msg.get('timestamp')))}</div>")
        text = text_of(msg.get("content"), display=True)
        if role == "tool":
            out.write(f"<details><summary>Output ({len(text)} characters)</summary>"
                      f"<pre>{_e(text)}</pre></details>")
        elif text:
            out.write(f"<div class=\"body\">{_e(text)}</div>")
        reasoning = msg.get("reasoning") or msg.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning.strip():
            out.write(f"<details><summary>Reasoning</summary><pre>{_e(reasoning)}</pre></details>")
        for call in calls_of(msg.get("tool_calls")):
            out.write(f"<details><summary>Tool call: {_e(call['name'])}</summary>"
                      f"<pre>{_e(_pretty_args(call['arguments']))}</pre></details>")
        out.write("</div>\n")
        count += 1
    out.write("</section>\n")
    return count
