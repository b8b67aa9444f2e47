"""A standby daemon answers on its port while it waits for the store's lease (issue 34).

The real console script as a standby, on both backends, the lease held by this test's own
process (an flock, a PostgreSQL advisory lock: the same locks a daemon takes): ``/healthz``
answers 200, ``/readyz`` 503 naming the holder, ``/metrics`` the process's series and
``envcheck_lease_held 0`` and nothing read from the store; the image's health check (the
real script, as a process) calls it healthy; it has created no table; SIGTERM ends the wait
(exit 0) and closes the port. A port in use is refused in one line before anything starts.
The takeover from a real daemon, SIGKILLed, is in ``tests/faults/test_two_daemons.py``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from envcheck.catalogue.fields import MIN_SCHEDULE_ENV
from envcheck.store.lease import StoreLease
from tests.backends import PG_ADMIN
from tests.conftest import ROOT, envcheck_cmd
from tests.ports import free_port
from tests.test_daemon import HEALTHY, Daemon, Daemons, problems, write_catalogue

pytestmark = pytest.mark.docker  # the daemons' helper reads the engine; a standby never does

HOST = socket.gethostname()
HEALTHCHECK = ROOT / "images" / "envcheck" / "healthcheck.py"
# what a standby's /readyz says of the lease while another process holds it
HELD_BY = "standby: the store's lease is held by host {host}, pid {pid}, since 20"


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    started = Daemons(tmp_path)
    yield started
    started.close()


def port_of(d: Daemon) -> int:
    return int(d.url.rsplit(":", 1)[1])


def healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, run against 127.0.0.1:``port``."""
    return subprocess.run([sys.executable, str(HEALTHCHECK)], capture_output=True, text=True,
                          env={**os.environ, "ENVCHECK_HOST": "127.0.0.1",
                               "ENVCHECK_PORT": str(port)}, timeout=30, check=False)


def series(d: Daemon) -> dict[str, float]:
    """Every sample of a scrape by name (labels left out: these have none, or process_*)."""
    text = d.get("/metrics").text
    return {s.name: s.value for family in text_string_to_metric_families(text)
            for s in family.samples}


def own_series_only(scraped: dict[str, float]) -> list[str]:
    """The names of a scrape that are not the process's or the lease's own."""
    return sorted(n for n in scraped if not n.startswith("process_")
                  and n != "envcheck_lease_held")


def standby_readyz(d: Daemon, pid: int) -> dict[str, object]:
    """The standby's /readyz once its look at the lease has named ``pid``: 503."""
    held_by = HELD_BY.format(host=HOST, pid=pid)
    d.wait("the standby's /readyz to name the holder",
           lambda: str(d.get("/readyz").json()["checks"]["lease"]).startswith(held_by))
    response = d.get("/readyz")
    assert response.status_code == 503, response.text
    body: dict[str, object] = response.json()
    return body


def tables(url: str) -> list[str]:
    """The tables in ``url``'s store: an SQLite file's, a PostgreSQL database's."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            return []
        import sqlite3

        with sqlite3.connect(path) as conn:
            return [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    dsn = PG_ADMIN.replace("dbname=test", f"dbname={url.rsplit('/', 1)[1]}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]


def test_a_waiting_standby_answers_health_names_the_holder_and_touches_no_table(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    holder = StoreLease.of(store_url)  # this process holds the store, as a daemon would
    assert holder.take(standby=False, stop=threading.Event()) == 0.0
    try:
        catalogue = tmp_path / "fleet.yaml"
        write_catalogue(catalogue, [HEALTHY])
        d = daemons.start(catalogue, database=store_url, ready=False, args=["--standby"])
        d.wait("the standby's /healthz", lambda: d.get("/healthz").status_code == 200)
        assert d.get("/healthz").json() == {"status": "ok"}

        body = standby_readyz(d, os.getpid())
        assert (body["ready"], body["role"]) == (False, "standby"), body
        assert re.fullmatch(r"standby: the store's lease is held by host \S+, pid \d+, since "
                            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00",
                            str(body["checks"]["lease"])), body  # type: ignore[index]
        assert body["holder"]["pid"] == os.getpid(), body  # type: ignore[index]

        scraped = series(d)
        assert scraped["envcheck_lease_held"] == 0.0
        assert scraped["process_resident_memory_bytes"] > 0
        assert own_series_only(scraped) == [], "a standby serves nothing from the store"

        check = healthcheck(port_of(d))
        assert check.returncode == 0, check.stdout + check.stderr
        assert HELD_BY.format(host=HOST, pid=os.getpid()) in check.stdout, check.stdout

        assert tables(store_url) == [], "a standby touches none of the store's tables"
        assert d.stop() == 0
        with pytest.raises(requests.ConnectionError):  # its port closed with it
            d.get("/healthz")
        assert d.events("daemon stopped while waiting for the store's lease")
        assert problems(d) == []
        assert "Traceback" not in d.log.read_text()
    finally:
        holder.release()


def test_a_port_in_use_is_refused_in_one_line_before_anything_starts(tmp_path: Path) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY])
    port = free_port()
    url = f"sqlite:///{tmp_path / 'envcheck.db'}"
    with socket.create_server(("127.0.0.1", port)):  # another program listens there
        proc = subprocess.run(
            [*envcheck_cmd(), "daemon", str(catalogue), "--port", str(port),
             "--database", url], capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "ENVCHECK_DATA_DIR": str(tmp_path / "data"),
                 MIN_SCHEDULE_ENV: "1s"})  # the catalogue probes every 2 s
    assert proc.returncode == 2, proc.stderr
    # one line for the operator; beside it, only the JSON log (the lease taken, then given back)
    [line] = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in line, line
    assert "--port" in line
    assert tables(url) == [], "refused before the store was touched"
    lease = StoreLease.of(url)
    assert lease.take(standby=False, stop=threading.Event()) == 0.0, "its lease given back"
    lease.release()
