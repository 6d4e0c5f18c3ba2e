"""Output formats of the reading commands: a table cut to the terminal's width, and
newline-delimited JSON, CSV and TSV for scripts (``--nl``, ``--csv``, ``--tsv``,
``--no-headers``).

The table never wraps: a row is one line. Columns that only ever hold nothing are left out;
the flexible ones (titles, workspaces, sources) are cut with an ellipsis, widest first, while
ids and times are never cut. When even then a row is wider than the terminal, a column marked
``own_line`` (the id) moves to a line of its own above the rest of its row, whole.
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
    own_line: bool = False  # printed on its own line when the row cannot fit otherwise


def terminal_width() -> int:
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def cut(text: str, width: int) -> str:
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


def wrap(text: str, width: int, *, indent: int = 0) -> list[str]:
    """``text`` folded at spaces into lines of at most ``width``, the later ones indented; a
    word longer than a line (an id, a path) is kept whole on a line of its own."""
    import textwrap

    return textwrap.wrap(text, width, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _cell_len(text))


def table_lines(columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                width: int | None = None, headers: bool = True) -> list[str]:
    """The table as lines no wider than ``width`` (unless an uncut cell alone is)."""
    width = terminal_width() if width is None else width
    rows = [[" ".join(str(c).split()) for c in row] for row in rows]
    keep = [i for i in range(len(columns)) if any(row[i] for row in rows)]
    cols = [columns[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    sizes, over = _fit(cols, rows, width, headers)
    own = [i for i, c in enumerate(cols) if c.own_line]
    if over > 0 and own and len(own) < len(cols):
        rest = [i for i in range(len(cols)) if i not in own]
        indent = GAP
        sizes, _ = _fit([cols[i] for i in rest], [[r[i] for i in rest] for r in rows],
                        width - len(indent), headers)
        out = [indent + _joined([cols[i].header for i in rest], sizes)] if headers else []
        for row in rows:
            out += [" ".join(row[i] for i in own)]
            out.append(indent + _joined([row[i] for i in rest], sizes))
        return out
    lines = [[c.header for c in cols]] if headers else []
    return [_joined(line, sizes) for line in lines + rows]


def _fit(cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int,
         headers: bool) -> tuple[list[int], int]:
    """Each column's width, the cuttable ones cut widest first, and how far the row is still
    over ``width``."""
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
    return sizes, over


def _joined(cells: Sequence[str], sizes: Sequence[int]) -> str:
    return GAP.join(_pad(cut(text, sizes[i]), sizes[i]) for i, text in enumerate(cells)).rstrip()


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
