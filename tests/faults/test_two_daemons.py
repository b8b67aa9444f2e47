"""Two daemons on one store: one writes it, the other is refused or waits (issue 25).

Real daemons (the console script) on the real engine, on both backends, with a real webhook
receiver on 127.0.0.1: a second daemon is refused with one line naming the holder; a
standby takes over once the first is SIGKILLed, and between the two no result is written
twice, none the first wrote is lost, and every alert reaches the webhook exactly once, the
one the first could not deliver included. While it waits, the standby answers on its port
(issue 34): ``/healthz`` 200, ``/readyz`` 503 naming the holder, ``/metrics`` its own series
alone; through the takeover its port answers every request, and then serves the full app.
On PostgreSQL, the lease's connection killed under a running daemon: it takes the lease back
when nobody else took it, and stops (exit 3) when another holds it.
"""

from __future__ import annotations

import itertools
import json
import signal
import socket
import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from sqlalchemy import select as sa_select
from sqlmodel import Session, select

from envcheck.notify.payloads import changes_alerts
from envcheck.store import Store
from envcheck.store.deliveries import DeliveryStatus
from envcheck.store.holder import Holder
from envcheck.store.pglease import KEY, application_name
from envcheck.store.tables.deliveries import WebhookRow
from envcheck.store.tables.results import ProbeResultRow
from tests.backends import PG_ADMIN
from tests.http_server import MisbehavingServer, fail, ok
from tests.test_daemon import (
    HEALTHY,
    HTTP_TIMEOUT_S,
    READONLY,
    TOOL_MISSING,
    Daemon,
    Daemons,
    probe_results,
    problems,
    write_catalogue,
)
from tests.test_standby import healthcheck, own_series_only, port_of, series, standby_readyz

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HOST = socket.gethostname()
# what a daemon logs while its webhook refuses
REFUSED = ("webhook delivery failed, retrying", "notification left pending")


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    started = Daemons(tmp_path)
    yield started
    started.close()


class Receiver:
    """The webhook: 503 while down, else 200; the Idempotency-Key of every message it took
    and of every one it refused, in order."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.up.set()
        self.taken: list[str] = []
        self.refused: list[str] = []

    def __call__(self, handler: Any) -> None:  # the server's request handler
        key = handler.headers.get("Idempotency-Key", "")
        if self.up.is_set():
            self.taken.append(key)
            ok({"status": "ok"})(handler)
        else:
            self.refused.append(key)
            fail(503)(handler)


def state(d: Daemon, env_id: str) -> tuple[str, bool] | None:
    with d.store() as store:
        row = store.env_state(env_id)
    return (row.state, row.quarantined) if row is not None else None


def webhook(store: Store) -> WebhookRow:
    with Session(store.engine) as session:
        [row] = session.exec(select(WebhookRow)).all()
    return row


def alert_keys(store: Store) -> set[str]:
    """The Idempotency-Key of every transition that fires or resolves an alert."""
    hook = webhook(store).id
    return {f"{hook}:transition:{t.id}" for t in store.transitions(limit=10_000)
            if changes_alerts(t)}


def settled(d: Daemon) -> bool:
    """The webhook's worker has handled every transition and nothing waits to be sent."""
    with d.store() as store:
        newest = store.generation()
        return bool(newest) and webhook(store).transition_cursor == newest \
            and not store.deliveries(status=DeliveryStatus.PENDING)


def spans(d: Daemon) -> list[Any]:
    """Every stored result: (id, run_id, env_id, kind, started_at, duration_s)."""
    table: Any = ProbeResultRow.__table__  # type: ignore[attr-defined]
    with d.store() as store, store.engine.connect() as conn:
        return list(conn.execute(sa_select(table.c.id, table.c.run_id, table.c.env_id,
                                           table.c.kind, table.c.started_at,
                                           table.c.duration_s)))


def runs_of(d: Daemon, pid: int) -> list[Any]:
    with d.store() as store:
        return [r for r in store.runs(limit=10_000) if r.pid == pid]


def test_a_second_daemon_on_the_store_exits_2_naming_the_holder(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY])
    first = daemons.start(catalogue, database=store_url)
    second = daemons.start(catalogue, database=store_url, tag=first.tag, ready=False)
    assert second.proc.wait(timeout=120) == 2
    second.stderr.close()
    [line] = second.log.read_text().splitlines()  # one line, no traceback
    assert "another envcheck daemon holds the store" in line, line
    assert f"host {HOST}, pid {first.proc.pid}, since 20" in line, line
    assert "--standby" in line
    assert runs_of(first, second.proc.pid) == [], "the refused daemon wrote nothing"
    first.wait("the holder's probing to go on", lambda: first.count(HEALTHY[0]) >= 2)
    assert first.stop() == 0
    assert problems(first) == []


def test_a_standby_takes_over_a_killed_daemon_with_nothing_lost_or_written_twice(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    catalogue = tmp_path / "probes" / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING])
    receiver = Receiver()
    with MisbehavingServer() as hooks:
        hooks.route("/hook", default=receiver)
        args = ["--webhook", hooks.url("/hook")]
        first = daemons.start(catalogue, database=store_url, args=args)
        first.wait("the broken environment's alert, delivered",
                   lambda: state(first, TOOL_MISSING[0]) == ("broken", True)
                   and settled(first) and receiver.taken)
        delivered_by_first = list(receiver.taken)

        receiver.up.clear()  # from now on the first daemon's alerts stay pending
        second = daemons.start(catalogue, database=store_url, tag=first.tag, ready=False,
                               args=[*args, "--standby"])
        second.wait("the standby to wait for the lease",
                    lambda: any(e["holder"] and e["holder"]["pid"] == first.proc.pid
                                for e in second.events("waiting for the store's lease")))
        # a third environment, for the first daemon only: the standby read the catalogue
        # before, and reads it again when it takes over
        write_catalogue(catalogue, [HEALTHY, TOOL_MISSING, READONLY])
        first.proc.send_signal(signal.SIGHUP)
        first.wait("the new environment's alert, refused by the webhook",
                   lambda: state(first, READONLY[0]) == ("broken", True) and receiver.refused)
        assert runs_of(first, second.proc.pid) == [], "the standby writes nothing"
        killed_at = datetime.now(UTC)
        first.proc.kill()
        first.proc.wait(timeout=30)
        receiver.up.set()
        first.stderr.close()
        running = {r.id for r in runs_of(first, first.proc.pid) if r.state == "running"}
        written_by_first = {r.id for r in spans(first)
                            if r.run_id in {run.id for run in runs_of(first, first.proc.pid)}}

        second.wait("the standby to take over",
                    lambda: second.get("/readyz").status_code == 200, timeout=90)
        second.wait("the standby's results of every environment, and every alert sent",
                    lambda: {e["env"] for e in probe_results(second)} >= {
                        HEALTHY[0], TOOL_MISSING[0], READONLY[0]} and settled(second))
        assert second.stop() == 0

    [taken] = second.events("store lease taken")
    assert taken["previous"]["pid"] == first.proc.pid, taken
    with second.store() as store:
        runs = store.runs(limit=10_000)
        keys = alert_keys(store)
    mine = [r for r in runs if r.pid == second.proc.pid]
    assert mine and all(r.started_at > killed_at for r in mine), "nothing before the kill"
    assert {r.pid for r in runs} == {first.proc.pid, second.proc.pid}
    assert {r.state for r in runs if r.id in running} <= {"interrupted"}, \
        "the killed daemon's open window, marked interrupted under the lease"
    assert {r.state for r in runs} <= {"finished", "interrupted"}

    # results: what the first wrote stays; no (environment, kind) was probed twice at once
    results = spans(second)
    assert written_by_first <= {r.id for r in results}
    assert {e["result_id"] for e in probe_results(first)} <= written_by_first
    by_key: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.started_at):
        by_key[(r.env_id, r.kind)].append(r)
    for key, probes in by_key.items():
        for before, after in itertools.pairwise(probes):
            ends = before.started_at + timedelta(seconds=before.duration_s)
            assert ends - timedelta(milliseconds=50) <= after.started_at, \
                f"{key}: two results at once ({before.id}, {after.id})"

    # alerts: each transition's once, the one the first daemon could not send included
    assert len(receiver.taken) == len(set(receiver.taken)), f"sent twice: {receiver.taken}"
    sent = {k for k in receiver.taken if ":transition:" in k}
    assert sent == keys, (sent, keys)
    assert set(delivered_by_first) <= sent
    pending_at_kill = {k for k in receiver.refused if ":transition:" in k}
    assert pending_at_kill and pending_at_kill <= sent - set(delivered_by_first), \
        "the alert pending at the kill is delivered, by the standby"
    assert daemons.containers(first.tag) == [], "the killed daemon's sandboxes reaped"
    assert problems(first, *REFUSED) == []
    assert problems(second, *REFUSED) == []  # (a post of its may beat the receiver's return)


class Poller:
    """Asks ``url`` over a new connection again and again, from a thread, until stopped:
    what each request got, a status code or the error that stopped it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.got: list[int | str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:  # no session: each request a new connection, accepted by the port anew
                self.got.append(requests.get(self.url, timeout=HTTP_TIMEOUT_S).status_code)
            except requests.RequestException as exc:
                self.got.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.02)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=HTTP_TIMEOUT_S + 5)


def test_a_standby_answers_on_its_port_while_it_waits_and_through_the_takeover(
        daemons: Daemons, tmp_path: Path, store_url: str) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY])
    first = daemons.start(catalogue, database=store_url)
    second = daemons.start(catalogue, database=store_url, tag=first.tag, ready=False,
                           args=["--standby"])
    second.wait("the standby's /healthz", lambda: second.get("/healthz").status_code == 200)
    body = standby_readyz(second, first.proc.pid)
    assert (body["ready"], body["role"]) == (False, "standby"), body
    assert body["holder"]["pid"] == first.proc.pid, body  # type: ignore[index]
    waiting, active = series(second), series(first)
    assert waiting["envcheck_lease_held"] == 0.0
    assert own_series_only(waiting) == [], "the standby serves nothing from the store"
    assert active["envcheck_lease_held"] == 1.0
    assert "envcheck_up" in active and "envcheck_feed_generation" in active
    assert first.get("/readyz").json()["role"] == "active"
    for d in (first, second):  # the image's health check: both healthy
        check = healthcheck(port_of(d))
        assert check.returncode == 0, check.stdout + check.stderr

    with Poller(second.url + "/healthz") as polled:
        first.proc.kill()
        first.proc.wait(timeout=30)
        first.stderr.close()
        second.wait("the standby to take over",
                    lambda: second.get("/readyz").status_code == 200, timeout=90)
        second.wait("a probe result of its own", lambda: bool(probe_results(second)))
    assert polled.got and set(polled.got) == {200}, \
        f"its port refused or failed a request during the takeover: {polled.got}"
    taken = series(second)
    assert taken["envcheck_lease_held"] == 1.0
    assert "envcheck_up" in taken and "envcheck_feed_generation" in taken
    assert second.get("/readyz").json()["role"] == "active"
    assert second.get("/v1/environments/" + HEALTHY[0]).status_code == 200, "the full API"
    check = healthcheck(port_of(second))
    assert check.returncode == 0, check.stdout + check.stderr
    assert second.stop() == 0
    assert problems(second) == []


def _lease_backend(url: str) -> int:
    """The server pid of the lease's session in ``url``'s database."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = %s "
            "AND a.application_name LIKE 'envcheck:%%'", (url.rsplit("/", 1)[1],)).fetchall()
    [(pid,)] = rows
    return int(pid)


@pytest.mark.postgres
def test_a_daemon_whose_lease_session_dies_takes_it_back_or_stops(
        daemons: Daemons, tmp_path: Path, pg_store_url: str) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY])
    d = daemons.start(catalogue, database=pg_store_url)
    d.wait("a result", lambda: d.count(HEALTHY[0]) >= 1)

    # killed, nobody else waiting: fenced, then taken back, and the probing goes on
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s, 5000)", (_lease_backend(pg_store_url),))
    d.wait("the lease taken back", lambda: d.events("store lease taken back: writes resume"))
    assert d.events("store lease lost: writes stop until it is taken back")
    count = d.count(HEALTHY[0])
    d.wait("results written again", lambda: d.count(HEALTHY[0]) > count)

    # killed, and someone else holds it at once (queued behind the daemon's lock, the other
    # session is granted it as the daemon's session ends): the daemon stops, naming it
    intruder = Holder("intruder", 4242, datetime.now(UTC).replace(microsecond=0))
    dsn = PG_ADMIN.replace("dbname=test", f"dbname={pg_store_url.rsplit('/', 1)[1]}")
    with psycopg.connect(dsn, autocommit=True, application_name=application_name(intruder)
                         ) as holder:
        queued = threading.Thread(target=holder.execute,
                                  args=("SELECT pg_advisory_lock(%s)", (KEY,)))
        queued.start()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            d.wait("the other session queued for the lock", lambda: conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone() == (1,))
            conn.execute("SELECT pg_terminate_backend(%s, 5000)",
                         (_lease_backend(pg_store_url),))
        queued.join(timeout=30)
        assert d.proc.wait(timeout=120) == 3
    d.stderr.close()
    [stopped] = d.events("another daemon holds the store's lease now")
    assert stopped["holder"] == json.loads(json.dumps(intruder.as_dict()))
    names = [e["event"] for e in d.events()]
    assert names.index("daemon stopping") > names.index(stopped["event"])
    assert names[-1] == "daemon stopped"
    assert daemons.containers(d.tag) == [], "its sandboxes removed"
