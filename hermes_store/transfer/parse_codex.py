"""Codex rollouts → :class:`~hermes_store.transfer.builder.ImportedSession` (docs/formats.md#codex).

File: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``; every line is
``{"timestamp", "type", "payload"}``. Messages come from ``response_item`` only: ``event_msg``
``user_message``/``agent_message`` repeat the same text and are used only when a file has no
``response_item`` messages at all. Token counts are running totals, so only the last
``token_count`` counts.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_store.transfer.builder import SOURCE_CODEX, ImportedSession, SessionBuilder
from hermes_store.transfer.lines import MAX_LINE_BYTES, ReadStats, field_object, iter_json_lines

__all__ = ["parse_codex_file"]

_RESPONSE_TYPES = frozenset({
    "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "local_shell_call", "web_search_call",
})
_UUID_IN_NAME = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")


@dataclass
class _Fallback:
    index: int
    compactions: int
    role: str
    text: str
    ts: float | None
    line: int


@dataclass
class _State:
    meta_seen: bool = False
    foreign_id: str | None = None
    saw_messages: bool = False
    pending_reasoning: list[str] = field(default_factory=list)
    fallback: list[_Fallback] = field(default_factory=list)
    last_usage: dict[str, Any] | None = None
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def parse_codex_file(path: str | os.PathLike[str], *,
                     session_index: str | os.PathLike[str] | None = None,
                     max_line_bytes: int = MAX_LINE_BYTES) -> ImportedSession:
    """Parse one rollout; the foreign id is ``session_meta.payload.id`` (else the file-name UUID)."""
    b = SessionBuilder(SOURCE_CODEX, path)
    st = _State()
    for lineno, obj in iter_json_lines(path, b.stats, max_line_bytes):
        _line(b, st, lineno, *_envelope(obj))
    if not st.saw_messages:
        _replay_fallback(b, st)
    _flush_reasoning(b, st, None, 0)
    _settle_usage(b.session, st.last_usage)
    b.extra_provenance["skipped_lines"] = dict(st.skipped)
    foreign_id = st.foreign_id
    if foreign_id is None and (m := _UUID_IN_NAME.search(Path(path).name)):
        foreign_id = m.group(1)
        b.note("no session_meta id: the file-name UUID was used")
    title = _thread_name(Path(path), foreign_id, session_index) if foreign_id else None
    return b.finish(foreign_id=foreign_id, title=title)


def _envelope(obj: dict[str, Any]) -> tuple[str | None, dict[str, Any], Any]:
    """(type, payload, timestamp); early rollouts had bare response items and a header line."""
    if isinstance(obj.get("payload"), dict):
        return obj.get("type"), obj["payload"], obj.get("timestamp")
    if obj.get("type") in _RESPONSE_TYPES:
        return "response_item", obj, obj.get("timestamp")
    if "record_type" in obj:
        return "state", obj, None
    if "id" in obj and "type" not in obj:
        return "session_meta", obj, obj.get("timestamp")
    return obj.get("type"), {}, obj.get("timestamp")


def _line(b: SessionBuilder, st: _State, lineno: int, kind: str | None,
          payload: dict[str, Any], raw_ts: Any) -> None:
    ts = b.line_time(raw_ts)
    if kind == "session_meta":
        _session_meta(b, st, payload)
    elif kind == "turn_context":
        s = b.session
        s.model = _str(payload.get("model")) or s.model
        s.cwd = _str(payload.get("cwd")) or s.cwd
    elif kind == "response_item":
        _response_item(b, st, lineno, payload, ts)
    elif kind == "event_msg":
        _event(b, st, lineno, payload, ts)
    elif kind == "compacted":
        text = _str(payload.get("message")) or _str(payload.get("summary")) or ""
        b.compact()
        b.add_summary(text, ts, lineno, {"trigger": payload.get("trigger")}
                      if payload.get("trigger") else None)
    elif kind == "state":
        st.skip("state")
    else:
        b.unknown(str(kind))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _session_meta(b: SessionBuilder, st: _State, p: dict[str, Any]) -> None:
    if st.meta_seen:
        st.skip("session_meta:repeat")  # forks and resumes may copy a parent's meta: first wins
        return
    st.meta_seen = True
    s = b.session
    st.foreign_id = _str(p.get("id"))
    b.line_time(p.get("timestamp"))
    s.cwd = _str(p.get("cwd")) or s.cwd
    git = field_object(p, "git")
    s.git_branch = _str(git.get("branch")) or s.git_branch
    base = p.get("base_instructions")
    prompt = base.get("text") if isinstance(base, dict) else base
    s.system_prompt = _str(prompt) or _str(p.get("instructions")) or s.system_prompt
    b.extra_provenance.update({
        k: p[k] for k in ("forked_from_id", "originator", "cli_version", "source", "model_provider")
        if p.get(k) is not None
    })
    if git.get("commit_hash") or git.get("repository_url"):
        b.extra_provenance["git"] = {k: git.get(k) for k in ("commit_hash", "repository_url")}


# --------------------------------------------------------------------------- response items

def _response_item(b: SessionBuilder, st: _State, lineno: int, p: dict[str, Any],
                   ts: float | None) -> None:
    ptype = p.get("type")
    if ptype == "message":
        _message(b, st, lineno, p, ts)
    elif ptype == "reasoning":
        texts = [i.get("text") for i in p.get("summary") or [] if isinstance(i, dict)]
        if not any(texts):  # unencrypted raw reasoning, when a provider sends it
            texts = [i.get("text") for i in p.get("content") or [] if isinstance(i, dict)]
        st.pending_reasoning += [t for t in texts if isinstance(t, str) and t.strip()]
    elif ptype == "function_call":
        row = _call_row(b, st, ts, lineno)
        b.add_tool_call(row, _str(p.get("call_id")), _str(p.get("name")), p.get("arguments"))
    elif ptype == "custom_tool_call":
        row = _call_row(b, st, ts, lineno)
        b.add_tool_call(row, _str(p.get("call_id")), _str(p.get("name")), {"input": p.get("input")})
    elif ptype == "local_shell_call":
        row = _call_row(b, st, ts, lineno)
        call_id = _str(p.get("call_id")) or _str(p.get("id"))
        b.add_tool_call(row, call_id, "local_shell", p.get("action"))
    elif ptype == "web_search_call":
        row = _call_row(b, st, ts, lineno)
        call_id = _str(p.get("id")) or f"web_search_{lineno}"
        b.add_tool_call(row, call_id, "web_search", p.get("action"))
    elif ptype in ("function_call_output", "custom_tool_call_output"):
        text, meta, attachments = _output(b, p.get("output"))
        b.add_tool_result(_str(p.get("call_id")), text, ts, lineno, meta, attachments)
    else:
        b.unknown(f"response_item:{ptype}")


def _message(b: SessionBuilder, st: _State, lineno: int, p: dict[str, Any],
             ts: float | None) -> None:
    role = p.get("role")
    if role not in ("user", "assistant"):
        st.skip(f"message:{role}")  # developer/system: injected policy, not conversation
        return
    st.saw_messages = True
    text, attachments = _content_text(b, p.get("content"))
    if role == "user":
        b.add_user_text(text, ts, lineno, attachments)
        return
    row = b.add("assistant", text or None, ts, lineno, attachments=attachments)
    _flush_reasoning(b, st, row, lineno)
    if _str(p.get("phase")):
        row["meta"]["phase"] = p["phase"]


def _call_row(b: SessionBuilder, st: _State, ts: float | None, lineno: int) -> dict[str, Any]:
    """The assistant row a call belongs to: the open one, or a new one if reasoning is pending."""
    if b.rows and b.rows[-1]["role"] == "assistant" and not st.pending_reasoning:
        return b.rows[-1]
    row = b.add("assistant", None, ts, lineno)
    _flush_reasoning(b, st, row, lineno)
    return row


def _flush_reasoning(b: SessionBuilder, st: _State, row: dict[str, Any] | None,
                     lineno: int) -> None:
    """Pending reasoning summaries go to the next assistant row (a new one at the very end)."""
    if not st.pending_reasoning:
        return
    text = "\n\n".join(st.pending_reasoning)
    st.pending_reasoning.clear()
    if row is None:
        ts = b.rows[-1]["timestamp"] if b.rows else None
        row = b.add("assistant", None, ts, b.rows[-1]["meta"].get("line", lineno) if b.rows else 0)
    row["reasoning"] = f"{row['reasoning']}\n\n{text}" if row["reasoning"] else text


def _content_text(b: SessionBuilder, content: Any) -> tuple[str, list[dict[str, Any]]]:
    """Join ``input_text``/``output_text`` items; images become attachments and ``[image]``."""
    if isinstance(content, str):
        return content, []
    parts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        itype = item.get("type")
        if itype in ("input_text", "output_text", "text"):
            parts.append(item.get("text") or "")
        elif itype in ("input_image", "image"):
            ref = b.add_image_url(item.get("image_url"))
            attachments += [ref] if ref else []
            parts.append("[image]")
        else:
            b.unknown(f"content:{itype}")
    return "\n".join(parts), attachments


def _output(b: SessionBuilder, output: Any) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """Tool output: a plain string, a JSON string with ``output`` + metadata, or a list of items."""
    if isinstance(output, str):
        parsed = _json_object(output)
        if parsed is not None and "output" in parsed:
            inner = parsed["output"]
            text = inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)
            meta = {"output_metadata": parsed["metadata"]} if parsed.get("metadata") else {}
            return text, meta, []
        return output, {}, []
    if isinstance(output, list):
        text, attachments = _content_text(b, output)
        return text, {}, attachments
    if isinstance(output, dict):
        inner = output.get("content", output.get("output"))
        text, meta, attachments = _output(b, inner) if inner is not None else ("", {}, [])
        if output.get("success") is False:
            meta["is_error"] = True
        return text, meta, attachments
    return ("" if output is None else json.dumps(output)), {}, []


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# --------------------------------------------------------------------------- events, tokens, titles

def _event(b: SessionBuilder, st: _State, lineno: int, p: dict[str, Any],
           ts: float | None) -> None:
    ptype = p.get("type")
    if ptype == "token_count":
        info = p.get("info")
        usage = info.get("total_token_usage") if isinstance(info, dict) else None
        if isinstance(usage, dict):
            st.last_usage = usage  # running totals: the last one is the answer
    elif ptype in ("user_message", "agent_message") and isinstance(p.get("message"), str):
        role = "user" if ptype == "user_message" else "assistant"
        st.fallback.append(_Fallback(len(b.rows), b.compactions, role, p["message"], ts, lineno))


def _replay_fallback(b: SessionBuilder, st: _State) -> None:
    """No ``response_item`` messages: rebuild turns from ``event_msg`` at their file positions."""
    if not st.fallback:
        return
    b.note("no response_item messages: event_msg user/agent messages were used")
    for fb in reversed(st.fallback):
        before = len(b.rows)
        if fb.role == "user":
            row = b.add_user_text(fb.text, fb.ts, fb.line)
        else:
            row = b.add("assistant", fb.text, fb.ts, fb.line)
        if row is None or len(b.rows) == before:
            continue
        b.rows.pop()
        if fb.compactions < b.compactions:
            row["active"], row["compacted"] = 0, 1
        b.rows.insert(fb.index, row)


def _settle_usage(s: ImportedSession, usage: dict[str, Any] | None) -> None:
    # The doc's example (100 + 20 + 10 + 5 = 135 total) treats the four counts as disjoint,
    # so they are copied as they are, never summed over lines.
    if not usage:
        return

    def num(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    s.input_tokens = num("input_tokens")
    s.cache_read_tokens = num("cached_input_tokens")
    s.output_tokens = num("output_tokens")
    s.reasoning_tokens = num("reasoning_output_tokens")


def _thread_name(path: Path, foreign_id: str,
                 explicit: str | os.PathLike[str] | None) -> str | None:
    """``thread_name`` from ``session_index.jsonl`` (the last entry for the id wins)."""
    candidates: list[Path] = []
    if explicit is not None:
        candidates.append(Path(explicit))
    else:
        for parent in path.absolute().parents:
            if parent.name == "sessions":
                candidates.append(parent.parent / "session_index.jsonl")
                break
        home = os.environ.get("CODEX_HOME")
        candidates.append((Path(home) if home else Path.home() / ".codex") / "session_index.jsonl")
    for index in candidates:
        name: str | None = None
        try:
            for _, obj in iter_json_lines(index, ReadStats()):
                if obj.get("id") == foreign_id:
                    name = _str(obj.get("thread_name")) or name
        except OSError:
            continue
        if name:
            return name
    return None
