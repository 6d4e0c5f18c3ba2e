"""What a PostgreSQL unit's bounds cost: the bounds in the BEGIN message (the library) beside the
same bounds as a statement of their own after psycopg's BEGIN (the former way, one more round
trip), for a short read (``get_session``) and an append, rounds interleaved on one store.

    python -m benchmarks.bench_pg_begin --rounds 15 --calls 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import Connection, text

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import postgres

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from backends import PgServer

_folded = postgres.bound_unit


def _separate(conn: Connection, *, lock_wait_s: float, budget_s: float | None) -> None:
    """The bounds as their own statement, after the driver's own BEGIN."""
    if budget_s is None:
        sql = postgres._LOCK_BOUND.format(lock_ms=postgres._ms(lock_wait_s))
    else:
        sql = postgres._BOUNDS.format(lock_ms=postgres._ms(min(lock_wait_s, budget_s)),
                                      statement_ms=postgres._ms(budget_s))
    conn.execute(text(sql))


def _time(db: SessionDB, op: str, calls: int) -> float:
    start = time.perf_counter()
    for n in range(calls):
        if op == "read":
            db.get_session("s1")
        else:
            db.append_message("s1", "user", f"message {n} about docker deployment")
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    server, reason = PgServer.find()
    if server is None:
        print(reason)
        return 1
    url = server.head_database()
    results: dict[str, dict[str, list[float]]] = {}
    try:
        with SessionDB(url) as db:
            db.create_session("s1", "cli")
            for op in ("read", "append"):
                both: dict[str, list[float]] = {"folded": [], "separate": []}
                for n in range(args.rounds + 1):
                    order = ("folded", "separate") if n % 2 == 0 else ("separate", "folded")
                    for way in order:
                        chosen = _folded if way == "folded" else _separate
                        postgres.bound_unit = chosen  # type: ignore[assignment]
                        took = _time(db, op, args.calls)
                        if n:  # the first round warms both
                            both[way].append(took)
                postgres.bound_unit = _folded  # type: ignore[assignment]
                results[op] = both
    finally:
        postgres.bound_unit = _folded  # type: ignore[assignment]
        engine_mod.dispose_all()
        server.drop(url)
        server.close()
    for op, both in results.items():
        ratios = [s / f for f, s in zip(both["folded"], both["separate"], strict=True)]
        print(f"{op:<7} folded {statistics.median(both['folded']) * 1e3:.3f} ms  separate "
              f"{statistics.median(both['separate']) * 1e3:.3f} ms  separate/folded "
              f"{statistics.median(ratios):.2f}x (per-round median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
