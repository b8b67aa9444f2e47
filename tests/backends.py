"""Store backends for tests: an empty SQLite file and the machine's real PostgreSQL.

Registered in ``conftest.py``; any test taking ``store_url`` runs once per backend.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=5"


@contextlib.contextmanager
def new_pg_database(prefix: str) -> Iterator[str]:
    """A fresh database on the machine's PostgreSQL (its name), dropped on exit."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh database for this test session, dropped at the end."""
    with new_pg_database("envcheck_test") as name:
        yield name


def emptied_pg_url(name: str) -> str:
    """The URL of the session's database ``name``, emptied: every test starts from empty."""
    dsn = PG_ADMIN.replace("dbname=test", f"dbname={name}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'envcheck.db'}"
    return emptied_pg_url(request.getfixturevalue("pg_database"))


@pytest.fixture
def pg_store_url(pg_database: str) -> str:
    """An empty PostgreSQL database, for what only PostgreSQL has."""
    return emptied_pg_url(pg_database)
