"""Large benchmark stores are slow to build: keep them between runs, keyed by their recipe.

Shared by the benchmarks that need a fleet of 10,000 environments and 1,000,000 results.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from alembic.script import ScriptDirectory
from sqlalchemy import func, insert, select

from envcheck.store import Store, open_store
from envcheck.store.core_tables import RESULTS, RUNS, STATES
from envcheck.store.database import alembic_config

PG_ADMIN = os.environ.get("ENVCHECK_BENCH_PG",
                          "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=5")


def cache_key(recipe: int, *params: int) -> str:
    """Changes with the recipe, the sizes and the schema, so a stale cache is never reused."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    text = ":".join(str(p) for p in (recipe, *params, head))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def complete(store: Store, envs: int, per_env: int, manual: int) -> bool:
    """The store holds the whole fleet: ``envs`` x ``per_env`` results, every environment
    assessed, and ``manual`` environments quarantined by hand (the last step of a build)."""
    with store.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(RESULTS)).scalar_one()
        assessed = conn.execute(select(func.count()).select_from(STATES)).scalar_one()
    return (stored == envs * per_env and assessed == envs
            and store.quarantine_page(source="manual").total == manual)


def _remove_sqlite(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextlib.contextmanager
def sqlite_url(prefix: str, key: str, rebuild: bool) -> Iterator[str]:
    folder = Path(tempfile.gettempdir()) / "envcheck-bench"
    folder.mkdir(exist_ok=True)
    path = folder / f"{prefix}-{key}.db"
    if rebuild:
        _remove_sqlite(str(path))
    yield f"sqlite:///{path}"


@contextlib.contextmanager
def postgres_url(prefix: str, key: str, rebuild: bool) -> Iterator[str]:
    name = f"envcheck_bench_{prefix}{key}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        if rebuild:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() \
                is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        params = conn.info.get_parameters()
    yield f"postgresql://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:" \
          f"{params.get('port', '5432')}/{name}"


def reset(url: str) -> None:
    """Empty a half-built cache before building again."""
    if url.startswith("sqlite:///"):
        _remove_sqlite(url.removeprefix("sqlite:///"))
        return
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN.replace("dbname=test", f"dbname={name}"),
                         autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def open_built(url: str, envs: int, per_env: int, manual: int,
               build: Callable[[Store], dict[str, float]], announce: str
               ) -> tuple[Store, str | dict[str, float]]:
    """The store at ``url``, built first (after a reset, ``announce`` printed) unless the
    fleet there is :func:`complete`; and "cached" or the build's timings, with ``total_s``."""
    store = open_store(url)
    if complete(store, envs, per_env, manual):
        return store, "cached"
    store.close()
    reset(url)
    store = open_store(url)
    print(announce, file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        timings = build(store)
    except BaseException:
        store.close()
        raise
    timings["total_s"] = time.perf_counter() - started
    return store, timings


def built_text(build: str | dict[str, float], unit: str = "") -> str:
    """What :func:`open_built` said of the build, for a report: "cached", or its timings."""
    if isinstance(build, str):
        return build
    return ", ".join(f"{k} {v:.1f}{unit}" for k, v in build.items())


def fleet_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options of a bench over cached fleets: their size, the backends, a rebuild, and
    where the numbers go."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else "")
    parser.add_argument("--envs", type=int, default=10_000)
    parser.add_argument("--results-per-env", type=int, default=100)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"])
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached fleets")
    parser.add_argument("--json", type=Path, help="write every number here")
    return parser


def insert_runs(store: Store, spans: Iterable[tuple[datetime, datetime]]) -> None:
    """One finished check run per (start, end), named ``bench-0000`` on."""
    with store.engine.begin() as conn:
        conn.execute(insert(RUNS), [
            {"id": f"bench-{c:04d}", "started_at": start, "finished_at": end,
             "state": "finished", "trigger": "bench", "host": "bench", "pid": 0,
             "catalogue_files": []} for c, (start, end) in enumerate(spans)])


class ResultBatches:
    """Result rows written ``size`` at a time, one statement a batch (``flush`` the rest)."""

    def __init__(self, store: Store, size: int) -> None:
        self.store, self.size, self.rows = store, size, list[dict[str, Any]]()

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            with self.store.engine.begin() as conn:
                conn.execute(insert(RESULTS), self.rows)
            self.rows.clear()
