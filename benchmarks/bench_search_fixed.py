"""Fixed cost of one search through ``SessionDB.search_messages``: a query that finds nothing,
on the v11 fixture upgraded to head (docs/search.md; issue 21's goal of <= 0.3 ms).

    python -m benchmarks.bench_search_fixed [--rounds 15] [--calls 400] [--profile]

Per round: ``--calls`` empty searches through the facade, then the same number of the one
statement the raw floor needs for it (the word MATCH through bare sqlite3, in a transaction), back
to back; the figure is the per-call median over rounds, wall and CPU. ``--profile`` prints the
cProfile of the facade calls instead.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import pstats
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from hermes_store import SessionDB

FIXTURE = Path(__file__).parent.parent / "tests" / "fixtures" / "state-v11.db.gz"
QUERIES = ("zzqqxxvv", '"zzqq xxvv"', "zzqq*")


def _store(folder: Path) -> Path:
    path = folder / "state.db"
    with gzip.open(FIXTURE) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    SessionDB(path).close()  # upgrades to head
    from hermes_store.ops import storage
    storage.optimize_storage(path)
    return path


def _timed(fn, calls: int) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return ((time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = _store(Path(tmp))
        db = SessionDB(path)
        raw = sqlite3.connect(path, isolation_level=None)
        for query in QUERIES:
            assert db.search_messages(query) == []

        def library() -> None:
            db.search_messages(QUERIES[0])

        def floor() -> None:
            raw.execute("BEGIN")
            raw.execute("SELECT rowid FROM hs_fts WHERE hs_fts MATCH ? ORDER BY rank LIMIT 20",
                        (QUERIES[0],)).fetchall()
            raw.execute("COMMIT")

        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(lambda: [library() for _ in range(args.calls)])
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return 0
        samples: dict[str, list[tuple[float, float]]] = {"library": [], "floor": []}
        for _ in range(args.rounds):
            samples["library"].append(_timed(library, args.calls))
            samples["floor"].append(_timed(floor, args.calls))
        for name, got in samples.items():
            print(f"{name:8} wall {statistics.median(w for w, _ in got) * 1e3:.3f} ms  "
                  f"cpu {statistics.median(c for _, c in got) * 1e3:.3f} ms")
        db.close()
        raw.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
