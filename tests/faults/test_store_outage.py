"""The store goes away under a running daemon and comes back: an expected outage, said once.

The daemon's PostgreSQL sits behind a TCP proxy that the test cuts (live connections drop,
new ones are refused, as a stopped server's are) and restores at the same port. While it is
cut the daemon keeps probing, and every part that needs the store every window or every probe
fails again and again. The log must hold one ``store unavailable`` line per part, naming the
store and its error, however many windows and probes the outage lasts, one ``store available
again`` line per part once it is back, and no traceback: the outage is known, not a bug.

The store's own errors are told apart from a bug by what the database said: a refused
connection is the store unavailable, a statement the database rejects is not.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from envcheck.core.errors import StoreError, StoreUnavailable
from envcheck.core.outages import AVAILABLE_AGAIN, UNAVAILABLE, StoreOutages
from envcheck.store import Store, open_store
from tests.backends import new_pg_database
from tests.engine_proxy import TcpServer
from tests.test_daemon import HEALTHY, Daemon, Daemons

# the parts a daemon probing one environment's terminal runs every window or every probe
PARTS = {"judging the rollouts", "reuse advice", "writing results",
         "reading the fleet's states"}
HELD_DURING_OUTAGE = 3  # results probed (and held) after every part said it could not run
CATALOGUE = f"""version: 1
suites:
  outage:
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ terminal: 2s, dependencies: null, tests: null, datasource: null,
                   jitter_s: 0 }}
    environments:
      - {{ id: {HEALTHY[0]}, image: '{HEALTHY[1]}' }}
"""


@pytest.fixture
def server() -> Iterator[TcpServer]:
    proxy = TcpServer(5432)
    yield proxy
    proxy.close()


@pytest.fixture
def database() -> Iterator[str]:
    with new_pg_database("envcheck_outage") as name:
        yield name


def _said(d: Daemon, event: str) -> Counter[str]:
    return Counter(str(e.get("part")) for e in d.events(event))


def _held(d: Daemon) -> int:
    return sum(1 for e in d.events("probe result") if e.get("held"))


@pytest.mark.docker
@pytest.mark.postgres
@pytest.mark.slow
def test_a_store_outage_is_said_once_per_part_without_a_traceback(
        tmp_path: Path, server: TcpServer, database: str) -> None:
    catalogue = tmp_path / "outage.yaml"
    catalogue.write_text(CATALOGUE, encoding="utf-8")
    url = f"postgresql://postgres@127.0.0.1:{server.port}/{database}"
    daemons = Daemons(tmp_path)
    try:
        d = daemons.start(catalogue, database=url)
        d.wait("the first probes", lambda: len(d.events("probe result")) >= 2)
        server.cut()
        try:
            d.wait("every part to say the store is unavailable",
                   lambda: set(_said(d, UNAVAILABLE)) >= PARTS, timeout=60)
            # many more windows and probes go by, each part failing again in each
            held = _held(d)
            d.wait("more probes while the store is away",
                   lambda: _held(d) >= held + HELD_DURING_OUTAGE, timeout=60)
            assert d.get("/readyz").status_code == 503
        finally:
            server.restore()  # a failure above must not leave the daemon without its store
        d.wait("every part to run again",
               lambda: set(_said(d, AVAILABLE_AGAIN)) >= PARTS, timeout=60)
        d.wait("/readyz ready again", lambda: d.get("/readyz").status_code == 200)
        assert d.stop() == 0
    finally:
        daemons.close()

    log = d.log.read_text(encoding="utf-8")
    assert "Traceback" not in log
    assert all(count == 1 for count in _said(d, UNAVAILABLE).values()), _said(d, UNAVAILABLE)
    assert all(count == 1 for count in _said(d, AVAILABLE_AGAIN).values())
    assert set(_said(d, AVAILABLE_AGAIN)) == set(_said(d, UNAVAILABLE))
    store = f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/{database}"
    for line in d.events(UNAVAILABLE):
        assert line["level"] == "error" and line["store"] == store, line
        # a new connection refused, or one in use dropped by the cut (a query in flight)
        assert any(said in line["error"] for said in (
            "Connection refused", "server closed the connection unexpectedly")), line
        assert "exc" not in line, line
    [written] = [e for e in d.events(AVAILABLE_AGAIN) if e["part"] == "writing results"]
    assert written["written"] >= HELD_DURING_OUTAGE
    # nothing was lost: every result probed in the outage is in the store
    assert d.count(HEALTHY[0]) == len(d.events("probe result"))


def _raised(action: Callable[[], object]) -> StoreError:
    with pytest.raises(StoreError) as caught:
        action()
    return caught.value


def _select_from_no_table(store: Store) -> None:
    with store._reading() as conn:
        conn.execute(text("SELECT 1 FROM no_such_table"))


@pytest.mark.postgres
def test_a_refused_connection_is_the_store_unavailable_a_bad_statement_is_not(
        server: TcpServer, database: str) -> None:
    url = f"postgresql://postgres@127.0.0.1:{server.port}/{database}"
    with open_store(url) as store:
        assert store.generation() == 0
        bad = _raised(lambda: _select_from_no_table(store))
        assert not isinstance(bad, StoreUnavailable), bad
        server.cut()
        store.engine.dispose()  # no pooled connection left over from before the cut
        refused = _raised(store.generation)
        assert isinstance(refused, StoreUnavailable), refused
        assert "Connection refused" in refused.reason and "\n" not in refused.reason
        assert refused.where == f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/" \
                                f"{database}"
        server.restore()
        assert store.generation() == 0


def test_each_part_says_an_outage_once_and_a_bug_is_left_to_its_caller(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = [100.0]
    outages = StoreOutages(monotonic=lambda: clock[0])
    refused = StoreUnavailable("store operation failed: …", "Connection refused", "pg://db")
    with caplog.at_level(logging.INFO, logger="envcheck.core.outages"):
        assert outages.failed("a bug", ValueError("no")) is False  # the caller's traceback
        for _ in range(3):  # three windows, one line per part
            assert outages.failed("judging", refused, then="later") is True
            assert outages.failed("advice", refused) is True
        assert outages.down() == {"judging": "pg://db", "advice": "pg://db"}
        clock[0] = 112.5
        assert outages.ran("judging", written=4) is True
        assert outages.ran("judging") is False
        assert outages.ran("never down") is False
    lines = [(r.getMessage(), getattr(r, "part", None)) for r in caplog.records]
    assert lines == [(UNAVAILABLE, "judging"), (UNAVAILABLE, "advice"),
                     (AVAILABLE_AGAIN, "judging")]
    first, _, back = caplog.records
    assert (first.store, first.error, first.then) == ("pg://db", "Connection refused", "later")
    assert (back.down_s, back.written) == (12.5, 4)
    assert outages.down() == {"advice": "pg://db"}
