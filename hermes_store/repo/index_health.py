"""Whether a derived search index (SQLite's FTS5 tables) answers truthfully (docs/search.md#damage).

A damaged FTS5 index does not always fail: a zeroed structure record reads as an empty index, an
emptied term table finds no term, zeroed leaves lose most doclists, all without an error. So
three checks, from cheap to thorough, each answering with the problems it found (``[]``: none):

* :func:`probe`, bounded, run by a search that found fewer hits than asked: the index opens, and
  the doclist of a term taken from one of its newest rows returns that row; for the CJK bigram
  index also that the covered rows after its newest side row that hold CJK text have one.
  :func:`verified` runs it at most once per connection and write generation;
* :func:`structure_problems` (``doctor``): the structure record decodes, every leaf page it
  lists exists and has a leaf's header, every segment has entries in the term table, and an
  index listing no segment holds no document;
* :func:`content_problems` (``doctor --full``): the index equals a copy built afresh from its
  content in the connection's ``temp`` schema (term, documents, instances), and every covered
  CJK message has its side row. FTS5's own ``integrity-check`` is a write (doctor never writes),
  and its comparison with the content reads our views through a statement that may not use
  ``json_each``; the copy needs neither.

Every statement reads, so each runs inside the caller's read transaction. Index names come from
``db.catalog`` and the content each index is built from from its own ``CREATE`` statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hermes_store.db import catalog
from hermes_store.db.sqlite_driver import dbapi_of, driver_errors
from hermes_store.repo import bigrams

if TYPE_CHECKING:
    from sqlalchemy import Connection

# Newest rows looked at for a probe term, covered rows read after the newest CJK side row.
PROBE_ROWS = 8
UNCOVERED_LIMIT = 64
# FTS5's _data rowids: a leaf page of segment s is (s << 37) + page; 10 is the structure record.
_STRUCTURE_ID = 10
_SEGMENT_SHIFT = 37
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
_CACHE = "hermes_index_health"

_ASCII_WORD = re.compile(r"[A-Za-z0-9]{3,40}")


def _quote(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"refusing a schema object with an odd name: {name!r}")
    return f'"{name}"'


def _message(err: BaseException) -> str:
    return str(getattr(err, "orig", None) or err)


# --------------------------------------------------------------------------- the bounded probe


def _term(text: str, trigram: bool) -> str | None:
    """A term of ``text`` the index must find: for unicode61 a whitespace-bounded ASCII word or
    CJK run (a phrase of exactly the tokens the row holds there), for trigram any three
    characters of an ASCII word or CJK run."""
    if trigram:
        found = _ASCII_WORD.search(text) or next(
            (m for m in bigrams.CJK_RUN_RE.finditer(text) if len(m.group()) >= 3), None)
        return found.group()[:3] if found else None
    for chunk in text[:4000].split():
        if _ASCII_WORD.fullmatch(chunk) or bigrams.CJK_RUN_RE.fullmatch(chunk):
            return chunk
    return None


def _candidates(conn: Connection, index: str, options: catalog.Fts5Options,
                column: str, window: tuple[int, int] | None) -> list[tuple[int, str]]:
    key = _quote(options.content_rowid)
    where = ""
    params: tuple[int, ...] = ()
    if window is not None:
        where, params = f" WHERE NOT ({key} > ? AND {key} <= ?)", window
    rows = conn.exec_driver_sql(
        f"SELECT {key}, {_quote(column)} FROM {_quote(options.content or index)}{where} "
        f"ORDER BY {key} DESC LIMIT {PROBE_ROWS}", params)
    return [(int(r[0]), r[1]) for r in rows if isinstance(r[1], str)]


def load_error(conn: Connection, index: str) -> str | None:
    """What FTS5 says when ``index`` does not even load (a shadow table gone, a record of a
    format it does not know); ``None`` when it loads. Such an index cannot be emptied or
    dropped through FTS5: ``repair`` takes it out of the catalog and builds it anew."""
    table = _quote(index)
    try:
        conn.exec_driver_sql(f"SELECT rowid FROM {table} WHERE {table} MATCH 'hermes' LIMIT 1"
                             ).all()
    except driver_errors() as err:
        return _message(err)
    return None


def probe(conn: Connection, index: str, window: tuple[int, int] | None = None) -> list[str]:
    """The bounded check of ``index`` (see the module's words); ``window`` is the backfill
    window, whose rows are not indexed yet by design."""
    sql = catalog.table_sql(conn, index)
    if sql is None:
        return []  # a missing index is the layout's finding (its triggers fail loudly)
    options = catalog.fts5_options(sql)
    problems: list[str] = []
    table = _quote(index)
    try:
        column = catalog.columns(conn, index)[0].name
        picked = next(((row_id, term) for row_id, text in
                       _candidates(conn, index, options, column, window)
                       if (term := _term(text, options.tokenize == "trigram"))), None)
        if picked is None:  # nothing to look up: at least the index must load
            error = load_error(conn, index)
            if error is not None:
                problems.append(f"the index cannot be read: {error}")
        else:
            row_id, term = picked
            phrase = '"' + term.replace('"', '""') + '"'
            found = conn.exec_driver_sql(
                f"SELECT count(*) FROM {table} WHERE {table} MATCH ? AND rowid = ?",
                (phrase, row_id)).scalar()
            if not found:
                problems.append(f"row {row_id} holds {term!r} but the index does not find it")
    except driver_errors() as err:
        problems.append(f"the index cannot be read: {_message(err)}")
    if index == catalog.CJK_FTS:
        problems += _side_rows(conn, UNCOVERED_LIMIT)
    return problems


def _side_rows(conn: Connection, limit: int | None) -> list[str]:
    try:
        missing = bigrams.uncovered(conn, limit)
    except driver_errors() as err:
        return [f"its side rows cannot be checked: {_message(err)}"]
    if not missing:
        return []
    found = (f"{len(missing)} messages with CJK text have no bigram side row "
             f"({bigrams.side_row_count(conn)} side rows; first missing: {missing[0]})")
    return [found]


def _generation(conn: Connection) -> tuple[int, int]:
    """Changes since a check: ``data_version`` moves when another connection commits,
    ``total_changes`` when this one writes."""
    raw = dbapi_of(conn.connection)
    version = raw.execute("PRAGMA data_version").fetchone()[0]
    return int(version), int(raw.total_changes)


def verified(conn: Connection, indexes: Sequence[str],
             window: tuple[int, int] | None = None) -> dict[str, list[str]]:
    """:func:`probe` of each of ``indexes`` not already found sound on this connection since
    the last write; ``{index: problems}`` of those that failed. Only a sound verdict is kept
    (on the pooled connection's ``info``), so a damaged index is reported every time."""
    known: dict[str, tuple[int, int]] = conn.connection.info.setdefault(_CACHE, {})
    generation = _generation(conn)
    failed: dict[str, list[str]] = {}
    for index in indexes:
        if known.get(index) == generation:
            continue
        problems = probe(conn, index, window)
        if problems:
            failed[index] = problems
        else:
            known[index] = generation
    return failed


# --------------------------------------------------------------------------- structure


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint at ``at``: (value, next offset)."""
    value = 0
    for i in range(8):
        if at + i >= len(data):
            raise ValueError("truncated")
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    if at + 8 >= len(data):
        raise ValueError("truncated")
    return (value << 8) | data[at + 8], at + 9


def segments(record: bytes) -> list[tuple[int, int, int]]:
    """``(segment id, first leaf, last leaf)`` of each segment an FTS5 structure record lists
    (both record versions); ``ValueError`` when it does not decode."""
    if len(record) < 4:
        raise ValueError("shorter than its cookie")
    at = 4
    v2 = record[at:at + 4] == _STRUCTURE_V2
    at += 4 if v2 else 0
    levels, at = _varint(record, at)
    total, at = _varint(record, at)
    _, at = _varint(record, at)  # the write counter
    found = []
    for _ in range(levels):
        _, at = _varint(record, at)  # segments in an ongoing merge
        count, at = _varint(record, at)
        for _ in range(count):
            segid, at = _varint(record, at)
            first, at = _varint(record, at)
            last, at = _varint(record, at)
            for _ in range(5 if v2 else 0):  # origins, tombstone pages and entries, entries
                _, at = _varint(record, at)
            if not 0 < first <= last:
                raise ValueError(f"segment {segid} lists leaves {first}..{last}")
            found.append((segid, first, last))
    if len(found) != total:
        raise ValueError(f"{total} segments announced, {len(found)} listed")
    return found


def structure_problems(conn: Connection, index: str) -> list[str]:
    """The structural check of ``index`` (see the module's words); reads every leaf header."""
    data, idx, docsize = (_quote(index + s) for s in ("_data", "_idx", "_docsize"))
    present = catalog.tables(conn)
    if index + "_data" not in present or index + "_idx" not in present:
        return ["its shadow tables are missing"]
    record = conn.exec_driver_sql(f"SELECT block FROM {data} WHERE id = ?",
                                  (_STRUCTURE_ID,)).scalar()
    if record is None:
        return ["it has no structure record"]
    try:
        listed = segments(bytes(record))
    except ValueError as err:
        return [f"its structure record does not decode ({err})"]
    problems = []
    if not listed and index + "_docsize" in present:
        docs = int(conn.exec_driver_sql(f"SELECT count(*) FROM {docsize}").scalar() or 0)
        if docs:
            problems.append(f"its structure record lists no segment while {docs} rows are "
                            "indexed")
    for segid, first, last in listed:
        base = segid << _SEGMENT_SHIFT
        # A leaf starts with two 16-bit offsets; the second (the leaf's size) is at least 4.
        pages, bad = conn.exec_driver_sql(
            f"SELECT count(*), COALESCE(sum(length(block) < 4 OR (substr(block, 3, 1) = x'00' "
            f"AND substr(block, 4, 1) < x'04')), 0) "
            f"FROM {data} WHERE id BETWEEN ? AND ?", (base + first, base + last)).one()
        if pages != last - first + 1:
            problems.append(f"segment {segid}: {last - first + 1 - pages} of "
                            f"{last - first + 1} leaf pages are missing")
        if bad:
            problems.append(f"segment {segid}: {bad} leaf pages have no valid header")
        terms = conn.exec_driver_sql(f"SELECT count(*) FROM {idx} WHERE segid = ?",
                                     (segid,)).scalar()
        if not terms:
            problems.append(f"segment {segid} has no entry in the term table")
    return problems


# --------------------------------------------------------------------------- against its content


_COPY = "hermes_doctor_copy"
_DIFFERENCES = """
SELECT count(*) FROM (
  SELECT term, doc, cnt FROM temp.hermes_doctor_fresh
  EXCEPT SELECT term, doc, cnt FROM temp.hermes_doctor_live)"""
_EXTRA = """
SELECT count(*) FROM (
  SELECT term, doc, cnt FROM temp.hermes_doctor_live
  EXCEPT SELECT term, doc, cnt FROM temp.hermes_doctor_fresh)"""
_TEMP_TABLES = (_COPY, "hermes_doctor_fresh", "hermes_doctor_live")


def content_problems(conn: Connection, index: str,
                     window: tuple[int, int] | None = None) -> list[str]:
    """The full check of ``index`` (see the module's words): as slow as building it again."""
    sql = catalog.table_sql(conn, index)
    if sql is None:
        return []
    options = catalog.fts5_options(sql)
    if options.content is None:
        return []  # only our external-content indexes: their text lives elsewhere
    columns = ", ".join(_quote(c.name) for c in catalog.columns(conn, index))
    tokenize = f", tokenize='{options.tokenize}'" if options.tokenize else ""
    key = _quote(options.content_rowid)
    where = ""
    params: tuple[int, ...] = ()
    if window is not None:
        where, params = f" WHERE NOT ({key} > ? AND {key} <= ?)", window
    problems = []
    try:
        conn.exec_driver_sql(f"CREATE VIRTUAL TABLE temp.{_COPY} USING fts5({columns}{tokenize})")
        conn.exec_driver_sql(f"INSERT INTO temp.{_COPY} (rowid, {columns}) SELECT {key}, "
                             f"{columns} FROM {_quote(options.content)}{where}", params)
        conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.hermes_doctor_fresh "
                             f"USING fts5vocab(temp, {_COPY}, 'row')")
        conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.hermes_doctor_live "
                             f"USING fts5vocab(main, {_quote(index)}, 'row')")
        lost = int(conn.exec_driver_sql(_DIFFERENCES).scalar() or 0)
        extra = int(conn.exec_driver_sql(_EXTRA).scalar() or 0)
        if lost or extra:
            problems.append(f"{lost} terms are missing or miscounted against its content, "
                            f"{extra} it holds that its content does not")
    except driver_errors() as err:
        problems.append(f"the index cannot be read: {_message(err)}")
    finally:
        for name in reversed(_TEMP_TABLES):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS temp.{name}")
    if index == catalog.CJK_FTS:
        problems += _side_rows(conn, None)
    return problems


def findings(conn: Connection, index: str, *, full: bool = False) -> list[str]:
    """What ``doctor`` and ``repair`` check of ``index``: :func:`structure_problems` and
    :func:`probe`, with ``full`` also :func:`content_problems`; rows in the backfill window
    left out."""
    window = catalog.backfill_window(conn)
    found = [*structure_problems(conn, index), *probe(conn, index, window)]
    if full:
        found += content_problems(conn, index, window)
    return found
