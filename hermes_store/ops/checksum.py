"""Row counts and checksums that read the same on SQLite and PostgreSQL: how ``copy`` verifies.

The checksum is computed in Python over the values each side reads back, not by SQL (the two
backends hash, cast and order differently): the sum of each row's SHA-256 (its first 8 bytes),
mod 2**64. It is independent of row order, and a missing, extra, doubled or changed row changes
it. Numbers compare by value (SQLite may hold ``3.0`` where the server holds ``3``), text by its
characters, blobs by their bytes, NULL as itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Table, select

from hermes_store.db.engine import reading

Rows = Iterable[Sequence[Any]]
# Adjusts what one side reads before it is summed (inside the same read transaction).
RowFilter = Callable[[Connection, Rows], Rows]


def _cell(value: Any) -> bytes:
    if value is None:
        return b"N"
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, int):
        return b"I" + str(value).encode()
    if isinstance(value, float):
        return b"F" + repr(value).encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"B" + bytes(value)
    return b"S" + str(value).encode("utf-8", "surrogatepass")


def checksum_rows(rows: Rows) -> tuple[int, str]:
    """Count and order-independent checksum of ``rows``."""
    count, total = 0, 0
    for row in rows:
        digest = hashlib.sha256(b"\x1f".join(_cell(v) for v in row)).digest()
        total = (total + int.from_bytes(digest[:8], "big")) % 2**64
        count += 1
    return count, f"{total:016x}"


def table_checksum(engine: Engine, table: Table, columns: Sequence[str], *, batch: int = 1000,
                   adjust: RowFilter | None = None) -> tuple[int, str]:
    """Count and checksum of ``columns`` of ``table``, streamed ``batch`` rows at a time in one
    read transaction."""
    cols = [table.c[c] for c in columns]
    with reading(engine) as conn:
        rows: Rows = conn.execution_options(yield_per=batch).execute(select(*cols))
        return checksum_rows(adjust(conn, rows) if adjust is not None else rows)
