"""Search latency and file size against corpus size: head, the agent's v11 layout, the floor.

    python -m benchmarks.scale                         # 20k, 60k and 200k messages
    python -m benchmarks.scale --sizes 20000 --repeats 5 --label quick

For each size, the seeded corpus of corpus.py is loaded into

* ``inline``: a store at revision 0011 (the agent's v11 inline layout), driven with v11's own
  statements (queries.INLINE);
* ``head``: a store upgraded to head and loaded by plain sqlite3 (the triggers index each row, as
  for any program writing to the store), then ``optimize_storage`` (the CJK catch-up and VACUUM
  an operator runs after the upgrade), searched through ``search_messages`` (the library) and
  with hand-written statements (queries.FLOOR, the raw-sqlite3 floor on the same file).

Both are built once per (corpus version, size, seed, head revision) and cached under
``benchmarks/.cache/`` (git-ignored; the 200k pair takes about 5 GB). Every query kind runs
``--repeats`` rounds after a warm-up; within a round the three layouts run back to back in a
rotating order, so a burst of load from other processes hits them alike. Latencies are the
minimum over the rounds, the least-disturbed estimate of the cost on a shared machine; ratios
are also given as the median of per-round ratios (layouts compared seconds apart), in wall
time and in CPU time. Slow layouts (v11's LIKE scans) stop after ``--budget`` seconds once
they have three samples.

Writes ``scale-<label>.json`` and, through report.py, ``scale-<label>.md`` (tables) and
``scale-<label>.png`` (latency and size against corpus size) into ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading
from hermes_store.ops import storage
from hermes_store.search.statements import search_messages

from . import corpus as corpus_mod
from . import report
from .queries import INLINE, KINDS, QUERIES, floor_for, in_snapshot

INLINE_REVISION = "0011_v11_inline_fts"
SIZES = (20_000, 60_000, 200_000)
LAYOUTS = ("head", "floor", "inline")
CACHE = Path(__file__).parent / ".cache"
RESULTS = Path(__file__).parent / "results"
BATCH = 2_000  # messages per load transaction, the same for both layouts


@dataclass
class Built:
    """One cached pair of stores and what building them cost."""

    messages: int
    sessions: int
    text_bytes: int
    seed: int
    corpus_version: int
    head_revision: str
    inline_bytes: int
    head_bytes: int
    load_s: float
    optimize_s: float
    folder: str

    @property
    def inline(self) -> Path:
        return Path(self.folder) / "inline.db"

    @property
    def head(self) -> Path:
        return Path(self.folder) / "head.db"


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def _batches(size: int, seed: int) -> Iterator[tuple[list[corpus_mod.Session],
                                                     list[corpus_mod.Row]]]:
    sessions: list[corpus_mod.Session] = []
    rows: list[corpus_mod.Row] = []
    for session, chunk in corpus_mod.generate(size, seed):
        sessions.append(session)
        rows.extend(chunk)
        if len(rows) >= BATCH:
            yield sessions, rows
            sessions, rows = [], []
    if rows:
        yield sessions, rows


def _load(con: sqlite3.Connection, sessions: list[corpus_mod.Session],
          rows: list[corpus_mod.Row]) -> None:
    con.execute("BEGIN")
    con.executemany("INSERT INTO sessions (id, source, model, started_at) VALUES (?, ?, ?, ?)",
                    sessions)
    con.executemany(
        "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(r.session_id, r.role, r.content, r.tool_name, r.tool_calls, r.timestamp)
         for r in rows])
    con.execute("COMMIT")


def build(size: int, seed: int = corpus_mod.SEED, cache: Path = CACHE,
          log: Callable[[str], None] = print) -> Built:
    """The cached stores for ``size`` messages, built first when missing."""
    head_rev = migrate.head_revision()
    folder = cache / f"corpus{corpus_mod.CORPUS_VERSION}-{size}-{seed}-{head_rev}"
    meta = folder / "build.json"
    if meta.exists():
        return Built(**json.loads(meta.read_text()))
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    inline, head = partial / "inline.db", partial / "head.db"
    migrate.upgrade(inline, INLINE_REVISION)
    migrate.upgrade(head)
    engine_mod.dispose_all()
    log(f"building {size:,} messages in {folder}")
    start = time.perf_counter()
    cons = [sqlite3.connect(p, isolation_level=None) for p in (inline, head)]
    messages = sessions = text_bytes = 0
    for batch_sessions, rows in _batches(size, seed):
        for con in cons:
            _load(con, batch_sessions, rows)
        sessions += len(batch_sessions)
        messages += len(rows)
        text_bytes += sum(len(r.content.encode()) for r in rows)
    for con in cons:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    storage.optimize_storage(head)
    engine_mod.dispose_all()
    optimize_s = time.perf_counter() - start
    built = Built(messages, sessions, text_bytes, seed, corpus_mod.CORPUS_VERSION, head_rev,
                  _file_bytes(inline), _file_bytes(head), round(load_s, 1), round(optimize_s, 1),
                  str(folder))
    (partial / "build.json").write_text(json.dumps(asdict(built), indent=2))
    partial.rename(folder)
    log(f"built in {load_s + optimize_s:.0f} s")
    return built


def _runners(built: Built) -> tuple[dict[str, Callable[[str], Any]], Callable[[], None]]:
    engine = open_engine(built.head)
    floor = sqlite3.connect(built.head, isolation_level=None)
    inline = sqlite3.connect(built.inline, isolation_level=None)

    def library(kind: str) -> list[dict[str, Any]]:
        text, filters = QUERIES[kind]
        with reading(engine) as conn:
            return search_messages(conn, text, **filters)

    def close() -> None:
        floor.close()
        inline.close()
        engine_mod.dispose_all()

    floors = floor_for(floor)
    return {"head": library,
            "floor": lambda kind: in_snapshot(floors[kind], floor),
            "inline": lambda kind: INLINE[kind](inline)}, close


def measure(built: Built, repeats: int, budget_s: float,
            log: Callable[[str], None] = print, kinds: tuple[str, ...] = KINDS) -> dict[str, dict[str, dict[str, Any]]]:
    """``{kind: {layout: {"min", "median", "n", "hits", "wall", "cpu"}}}``, in seconds.

    ``wall`` and ``cpu`` (this process's CPU time: the queries run in process on cached pages,
    so it is what they cost without the waits other processes impose) hold one sample per
    round, None where the layout sat the round out, so rounds can be compared pairwise.
    """
    runners, close = _runners(built)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        for kind in kinds:
            wall: dict[str, list[float | None]] = {layout: [] for layout in LAYOUTS}
            cpu: dict[str, list[float | None]] = {layout: [] for layout in LAYOUTS}
            hits = {layout: len(runners[layout](kind)) for layout in LAYOUTS}  # warm-up
            spent = dict.fromkeys(LAYOUTS, 0.0)
            for round_ in range(repeats):
                order = LAYOUTS[round_ % 3:] + LAYOUTS[:round_ % 3]
                for layout in order:
                    taken = [x for x in wall[layout] if x is not None]
                    if len(taken) >= 3 and spent[layout] > budget_s:
                        wall[layout].append(None)
                        cpu[layout].append(None)
                        continue
                    gc.collect()
                    start, start_cpu = time.perf_counter(), time.process_time()
                    runners[layout](kind)
                    took = time.perf_counter() - start
                    cpu[layout].append(time.process_time() - start_cpu)
                    wall[layout].append(took)
                    spent[layout] += took
            out[kind] = {}
            for layout in LAYOUTS:
                taken = [x for x in wall[layout] if x is not None]
                out[kind][layout] = {"min": min(taken), "median": statistics.median(taken),
                                     "n": len(taken), "hits": hits[layout],
                                     "wall": wall[layout], "cpu": cpu[layout]}
            log(f"  {built.messages:>7,} {kind:<9} " + "  ".join(
                f"{layout} {out[kind][layout]['min'] * 1000:8.2f} ms" for layout in LAYOUTS))
    finally:
        close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--seed", type=int, default=corpus_mod.SEED)
    parser.add_argument("--repeats", type=int, default=15, help="rounds per query kind")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds a layout may spend on one kind once it has 3 samples")
    parser.add_argument("--label", default="latest", help="names the output files")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS,
                        help="query kinds to run (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--build-only", action="store_true", help="build the corpora and stop")
    args = parser.parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    built = [build(size, args.seed, args.cache, log) for size in sorted(args.sizes)]
    if args.build_only:
        return 0
    runs = []
    for item in built:
        latency = measure(item, args.repeats, args.budget, log, tuple(args.kinds))
        runs.append({**asdict(item), "latency": latency})
    data = {"sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count(),
            "repeats": args.repeats, "sizes": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"scale-{args.label}.json"
    path.write_text(json.dumps(data, indent=2))
    table = report.scale_report([path], args.out / f"scale-{args.label}")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
