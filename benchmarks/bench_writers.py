"""Append throughput and latency with 1, 2, 4 and 8 writer processes on one store, on SQLite and
on PostgreSQL, the library beside a raw floor (``benchmarks/floors.py``: the bare driver running
the library's statements, one transaction a message).

Each writer is its own process (``spawn``) appending to its own session, the way a gateway, CLI
calls and cron runs do at once (on PostgreSQL: gateway hosts sharing one database). Every append
is timed from call to return, so lock waits and retries are inside the figure. Writers start
together (a start file) and the wall clock runs from that moment to the last writer's end. For
each writer count the library and the floor run back to back, each into a fresh store, in
alternating order, so their ratio compares runs made under the same load from other processes;
``--rounds`` repeats the whole series and the tables give medians.

    python benchmarks/bench_writers.py --rounds 3      # both backends, library and floor, 1/2/4/8
    python benchmarks/bench_writers.py --backend postgresql --writers 1 4 --messages 1000
    python benchmarks/bench_writers.py --json out.json --pause-ms 20   # writers that think
    python benchmarks/bench_writers.py --backend sqlite --synchronous OFF  # diagnostic: no fsync
    python benchmarks/bench_writers.py --backend postgresql --corpus --gin off  # GIN pending list

``--corpus`` appends the seeded benchmark corpus (chat in several languages, tool output up to
100 kB) instead of two fixed messages; ``--gin`` sets the GIN indexes' ``fastupdate`` (``on``: with
PostgreSQL's default 4 MB list, ``off``) or their pending-list limit in kB (a number) before the
run, instead of revision 0021's 128 kB, to measure flushes.
PostgreSQL is ``$HERMES_STORE_TEST_PG_URL``, else the server on 127.0.0.1:5432 (one database per
run, dropped after it). Figures depend on the disk and the number of cores; compare runs on one
machine only.
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sqlalchemy import event  # noqa: E402 - needs the sys.path above

from benchmarks import corpus as corpus_mod  # noqa: E402 - needs the sys.path above
from benchmarks import floors  # noqa: E402 - needs the sys.path above
from hermes_store import SessionDB  # noqa: E402 - needs the sys.path above
from hermes_store.db import engine as eng  # noqa: E402 - needs the sys.path above
from hermes_store.db import migrate  # noqa: E402 - needs the sys.path above

CHAT = ("Could you check why the nightly deploy of the api service failed? The logs mention a "
        "timeout talking to postgres after the migration step. 昨晚的部署失败了，请看一下日志。")
TOOL = "$ kubectl logs deploy/api --since=12h\n" + "2026-11-30T03:00:01Z ERROR timeout\n" * 100
SLOW_MS = 50.0


@dataclass
class Result:
    backend: str
    runner: str
    writers: int
    messages: int
    seconds: float
    messages_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    over_50ms: int
    errors: int
    wal_peak_bytes: int
    client_cpu_us: float  # the writer processes' own CPU time per append


# --------------------------------------------------------------------------- what is appended


def _messages(name: str, count: int, corpus: bool) -> Iterator[tuple[str, str, str | None,
                                                                      str | None]]:
    """(role, content, tool_name, tool_calls) for one writer: fixed text, or its own corpus."""
    if not corpus:
        for i in range(count):
            role, content, tool = (("tool", TOOL, "terminal") if i % 5 == 4
                                   else ("user" if i % 2 else "assistant", CHAT, None))
            yield role, f"{i} {content}", tool, None
        return
    seed = corpus_mod.SEED + sum(map(ord, name))
    for _, rows in corpus_mod.generate(count, seed=seed):
        for r in rows:
            yield r.role, r.content, r.tool_name, r.tool_calls


# --------------------------------------------------------------------------- writer processes


def _library_writer(target: str, name: str, items: list[Any], pause_s: float, start_file: str,
                    synchronous: str | None) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    if synchronous is not None:
        engine = eng.open_engine(target)  # the engine SessionDB will use: no connection made yet
        event.listen(engine, "connect",
                     lambda dbapi, _rec: dbapi.execute(f"PRAGMA synchronous={synchronous}"))
    with SessionDB(target) as db:
        db.create_session(name, "cli")
        _wait(start_file)
        cpu = time.process_time()
        for role, content, tool, calls in items:
            t0 = time.perf_counter()
            try:
                db.append_message(name, role, content, tool_name=tool,
                                  tool_calls=json.loads(calls) if calls else None)
            except Exception:  # noqa: BLE001 - counted; the figure must show it
                errors += 1
            latencies.append(time.perf_counter() - t0)
            _pause(pause_s)
    return latencies, errors, time.process_time() - cpu


def _floor_writer(backend: str, target: str, name: str, items: list[Any], pause_s: float,
                  start_file: str, synchronous: int) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    errors = 0
    if backend == "sqlite":
        con = floors.sqlite_connect(target, synchronous)
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
                    (name, time.time()))

        def append(n: int, role: str, content: str, tool: str | None, calls: str | None) -> None:
            floors.sqlite_append(con, n, name, role, content, tool, calls, time.time())
    else:
        con = floors.pg_connect(target)
        con.autocommit = True
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (%s, 'cli', %s)",
                    (name, time.time()))

        def append(n: int, role: str, content: str, tool: str | None, calls: str | None) -> None:
            floors.pg_append(con, name, role, content, tool, calls)
    _wait(start_file)
    cpu = time.process_time()
    for n, (role, content, tool, calls) in enumerate(items, 1):
        t0 = time.perf_counter()
        try:
            append(n, role, content, tool, calls)
        except Exception:  # noqa: BLE001
            errors += 1
        latencies.append(time.perf_counter() - t0)
        _pause(pause_s)
    cpu = time.process_time() - cpu
    con.close()
    return latencies, errors, cpu


def _wait(start_file: str) -> None:
    while not os.path.exists(start_file):
        time.sleep(0.001)


def _pause(pause_s: float) -> None:
    if pause_s:
        time.sleep(random.uniform(0, 2 * pause_s))  # a turn's "think time"


def _writer(backend: str, runner: str, target: str, name: str, count: int, corpus: bool,
            pause_s: float, start_file: str, out_file: str, synchronous: Any) -> None:
    items = list(_messages(name, count, corpus))
    if runner == "library":
        latencies, errors, cpu = _library_writer(target, name, items, pause_s, start_file,
                                                 synchronous)
    else:
        latencies, errors, cpu = _floor_writer(backend, target, name, items, pause_s,
                                               start_file, synchronous)
    Path(out_file).write_text(json.dumps({"latencies": latencies, "errors": errors,
                                          "cpu": cpu, "end": time.time()}))


# --------------------------------------------------------------------------- stores


class Stores:
    """Fresh stores at head: SQLite files in a scratch directory, PostgreSQL databases cloned
    from one upgraded template (tests/backends.py), each dropped after its run."""

    def __init__(self, workdir: Path, gin: str | None) -> None:
        self.workdir, self.gin = workdir, gin
        self.server: Any = None
        self.count = 0

    def make(self, backend: str) -> str:
        self.count += 1
        if backend == "sqlite":
            path = self.workdir / f"bench-{self.count}.db"
            migrate.upgrade(path)
            eng.dispose_all()
            return str(path)
        if self.server is None:
            from backends import PgServer

            self.server, reason = PgServer.find()
            if self.server is None:
                raise SystemExit(f"no PostgreSQL server: {reason}")
        url = self.server.head_database()
        if self.gin is not None:
            con = floors.pg_connect(url)
            con.autocommit = True
            for statement in floors.gin_settings(self.gin):
                con.execute(statement)
            con.close()
        return url

    def drop(self, backend: str, target: str) -> None:
        eng.dispose_all()
        if backend == "postgresql":
            self.server.drop(target)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _sqlite_synchronous(path: str) -> int:
    with eng.reading(eng.open_engine(path)) as conn:
        value = int(conn.exec_driver_sql("PRAGMA synchronous").scalar())
    eng.dispose_all()
    return value


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def run(backend: str, runner: str, writers: int, per_writer: int, stores: Stores,
        pause_s: float = 0.0, synchronous: str | None = None, corpus: bool = False) -> Result:
    target = stores.make(backend)
    workdir = stores.workdir
    if runner == "floor":
        sync: Any = (_sqlite_synchronous(target) if synchronous is None else
                     {"OFF": 0, "NORMAL": 1, "FULL": 2}[synchronous]) if backend == "sqlite" else 0
    else:
        sync = synchronous if backend == "sqlite" else None
    start_file = workdir / f"start-{stores.count}"
    ctx = mp.get_context("spawn")
    outs = [workdir / f"w{stores.count}-{n}.json" for n in range(writers)]
    procs = [ctx.Process(target=_writer, args=(backend, runner, target, f"writer-{n}",
                                               per_writer, corpus, pause_s, str(start_file),
                                               str(outs[n]), sync))
             for n in range(writers)]
    for p in procs:
        p.start()
    time.sleep(1.0 + 0.3 * writers)  # let every child import and open its store
    wal = Path(f"{target}-wal")
    wal_peak = 0
    started = time.time()
    start_file.touch()
    while any(p.is_alive() for p in procs):
        if backend == "sqlite":
            wal_peak = max(wal_peak, wal.stat().st_size if wal.exists() else 0)
        time.sleep(0.01)
    for p in procs:
        p.join()
    reports = [json.loads(o.read_text()) for o in outs]
    stores.drop(backend, target)
    elapsed = max(r["end"] for r in reports) - started
    latencies = sorted(x for r in reports for x in r["latencies"])
    total = len(latencies)
    return Result(backend, runner, writers, total, round(elapsed, 3), round(total / elapsed, 1),
                  round(statistics.median(latencies) * 1000, 2),
                  round(_percentile(latencies, 0.99) * 1000, 2),
                  round(latencies[-1] * 1000, 2),
                  sum(1 for x in latencies if x * 1000 > SLOW_MS),
                  sum(r["errors"] for r in reports), wal_peak,
                  round(sum(r["cpu"] for r in reports) / total * 1e6))


# --------------------------------------------------------------------------- report


def table(results: list[Result], backend: str) -> str:
    """Library beside floor for each writer count: medians over the rounds (max: the largest),
    and the median of the rounds' ratios (each round ran the two back to back)."""
    lines = ["| writers | library msgs/s | floor msgs/s | library / floor | "
             "library p50 · p99 · max ms | floor p50 · p99 · max ms | appends > 50 ms "
             "(library · floor) | errors |",
             "|---:|---:|---:|---:|---|---|---|---:|"]
    runs: dict[tuple[str, int], list[Result]] = {}
    for r in results:
        if r.backend == backend:
            runs.setdefault((r.runner, r.writers), []).append(r)
    med = statistics.median
    for n in sorted({w for _, w in runs}):
        lib, low = runs.get(("library", n)), runs.get(("floor", n))
        if not lib or not low:
            continue
        ratio = med(a.messages_per_s / b.messages_per_s for a, b in zip(lib, low, strict=False))

        def latency(rs: list[Result]) -> str:
            return (f"{med(r.p50_ms for r in rs):.1f} · {med(r.p99_ms for r in rs):.1f} · "
                    f"{max(r.max_ms for r in rs):.0f}")

        lines.append(
            f"| {n} | {med(r.messages_per_s for r in lib):.0f} | "
            f"{med(r.messages_per_s for r in low):.0f} | {ratio:.2f} | {latency(lib)} | "
            f"{latency(low)} | {sum(r.over_50ms for r in lib)} · "
            f"{sum(r.over_50ms for r in low)} | {sum(r.errors for r in lib + low)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), nargs="+",
                        default=["sqlite", "postgresql"])
    parser.add_argument("--runner", choices=("library", "floor"), nargs="+",
                        default=["library", "floor"])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--messages", type=int, default=300, help="appends per writer")
    parser.add_argument("--pause-ms", type=float, default=0.0,
                        help="mean pause between a writer's appends (0: back to back)")
    parser.add_argument("--synchronous", choices=("OFF", "NORMAL", "FULL"),
                        help="SQLite diagnostic: this PRAGMA synchronous instead of the library's")
    parser.add_argument("--corpus", action="store_true",
                        help="append the seeded corpus instead of two fixed messages")
    parser.add_argument("--gin", help="PostgreSQL diagnostic: GIN fastupdate on/off, or a "
                                      "pending-list limit in kB")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every writer count this many times (tables: medians)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        stores = Stores(Path(tmp), args.gin)
        try:
            for backend in args.backend:
                counts = [n for _ in range(args.rounds) for n in args.writers]
                for i, n in enumerate(counts):
                    flip = (i + i // len(args.writers)) % 2  # across counts and across rounds
                    order = list(reversed(args.runner)) if flip else args.runner
                    for runner in order:
                        results.append(run(backend, runner, n, args.messages, stores,
                                           args.pause_ms / 1000, args.synchronous, args.corpus))
                        print(f"{backend} {runner} {n} writer(s): "
                              f"{results[-1].messages_per_s:.0f} msgs/s", file=sys.stderr)
        finally:
            stores.close()
    print(f"{os.cpu_count()} CPU(s), {args.messages} appends per writer "
          f"({'corpus' if args.corpus else 'fixed chat and tool output'}), mean pause "
          f"{args.pause_ms:g} ms, SQLite {'.'.join(map(str, eng.sqlite_version()))} synchronous "
          f"{args.synchronous or 'as the library sets it'}, PostgreSQL GIN "
          f"{'as created' if args.gin is None else args.gin}")
    for backend in args.backend:
        print(f"\n{backend}\n")
        if set(args.runner) == {"library", "floor"}:
            print(table(results, backend))
        for r in results:
            if r.backend == backend:
                print(f"  {r.runner:7} {r.writers} writer(s): {r.messages_per_s:.0f} msgs/s, "
                      f"p50 {r.p50_ms:.1f} p99 {r.p99_ms:.1f} max {r.max_ms:.0f} ms, "
                      f"> 50 ms {r.over_50ms}, errors {r.errors}, "
                      f"client CPU {r.client_cpu_us:.0f} µs an append"
                      + (f", WAL peak {r.wal_peak_bytes / 2**20:.1f} MB"
                         if backend == "sqlite" else ""))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
