"""Append throughput and latency with 1, 2, 4 and 8 writer processes on one store.

Each writer is its own process (``spawn``) with its own ``SessionDB``, appending to its own
session the way a gateway, CLI calls and cron runs do at once. Every ``append_message`` is timed
from call to return, so lock waits and retries are inside the figure. Writers start together
(a start file) and the wall clock runs from that moment to the last writer's end.

    python benchmarks/bench_writers.py                 # 1, 2, 4, 8 writers, 300 appends each
    python benchmarks/bench_writers.py --writers 1 4 --messages 1000 --json out.json
    python benchmarks/bench_writers.py --pause-ms 20   # writers that think between turns
    python benchmarks/bench_writers.py --synchronous OFF  # diagnostic: the disk's fsync left out

Figures depend on the disk and the number of cores; compare runs on one machine only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event  # noqa: E402

from hermes_store import SessionDB  # noqa: E402
from hermes_store.db import engine as eng  # noqa: E402
from hermes_store.db import migrate  # noqa: E402

CHAT = ("Could you check why the nightly deploy of the api service failed? The logs mention a "
        "timeout talking to postgres after the migration step. 昨晚的部署失败了，请看一下日志。")
TOOL = "$ kubectl logs deploy/api --since=12h\n" + "2026-11-30T03:00:01Z ERROR timeout\n" * 100


@dataclass
class Result:
    writers: int
    messages: int
    seconds: float
    messages_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    wal_peak_bytes: int


def _writer(path: str, name: str, count: int, pause_s: float, start_file: str,
            out_file: str, synchronous: str | None = None) -> None:
    latencies: list[float] = []
    errors = 0
    if synchronous is not None:
        engine = eng.open_engine(path)  # the engine SessionDB will use: no connection made yet
        event.listen(engine, "connect",
                     lambda dbapi, _rec: dbapi.execute(f"PRAGMA synchronous={synchronous}"))
    with SessionDB(path) as db:
        db.create_session(name, "cli")
        while not os.path.exists(start_file):
            time.sleep(0.001)
        for i in range(count):
            role, content, tool = (("tool", TOOL, "terminal") if i % 5 == 4
                                   else ("user" if i % 2 else "assistant", CHAT, None))
            t0 = time.perf_counter()
            try:
                db.append_message(name, role, f"{i} {content}", tool_name=tool)
            except Exception:  # noqa: BLE001 - counted; the figure must show it
                errors += 1
            latencies.append(time.perf_counter() - t0)
            if pause_s:
                time.sleep(random.uniform(0, 2 * pause_s))  # a turn's "think time"
    Path(out_file).write_text(json.dumps({"latencies": latencies, "errors": errors,
                                          "end": time.time()}))


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def run(writers: int, per_writer: int, workdir: Path, pause_s: float = 0.0,
        synchronous: str | None = None) -> Result:
    path = workdir / f"bench-{writers}.db"
    migrate.upgrade(path)
    eng.dispose_all()
    start_file = workdir / f"start-{writers}"
    ctx = mp.get_context("spawn")
    outs = [workdir / f"w{writers}-{n}.json" for n in range(writers)]
    procs = [ctx.Process(target=_writer, args=(str(path), f"writer-{n}", per_writer, pause_s,
                                               str(start_file), str(outs[n]), synchronous))
             for n in range(writers)]
    for p in procs:
        p.start()
    time.sleep(1.0 + 0.3 * writers)  # let every child import and open its SessionDB
    wal = Path(f"{path}-wal")
    wal_peak = 0
    started = time.time()
    start_file.touch()
    while any(p.is_alive() for p in procs):
        wal_peak = max(wal_peak, wal.stat().st_size if wal.exists() else 0)
        time.sleep(0.01)
    for p in procs:
        p.join()
    reports = [json.loads(o.read_text()) for o in outs]
    elapsed = max(r["end"] for r in reports) - started
    latencies = sorted(x for r in reports for x in r["latencies"])
    total = len(latencies)
    return Result(writers, total, round(elapsed, 3), round(total / elapsed, 1),
                  round(statistics.median(latencies) * 1000, 2),
                  round(_percentile(latencies, 0.99) * 1000, 2),
                  round(latencies[-1] * 1000, 2), sum(r["errors"] for r in reports), wal_peak)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--messages", type=int, default=300, help="appends per writer")
    parser.add_argument("--pause-ms", type=float, default=0.0,
                        help="mean pause between a writer's appends (0: back to back)")
    parser.add_argument("--synchronous", choices=("OFF", "NORMAL", "FULL"),
                        help="diagnostic: this PRAGMA synchronous instead of the library's")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        for n in args.writers:
            results.append(run(n, args.messages, Path(tmp), args.pause_ms / 1000,
                               args.synchronous))
            print(f"{n} writer(s) done", file=sys.stderr)
    print(f"SQLite {'.'.join(map(str, eng.sqlite_version()))}, {os.cpu_count()} CPU(s), "
          f"{args.messages} appends per writer, mean pause {args.pause_ms:g} ms, "
          f"synchronous {args.synchronous or 'as the library sets it'}\n")
    print("| writers | messages | msgs/s | p50 ms | p99 ms | max ms | errors | WAL peak |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.writers} | {r.messages} | {r.messages_per_s:.0f} | {r.p50_ms:.1f} | "
              f"{r.p99_ms:.1f} | {r.max_ms:.0f} | {r.errors} | "
              f"{r.wal_peak_bytes / 1024 / 1024:.1f} MB |")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
