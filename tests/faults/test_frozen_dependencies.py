"""The engine or the store freezes (dockerd or PostgreSQL under SIGSTOP) and wakes again: the
daemon's ``/readyz`` keeps answering, 503 with the reason and the age of the last answer,
and 200 once the dependency answers again.

The real engine and the real PostgreSQL sit behind socket proxies that freeze as a stopped
process does: connections are accepted and held open, nothing is answered until the thaw.
``/readyz`` is read with a client timeout of a couple of seconds: a readiness check that
waits on the frozen dependency fails the test there (a hang guard, not a speed target).

The image's health check (the real script, as a process) against an active daemon and a
standby on one frozen PostgreSQL (issue 34): healthy for both before, unhealthy for both while
frozen (the active's store, the standby's look at the lease: neither outage is hidden behind
"standby"), healthy again after the thaw, the active still the active.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from envcheck.core.readiness import BOUND_S, INTERVAL_S
from tests.backends import new_pg_database
from tests.engine_proxy import EngineProxy, SocketProxy, TcpProxy
from tests.test_daemon import HEALTHY, Daemon, Daemons
from tests.test_standby import HELD_BY, HOST, healthcheck, port_of, standby_readyz

pytestmark = [pytest.mark.docker, pytest.mark.slow]

READYZ_TIMEOUT_S = 2.0
NOT_ANSWERING = re.compile(r"error: not answering for \d+ s")
# probed once at the start, then not for an hour: nothing is in flight when the test freezes
CATALOGUE = f"""version: 1
suites:
  frozen:
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ terminal: 1h, dependencies: null, tests: null, datasource: null,
                   jitter_s: 0 }}
    environments:
      - {{ id: {HEALTHY[0]}, image: '{HEALTHY[1]}' }}
"""


def readyz(d: Daemon) -> tuple[int, dict[str, Any]]:
    response: requests.Response | None = None
    with contextlib.suppress(requests.Timeout):  # failed below, without the client's frames
        response = requests.get(f"{d.url}/readyz", timeout=READYZ_TIMEOUT_S)
    if response is None:
        pytest.fail(f"/readyz did not answer within {READYZ_TIMEOUT_S} s: it waits on a "
                    "dependency")
    return response.status_code, response.json()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)  # its own client reads the real engine
    yield d
    d.close()


@pytest.fixture
def catalogue(tmp_path: Path) -> Path:
    path = tmp_path / "probes" / "frozen.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(CATALOGUE, encoding="utf-8")
    return path


def freeze_and_thaw(d: Daemon, proxy: SocketProxy, frozen: str, other: str) -> None:
    """Freeze what ``proxy`` fronts: ``frozen`` reads as not answering, ``other`` stays ok,
    and every answer says how old its evidence is; after the thaw, ready again."""
    d.wait("the start-up probe", lambda: bool(d.events("probe result")))
    assert readyz(d)[0] == 200
    proxy.freeze()
    try:
        d.wait(f"/readyz to say the {frozen} does not answer",
               lambda: NOT_ANSWERING.fullmatch(readyz(d)[1]["checks"][frozen]) is not None,
               timeout=30)
        status, body = readyz(d)
        assert status == 503, body
        assert body["ready"] is False
        assert NOT_ANSWERING.fullmatch(body["checks"][frozen]), body
        assert body["checks"][other] == "ok", body
        # the last answer came before the question that has gone unanswered past the bound
        assert body["age_s"][frozen] > BOUND_S, body
        assert 0 <= body["age_s"][other] <= INTERVAL_S + BOUND_S, body
        healthz = requests.get(f"{d.url}/healthz", timeout=READYZ_TIMEOUT_S)
        assert healthz.json() == {"status": "ok"}
    finally:
        proxy.thaw()  # a failure above must not leave the daemon unable to stop
    d.wait("/readyz ready again", lambda: readyz(d)[0] == 200, timeout=30)
    _, body = readyz(d)
    assert body["checks"] == {"store": "ok", "engine": "ok"}, body
    assert d.stop() == 0
    assert "Traceback" not in d.log.read_text()


def test_readyz_answers_while_the_engine_is_frozen(
    daemons: Daemons, catalogue: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = EngineProxy(tmp_path / "engine.sock")
    try:
        monkeypatch.setenv("DOCKER_HOST", proxy.url)
        d = daemons.start(catalogue)
        freeze_and_thaw(d, proxy, "engine", "store")
    finally:
        proxy.close()


@pytest.mark.postgres
def test_readyz_answers_while_postgresql_is_frozen(
    daemons: Daemons, catalogue: Path,
) -> None:
    proxy = TcpProxy(5432)
    try:
        with new_pg_database("envcheck_frozen") as name:
            d = daemons.start(catalogue, args=[
                "--database", f"postgresql://postgres@127.0.0.1:{proxy.port}/{name}"])
            try:
                freeze_and_thaw(d, proxy, "store", "engine")
            finally:
                d.stop()  # before the database is dropped under it
    finally:
        proxy.close()


@pytest.mark.postgres
def test_the_image_health_check_passes_a_standby_and_fails_both_while_the_store_is_frozen(
    daemons: Daemons, catalogue: Path,
) -> None:
    proxy = TcpProxy(5432)
    try:
        with new_pg_database("envcheck_frozen") as name:
            url = f"postgresql://postgres@127.0.0.1:{proxy.port}/{name}"
            active = daemons.start(catalogue, database=url)
            standby = daemons.start(catalogue, database=url, tag=active.tag, ready=False,
                                    args=["--standby"])
            held_by = HELD_BY.format(host=HOST, pid=active.proc.pid)
            try:
                standby_readyz(standby, active.proc.pid)
                active.wait("the start-up probe", lambda: bool(active.events("probe result")))
                for d in (active, standby):
                    check = healthcheck(port_of(d))
                    assert check.returncode == 0, check.stdout + check.stderr
                proxy.freeze()
                try:
                    active.wait("the active's /readyz to say the store does not answer",
                                lambda: NOT_ANSWERING.fullmatch(
                                    readyz(active)[1]["checks"]["store"]) is not None,
                                timeout=30)
                    standby.wait("the standby's /readyz to say its look is not answered",
                                 lambda: NOT_ANSWERING.fullmatch(
                                     readyz(standby)[1]["checks"]["lease"]) is not None,
                                 timeout=30)
                    for d, role in ((active, "active"), (standby, "standby")):
                        status, body = readyz(d)
                        assert (status, body["role"]) == (503, role), body
                        check = healthcheck(port_of(d))
                        assert check.returncode == 1, (role, check.stdout + check.stderr)
                        assert "not answering for" in check.stdout, (role, check.stdout)
                        assert d.get("/healthz").status_code == 200, "alive all the same"
                finally:
                    proxy.thaw()  # a failure above must not leave the daemons unable to stop
                active.wait("the active ready again", lambda: readyz(active)[0] == 200,
                            timeout=30)
                standby.wait("the standby's look to name the holder again",
                             lambda: str(readyz(standby)[1]["checks"]["lease"]).startswith(
                                 held_by), timeout=30)
                for d in (active, standby):
                    check = healthcheck(port_of(d))
                    assert check.returncode == 0, check.stdout + check.stderr
                assert standby.stop() == 0
                assert active.stop() == 0
            finally:
                for d in (standby, active):  # before the database is dropped under them
                    d.stop()
    finally:
        proxy.close()
