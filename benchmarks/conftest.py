"""Benchmark fixtures: one corpus, loaded once into the inline v11 layout and into head.

Run with ``pytest benchmarks/ --benchmark-only --benchmark-json=benchmarks/results/latest.json``
and turn the JSON into a table and a chart with ``python -m benchmarks.report``.
``HERMES_BENCH_MESSAGES`` scales the corpus (default 20,000 messages).
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.ops import storage

from . import corpus as corpus_mod

INLINE_REVISION = "0011_v11_inline_fts"


@dataclass
class Stores:
    """Paths of the loaded stores, and what it cost to get from one to the other."""

    corpus: corpus_mod.Corpus
    inline: Path
    head: Path
    inline_bytes: int
    head_bytes: int
    upgrade_s: float
    optimize_s: float


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def load(path: Path, data: corpus_mod.Corpus) -> None:
    """Write the corpus with plain sqlite3, as the agent's own store did (one transaction)."""
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO sessions (id, source, model, started_at) VALUES (?, ?, ?, ?)",
                    data.sessions)
    con.executemany(
        "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(r.session_id, r.role, r.content, r.tool_name, r.tool_calls, r.timestamp)
         for r in data.rows])
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


@pytest.fixture(scope="session")
def corpus() -> corpus_mod.Corpus:
    return corpus_mod.build()


@pytest.fixture(scope="session")
def stores(corpus: corpus_mod.Corpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    root = tmp_path_factory.mktemp("bench")
    inline = root / "inline.db"
    migrate.upgrade(inline, INLINE_REVISION)
    load(inline, corpus)
    engine_mod.dispose_all()
    inline_bytes = file_bytes(inline)

    head = Path(shutil.copy(inline, root / "head.db"))
    start = time.perf_counter()
    migrate.upgrade(head)
    upgrade_s = time.perf_counter() - start
    start = time.perf_counter()
    storage.optimize_storage(head)
    optimize_s = time.perf_counter() - start
    engine_mod.dispose_all()
    yield Stores(corpus, inline, head, inline_bytes, file_bytes(head), upgrade_s, optimize_s)
    engine_mod.dispose_all()
