"""What the index probe costs a short search answer (docs/search.md#damage), as ratios.

A search that returns fewer hits than its limit probes each index its routes read unless this
connection found it sound since the last write. This times, on the v11 fixture upgraded to head
(or a store given with ``--db``), a search with no hit on each route three ways: with the
verdict kept (what a run of empty searches costs), with the verdict dropped before every search
(the first empty search after a write), and the probe of the same indexes alone.

    python benchmarks/bench_index_probe.py                 # the v11 fixture (358 messages)
    python benchmarks/bench_index_probe.py --db STORE.db   # a copy of a real store
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hermes_store.db import catalog, migrate  # noqa: E402 - needs the sys.path above
from hermes_store.db.engine import open_engine, reading  # noqa: E402 - needs the sys.path above
from hermes_store.ops import storage  # noqa: E402 - needs the sys.path above
from hermes_store.repo import index_health  # noqa: E402 - needs the sys.path above
from hermes_store.search.statements import search_messages  # noqa: E402 - needs the sys.path above

# A query with no hit per route, and the indexes that route reads.
QUERIES = {"word": ("zzqxnothing", (catalog.WORD_FTS, catalog.CJK_FTS)),
           "trigram": ("镲镲镲镲", (catalog.TRIGRAM_FTS,)),
           "bigram": ("镲镲", (catalog.CJK_FTS,))}
ROUNDS = 200


def _fixture(workdir: Path) -> Path:
    path = workdir / "state.db"
    with gzip.open(ROOT / "tests" / "fixtures" / "state-v11.db.gz", "rb") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    migrate.upgrade(path)
    storage.optimize_storage(path)
    return path


def _min_ms(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, help="a store at head (a copy: it is only read)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or _fixture(Path(tmp))
        engine = open_engine(path)
        print(f"{path}: minimum of {ROUNDS} runs per figure (a shared machine)")
        print("| route | empty search, verdict kept | verdict dropped / kept | probe alone / "
              "empty search |")
        print("|---|---|---|---|")
        for route, (query, indexes) in QUERIES.items():
            with reading(engine) as conn:
                def kept(query: str = query) -> object:
                    return search_messages(conn, query)

                def dropped(query: str = query) -> object:
                    conn.connection.info.pop("hermes_index_health", None)
                    return search_messages(conn, query)

                def probe(indexes: tuple[str, ...] = indexes) -> object:
                    return [index_health.probe(conn, i) for i in indexes]

                kept()
                base, cold, alone = _min_ms(kept), _min_ms(dropped), _min_ms(probe)
            print(f"| {route} | {base:.3f} ms | {cold / base:.2f}x | {alone / base:.2f}x |")


if __name__ == "__main__":
    main()
