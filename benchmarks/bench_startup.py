"""Start-up of the reading commands: ``hermes-store search``, ``list``, ``current``, ``stats``
and ``show`` against ``sqlite-utils search`` on the same file, each a fresh process, median of
N runs.

The machine is shared, so the figures are ratios (ours / sqlite-utils, measured interleaved)
plus the load average read before and after (``os.getloadavg``, what ``uptime`` prints).
The store is a real one at head with a few hundred sessions; ``sqlite-utils`` reads its FTS5
table directly.

    python benchmarks/bench_startup.py               # 7 runs each
    python benchmarks/bench_startup.py --runs 15 --json

Needs the ``bench`` extra (``pip install -e '.[bench]'``) for ``sqlite-utils``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    other = shutil.which(name)
    if other is None:
        raise SystemExit(f"{name} is not installed (pip install -e '.[bench]')")
    return other


def build_store(path: Path, sessions: int = 300) -> None:
    subprocess.run([_tool("hermes-store"), "-q", "--db", str(path), "upgrade"], check=True,
                   stdout=subprocess.DEVNULL)
    con = sqlite3.connect(path)
    now = time.time()
    with con:
        for i in range(sessions):
            sid = f"20260101_{i:06d}_{i:08x}"
            con.execute("INSERT INTO sessions (id, source, started_at, title) "
                        "VALUES (?, 'cli', ?, ?)", (sid, now - i * 100, f"title {i}"))
            con.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES (?, 'user', ?, ?)",
                [(sid, f"borrow checker note {j} " + "lorem ipsum " * 20, now - i * 100 + j)
                 for j in range(3)])
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def fts_table(path: Path) -> str:
    """The store's word index (its name moves with the layout)."""
    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%fts5%' "
            "AND sql NOT LIKE '%trigram%' ORDER BY name")]
    finally:
        con.close()
    return names[0]


# A user's Python caches bytecode (pip compiles it at install); with PYTHONDONTWRITEBYTECODE set,
# as some shells and CI images do, every run would compile ~30 modules from source (~55 ms here)
# and the figure would measure the compiler, not the start-up.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=_ENV)
    return time.perf_counter() - start


def measure(path: Path, runs: int) -> dict[str, object]:
    ours = _tool("hermes-store")
    commands = {
        "search": [ours, "--db", str(path), "search", "borrow"],
        "list": [ours, "--db", str(path), "list"],
        "current": [ours, "--db", str(path), "current"],
        "stats": [ours, "--db", str(path), "stats"],
        "show": [ours, "--db", str(path), "show", "latest"],
        "sqlite-utils search": [_tool("sqlite-utils"), "search", str(path), fts_table(path),
                                "borrow"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    for argv in commands.values():
        once(argv)  # warm the page cache and the bytecode
    times: dict[str, list[float]] = {name: [] for name in commands}
    load_before = os.getloadavg()[0]
    for _ in range(runs):  # interleaved, so a burst of load hits every command alike
        for name, argv in commands.items():
            times[name].append(once(argv))
    load_after = os.getloadavg()[0]
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base = medians["sqlite-utils search"]
    return {"runs": runs, "median_s": {k: round(v, 3) for k, v in medians.items()},
            "ratio_to_sqlite_utils": {k: round(v / base, 2) for k, v in medians.items()},
            "load_average": [round(load_before, 2), round(load_after, 2)],
            "cpus": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        build_store(path, args.sessions)
        report = measure(path, args.runs)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"median of {report['runs']} runs; load average {report['load_average'][0]} → "
          f"{report['load_average'][1]} on {report['cpus']} CPUs")
    for name, secs in report["median_s"].items():  # type: ignore[union-attr]
        ratio = report["ratio_to_sqlite_utils"][name]  # type: ignore[index]
        print(f"  {name:<22} {secs:>7.3f} s  {ratio:>5.2f}× sqlite-utils")


if __name__ == "__main__":
    main()
