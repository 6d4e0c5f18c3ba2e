"""A PostgreSQL benchmark store built once per (corpus version, size, seed, head revision) and kept.

The PostgreSQL counterpart of ``scale.py``'s ``benchmarks/.cache``: a server store cannot live
in a folder, so the built corpus is kept as a database on the benchmark server, named for what
it holds; ``benchmarks/.cache/pg-<name>.json`` records what building it cost. A database whose
build did not finish has no ``hs_bench_built`` row and is built again. Loading goes through the
library's batch append (every index written as the agent's writes would), then ``VACUUM
(ANALYZE)``.

    python -m benchmarks.pg_cache 200000          # build (or find) the 200k store, print its URL
    python -m benchmarks.pg_cache 1000000 --drop  # forget one
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sqlalchemy import make_url

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.repo import messages

from . import corpus as corpus_mod

CACHE = Path(__file__).parent / ".cache"
BATCH = 1000
_MARK = "CREATE TABLE IF NOT EXISTS hs_bench_built (built_at double precision, load_s double "\
        "precision)"


def database_name(size: int, seed: int = corpus_mod.SEED) -> str:
    head = migrate.head_revision()[:4]  # revision ids start with a unique 4-digit number
    return f"hs_bench_v{corpus_mod.CORPUS_VERSION}_{size}_{seed}_r{head}"


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _admin(server_url: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(_libpq(server_url), autocommit=True)


def _built(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(_libpq(url)) as conn:
            return bool(conn.execute("SELECT count(*) FROM hs_bench_built").fetchone()[0])
    except psycopg.Error:
        return False


def cached_store(server_url: str, size: int, seed: int = corpus_mod.SEED,
                 log=print) -> str:  # type: ignore[no-untyped-def]
    """The URL of a store at head holding ``size`` corpus messages, built on first use."""
    name = database_name(size, seed)
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    if _built(url):
        return url
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    migrate.upgrade(url)
    started = time.perf_counter()
    engine = engine_mod.open_engine(url)
    done = 0
    with SessionDB(url) as db:
        for (sid, source, model, _started), chunk in corpus_mod.generate(size, seed):
            db.create_session(sid, source, model=model)
            for start in range(0, len(chunk), BATCH):
                batch = [messages.prepare_message(
                    r.session_id, r.role, content=r.content, tool_name=r.tool_name,
                    tool_calls=json.loads(r.tool_calls) if r.tool_calls else None,
                    timestamp=r.timestamp) for r in chunk[start:start + BATCH]]
                engine_mod.run_write(engine, lambda conn, b=batch: messages.append_many(conn, b))
            done += len(chunk)
            if done // 20_000 != (done - len(chunk)) // 20_000:
                log(f"{name}: {done} messages, {time.perf_counter() - started:.0f} s")
    load_s = time.perf_counter() - started
    engine_mod.vacuum(engine)
    engine_mod.dispose_all()
    import psycopg

    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        conn.execute(_MARK)
        conn.execute("INSERT INTO hs_bench_built VALUES (extract(epoch FROM now()), %s)",
                     [load_s])
        size_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    CACHE.mkdir(exist_ok=True)
    (CACHE / f"pg-{name}.json").write_text(json.dumps(
        {"database": name, "messages": size, "seed": seed, "load_s": round(load_s, 1),
         "database_bytes": size_bytes}, indent=2) + "\n")
    return url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", type=int)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--drop", action="store_true")
    args = parser.parse_args(argv)
    if args.drop:
        with _admin(args.server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database_name(args.size)}" WITH (FORCE)')
        return 0
    print(cached_store(args.server, args.size, log=lambda s: print(s, file=sys.stderr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
