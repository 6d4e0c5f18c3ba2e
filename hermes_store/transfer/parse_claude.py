"""Claude Code logs → :class:`~hermes_store.transfer.builder.ImportedSession` (docs/formats.md).

File: ``~/.claude/projects/<encoded-cwd>/<session-uuid>.jsonl``. One API message may span several
``assistant`` lines sharing ``message.id`` (one content block each, each repeating ``usage``), so
lines are merged by that id and usage is counted once per id. Tool activity stays structured:
``tool_use`` → ``tool_calls``, ``tool_result`` → ``tool`` rows paired by id
(docs/lessons.md#transfer: the old importer flattened these to ``[ran tool: X]``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_store.transfer.builder import SOURCE_CLAUDE, ImportedSession, SessionBuilder
from hermes_store.transfer.lines import MAX_LINE_BYTES, field_object, iter_json_lines

__all__ = ["parse_claude_file"]

#: Lines that carry no conversation: skipped without being reported as unknown.
BOOKKEEPING_TYPES = frozenset({
    "file-history-snapshot", "queue-operation", "progress", "attachment", "last-prompt",
    "mode", "pr-link",
})
_USAGE_FIELDS = (
    ("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
    ("cache_read_input_tokens", "cache_read_tokens"),
    ("cache_creation_input_tokens", "cache_write_tokens"),
)


@dataclass
class _State:
    by_message_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    custom_title: str | None = None
    summary: str | None = None
    ai_title: str | None = None
    version: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    session_ids: list[str] = field(default_factory=list)  # in order, once each

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def parse_claude_file(path: str | os.PathLike[str], *,
                      max_line_bytes: int = MAX_LINE_BYTES) -> ImportedSession:
    """Parse one Claude Code log. The foreign id is the session's own id, so moving or
    renaming the file never makes a second session (:func:`_foreign_id`)."""
    b = SessionBuilder(SOURCE_CLAUDE, path)
    st = _State()
    for lineno, obj in iter_json_lines(path, b.stats, max_line_bytes):
        _line(b, st, lineno, obj)
    _settle_usage(b.session, st)
    b.extra_provenance.update(source_version=st.version, skipped_lines=dict(st.skipped))
    title = st.custom_title or st.summary or st.ai_title
    return b.finish(foreign_id=_foreign_id(Path(path).stem, st.session_ids), title=title)


def _foreign_id(stem: str, session_ids: list[str]) -> str:
    """The file-stem UUID when the lines carry it (the file as Claude Code named it), else
    the last ``sessionId`` the session's own lines carry (the file was renamed or copied);
    the stem for a file without one (a subagent log, whose lines carry its parent's)."""
    if stem in session_ids or not session_ids:
        return stem
    return session_ids[-1]


def _line(b: SessionBuilder, st: _State, lineno: int, obj: dict[str, Any]) -> None:
    kind = obj.get("type")
    # Every dated line bounds the session in time, even one skipped below.
    ts = b.line_time(obj.get("timestamp"))
    if obj.get("isSidechain") is True:
        st.skip("sidechain")  # subagent turns belong to their own (child) session
        return
    if obj.get("isMeta") is True:
        b.session.dropped_wrappers += 1  # injected by definition (docs/formats.md#wrappers)
        return
    if kind in ("user", "assistant"):
        sid = _str(obj.get("sessionId"))
        if sid is not None and sid not in st.session_ids:
            st.session_ids.append(sid)
        _remember_context(b, st, obj)
        (_user if kind == "user" else _assistant)(b, st, lineno, obj, ts)
    elif kind == "summary":
        st.summary = _str(obj.get("summary")) or st.summary
    elif kind == "ai-title":
        st.ai_title = _str(obj.get("aiTitle")) or st.ai_title
    elif kind == "custom-title":
        st.custom_title = _str(obj.get("customTitle")) or st.custom_title
    elif kind == "system":
        _system(b, st, lineno, obj)
    elif kind in BOOKKEEPING_TYPES:
        st.skip(str(kind))
    else:
        b.unknown(str(kind))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _remember_context(b: SessionBuilder, st: _State, obj: dict[str, Any]) -> None:
    s = b.session
    s.cwd = _str(obj.get("cwd")) or s.cwd
    s.git_branch = _str(obj.get("gitBranch")) or s.git_branch
    st.version = _str(obj.get("version")) or st.version


def _system(b: SessionBuilder, st: _State, lineno: int, obj: dict[str, Any]) -> None:
    if obj.get("subtype") != "compact_boundary":
        st.skip(f"system:{obj.get('subtype')}")
        return
    b.compact()
    meta = obj.get("compactMetadata")
    if isinstance(meta, dict):
        b.extra_provenance.setdefault("compact_boundaries", []).append(
            {"line": lineno, "trigger": meta.get("trigger"), "pre_tokens": meta.get("preTokens")}
        )


# --------------------------------------------------------------------------- user lines

def _user(b: SessionBuilder, st: _State, lineno: int, obj: dict[str, Any],
          ts: float | None) -> None:
    message = field_object(obj, "message")
    content = message.get("content")
    if obj.get("isCompactSummary") is True:
        text, _ = _blocks_text(b, content)
        b.compact()  # older logs have no boundary line before the summary; harmless if they do
        b.add_summary(text, ts, lineno)
        return
    if isinstance(content, str):
        b.add_user_text(content, ts, lineno)
        return
    if not isinstance(content, list):
        st.skip("user:no-content")
        return
    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "tool_result":
            _tool_result(b, block, ts, lineno)
        elif btype == "text":
            texts.append(block.get("text") or "")
        elif btype == "image":
            ref = _image(b, block)
            attachments += [ref] if ref else []
            texts.append("[image]")
        else:
            b.unknown(f"user-block:{btype}")
    if texts or attachments:
        b.add_user_text("\n".join(texts), ts, lineno, attachments)


def _tool_result(b: SessionBuilder, block: dict[str, Any], ts: float | None, lineno: int) -> None:
    text, attachments = _blocks_text(b, block.get("content"))
    meta = {"is_error": True} if block.get("is_error") is True else {}
    b.add_tool_result(_str(block.get("tool_use_id")), text, ts, lineno, meta, attachments)


def _image(b: SessionBuilder, block: dict[str, Any]) -> dict[str, Any] | None:
    source = field_object(block, "source")
    if source.get("type") == "base64":
        return b.add_image(source.get("data"), source.get("media_type"))
    if source.get("type") == "url":
        return b.add_image_url(source.get("url"))
    return None


def _blocks_text(b: SessionBuilder, content: Any) -> tuple[str, list[dict[str, Any]]]:
    """Text of a string-or-blocks content; images become attachments and ``[image]``."""
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        return ("" if content is None else json.dumps(content, ensure_ascii=False)), []
    parts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text") or "")
        elif isinstance(block, dict) and block.get("type") == "image":
            ref = _image(b, block)
            attachments += [ref] if ref else []
            parts.append("[image]")
        else:
            parts.append(json.dumps(block, ensure_ascii=False))
    return "\n".join(parts), attachments


# --------------------------------------------------------------------------- assistant lines

def _assistant(b: SessionBuilder, st: _State, lineno: int, obj: dict[str, Any],
               ts: float | None) -> None:
    message = field_object(obj, "message")
    if message.get("model") == "<synthetic>":
        st.skip("synthetic")  # client-side placeholders ("No response requested."), not the model
        return
    mid = _str(message.get("id"))
    row = st.by_message_id.get(mid) if mid else None
    if row is None:
        row = b.add("assistant", None, ts, lineno, meta={"message_id": mid} if mid else None)
        if mid:
            st.by_message_id[mid] = row
    if isinstance(message.get("usage"), dict):
        # Split lines repeat usage: the last copy per id wins, never a sum of copies.
        st.usage[mid or f"line:{lineno}"] = message["usage"]
    b.session.model = _str(message.get("model")) or b.session.model
    if _str(message.get("stop_reason")):
        row["finish_reason"] = message["stop_reason"]
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    for block in blocks if isinstance(blocks, list) else []:
        if isinstance(block, dict):
            _assistant_block(b, row, block, ts, lineno)


def _assistant_block(b: SessionBuilder, row: dict[str, Any], block: dict[str, Any],
                     ts: float | None, lineno: int) -> None:
    btype = block.get("type")
    if btype == "text":
        row["content"] = _join(row["content"], block.get("text"))
    elif btype == "thinking":
        row["reasoning"] = _join(row["reasoning"], block.get("thinking"))
    elif btype in ("tool_use", "server_tool_use"):
        b.add_tool_call(row, _str(block.get("id")), _str(block.get("name")), block.get("input"))
    elif btype == "redacted_thinking":
        row["meta"]["redacted_thinking"] = True  # opaque ciphertext: nothing to keep
    elif isinstance(btype, str) and btype.endswith("_tool_result"):
        text, attachments = _blocks_text(b, block.get("content"))
        b.add_tool_result(_str(block.get("tool_use_id")), text, ts, lineno, None, attachments)
    else:
        b.unknown(f"assistant-block:{btype}")


def _join(existing: str | None, new: Any) -> str | None:
    if not isinstance(new, str) or not new:
        return existing
    return new if not existing else f"{existing}\n\n{new}"


def _settle_usage(s: ImportedSession, st: _State) -> None:
    for usage in st.usage.values():
        for src, dst in _USAGE_FIELDS:
            value = usage.get(src)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(s, dst, getattr(s, dst) + value)
