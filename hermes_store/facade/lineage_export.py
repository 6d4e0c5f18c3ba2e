"""v21 API (docs/v21.md#other): ``export_session_lineage``, a compressed conversation as one
document."""

from __future__ import annotations

from typing import Any, Protocol

from hermes_store.facade import compression
from hermes_store.facade.units import SessionDB


class _Exporting(SessionDB, Protocol):
    def export_session(self, session_id: str) -> dict[str, Any] | None: ...


def export_session_lineage(db: _Exporting, session_id: str) -> dict[str, Any] | None:
    """The tip's ``export_session`` dict, plus every segment's export root → tip and their
    messages concatenated: a compressed conversation as one document."""
    ids = compression.get_compression_lineage(db, session_id)
    segments = [found for sid in ids if (found := db.export_session(sid)) is not None]
    if not segments:
        return None
    combined = dict(segments[-1])
    combined["segments"] = segments
    combined["lineage_session_ids"] = [segment["id"] for segment in segments]
    combined["messages"] = [m for segment in segments for m in segment.get("messages", [])]
    combined["message_count"] = len(combined["messages"])
    return combined
