"""Finishing the session rows a listing reads: the preview cut, prompts stored by hash filled in,
a compression root shown as its lineage's tip (docs/contracts.md#listing).

No SQLAlchemy here: the same finishing serves the repo's statements (:mod:`repo.listing`) and
the stdlib path's (:mod:`repo.prepared_reads`); what needs the database comes in as a function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_store.content import text_of

PREVIEW_CHARS = 60
PROMPTS_TABLE = "system_prompts"
HASH_COLUMN = "system_prompt_hash"
COMPRESSION = "compression"
# The agent's column (its schema 31) for sessions a user hid from their lists.
HIDDEN = "hidden"
# Columns a projected listing row takes from its lineage's tip (docs/contracts.md#listing).
TIP_COLUMNS = ("id", "ended_at", "end_reason", "message_count", "tool_call_count", "title",
               "last_active", "preview", "model", "system_prompt")


def make_preview(raw: str | None) -> str:
    """Line breaks to spaces, trimmed, cut to 60 characters plus ``...``; none → ``""``."""
    if not raw:
        return ""
    text = text_of(raw).replace("\r", " ").replace("\n", " ").strip()
    return text[:PREVIEW_CHARS] + "..." if len(text) > PREVIEW_CHARS else text


def finish_row(row: Any) -> dict[str, Any]:
    item = dict(row)
    item["preview"] = make_preview(item.get("preview"))
    return item


def pending_prompts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose prompt is stored by hash (a store without the layout has none)."""
    return [r for r in rows if r.get("system_prompt") is None and r.get(HASH_COLUMN)]


def with_prompts(rows: list[dict[str, Any]],
                 resolve: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
    """``rows`` with prompts stored by hash filled in by ``resolve`` (given only those rows)."""
    pending = pending_prompts(rows)
    if pending:
        resolve(pending)
    return rows


def project(row: dict[str, Any], tip_of: Callable[[str], str | None],
            tip_row: Callable[[str], dict[str, Any] | None]) -> dict[str, Any]:
    """A compression-ended row shows its lineage tip, keeping the root's ``started_at``;
    ``tip_row`` gives the tip's finished row (None when it is gone)."""
    if row.get("end_reason") != COMPRESSION:
        return row
    tip_id = tip_of(row["id"])
    if tip_id is None or tip_id == row["id"]:
        return row
    tip = tip_row(tip_id)
    if tip is None:
        return row
    projected = dict(row)
    for key in TIP_COLUMNS:
        projected[key] = tip.get(key)
    projected["_lineage_root_id"] = row["id"]
    return projected
