"""PostgreSQL search latency per query kind: the library beside a raw-psycopg floor.

* ``library`` — ``SessionDB.search_messages`` on a PostgreSQL store at head holding the corpus.
* ``floor``   — the very statements the library ran for that query (recorded), run again with a
  bare psycopg connection in one transaction: no sanitizer, no routing, no SQLAlchemy, no
  result dicts. The ratio library/floor is the library's own cost (target ≤ 1.3×).
* the plans: each statement is prepared and executed five times, then its generic plan must
  not read ``messages`` by a sequential scan (an index query must stay an index query).

``HERMES_BENCH_MESSAGES`` scales the corpus (default 20,000). The figures (medians, ratios)
are printed and written to ``benchmarks/results/pg_search.json``. Run with
``pytest benchmarks/test_bench_pg_search.py -s``.
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
from hermes_store.search import statements

from . import corpus as corpus_mod

QUERIES: dict[str, tuple[str, dict[str, Any]]] = {
    "word": ("docker deployment", {}),
    "common word": ("the", {}),
    "phrase": ('"docker deployment"', {}),
    "prefix": ("deploy*", {}),
    "substring": ("数据库迁移", {}),
    "cjk2": ("通信", {}),
    "mixed": ("docker 部署", {}),
    "filtered": ("docker", {"source_filter": ["cli"], "role_filter": ["assistant"]}),
    "newest": ("docker", {"sort": "newest"}),
}
ROUNDS = 15
RESULTS = Path(__file__).parent / "results" / "pg_search.json"


@pytest.fixture(scope="module")
def pg_corpus() -> Iterator[str]:
    server, reason = PgServer.find()
    if server is None:
        pytest.skip(reason)
    url = server.head_database()
    data = corpus_mod.build()
    with SessionDB(url) as db:
        for sid, source, model, started in data.sessions:
            db.create_session(sid, source, model=model)
        for row in data.rows:
            db.append_message(row.session_id, row.role, row.content, tool_name=row.tool_name,
                              tool_calls=json.loads(row.tool_calls) if row.tool_calls else None)
    engine_mod.vacuum(engine_mod.open_engine(url))
    yield url
    engine_mod.dispose_all()
    server.drop(url)
    server.close()


def _recorded(url: str, query: str, kw: dict[str, Any]) -> list[tuple[str, tuple]]:
    seen: list[tuple[str, tuple]] = []
    real = statements._fetch

    def recording(conn: Any, statement: Any) -> list[Any]:
        seen.append((statement.text, tuple(statement.params)))
        return real(conn, statement)

    statements._fetch = recording  # type: ignore[assignment]
    try:
        with SessionDB(url) as db:
            db.search_messages(query, **kw)
    finally:
        statements._fetch = real  # type: ignore[assignment]
    return seen


def _median_ms(fn: Any) -> float:
    fn()
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _generic_plan(conn: Any, sql: str, params: tuple) -> str:
    """The plan of ``sql`` as a prepared statement after five executions, generic forced."""
    from psycopg import ClientCursor

    n = iter(range(1, 1000))
    numbered = re.sub(r"%s", lambda _: f"${next(n)}", sql)
    cur = ClientCursor(conn)
    cur.execute(f"PREPARE bench_q AS {numbered}")
    args = ", ".join(["%s"] * len(params))
    run = f"EXECUTE bench_q({args})" if params else "EXECUTE bench_q"
    for _ in range(5):
        cur.execute(run, params)
    cur.execute("SET plan_cache_mode = force_generic_plan")
    cur.execute("EXPLAIN " + run, params)
    plan = "\n".join(r[0] for r in cur.fetchall())
    cur.execute("RESET plan_cache_mode")
    cur.execute("DEALLOCATE bench_q")
    return plan


def test_pg_search_latency_beside_the_raw_floor(pg_corpus: str) -> None:
    import psycopg

    url = pg_corpus
    figures: dict[str, dict[str, float]] = {}
    raw = psycopg.connect(url, autocommit=True)
    plans = psycopg.connect(url, autocommit=True, prepare_threshold=None)
    scans: dict[str, list[str]] = {}
    with SessionDB(url) as db:
        for kind, (query, kw) in QUERIES.items():
            recorded = _recorded(url, query, kw)
            assert recorded, kind

            def floor(recorded: list = recorded) -> None:
                with raw.transaction():
                    raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    for sql, params in recorded:
                        raw.execute(sql, params).fetchall()

            lib = _median_ms(lambda q=query, k=kw: db.search_messages(q, **k))
            low = _median_ms(floor)
            figures[kind] = {"library_ms": round(lib, 3), "floor_ms": round(low, 3),
                             "ratio": round(lib / low, 2),
                             "hits": len(db.search_messages(query, **kw))}
            for sql, params in recorded:
                plan = _generic_plan(plans, sql, params)
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
              f"  ratio {f['ratio']:.2f}x  hits {f['hits']:.0f}")
    assert not scans, json.dumps(scans, indent=1, ensure_ascii=False)
