"""The client's rollout reporter against the real API over a real store (SQLite and
PostgreSQL), through real sockets that refuse, hang, lose an answer or hold a request: what
arrives is counted once, the queue stays bounded, and ``report`` never waits."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envcheck.api.app import create_app, serve_in_thread
from envcheck.catalogue.models import Environment
from envcheck.client import EnvcheckClient, RolloutReporter
from envcheck.client_rollouts import ReporterStats
from envcheck.core.rollouts import Outcome
from envcheck.store import Store, open_store
from tests.conftest import ROOT
from tests.engine_proxy import TcpProxy
from tests.polling import wait_for
from tests.ports import free_port
from tests.test_api import TOKEN

ENVS = ("env-a", "env-b", "env-c")
Batches = list[tuple[str, int]]  # (Content-Encoding, records) of each POST /v1/rollouts


def fleet(store: Store) -> Store:
    store.sync_environments([Environment(id=env_id, image=f"fleet/{env_id}:1", suite="train")
                             for env_id in ENVS])
    return store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The fleet's store, on each backend."""
    with open_store(store_url) as opened:
        yield fleet(opened)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as opened:
        yield fleet(opened)


def recording(app: ASGIApp, batches: Batches) -> ASGIApp:
    """``app``, noting the encoding and the record count of each batch it is sent."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/rollouts":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def noting() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    encoding = dict(scope["headers"]).get(b"content-encoding", b"").decode()
                    body = b"".join(chunks)
                    records = json.loads(gzip.decompress(body) if encoding == "gzip" else body)
                    batches.append((encoding, len(records)))
            return message

        await app(scope, noting, send)

    return wrapped


@contextlib.contextmanager
def api(store: Store, batches: Batches | None = None, port: int = 0) -> Iterator[str]:
    app = create_app(store, TOKEN)
    with serve_in_thread(recording(app, batches if batches is not None else []),
                         port=port) as url:
        yield url


def reporter(url: str, token: str = TOKEN, **options: Any) -> RolloutReporter:
    options.setdefault("timeout", (2.0, 20.0))
    options.setdefault("backoff_s", (0.01, 0.05))
    return RolloutReporter(url, token, **options)


def counted(store: Store) -> dict[str, int]:
    """Records counted per environment."""
    out: dict[str, int] = {}
    for row in store.rollout_rows():
        out[row.env_id] = out.get(row.env_id, 0) + row.count
    return out


def reward_sum(store: Store) -> float:
    return float(sum(row.reward_sum for row in store.rollout_rows()))


# --- counting, end to end -------------------------------------------------------------------


def test_rollouts_reported_are_counted_in_the_store(store: Store) -> None:
    batches: Batches = []
    outcomes = list(Outcome)
    with api(store, batches) as url:
        with EnvcheckClient(url, TOKEN) as envcheck:
            rollouts = envcheck.rollouts(max_age_s=60.0)  # batches by size alone
            for i in range(2_400):
                rollouts.report(ENVS[i % 3], outcomes[i % len(outcomes)], reward=i % 2,
                                image_digest="sha256:abc", durations={"agent_s": 2.0})
            for _ in range(100):
                rollouts.report("env-gone", "ok")
        # closing the client closed the reporter: everything went out, in full batches
        with pytest.raises(RuntimeError, match="closed"):
            rollouts.report("env-a", "ok")
    assert rollouts.stats == ReporterStats(queued=0, sent=2_500, counted=2_400, duplicates=0,
                                           unknown=100, dropped_overflow=0, dropped_rejected=0,
                                           retries=0, last_error=None)
    assert batches == [("gzip", 1_000), ("gzip", 1_000), ("gzip", 500)]
    assert counted(store) == dict.fromkeys(ENVS, 800)
    rows = store.rollout_rows()
    assert {row.outcome for row in rows} == {o.value for o in Outcome}
    assert {row.image_digest for row in rows} == {"sha256:abc"}
    assert reward_sum(store) == 1_200
    assert sum(row.agent_s_sum for row in rows) == 2 * 2_400
    assert store.unknown_rollouts()[0] == 100


def test_a_few_records_go_out_when_the_oldest_is_old_enough(sqlite_store: Store) -> None:
    batches: Batches = []
    with api(sqlite_store, batches) as url, reporter(url, max_age_s=0.2) as rollouts:
        for env_id in ENVS:
            rollouts.report(env_id, "ok")
        # no flush: the age of the oldest sends them
        wait_for(lambda: sum(counted(sqlite_store).values()) == 3, timeout_s=30,
                 what="the records to be sent by age")
        assert rollouts.stats.queued == 0
    assert batches == [("gzip", 3)]


def test_many_threads_report_each_record_once(store: Store) -> None:
    with api(store) as url, reporter(url, batch_size=250) as rollouts:
        def trainer(env_id: str) -> None:
            for _ in range(1_000):
                rollouts.report(env_id, "ok", reward=1.0)

        threads = [threading.Thread(target=trainer, args=(ENVS[i % 3],)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert rollouts.flush(30)
        stats = rollouts.stats
    # a sequence number given twice would have been taken by the server for a duplicate
    assert (stats.sent, stats.counted, stats.duplicates) == (6_000, 6_000, 0)
    assert rollouts.next_seq == 6_000
    assert counted(store) == dict.fromkeys(ENVS, 2_000)


# --- envcheck down, slow, or losing an answer ----------------------------------------------


def test_records_wait_for_a_server_that_comes_up_later(sqlite_store: Store) -> None:
    port = free_port()
    # short retry rounds: the batch goes back to the queue between them, and loses nothing
    with reporter(f"http://127.0.0.1:{port}", retry_for_s=0.1) as rollouts:
        for i in range(50):
            rollouts.report(ENVS[i % 3], "sandbox_lost")
        assert not rollouts.flush(0.2)  # nothing listens yet
        wait_for(lambda: rollouts.stats.retries >= 2, timeout_s=30, what="retries")
        assert rollouts.stats.queued == 50 and "Connection" in str(rollouts.stats.last_error)
        with api(sqlite_store, port=port):
            assert rollouts.flush(30)
            stats = rollouts.stats
    assert (stats.queued, stats.sent, stats.counted, stats.duplicates) == (0, 50, 50, 0)
    assert stats.last_error is None
    assert sum(counted(sqlite_store).values()) == 50


class _Forwarder(BaseHTTPRequestHandler):
    """Passes each POST on to the real API; its first answers follow ``server.first``:
    ``"lose"`` (forward, then close without answering) or ``"busy"`` (503, not forwarded)."""

    protocol_version = "HTTP/1.1"
    server: _ForwardingServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            trick = self.server.first.pop(0) if self.server.first else None
        if trick == "busy":
            self._answer(503, b'{"error": "busy"}', {"Retry-After": "3"})
            return
        headers = {k: self.headers[k] for k in ("Authorization", "Content-Type",
                                                 "Content-Encoding")}
        upstream = requests.post(self.server.upstream + self.path, data=body, headers=headers,
                                 timeout=30)
        self.server.forwarded.append(upstream.status_code)
        if trick == "lose":  # committed upstream; the client never hears of it
            self.close_connection = True
            return
        self._answer(upstream.status_code, upstream.content, {})

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ForwardingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, first: list[str]) -> None:
        self.upstream, self.first = upstream, first
        self.forwarded: list[int] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Forwarder)


@contextlib.contextmanager
def forwarding(upstream: str, *first: str) -> Iterator[tuple[str, _ForwardingServer]]:
    server = _ForwardingServer(upstream, list(first))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_batch_whose_answer_is_lost_is_counted_once(store: Store) -> None:
    # a read timeout far above what a loaded machine takes to count the batch: the one
    # retry asserted below is the lost answer's, never a slow answer's
    with api(store) as upstream, forwarding(upstream, "lose") as (url, server), \
            reporter(url, timeout=(5.0, 120.0)) as rollouts:
        for i in range(300):
            rollouts.report(ENVS[i % 3], "ok", reward=1.0)
        assert rollouts.flush(30)
        stats = rollouts.stats
    assert server.forwarded == [200, 200]  # the server took the batch twice ...
    assert sum(counted(store).values()) == 300  # ... and counted it once
    assert (stats.sent, stats.counted, stats.duplicates, stats.retries) == (300, 0, 300, 1)


def test_a_busy_server_is_retried_after_its_retry_after(sqlite_store: Store) -> None:
    waits: list[float] = []
    with api(sqlite_store) as upstream, forwarding(upstream, "busy") as (url, server), \
            reporter(url, sleep=waits.append) as rollouts:
        rollouts.report("env-a", "verifier_error")
        assert rollouts.flush(30)
        stats = rollouts.stats
    assert waits and waits[0] >= 3.0  # the backoff alone is at most 0.06 s
    assert server.forwarded == [200]
    assert (stats.sent, stats.counted, stats.retries) == (1, 1, 1)
    assert counted(sqlite_store) == {"env-a": 1}


def test_overflow_drops_the_oldest_and_counts_it(sqlite_store: Store) -> None:
    with api(sqlite_store) as upstream:
        proxy = TcpProxy(int(upstream.rsplit(":", 1)[1]))
        try:
            proxy.freeze()  # the server takes the first batch and says nothing
            rollouts = reporter(f"http://127.0.0.1:{proxy.port}", batch_size=10,
                                max_queued=100, timeout=(2.0, 60.0))
            for i in range(10):
                rollouts.report("env-a", "ok", reward=i)
            wait_for(lambda: proxy.connections == 1, timeout_s=30, what="the first batch")
            for i in range(10, 250):
                rollouts.report("env-a", "ok", reward=i)
            stats = rollouts.stats
            # the held batch (0-9) counts within the bound; 10-159 were the oldest waiting
            assert (stats.queued, stats.dropped_overflow, stats.sent) == (100, 150, 0)
            proxy.thaw()
            assert rollouts.close(30)
        finally:
            proxy.close()
    assert rollouts.stats.sent == 100
    assert counted(sqlite_store) == {"env-a": 100}
    assert reward_sum(sqlite_store) == sum(range(10)) + sum(range(160, 250))


@contextlib.contextmanager
def holding_server() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A socket on 127.0.0.1 that accepts a request and never answers it: yields its URL, an
    Event set once it holds a request, and one that lets it go (closing the connection)."""
    holding, release = threading.Event(), threading.Event()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def hold() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                if conn.recv(65536):
                    holding.set()
                release.wait(120)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", holding, release
    finally:
        release.set()
        thread.join(10)
        listener.close()


def test_report_returns_while_the_server_holds_a_request() -> None:
    with holding_server() as (url, holding, release):
        rollouts = reporter(url, timeout=(2.0, 60.0), max_queued=20_000)
        for _ in range(1_000):
            rollouts.report("env-a", "ok")
        assert holding.wait(30), "the first batch never reached the server"
        done = threading.Event()

        def trainer() -> None:
            for i in range(10_000):
                rollouts.report(ENVS[i % 3], "agent_timeout", reward=0.0)
            done.set()

        threading.Thread(target=trainer, daemon=True).start()
        # the reports complete while the server still holds the first request unanswered
        assert done.wait(60) and not release.is_set()
        stats = rollouts.stats
        assert (stats.queued, stats.sent, stats.dropped_overflow) == (11_000, 0, 0)
        assert not rollouts.close(timeout=0.2)  # it cannot drain: held, not lost
        assert rollouts.stats.queued == 11_000
        release.set()
    with pytest.raises(RuntimeError, match="closed"):
        rollouts.report("env-a", "ok")


# --- bad records ------------------------------------------------------------------------------


def test_a_refused_batch_is_dropped_counted_and_logged_once(
        sqlite_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="envcheck.client.rollouts")
    with api(sqlite_store) as url:
        with reporter(url, max_age_s=60.0) as rollouts:
            for _ in range(5):
                rollouts.report("env-a", "ok")
            # passes the client's checks; the server refuses a time this far ahead
            rollouts.report("env-a", "ok", at=datetime.now(UTC) + timedelta(hours=3))
            assert rollouts.flush(30)
            refused = rollouts.stats
            for _ in range(3):
                rollouts.report("env-b", "ok")
            assert rollouts.flush(30)
            after = rollouts.stats
        with reporter(url, token="not-the-token-" + "x" * 20) as stranger:
            stranger.report("env-c", "ok")
            assert stranger.flush(30)
            unauthorised = stranger.stats
    assert (refused.dropped_rejected, refused.sent, refused.retries) == (6, 0, 0)
    assert "record 5, field at" in str(refused.last_error)
    assert (after.dropped_rejected, after.sent, after.last_error) == (6, 3, None)
    assert (unauthorised.dropped_rejected, unauthorised.retries) == (1, 0)
    assert "HTTP 401" in str(unauthorised.last_error)
    assert counted(sqlite_store) == {"env-b": 3}
    lines = [r.getMessage() for r in caplog.records if r.name == "envcheck.client.rollouts"]
    assert len(lines) == 2
    assert lines[0].startswith("dropped a batch of 6 rollouts: HTTP 400 invalid_record")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"outcome": "okk"}, "unknown outcome 'okk': one of ok, sandbox_start_failed"),
    ({"env_id": ""}, "env_id must be a string"),
    ({"at": datetime(2026, 1, 5, 8, 0)}, "at must be a timezone-aware datetime"),
    ({"reward": float("nan")}, "reward must be a finite number"),
    ({"reward": True}, "reward must be a finite number"),
    ({"image_digest": "x" * 257}, "image_digest must be a string of 1 to 256"),
    ({"durations": {"agent": 1.0}}, "unknown duration 'agent': the names are"),
    ({"durations": {"agent_s": -1.0}}, "durations['agent_s'] must be >= 0"),
])
def test_report_refuses_a_bad_record_at_once(kwargs: dict[str, Any], message: str) -> None:
    record: dict[str, Any] = {"env_id": "env-a", "outcome": "ok", **kwargs}
    with reporter(f"http://127.0.0.1:{free_port()}") as rollouts:
        with pytest.raises(ValueError) as caught:
            rollouts.report(record.pop("env_id"), record.pop("outcome"), **record)
        assert message in str(caught.value)
        assert (rollouts.stats.queued, rollouts.next_seq) == (0, 0)


def test_a_reporter_needs_the_token_and_room_for_a_batch() -> None:
    with EnvcheckClient("http://127.0.0.1:9") as anonymous, \
            pytest.raises(ValueError, match="needs envcheck's API token"):
        anonymous.rollouts()
    with pytest.raises(ValueError, match="must hold a batch"):
        reporter("http://127.0.0.1:9", batch_size=100, max_queued=10)


# --- at exit ----------------------------------------------------------------------------------

EXITING_TRAINER = """
import sys
from envcheck.client import EnvcheckClient

rollouts = EnvcheckClient(sys.argv[1], sys.argv[2]).rollouts(max_age_s=3600)
for i in range(300):
    rollouts.report("env-a", "ok" if i % 3 else "verifier_timeout", reward=1.0)
print(rollouts.stats.queued)  # nothing is due before exit; then it exits without closing
"""


def run_trainer(script: str, url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "trainer.py"
    path.write_text(script, encoding="utf-8")
    return subprocess.run([sys.executable, str(path), url, TOKEN], cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120, check=False)


def test_what_is_queued_at_exit_is_sent(sqlite_store: Store, tmp_path: Path) -> None:
    with api(sqlite_store) as url:
        proc = run_trainer(EXITING_TRAINER, url, tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "300"), proc.stderr
    assert counted(sqlite_store) == {"env-a": 300}


FORKING_TRAINER = """
import os, sys
from envcheck.client import EnvcheckClient

rollouts = EnvcheckClient(sys.argv[1], sys.argv[2]).rollouts(max_age_s=3600)
rollouts.report("env-a", "ok")
child = os.fork()
if child == 0:
    try:
        rollouts.report("env-b", "ok")  # would reuse the parent's producer and numbers
    except RuntimeError as exc:
        print("child:", exc)
    sys.exit(0)  # the child's exit leaves the parent's records to the parent
os.waitpid(child, 0)
rollouts.report("env-a", "ok")
print("parent:", rollouts.next_seq)
"""


def test_a_forked_child_cannot_report_through_its_parents_reporter(
        sqlite_store: Store, tmp_path: Path) -> None:
    with api(sqlite_store) as url:
        proc = run_trainer(FORKING_TRAINER, url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "child: a rollout reporter does not follow a fork: make one in the child "
        "(EnvcheckClient.rollouts())", "parent: 2"]
    assert counted(sqlite_store) == {"env-a": 2}
