"""PostgreSQL search latency at one corpus size: p50 and p99 per query kind, ranked pages with the
bounded rank window (the library) beside every hit ranked (``RANK_WINDOW = 0``, the former way).

The store is built once per size and kept on the server (``benchmarks.pg_cache``). Each round
runs every query kind once per mode, the two modes back to back in alternating order, so load
from other processes hits both alike; latencies are of ``SessionDB.search_messages`` (top-20
pages), warm.

    python -m benchmarks.pg_scale 200000 --rounds 40 --json benchmarks/results/pg_scale-200k.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from hermes_store import SessionDB
from hermes_store.search import postgres as pg_search

from .pg_cache import cached_store
from .test_bench_pg_search import QUERIES

MODES = {"window": pg_search.RANK_WINDOW, "exact": 0}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", type=int)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--kinds", nargs="*", default=list(QUERIES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    url = cached_store(args.server, args.size, log=lambda s: print(s, file=sys.stderr))
    times: dict[str, dict[str, list[float]]] = {k: {m: [] for m in MODES} for k in args.kinds}
    hits: dict[str, dict[str, int]] = {k: {} for k in args.kinds}
    with SessionDB(url) as db:
        for n in range(args.rounds + 2):  # two warm-up rounds
            for kind in args.kinds:
                query, kw = QUERIES[kind]
                order = list(MODES) if n % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    pg_search.RANK_WINDOW = MODES[mode]
                    start = time.perf_counter()
                    found = db.search_messages(query, **kw)
                    took = time.perf_counter() - start
                    if n >= 2:
                        times[kind][mode].append(took * 1000)
                    hits[kind][mode] = len(found)
    pg_search.RANK_WINDOW = MODES["window"]
    table = {kind: {f"{mode}_{q}": round(_pct(v, p), 2) for mode, v in modes.items()
                    for q, p in (("p50", 0.5), ("p99", 0.99))}
             for kind, modes in times.items()}
    for kind, row in table.items():
        ratios = [e / w for w, e in zip(times[kind]["window"], times[kind]["exact"], strict=True)]
        row["exact_over_window"] = round(statistics.median(ratios), 2)
        print(f"{kind:<14} window p50 {row['window_p50']:8.2f} p99 {row['window_p99']:8.2f} ms"
              f"   exact p50 {row['exact_p50']:8.2f} p99 {row['exact_p99']:8.2f} ms"
              f"   exact/window {row['exact_over_window']:.2f}x   hits {hits[kind]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"messages": args.size, "rounds": args.rounds,
                                         "rank_window": MODES["window"], "kinds": table},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
