"""Which search layout a store file has and what its SQLite can do: what ``current`` reports
beside the revision, and ``stats``' layout line.

No SQLAlchemy here: ``current`` on a store file reads through the standard library
(:mod:`db.raw`); the functions take either connection (``exec_driver_sql``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermes_store.db import catalog, names
from hermes_store.db import derived as layout
from hermes_store.db.sqlite_driver import driver_errors

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["capabilities", "layout_info", "state_markers"]


def state_markers(conn: Connection) -> dict[str, str]:
    try:
        return {str(k): v for k, v in conn.exec_driver_sql("SELECT key, value FROM state_meta")}
    except driver_errors():
        return {}


def _layout_state(conn: Connection, markers: dict[str, str], fts: list[str]) -> str:
    """What the derived indexes are, read from the schema itself (a stamp, if any, wins)."""
    stamp = next((v for k, v in sorted(markers.items()) if "layout" in k), None)
    if stamp:
        return stamp
    # An adopted file not upgraded yet has only the agent's index, under its name.
    word_sql = catalog.table_sql(conn, "messages_fts")
    compact_sql = "".join((word_sql or "").split()).lower()
    if word_sql is not None and catalog.table_sql(conn, names.WORD_INDEX) is None:
        return "legacy (inline)" if "content=" not in compact_sql else "legacy (external content)"
    missing = layout.missing_objects(conn)
    if len(missing) == len(layout.expected_objects()):
        return "none"
    state = "compact" if not missing else (
        f"compact, incomplete ({len(missing)} objects missing: hermes-store repair)")
    if any(t.endswith("_old") for t in fts):
        state += "; old inline index awaiting hermes-store optimize-storage"
    return state


def layout_info(conn: Connection) -> dict[str, Any]:
    """The derived-index layout as recorded in ``state_meta``; any keys may be absent."""
    markers = state_markers(conn)
    relevant = {k: v for k, v in markers.items()
                if "fts" in k or "layout" in k or names.is_ours(k)}
    present = catalog.fts5_tables(conn)
    info: dict[str, Any] = {"version": _layout_state(conn, relevant, present), "markers": relevant,
                            "fts_tables": present, "backfill": None}
    high, progress = (relevant.get(names.BACKFILL_HIGH_WATER),
                      relevant.get(names.BACKFILL_PROGRESS))
    if high is not None:
        try:
            high_i, prog_i = int(high), int(progress or 0)
        except ValueError:
            info["backfill"] = {"pending": True, "note": f"unreadable markers {high!r}/{progress!r}"}
        else:
            total = conn.exec_driver_sql("SELECT COUNT(*) FROM messages WHERE id <= ?",
                                         (high_i,)).scalar() or 0
            done = conn.exec_driver_sql("SELECT COUNT(*) FROM messages WHERE id <= ?",
                                        (min(prog_i, high_i),)).scalar() or 0
            info["backfill"] = {"pending": prog_i < high_i, "done": int(done), "total": int(total),
                                "high_water": high_i, "progress": prog_i}
    return info


def capabilities(conn: Connection) -> dict[str, Any]:
    """What ``current`` reports beside the revision: journal mode, FTS5/trigram, the layout.

    The trigram probe creates (and drops) a table in the connection's private ``temp`` schema,
    which a read-only connection may do; the store itself is not written.
    """
    journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    failed = driver_errors()
    trigram = True
    try:
        conn.exec_driver_sql(
            "CREATE VIRTUAL TABLE temp.hermes_trigram_probe USING fts5(x, tokenize='trigram')")
        conn.exec_driver_sql("DROP TABLE temp.hermes_trigram_probe")
    except failed:
        trigram = False
    try:
        conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.hermes_fts5_probe USING fts5(x)")
        conn.exec_driver_sql("DROP TABLE temp.hermes_fts5_probe")
        fts5 = True
    except failed:
        fts5 = False
    layout = (layout_info(conn) if catalog.has_table(conn, "state_meta")
              else {"version": None})
    return {"journal_mode": journal, "fts5": fts5, "trigram": trigram and fts5,
            "layout_version": layout.get("version"), "backfill": layout.get("backfill")}
