"""Output formats of the reading commands: a table cut to the terminal's width, and
newline-delimited JSON, CSV and TSV for scripts (``--nl``, ``--csv``, ``--tsv``,
``--no-headers``).

The table never wraps: a row is one line. Columns that only ever hold nothing are left out;
the flexible ones (titles, workspaces, sources) are cut with an ellipsis, widest first, while
ids and times are never cut.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

PIPE_WIDTH = 120  # a table written to a pipe or file, unless $COLUMNS says otherwise
GAP = "  "
ELLIPSIS = "…"
RECORD_FORMATS = ("nl", "csv", "tsv")


@dataclass(frozen=True)
class Column:
    header: str
    min_width: int | None = None  # None: never cut


def terminal_width() -> int:
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells, ending in an ellipsis when cut."""
    if _cell_len(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        size = _cell_len(ch)
        if used + size > width - 1:
            break
        out.append(ch)
        used += size
    return "".join(out) + ELLIPSIS


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _cell_len(text))


def table_lines(columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                width: int | None = None, headers: bool = True) -> list[str]:
    """The table as lines no wider than ``width`` (unless the uncut columns alone are)."""
    width = terminal_width() if width is None else width
    rows = [[" ".join(str(c).split()) for c in row] for row in rows]
    keep = [i for i in range(len(columns)) if any(row[i] for row in rows)]
    cols = [columns[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    sizes = [max([_cell_len(c.header) if headers else 0] + [_cell_len(r[i]) for r in rows])
             for i, c in enumerate(cols)]
    over = sum(sizes) + len(GAP) * (len(sizes) - 1) - width
    while over > 0:
        cuttable = [i for i, c in enumerate(cols)
                    if c.min_width is not None and sizes[i] > c.min_width]
        if not cuttable:
            break
        widest = max(cuttable, key=lambda i: sizes[i])
        step = min(over, sizes[widest] - (cols[widest].min_width or 0))
        sizes[widest] -= step
        over -= step
    lines = [[c.header for c in cols]] if headers else []
    lines += rows
    out = []
    for line in lines:
        cells = [_pad(_cut(text, sizes[i]), sizes[i]) for i, text in enumerate(line)]
        out.append(GAP.join(cells).rstrip())
    return out


# --------------------------------------------------------------------------- records


def _flat(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _tsv(value: Any) -> str:
    # One record a line: the separators and the escape character are written escaped.
    return (_flat(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def write_records(fmt: str, keys: Sequence[str], records: Sequence[dict[str, Any]], *,
                  headers: bool = True, echo: Callable[[str], None] = click.echo) -> None:
    """``records`` as newline-delimited JSON (every key), CSV or TSV (the columns ``keys``)."""
    if fmt == "nl":
        for record in records:
            echo(json.dumps(record, ensure_ascii=False, default=str))
        return
    if fmt == "tsv":
        if headers:
            echo("\t".join(keys))
        for record in records:
            echo("\t".join(_tsv(record.get(k)) for k in keys))
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if headers:
        writer.writerow(keys)
    for record in records:
        writer.writerow([_flat(record.get(k)) for k in keys])
    if buffer.getvalue():
        echo(buffer.getvalue().rstrip("\n"))
