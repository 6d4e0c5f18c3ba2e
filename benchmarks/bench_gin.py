"""What GIN pending-list flushes cost an append on PostgreSQL, per index setting.

With ``fastupdate`` on (PostgreSQL's default) a GIN index queues new entries in a pending list
and the insert that takes the list past ``gin_pending_list_limit`` (4 MB by default) merges all
of it into the index before it returns; VACUUM (autovacuum included) merges it too. With
``fastupdate`` off every insert updates the index itself. This appends the seeded corpus with one
library writer into a fresh database per setting and, after every append, reads each GIN index's
pending pages (``pgstattuple``'s ``pgstatginindex``, outside the timed call): an append during
which a list shrank is one that flushed. It reports the appends that flushed and the others
separately, so a flush's cost is told apart from the noise of a shared machine.

    python benchmarks/bench_gin.py              # on (4 MB, PostgreSQL's default), off, 64 … 1024 kB
    python benchmarks/bench_gin.py --messages 5000 --settings on off 256

Needs a role that may ``CREATE EXTENSION pgstattuple`` (the server of tests/backends.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import corpus as corpus_mod  # noqa: E402 - needs the sys.path above
from benchmarks import floors  # noqa: E402 - needs the sys.path above
from hermes_store import SessionDB  # noqa: E402 - needs the sys.path above
from hermes_store.db import engine as eng  # noqa: E402 - needs the sys.path above

GIN_INDEXES = floors.GIN_INDEXES
PENDING = ("SELECT (pgstatginindex(%s::regclass)).pending_pages, "
           "(pgstatginindex(%s::regclass)).pending_pages, "
           "(pgstatginindex(%s::regclass)).pending_pages")




def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def run(server: Any, setting: str, rows: list[corpus_mod.Row]) -> dict[str, Any]:
    url = server.head_database()
    admin = floors.pg_connect(url)
    admin.autocommit = True
    admin.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    for statement in floors.gin_settings(setting):
        admin.execute(statement)
    flushed: list[float] = []
    quiet: list[float] = []
    try:
        with SessionDB(url) as db:
            sessions = {r.session_id for r in rows}
            for sid in sorted(sessions):
                db.create_session(sid, "cli")
            before = admin.execute(PENDING, GIN_INDEXES).fetchone()
            for r in rows:
                start = time.perf_counter()
                db.append_message(r.session_id, r.role, r.content, tool_name=r.tool_name,
                                  tool_calls=json.loads(r.tool_calls) if r.tool_calls else None)
                spent = (time.perf_counter() - start) * 1000
                after = admin.execute(PENDING, GIN_INDEXES).fetchone()
                drained = any(a < b for a, b in zip(after, before, strict=True))
                (flushed if drained else quiet).append(spent)
                before = after
    finally:
        admin.close()
        eng.dispose_all()
        server.drop(url)
    every = flushed + quiet
    return {"setting": setting, "appends": len(every),
            "msgs_per_s": round(len(every) / (sum(every) / 1000), 1),
            "p50_ms": round(statistics.median(every), 2), "p99_ms": round(_pct(every, 0.99), 1),
            "max_ms": round(max(every), 1), "flushes": len(flushed),
            "flush_p50_ms": round(statistics.median(flushed), 1) if flushed else None,
            "flush_max_ms": round(max(flushed), 1) if flushed else None,
            "other_max_ms": round(max(quiet), 1) if quiet else None,
            "over_50ms": sum(1 for x in every if x > 50),
            "flushes_over_50ms": sum(1 for x in flushed if x > 50)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--settings", nargs="+", default=["on", "off", "64", "128", "256", "1024"],
                        help="on, off, or a pending-list limit in kB (fastupdate on)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from backends import PgServer

    server, reason = PgServer.find()
    if server is None:
        raise SystemExit(f"no PostgreSQL server: {reason}")
    rows = corpus_mod.build(args.messages).rows
    results = []
    try:
        for setting in args.settings:
            results.append(run(server, setting, rows))
            print(f"{setting}: done", file=sys.stderr)
    finally:
        server.close()
    print(f"{args.messages} corpus appends, one library writer, a fresh database per setting\n")
    print("| GIN setting | msgs/s | p50 · p99 · max ms | flushes | flush p50 · max ms | "
          "max ms of the others | appends > 50 ms (of them flushes) |")
    print("|---|---:|---|---:|---|---:|---|")
    for r in results:
        label = {"on": "fastupdate on, 4 MB (default)", "off": "fastupdate off"}.get(
            r["setting"], f"fastupdate on, {r['setting']} kB")
        flush = (f"{r['flush_p50_ms']} · {r['flush_max_ms']}" if r["flushes"] else "—")
        print(f"| {label} | {r['msgs_per_s']:.0f} | {r['p50_ms']} · {r['p99_ms']} · "
              f"{r['max_ms']} | {r['flushes']} | {flush} | {r['other_max_ms']} | "
              f"{r['over_50ms']} ({r['flushes_over_50ms']}) |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
