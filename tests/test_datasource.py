"""The data-source probe against real HTTP servers on 127.0.0.1 that misbehave on command.

Each test drives a :class:`MisbehavingServer` (threads, ephemeral ports) and checks the status
and reason the probe gives. Retry waits are skipped by a clock that adds them to its time,
so Retry-After and backoff are honoured without the tests sleeping through them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
import urllib3.exceptions as u3
import yaml
from typer.testing import CliRunner

from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.cli.app import app
from envcheck.core.errors import CatalogueError, ImageMissing
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import run_cycle
from envcheck.kinds.datasource.fingerprint import changes, fingerprint, shape_of
from envcheck.kinds.datasource.probe import DataSourceChecker
from envcheck.kinds.datasource.report import SourceReport
from envcheck.net.http import classify
from envcheck.net.secrets import REDACTED, Redactor, redact_url
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from envcheck.store import Store, open_store
from tests.http_server import (
    MisbehavingServer,
    answer,
    echo,
    fail,
    hang,
    ok,
    raw_close,
    reset,
    truncate,
)
from tests.polling import wait_for
from tests.ports import free_port

WEATHER = {"city": "Paris", "temp": 21.5, "tags": ["a"], "updated_at": "2020-01-01T00:00:00Z"}


class FastClock:
    """Real time, except that sleeps are skipped, recorded and added to the clock."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.skipped += seconds

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.skipped)


@pytest.fixture
def api() -> Iterator[MisbehavingServer]:
    with MisbehavingServer() as server:
        yield server


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as opened:
        yield opened


@pytest.fixture
def clock() -> FastClock:
    return FastClock()


def make_source(url: str, **changes: Any) -> DataSource:
    data = {"id": "api", "url": url, "samples": 3, "connect_timeout_s": 1.0,
            "read_timeout_s": 1.0, "retries": 2, "retry_budget_s": 5.0, **changes}
    return DataSource.model_validate(data, by_alias=True)


def probe(store: Store, clock: FastClock, source: DataSource) -> SourceReport:
    checker = DataSourceChecker([source], store, clock=clock, rng=random.Random(7))
    return checker.probe(source)


def outcome(report: SourceReport) -> tuple[Status, Reason]:
    return report.status, report.reason


# --- answers that pass ------------------------------------------------------------------


def test_healthy_source_passes_and_accepts_its_first_shape(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", default=ok(WEATHER))
    report = probe(store, clock, make_source(api.url("/v1"), samples=5))
    assert outcome(report) == (Status.PASS, Reason.OK)
    d = report.details
    assert (d["samples"], d["ok"], d["availability"], d["retries"]) == (5, 5, 1.0, 0)
    assert set(d["latency_ms"]) == {"p50", "p95", "max"}
    assert d["latency_ms"]["p50"] <= d["latency_ms"]["p95"] <= d["latency_ms"]["max"]
    assert d["fingerprint"]["accepted_now"] is True
    accepted = store.accepted_shape("api")
    assert accepted is not None and accepted.seen == 5
    assert accepted.fingerprint == fingerprint(shape_of(WEATHER))
    assert report.evidence[0].exit_code == 200
    assert api.hits("/v1") == 5


def test_burst_of_5xx_recovers_after_retries_as_a_degraded_pass(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", fail(503), fail(502), default=ok(WEATHER))
    report = probe(store, clock, make_source(api.url("/v1")))
    assert outcome(report) == (Status.PASS, Reason.RECOVERED_AFTER_RETRY)
    assert report.degraded
    assert report.details["retries"] == 2
    assert report.details["retried"] == {"http_5xx": 2}
    assert len(clock.sleeps) == 2 and clock.sleeps[1] > clock.sleeps[0] / 2  # backoff


def test_persistent_5xx_fails_after_the_retries(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", default=fail(500))
    report = probe(store, clock, make_source(api.url("/v1"), samples=2, retries=2))
    assert outcome(report) == (Status.FAIL, Reason.HTTP_5XX)
    assert report.details["failures"] == {"http_5xx": 2}
    assert report.details["retries"] == 4
    assert api.hits("/v1") == 6


def test_intermittent_5xx_past_the_retries_is_flaky(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", ok(WEATHER), fail(500), ok(WEATHER), default=ok(WEATHER))
    report = probe(store, clock, make_source(api.url("/v1"), retries=0))
    assert outcome(report) == (Status.FLAKY, Reason.HTTP_5XX)
    assert report.details["availability"] == pytest.approx(2 / 3, abs=1e-3)


# --- timing -----------------------------------------------------------------------------


def test_slow_answers_past_the_latency_budget(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", default=ok(WEATHER, delay_s=0.25))
    report = probe(store, clock, make_source(api.url("/v1"), samples=2, latency_budget_ms=100))
    assert outcome(report) == (Status.FAIL, Reason.SLOW_RESPONSE)
    assert report.details["latency_ms"]["p95"] >= 250


def test_a_hanging_server_is_a_read_timeout(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", default=hang(60))  # silent until the server closes, after the probe
    report = probe(store, clock, make_source(api.url("/v1"), samples=1, retries=1,
                                             read_timeout_s=0.3))
    assert outcome(report) == (Status.FAIL, Reason.TIMEOUT_READ)
    assert report.details["retried"] == {"timeout_read": 1}
    assert report.evidence[0].timed_out
    assert api.hits("/v1") == 2, "one try and one retry, each cut at the read timeout"


def test_a_trickling_body_is_cut_at_connect_plus_read_timeout(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    def trickle(h: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100")
        h.end_headers()
        for _ in range(100):  # each byte well within the read timeout, the whole far past it
            if h.server.closing.wait(0.1):
                return
            h.wfile.write(b" ")
            h.wfile.flush()

    api.route("/v1", default=trickle)
    report = probe(store, clock, make_source(api.url("/v1"), samples=1, retries=0,
                                             connect_timeout_s=0.5, read_timeout_s=0.5))
    assert outcome(report) == (Status.FAIL, Reason.TIMEOUT_READ)


def test_a_full_accept_queue_is_a_connect_timeout(store: Store, clock: FastClock) -> None:
    with ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):  # fill the backlog: the kernel then drops new SYNs
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        report = probe(store, clock, make_source(f"http://127.0.0.1:{port}/", samples=1,
                                                 retries=0, connect_timeout_s=0.3))
    assert outcome(report) == (Status.FAIL, Reason.TIMEOUT_CONNECT)


# --- connections ------------------------------------------------------------------------


def test_a_closed_port_is_refused_and_retried_within_the_budget(
        store: Store, clock: FastClock) -> None:
    report = probe(store, clock, make_source(f"http://127.0.0.1:{free_port()}/v1",
                                             samples=2, retries=3))
    assert outcome(report) == (Status.FAIL, Reason.CONNECTION_REFUSED)
    assert report.details["retried"] == {"connection_refused": 6}
    assert sum(clock.sleeps) <= 5.0


@pytest.mark.parametrize("action", [reset(), raw_close(), truncate(json.dumps(WEATHER).encode(),
                                                                    10)],
                         ids=["rst", "closed-without-answer", "truncated-body"])
def test_resets_and_truncated_bodies(api: MisbehavingServer, store: Store, clock: FastClock,
                                     action: Any) -> None:
    api.route("/v1", default=action)
    report = probe(store, clock, make_source(api.url("/v1"), samples=1, retries=1))
    assert outcome(report) == (Status.FAIL, Reason.CONNECTION_RESET)
    assert report.details["retries"] == 1


def test_a_reset_then_recovery_is_degraded(api: MisbehavingServer, store: Store,
                                           clock: FastClock) -> None:
    api.route("/v1", reset(), default=ok(WEATHER))
    report = probe(store, clock, make_source(api.url("/v1"), samples=2))
    assert outcome(report) == (Status.PASS, Reason.RECOVERED_AFTER_RETRY)
    assert report.details["retried"] == {"connection_reset": 1}


# --- rate limits ------------------------------------------------------------------------


def test_retry_after_is_honoured(api: MisbehavingServer, store: Store,
                                 clock: FastClock) -> None:
    api.route("/v1", fail(429, retry_after="2"), default=ok(WEATHER))
    report = probe(store, clock, make_source(api.url("/v1"), samples=1))
    assert outcome(report) == (Status.PASS, Reason.RECOVERED_AFTER_RETRY)
    assert report.details["retried"] == {"rate_limited": 1}
    assert clock.sleeps == [2.0]


def test_retry_after_past_the_budget_is_not_waited_for(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/v1", default=fail(429, retry_after="60"))
    report = probe(store, clock, make_source(api.url("/v1"), samples=2, retry_budget_s=5))
    assert outcome(report) == (Status.FAIL, Reason.RATE_LIMITED)
    assert report.details["retry_budget_exhausted"] is True
    assert clock.sleeps == []
    # The budget is spent after the first sample: the second is not sent, and it says so.
    assert api.hits("/v1") == 1
    assert report.details["samples_not_sent"] == 1
    assert "retry budget" in report.details["not_sent_because"]


# --- content ----------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "changes_", "reason"), [
    (answer(200, b'{"temp": 21.5,'), {}, Reason.INVALID_JSON),
    (answer(200, b"<html>maintenance</html>"), {}, Reason.INVALID_JSON),
    (ok({"temp": "warm"}), {"schema": {"type": "object", "properties": {
        "temp": {"type": "number"}}, "required": ["temp"]}}, Reason.SCHEMA_VIOLATION),
    (fail(404), {}, Reason.HTTP_4XX),
    (fail(401), {}, Reason.HTTP_4XX),
    (answer(302, b"", {"Location": "/elsewhere"}), {}, Reason.UNEXPECTED_STATUS),
    (ok({"items": list(range(5000))}), {"max_body_kb": 1}, Reason.BODY_TOO_LARGE),
    (ok({"other": 1}), {"freshness": {"field": "meta.updated_at", "max_age_s": "1h"}},
     Reason.SCHEMA_VIOLATION),
], ids=["truncated-json", "html", "schema", "404", "401", "redirect", "too-large",
        "freshness-field-missing"])
def test_permanent_failures_are_not_retried(
        api: MisbehavingServer, store: Store, clock: FastClock, action: Any,
        changes_: dict[str, Any], reason: Reason) -> None:
    api.route("/v1", default=action)
    report = probe(store, clock, make_source(api.url("/v1"), samples=2, **changes_))
    assert outcome(report) == (Status.FAIL, reason)
    assert report.details["retries"] == 0
    assert api.hits("/v1") == 2


def test_stale_and_fresh_timestamps(api: MisbehavingServer, store: Store,
                                    clock: FastClock) -> None:
    freshness = {"field": "meta.updated_at", "max_age_s": "1h"}
    old = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    api.route("/stale", default=ok({"meta": {"updated_at": old}}))
    api.route("/fresh", default=ok({"meta": {"updated_at": time.time() - 60}}))
    stale = probe(store, clock, make_source(api.url("/stale"), freshness=freshness))
    assert outcome(stale) == (Status.FAIL, Reason.STALE_DATA)
    assert "meta.updated_at is 3.0h old (max 1.0h)" in stale.summary
    fresh = probe(store, clock, make_source(api.url("/fresh"), id="fresh",
                                            freshness=freshness))
    assert outcome(fresh) == (Status.PASS, Reason.OK)


def test_format_any_checks_only_status_and_latency(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/csv", default=answer(200, b"a,b\n1,2\n"))
    report = probe(store, clock, make_source(api.url("/csv"), format="any"))
    assert outcome(report) == (Status.PASS, Reason.OK)
    assert store.shapes("api") == []


# --- schema drift -----------------------------------------------------------------------


def test_a_renamed_field_is_drift_until_accepted(
        api: MisbehavingServer, store: Store, clock: FastClock, tmp_path: Path) -> None:
    renamed = {**{k: v for k, v in WEATHER.items() if k != "temp"}, "temperature": 21.5}
    api.route("/v1", *[ok(WEATHER)] * 3, default=ok(renamed))
    # A loose schema still validates the renamed answer: only the fingerprint sees it.
    source = make_source(api.url("/v1"), schema={"type": "object"})
    assert outcome(probe(store, clock, source)) == (Status.PASS, Reason.OK)
    drifted = probe(store, clock, source)
    assert outcome(drifted) == (Status.FAIL, Reason.SCHEMA_DRIFT)
    assert drifted.details["drift"] == ["$.temp: removed", "$.temperature: added (number)"]
    assert "$.temp: removed" in drifted.summary

    catalogue = tmp_path / "sources.yaml"
    catalogue.write_text(f"version: 1\ndata_sources:\n  - {{id: api, url: '{source.url}'}}\n")
    url = str(store.engine.url)
    run = CliRunner().invoke(app, ["accept-schema", str(catalogue), "api", "--actor", "alice",
                                   "--database", url])
    assert run.exit_code == 0, run.output
    assert "$.temperature: added (number)" in run.stdout
    assert "by alice" in run.stdout
    accepted = store.accepted_shape("api")
    assert accepted is not None and accepted.accepted_by == "alice"
    assert outcome(probe(store, clock, source)) == (Status.PASS, Reason.OK)
    again = CliRunner().invoke(app, ["accept-schema", str(catalogue), "api", "--database", url])
    assert again.exit_code == 0 and "already accepted" in again.stdout


def test_accept_schema_with_nothing_observed_exits_two(tmp_path: Path, store: Store) -> None:
    catalogue = tmp_path / "sources.yaml"
    catalogue.write_text("version: 1\ndata_sources:\n  - {id: api, url: 'http://127.0.0.1:9/'}\n")
    url = str(store.engine.url)
    for source_id in ("api", "nope"):
        run = CliRunner().invoke(app, ["accept-schema", str(catalogue), source_id,
                                       "--database", url])
        assert run.exit_code == 2


def test_fingerprints_ignore_values_nulls_and_empty_lists() -> None:
    a = {"id": 1, "name": "x", "items": [{"sku": "a", "price": 1.5}], "next": None}
    b = {"id": 2.5, "name": "y", "items": [], "next": "https://x"}
    c = {"id": 3, "name": "z", "items": [{"sku": "b", "price": 2}, {"sku": "c", "price": 3}],
         "next": None}
    assert fingerprint(shape_of(a)) == fingerprint(shape_of(c))
    assert changes(shape_of(a), shape_of(b)) == []  # null and [] say nothing about structure
    d = {"id": "1", "name": "x", "items": [{"sku": "a"}], "next": None}
    assert changes(shape_of(a), shape_of(d)) == ["$.id: number -> string",
                                                 "$.items[].price: removed"]


# --- TLS --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_self_signed_certificate_is_tls_unless_trusted(
        certificate: tuple[Path, Path], store: Store, clock: FastClock) -> None:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with MisbehavingServer(tls=context) as tls_api:
        tls_api.route("/v1", default=ok(WEATHER))
        untrusted = probe(store, clock, make_source(tls_api.url("/v1"), samples=1))
        trusted = probe(store, clock, make_source(tls_api.url("/v1"), id="trusted",
                                                  ca_bundle=str(cert)))
    assert outcome(untrusted) == (Status.FAIL, Reason.TLS)
    assert untrusted.details["retries"] == 0  # a bad certificate does not heal in a second
    assert outcome(trusted) == (Status.PASS, Reason.OK)


# --- secrets ----------------------------------------------------------------------------


def test_missing_secret_is_an_error_not_a_failure(
        monkeypatch: pytest.MonkeyPatch, api: MisbehavingServer, store: Store,
        clock: FastClock, tmp_path: Path) -> None:
    monkeypatch.delenv("ENVCHECK_TEST_NO_SUCH_TOKEN", raising=False)
    by_env = make_source(api.url("/v1"), auth={"env": "ENVCHECK_TEST_NO_SUCH_TOKEN"})
    by_file = make_source(api.url("/v1"), id="f", auth={"file": str(tmp_path / "none")})
    for source in (by_env, by_file):
        assert outcome(probe(store, clock, source)) == (Status.ERROR, Reason.SECRET_UNAVAILABLE)
    assert api.hits("/v1") == 0


def test_secret_from_a_file_goes_in_the_header_and_nowhere_else(
        api: MisbehavingServer, store: Store, clock: FastClock, tmp_path: Path) -> None:
    secret = "file-secret-0123456789"
    (tmp_path / "token").write_text(secret + "\n")
    api.route("/v1", default=echo(500))
    source = make_source(api.url("/v1"), samples=1, retries=0,
                         auth={"file": str(tmp_path / "token"), "scheme": "Token"})
    report = probe(store, clock, source)
    assert api.seen[0]["headers"]["Authorization"] == f"Token {secret}"
    assert outcome(report) == (Status.FAIL, Reason.HTTP_5XX)
    shown = json.dumps([report.summary, report.details,
                        [e.to_json() for e in report.evidence]])
    assert secret not in shown
    assert f"Token {REDACTED}" in report.evidence[0].output_head


def test_redaction_of_urls_and_known_values() -> None:
    assert redact_url("https://u:pw@h/x?api_key=abc&page=2&X-Amz-Signature=s") == (
        "https://u:***@h/x?api_key=***&page=2&X-Amz-Signature=***")
    redactor = Redactor(["s3cr3t/+="])
    text = "Bearer s3cr3t/+= then s3cr3t%2F%2B%3D then czNjcjN0Lys9 then http://h/?token=x"
    assert redactor.text(text) == "Bearer *** then *** then *** then http://h/?token=***"
    assert redactor.value({"a": ["s3cr3t/+="], "s3cr3t/+=": 1}) == {"a": ["***"], "***": 1}


SECRET = "tok-7f3a9c1e5b2d4680"


def secrets_catalogue(tmp_path: Path, api: MisbehavingServer) -> Path:
    path = tmp_path / "secrets.yaml"
    path.write_text(f"""\
version: 1
suites:
  secrets:
    environments:
      - id: ds-secret
        image: envcheck-demo/healthy:latest
        data_sources: [in-header, in-query]
data_sources:
  - id: in-header
    url: {api.url("/header")}
    samples: 2
    retries: 1
    auth: {{env: ENVCHECK_TEST_API_TOKEN}}
  - id: in-query
    url: {api.url("/query")}
    samples: 2
    retries: 1
    auth: {{env: ENVCHECK_TEST_API_TOKEN, query: api_key}}
""")
    return path


@pytest.mark.docker
def test_secrets_never_reach_the_store_logs_or_output(
        api: MisbehavingServer, tmp_path: Path, data_dir: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("ENVCHECK_TEST_API_TOKEN", SECRET)
    api.route("/header", default=echo(500))  # echoes the Authorization header back
    api.route("/query", fail(503), default=echo(200))  # echoes the URL with its token
    caplog.set_level(logging.DEBUG)
    catalogue = secrets_catalogue(tmp_path, api)
    run = CliRunner().invoke(app, ["check", str(catalogue), "--probe", "datasource", "--json"])
    assert run.exit_code == 1, run.output
    [line] = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    assert (line["status"], line["reason"]) == ("fail", "http_5xx")
    assert line["details"]["failing"] == ["in-header"]
    # the secret did travel, where the catalogue said
    assert {r["headers"].get("Authorization") for r in api.seen
            if r["path"] == "/header"} == {f"Bearer {SECRET}"}
    assert all(f"api_key={SECRET}" in r["path"] for r in api.seen if r["path"] != "/header")
    assert any("api_key=***" in r.getMessage() for r in caplog.records)  # urllib3 DEBUG lines
    stored = b"".join(p.read_bytes() for p in data_dir.rglob("*") if p.is_file())
    assert b"in-header" in stored  # the store holds the result...
    for where, text in [("stdout", run.stdout), ("stderr", run.stderr),
                        ("logs", caplog.text), ("store", stored.decode("latin-1"))]:
        assert SECRET not in text, where  # ... but never the secret


# --- classification boundary ------------------------------------------------------------


NOT_RESOLVED = u3.NameResolutionError("h", None, OSError("Name or service not known"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("exc", "reason"), [
    (requests.exceptions.ConnectionError(u3.MaxRetryError(None, "/", NOT_RESOLVED)),  # type: ignore[arg-type]
     Reason.UNREACHABLE),
    (requests.exceptions.ConnectionError(OSError(101, "Network is unreachable")),
     Reason.UNREACHABLE),
    (requests.exceptions.ConnectTimeout("x"), Reason.TIMEOUT_CONNECT),
    (u3.ReadTimeoutError(None, "/", "read timed out"), Reason.TIMEOUT_READ),  # type: ignore[arg-type]
    (u3.ProtocolError("Connection broken", ConnectionResetError(104, "reset")),
     Reason.CONNECTION_RESET),
    (requests.exceptions.SSLError("bad handshake"), Reason.TLS),
    (requests.exceptions.ContentDecodingError("bad gzip"), Reason.INVALID_JSON),
    (requests.exceptions.InvalidURL("no host"), None),
    (ValueError("a bug"), None),
])
def test_classify(exc: BaseException, reason: Reason | None) -> None:
    assert classify(exc) == reason


# --- environments and the cycle cache ---------------------------------------------------


class NoEngine:
    """A runtime for host-mode probes: the engine must not be needed."""

    def ping(self) -> None:
        pass

    def image_digest(self, image: str) -> str:
        return f"sha256:{image}"

    def sandbox(self, spec: Any) -> Any:
        raise AssertionError("host-mode data-source probes start no container")

    def reap(self) -> int:
        return 0


def env(env_id: str, *sources: str) -> Environment:
    return Environment(id=env_id, image="img/x", suite="s", data_sources=list(sources))


def test_a_shared_source_is_sampled_once_per_cycle(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/ok", default=ok(WEATHER))
    api.route("/bad", default=fail(500))
    sources = [make_source(api.url("/ok"), id="good", samples=2),
               make_source(api.url("/bad"), id="bad", samples=1, retries=0)]
    checker = DataSourceChecker(sources, store, clock=clock)
    envs = [env("e1", "good"), env("e2", "good", "bad"), env("e3", "good"), env("e4")]
    kinds = [ProbeKind.DATASOURCE]
    results = run_cycle(envs, kinds, NoEngine(), "run-1", concurrency=3,
                        services={DataSourceChecker: checker})
    by_env = {r.env_id: r for r in results}
    assert [(r.status, r.reason) for r in results] == [
        (Status.PASS, Reason.OK), (Status.FAIL, Reason.HTTP_5XX), (Status.PASS, Reason.OK),
        (Status.SKIP, Reason.NOT_APPLICABLE)]
    assert by_env["e2"].details["failing"] == ["bad"]
    assert by_env["e2"].summary.startswith("1 of 2 data source(s) failing: bad: http_5xx")
    assert (checker.sampled, api.hits("/ok"), api.hits("/bad")) == (2, 2, 1)
    run_cycle(envs[:1], kinds, NoEngine(), "run-2", services={DataSourceChecker: checker})
    assert api.hits("/ok") == 4  # a new cycle samples again


def test_spec_hash_follows_the_source_definitions(
        api: MisbehavingServer, store: Store, clock: FastClock) -> None:
    api.route("/ok", default=ok(WEATHER))

    def spec_hash(**changes: Any) -> str:
        source = make_source(api.url("/ok"), id="good", samples=1, **changes)
        checker = DataSourceChecker([source], store, clock=clock)
        [result] = run_cycle([env("e1", "good")], [ProbeKind.DATASOURCE], NoEngine(), "r",
                             services={DataSourceChecker: checker})
        return result.spec_hash

    assert spec_hash() == spec_hash()
    assert spec_hash() != spec_hash(latency_budget_ms=5)


def test_without_a_checker_the_probe_is_an_error(store: Store) -> None:
    [result] = run_cycle([env("e1", "x")], [ProbeKind.DATASOURCE], NoEngine(), "r")
    assert (result.status, result.reason) == (Status.ERROR, Reason.CHECKER_CRASHED)


def test_degraded_is_a_pass_reason_only() -> None:
    def result(status: Status, reason: Reason) -> ProbeResult:
        return ProbeResult("e", ProbeKind.DATASOURCE, status, reason, "", 0.0)

    passed = result(Status.PASS, Reason.RECOVERED_AFTER_RETRY)
    assert passed.ok and passed.degraded
    assert not result(Status.PASS, Reason.OK).degraded
    for status in (Status.FAIL, Status.SKIP, Status.ERROR, Status.FLAKY):
        with pytest.raises(ValueError, match="does not go with"):
            result(status, Reason.RECOVERED_AFTER_RETRY)


def test_engine_missing_image_still_reads_as_an_error() -> None:
    # The runner asks for the digest first; a data-source probe changes nothing there.
    class Missing(NoEngine):
        def image_digest(self, image: str) -> str:
            raise ImageMissing(image)

    [result] = run_cycle([env("e1", "x")], [ProbeKind.DATASOURCE], Missing(), "r")
    assert (result.status, result.reason) == (Status.ERROR, Reason.IMAGE_MISSING)


# --- in-sandbox mode (real engine; traffic stays on one container's loopback) ----------

SERVER = r"""
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"rows": [{"id": 1}], "served_by": "server-container"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 8000), H)
print("ready", flush=True)
server.serve_forever()
"""
IMAGE = "envcheck-demo/healthy:latest"


@pytest.fixture
def server_container() -> Iterator[str]:
    """A container with no network but its own loopback, serving JSON on 127.0.0.1:8000;
    probe containers join its network namespace: no bridge, no address but loopback."""
    client = docker.from_env(timeout=30)
    name = f"envcheck-test-source-{uuid.uuid4().hex[:10]}"
    container = None
    try:
        container = client.containers.run(IMAGE, ["python3", "-c", SERVER], name=name,
                                          network_mode="none", detach=True,
                                          labels={"org.envcheck.test": "datasource"})
        started = container
        wait_for(lambda: b"ready" in started.logs(), timeout_s=60, what="the source to serve",
                 interval_s=0.1, details=lambda: started.logs().decode("utf-8", "replace"))
        yield name
    finally:
        if container is not None:
            container.remove(force=True)
        client.close()


def in_sandbox_env(network: str | None, *sources: str) -> Environment:
    extra = {"data_sources_in_sandbox": {"network": network}} if network else {}
    return Environment.model_validate({"id": "inside", "image": IMAGE, "suite": "s",
                                       "user": "agent", "data_sources": list(sources), **extra})


@pytest.mark.docker
def test_in_sandbox_probe_reaches_the_source_over_the_named_network(
        server_container: str, runtime: DockerRuntime, store: Store, clock: FastClock) -> None:
    network = f"container:{server_container}"
    sources = [
        make_source("http://127.0.0.1:8000/rows", id="inside", samples=2,
                    in_sandbox={"network": network}),
        make_source("http://127.0.0.1:8001/rows", id="inside-closed", samples=1, retries=1,
                    in_sandbox={"network": network}),
    ]
    checker = DataSourceChecker(sources, store, clock=clock)
    services = {DataSourceChecker: checker}
    ok_env, closed_env = in_sandbox_env(None, "inside"), in_sandbox_env(None, "inside-closed")
    [passed] = run_cycle([ok_env], [ProbeKind.DATASOURCE], runtime, "r1", services=services)
    [refused] = run_cycle([closed_env], [ProbeKind.DATASOURCE], runtime, "r1",
                          services=services)
    assert (passed.status, passed.reason) == (Status.PASS, Reason.OK), passed.summary
    details = passed.details["sources"]["inside"]
    assert details["via"] == f"sandbox (network {network})"
    assert '"served_by": "server-container"' in passed.evidence[0].output_head
    assert (refused.status, refused.reason) == (Status.FAIL, Reason.CONNECTION_REFUSED)
    assert refused.details["sources"]["inside-closed"]["retried"] == {"connection_refused": 1}


@pytest.mark.docker
def test_environment_level_in_sandbox_overrides_and_is_cached_per_image(
        server_container: str, runtime: DockerRuntime, store: Store, clock: FastClock) -> None:
    source = make_source("http://127.0.0.1:8000/rows", id="rows", samples=1)  # host mode...
    checker = DataSourceChecker([source], store, clock=clock)
    envs = [in_sandbox_env(f"container:{server_container}", "rows")] * 2  # ...but not here
    results = run_cycle(envs, [ProbeKind.DATASOURCE], runtime, "r1", concurrency=2,
                        services={DataSourceChecker: checker})
    assert [(r.status, r.reason) for r in results] == [(Status.PASS, Reason.OK)] * 2
    assert checker.sampled == 1  # same image, same network, same cycle: sampled once


@pytest.mark.docker
def test_other_sandboxes_keep_network_none(runtime: DockerRuntime) -> None:
    spec = SandboxSpec(env_id="e", image=IMAGE, run_id="r")
    assert spec.network == "none"
    args = runtime._create_args(spec)
    assert (args["network_mode"], args["hostname"]) == ("none", "sandbox")
    joined = runtime._create_args(dataclasses.replace(spec, network="container:abc"))
    assert joined["network_mode"] == "container:abc" and "hostname" not in joined


@pytest.mark.parametrize(("block", "message"), [
    ({"in_sandbox": True}, "needs the Docker network"),
    ({"in_sandbox": {}}, "required key is missing"),
    ({"in_sandbox": {"network": "bridge"}}, "Docker's default network"),
    ({"in_sandbox": {"network": "host"}}, "no isolation"),
    ({"in_sandbox": {"network": "none"}}, "has no network"),
    ({"url": "http://u:pw@127.0.0.1/"}, "password in the URL"),
    ({"schema": {"type": "nonsense"}}, "not a valid JSON Schema"),
    ({"method": "HEAD", "schema": {"type": "object"}}, "need a JSON body"),
    ({"auth": {"header": "X-Key"}}, "auth: set exactly one of env or file"),
    ({"headers": {"X-Trace": "a\r\nX-Injected: 1"}}, "not a valid header"),
], ids=["true", "empty", "bridge", "host", "none", "password", "schema", "head", "auth",
        "header"])
def test_catalogue_says_what_is_wrong(tmp_path: Path, block: dict[str, Any],
                                      message: str) -> None:
    source = {"id": "api", "url": "http://127.0.0.1:9/", **block}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "data_sources": [source]}))
    with pytest.raises(CatalogueError) as caught:
        load_catalogue([path])
    assert message in str(caught.value)
