"""PostgreSQL search latency per query kind: the library beside a raw-psycopg floor.

* ``library`` — ``SessionDB.search_messages`` on a PostgreSQL store at head holding the corpus
  (loaded through the library's batch append, with the corpus's own timestamps).
* ``floor``   — the very statements the library ran for that query (recorded), run again on a
  bare psycopg connection in one read transaction at the library's isolation (one ``BEGIN
  ISOLATION LEVEL REPEATABLE READ``, the statements, ``COMMIT``), each prepared or not as the
  library runs it: no sanitizer, no routing, no SQLAlchemy, no result dicts. The ratio
  library/floor is the library's own cost (target ≤ 1.3×).
* ``server_ms``: what the server spends on those statements (``EXPLAIN ANALYZE``: execution,
  and planning for the statements never prepared), free of the client's scheduling.
* the plans: each statement the library lets psycopg prepare is prepared and executed five
  times, then its generic plan must not read ``messages`` by a sequential scan (the statements
  never prepared are planned for their terms each time; tests/test_pg_plans.py checks both).

Rounds alternate which of the two runs first; each kind reports the medians and the median of
the per-round ratios. ``HERMES_BENCH_MESSAGES`` scales the corpus (default 20,000). The figures
are printed and written to ``benchmarks/results/pg_search.json``:

    pytest benchmarks/test_bench_pg_search.py -s -p no:cacheprovider
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from backends import PgServer

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.repo import messages
from hermes_store.search import statements

from . import corpus as corpus_mod

QUERIES: dict[str, tuple[str, dict[str, Any]]] = {
    "word": ("docker deployment", {}),
    "common word": ("the", {}),
    "phrase": ('"docker deployment"', {}),
    "common phrase": ('"of the"', {}),
    "prefix": ("deploy*", {}),
    "substring": ("数据库迁移", {}),
    "cjk1": ("通", {}),
    "cjk2": ("通信", {}),
    "mixed": ("docker 部署", {}),
    "filtered": ("docker", {"source_filter": ["cli"], "role_filter": ["assistant"]}),
    "newest": ("docker", {"sort": "newest"}),
    "oldest": ("docker", {"sort": "oldest"}),
    "newest rare": ("rebase merge", {"sort": "newest"}),
}
ROUNDS = 25
BATCH = 1000
RESULTS = Path(__file__).parent / "results" / "pg_search.json"


@pytest.fixture(scope="module")
def pg_corpus() -> Iterator[str]:
    server, reason = PgServer.find()
    if server is None:
        pytest.skip(reason)
    url = server.head_database()
    data = corpus_mod.build()
    engine = engine_mod.open_engine(url)
    with SessionDB(url) as db:
        for sid, source, model, _started in data.sessions:
            db.create_session(sid, source, model=model)
    for start in range(0, len(data.rows), BATCH):
        batch = [messages.prepare_message(
            r.session_id, r.role, content=r.content, tool_name=r.tool_name,
            tool_calls=json.loads(r.tool_calls) if r.tool_calls else None, timestamp=r.timestamp)
            for r in data.rows[start:start + BATCH]]
        engine_mod.run_write(engine, lambda conn, b=batch: messages.append_many(conn, b))
    engine_mod.vacuum(engine)
    yield url
    engine_mod.dispose_all()
    server.drop(url)
    server.close()


def _recorded(url: str, query: str, kw: dict[str, Any]) -> list[Any]:
    seen: list[Any] = []
    real = statements._fetch

    def recording(conn: Any, statement: Any) -> list[Any]:
        seen.append(statement)
        return real(conn, statement)

    statements._fetch = recording  # type: ignore[assignment]
    try:
        with SessionDB(url) as db:
            db.search_messages(query, **kw)
    finally:
        statements._fetch = real  # type: ignore[assignment]
    return seen


def _generic_plan(conn: Any, sql: str, params: list[Any]) -> str:
    """The plan of ``sql`` as a prepared statement after five executions, generic forced."""
    from psycopg import ClientCursor

    n = iter(range(1, 1000))
    numbered = re.sub(r"%s", lambda _: f"${next(n)}", sql)
    cur = ClientCursor(conn)
    cur.execute(f"PREPARE bench_q AS {numbered}")
    run = f"EXECUTE bench_q({', '.join(['%s'] * len(params))})" if params else "EXECUTE bench_q"
    for _ in range(5):
        cur.execute(run, params)
    cur.execute("SET plan_cache_mode = force_generic_plan")
    cur.execute("EXPLAIN " + run, params)
    plan = "\n".join(r[0] for r in cur.fetchall())
    cur.execute("RESET plan_cache_mode")
    cur.execute("DEALLOCATE bench_q")
    return plan


def _server_ms(conn: Any, recorded: list[Any]) -> float:
    """What the server spends on the statements (median of 5): execution, plus planning for the
    statements never prepared (a prepared one is planned once per connection, then reused)."""
    runs = []
    for _ in range(5):
        total = 0.0
        for s in recorded:
            rows = conn.execute("EXPLAIN (ANALYZE, SUMMARY, TIMING OFF, FORMAT JSON) " + s.text,
                                s.params, prepare=False).fetchone()[0][0]
            total += rows["Execution Time"] + (rows["Planning Time"] if s.prepare is False
                                               else 0.0)
        runs.append(total)
    return statistics.median(runs)


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def test_pg_search_latency_beside_the_raw_floor(pg_corpus: str) -> None:
    import psycopg

    url = pg_corpus
    figures: dict[str, dict[str, float]] = {}
    raw = psycopg.connect(url, autocommit=True)
    raw.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    plans = psycopg.connect(url, autocommit=True, prepare_threshold=None)
    scans: dict[str, list[str]] = {}
    with SessionDB(url) as db:
        for kind, (query, kw) in QUERIES.items():
            recorded = _recorded(url, query, kw)
            assert recorded, kind

            def floor(recorded: list[Any] = recorded) -> None:
                with raw.transaction():
                    for s in recorded:
                        raw.execute(s.text, s.params, prepare=s.prepare).fetchall()

            def library(q: str = query, k: dict[str, Any] = kw) -> None:
                db.search_messages(q, **k)

            for _ in range(6):  # warm both, and let psycopg prepare what it prepares
                library()
                floor()
            lib, low, ratios = [], [], []
            for n in range(ROUNDS):
                pair = (library, floor) if n % 2 == 0 else (floor, library)
                first, second = _timed(pair[0]), _timed(pair[1])
                a, b = (first, second) if n % 2 == 0 else (second, first)
                lib.append(a)
                low.append(b)
                ratios.append(a / b)
            figures[kind] = {"library_ms": round(statistics.median(lib) * 1000, 3),
                             "floor_ms": round(statistics.median(low) * 1000, 3),
                             "library_min_ms": round(min(lib) * 1000, 3),
                             "floor_min_ms": round(min(low) * 1000, 3),
                             "ratio": round(statistics.median(ratios), 2),
                             "statements": len(recorded),
                             "server_ms": round(_server_ms(raw, recorded), 3),
                             "hits": len(db.search_messages(query, **kw))}
            for s in recorded:
                if s.prepare is False:
                    continue
                plan = _generic_plan(plans, s.text, list(s.params))
                if "Seq Scan on messages" in plan:
                    scans.setdefault(kind, []).append(plan)
    raw.close()
    plans.close()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    width = max(map(len, figures))
    print()
    for kind, f in figures.items():
        print(f"{kind:<{width}}  library {f['library_ms']:8.3f} ms  floor {f['floor_ms']:8.3f} ms"
              f"  (minima {f['library_min_ms']:.3f} / {f['floor_min_ms']:.3f})"
              f"  ratio {f['ratio']:.2f}x  server {f['server_ms']:.3f} ms  hits {f['hits']:.0f}")
    assert not scans, json.dumps(scans, indent=1, ensure_ascii=False)
