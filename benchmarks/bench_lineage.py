"""Listing, tips and prune selection over a store with real lineages, on SQLite and PostgreSQL.

    python -m benchmarks.bench_lineage build --db PATH_OR_URL [--messages 200000]
    python -m benchmarks.bench_lineage measure --db PATH_OR_URL [--rounds 5] [--json OUT]

``build`` loads the seeded corpus of corpus.py into a store at head the way the agent writes
(plain INSERTs; on SQLite through the search triggers), with its messages cut to 300
characters: listing and tips read sessions and message times, not text, and the full 700 MB
would only slow the load. It adds lineages the corpus lacks: a third of the sessions continue
the one before after a compression, some are branches, subagent sessions hang under an
earlier session.

``measure`` runs each operation once to warm up, then ``--rounds`` times, and reports the
minimum and the median per operation in milliseconds. It uses only the public API, so the same
file measures two versions of the code against copies of one store (run it with each version
first on ``PYTHONPATH``, alternating, and compare the ratios: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import text

from benchmarks import corpus as corpus_mod
from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.repo import listing, retention
from hermes_store.repo.filters import SessionFilter

TEXT_CHARS = 300
TIP_SAMPLE = 200
BATCH = 5_000


def lineage_rows(messages: int, seed: int = corpus_mod.SEED) -> Iterator[tuple[dict, list]]:
    """The corpus's sessions with parent links and end reasons, and their (cut) messages."""
    rng = random.Random(seed + 1)
    previous: dict[str, Any] | None = None
    previous_rows: list = []
    ids: list[str] = []
    for (sid, source, model, started), rows in corpus_mod.generate(messages, seed):
        session = {"id": sid, "source": source, "model": model, "started_at": started,
                   "parent": None, "ended_at": None, "end_reason": None}
        if previous is not None:
            roll = rng.random()
            if source == "subagent":
                session["parent"] = rng.choice(ids[-50:])
            elif roll < 0.33:
                previous["end_reason"], previous["ended_at"] = "compression", started
                session["parent"] = previous["id"]
            elif roll < 0.38:
                previous["end_reason"], previous["ended_at"] = "branched", started
                session["parent"] = previous["id"]
            if previous["end_reason"] is None:
                previous["end_reason"], previous["ended_at"] = "user_exit", started
            yield previous, previous_rows
        previous, previous_rows = session, rows
        ids.append(sid)
    if previous is not None:
        yield previous, previous_rows


def build(location: str, messages: int) -> None:
    migrate.upgrade(location)
    engine = engine_mod.open_engine(location)
    insert_session = ("INSERT INTO sessions (id, source, model, started_at, parent_session_id, "
                      "ended_at, end_reason) VALUES (:id, :source, :model, :started_at, "
                      ":parent, :ended_at, :end_reason)")
    insert_message = ("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
                      "timestamp) VALUES (:session_id, :role, :content, :tool_name, "
                      ":tool_calls, :timestamp)")
    pending_s: list[dict] = []
    pending_m: list[dict] = []

    def flush() -> None:
        def unit(conn: Any) -> None:
            if pending_s:
                conn.execute(text(insert_session), pending_s)
            if pending_m:
                conn.execute(text(insert_message), pending_m)
        engine_mod.run_write(engine, unit, budget=600)
        pending_s.clear()
        pending_m.clear()

    # PostgreSQL: the search indexes are built once after the load, not row by row (the same
    # definitions; listing and tips never read them).
    search_indexes = []
    if engine_mod.is_server(engine):
        with engine_mod.reading(engine) as conn:
            search_indexes = list(conn.exec_driver_sql(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages' "
                "AND indexname LIKE 'idx_messages_search%%'"))
        for name, _ in search_indexes:
            engine_mod.run_write(engine, lambda c, n=name: c.exec_driver_sql(f"DROP INDEX {n}"))
    for session, rows in lineage_rows(messages):
        pending_s.append(session)
        pending_m.extend({"session_id": r.session_id, "role": r.role,
                          "content": r.content[:TEXT_CHARS], "tool_name": r.tool_name,
                          "tool_calls": r.tool_calls, "timestamp": r.timestamp} for r in rows)
        if len(pending_m) >= BATCH:
            flush()
    flush()
    for _, definition in search_indexes:
        engine_mod.run_write(engine, lambda c, d=definition: c.exec_driver_sql(d), budget=3600)
    engine_mod.run_write(engine, lambda c: c.exec_driver_sql("ANALYZE"))
    engine_mod.dispose_all()


def operations(db: SessionDB, tip_ids: list[str]) -> dict[str, Callable[[], Any]]:
    def cli_list() -> Any:
        with engine_mod.reading(db.engine) as conn:
            return listing.list_matching(conn, SessionFilter(), limit=20)

    def cli_list_filtered() -> Any:
        with engine_mod.reading(db.engine) as conn:
            return listing.list_matching(conn, SessionFilter(sources=("cli",)), limit=20)

    def prune_v11() -> Any:
        with engine_mod.reading(db.engine) as conn:
            return retention.prune(conn, older_than=time.time(), dry_run=True)

    return {
        "list (v21 default)": lambda: db.list_sessions_rich(limit=20),
        "list by last activity": lambda: db.list_sessions_rich(limit=20,
                                                               order_by_last_active=True),
        "list by last activity, search needle": lambda: db.list_sessions_rich(
            limit=20, order_by_last_active=True, search_query="s01"),
        "cli list": cli_list,
        "cli list --source cli": cli_list_filtered,
        f"get_lineage_tip x{len(tip_ids)}": lambda: [db.get_lineage_tip(s) for s in tip_ids],
        f"get_compression_tip x{len(tip_ids)}": lambda: [db.get_compression_tip(s)
                                                          for s in tip_ids],
        f"get_compression_lineage x{len(tip_ids)}": lambda: [db.get_compression_lineage(s)
                                                              for s in tip_ids],
        "prune selection (v11 rule)": prune_v11,
        "list_prune_candidates (v21 rule)": lambda: db.list_prune_candidates(
            older_than_days=1),
    }


def measure(location: str, rounds: int) -> dict[str, dict[str, float]]:
    with SessionDB(location) as db:
        with engine_mod.reading(db.engine) as conn:
            ids = [r[0] for r in conn.exec_driver_sql(
                "SELECT id FROM sessions WHERE parent_session_id IS NOT NULL "
                "OR end_reason = 'compression' ORDER BY id")]
        tip_ids = random.Random(7).sample(ids, min(TIP_SAMPLE, len(ids)))
        ops = operations(db, tip_ids)
        wall: dict[str, list[float]] = {name: [] for name in ops}
        cpu: dict[str, list[float]] = {name: [] for name in ops}
        for op in ops.values():
            op()  # warm-up
        for _ in range(rounds):
            for name, op in ops.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                op()
                wall[name].append((time.perf_counter() - start) * 1000)
                cpu[name].append((time.process_time() - start_cpu) * 1000)
    # On SQLite all the work is this process's: its CPU time is the figure a loaded machine
    # disturbs least. On PostgreSQL the server's share only shows in wall time.
    return {name: {"min_ms": min(wall[name]), "median_ms": statistics.median(wall[name]),
                   "cpu_min_ms": min(cpu[name])} for name in ops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "measure"))
    parser.add_argument("--db", required=True)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.action == "build":
        build(args.db, args.messages)
        return 0
    result = measure(args.db, args.rounds)
    for name, figures in result.items():
        print(f"{name:45s} min {figures['min_ms']:9.2f} ms   median "
              f"{figures['median_ms']:9.2f} ms   cpu {figures['cpu_min_ms']:9.2f} ms")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
