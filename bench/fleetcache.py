"""Large benchmark stores are slow to build: keep them between runs, keyed by their recipe.

Shared by the benchmarks that need a fleet of 10,000 environments and 1,000,000 results.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from alembic.script import ScriptDirectory
from sqlalchemy import func, select

from envcheck.store import Store
from envcheck.store.database import alembic_config
from envcheck.store.tables import EnvStateRow, ProbeResultRow

PG_ADMIN = os.environ.get("ENVCHECK_BENCH_PG",
                          "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=5")


def cache_key(recipe: int, *params: int) -> str:
    """Changes with the recipe, the sizes and the schema, so a stale cache is never reused."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    text = ":".join(str(p) for p in (recipe, *params, head))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def stored_counts(store: Store) -> tuple[int, int]:
    """(results, assessed environments) in the store."""
    results: Any = ProbeResultRow.__table__  # type: ignore[attr-defined]
    states: Any = EnvStateRow.__table__  # type: ignore[attr-defined]
    with store.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(results)).scalar_one()
        assessed = conn.execute(select(func.count()).select_from(states)).scalar_one()
    return int(stored), int(assessed)


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
