"""The notifier against real local receivers (http.server on 127.0.0.1, ephemeral ports)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlmodel import Session

from envcheck.catalogue.models import Environment
from envcheck.core.logs import JsonFormatter
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.feed.assess import CycleOutcome, set_quarantine_by_id
from envcheck.notify.config import WebhookConfig, WebhookConfigError, load_webhooks
from envcheck.notify.notifier import Notifier, RetryPolicy
from envcheck.notify.payloads import fingerprint
from envcheck.store import Store, open_store
from envcheck.store.deliveries import Delivery, DeliveryStatus, Subject
from envcheck.store.tables.deliveries import WebhookRow
from envcheck.store.tables.states import TransitionRow
from tests.http_server import MisbehavingServer, fail, hang, ok
from tests.polling import wait_for
from tests.ports import free_port

FAST = RetryPolicy(initial_backoff_s=0.02, max_backoff_s=0.2, jitter_s=0.02)
EXTERNAL = "http://envcheck.example:8787"
TOKEN = "T0K3N-abcdef123456"
QUERY_SECRET = "q-s3cr3t-987654"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as opened:
        opened.sync_environments([Environment(id=e, image="demo/ok:1", suite="demo",
                                              tools=["git"]) for e in ("env-a", "env-b")])
        yield opened


@pytest.fixture
def receiver() -> Iterator[MisbehavingServer]:
    with MisbehavingServer() as server:
        server.route("/hook", default=ok({"status": "ok"}))
        yield server


def hook(url: str, fmt: str = "alertmanager", name: str = "oncall", read_s: float = 2.0
         ) -> WebhookConfig:
    return WebhookConfig.build(name, fmt, url, connect_timeout_s=1.0,  # type: ignore[arg-type]
                               read_timeout_s=read_s)


def notifier(store: Store, *hooks: WebhookConfig, poll_s: float = 30.0) -> Notifier:
    return Notifier(store, hooks, external_url=EXTERNAL, policy=FAST, poll_s=poll_s)


def transit(store: Store, env: str, old: str, new: str, *, was_q: bool = False,
            q: bool = False, reason: str = "tests: oracle_does_not_fix",
            at: datetime | None = None) -> TransitionRow:
    row = TransitionRow(env_id=env, at=at or datetime.now(UTC), old_state=old, new_state=new,
                        was_quarantined=was_q, quarantined=q, actor="envcheck", reason=reason,
                        evidence=[7, 8], image_digest="sha256:" + "ab" * 32)
    store.apply(env, "demo", {"state": new, "quarantined": q}, row)
    return row


def bodies(server: MisbehavingServer, path: str = "/hook") -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in server.seen if r["path"].split("?")[0] == path]


def caught_up(store: Store) -> bool:
    """The (one) webhook's cursor is at the newest transition: its worker handled them all."""
    with Session(store.engine) as session:
        [cursor] = session.scalars(select(WebhookRow.transition_cursor)).all()
    return cursor == store.transitions(limit=1)[0].id


def returns(call: Callable[[], object], guard_s: float = 60.0) -> bool:
    """Whether ``call`` returns (or raises) within ``guard_s``: a hang guard, not a timing."""
    pool = ThreadPoolExecutor(1)
    try:
        pool.submit(call).result(timeout=guard_s)
    except TimeoutError:
        return False
    finally:
        pool.shutdown(wait=False)
    return True


@contextmanager
def drained(n: Notifier) -> Iterator[Notifier]:
    """Run ``n``; on the way out stop it and wait until its workers have ended. stop() lets
    each worker make one last pass over the store, so once they are gone everything they
    would ever post has been posted: what has not arrived by then never will (shown by
    ordering, not by waiting a while)."""
    before = set(threading.enumerate())
    with n:
        yield n
    wait_for(lambda: not [t for t in threading.enumerate() if t not in before
                          and t.name.startswith("envcheck-notify-") and t.is_alive()],
             timeout_s=30.0, what="the notifier's workers to end", interval_s=0.02)


def delivered(store: Store, n: int) -> Callable[[], list[Delivery]]:
    def check() -> list[Delivery]:
        done = store.deliveries(status=DeliveryStatus.DELIVERED)
        return done if len(done) >= n else []
    return check


def test_fires_then_resolves_in_alertmanager_and_slack_formats(
        store: Store, receiver: MisbehavingServer) -> None:
    receiver.route("/slack", default=ok({}))
    am, slack = hook(receiver.url("/hook")), hook(receiver.url("/slack"), "slack", "chat")
    with notifier(store, am, slack) as n:
        t0 = datetime.now(UTC).replace(microsecond=0)
        fired = transit(store, "env-a", "healthy", "broken", q=True, at=t0)
        n.on_cycle(CycleOutcome(None, [fired]))
        wait_for(delivered(store, 2), timeout_s=10.0, what="2 deliveries", interval_s=0.02)
        released = transit(store, "env-a", "broken", "healthy", was_q=True,
                           reason="released: healthy", at=t0 + timedelta(minutes=5))
        n.on_cycle(CycleOutcome(None, [released]))
        wait_for(delivered(store, 4), timeout_s=10.0, what="4 deliveries", interval_s=0.02)

    firing, resolved = bodies(receiver)
    assert firing["version"] == "4" and firing["receiver"] == "oncall"
    assert firing["status"] == "firing" and resolved["status"] == "resolved"
    assert firing["groupKey"] == '{}:{env="env-a"}' and firing["groupLabels"] == {"env": "env-a"}
    assert firing["externalURL"] == EXTERNAL and firing["truncatedAlerts"] == 0
    assert firing["commonLabels"] == {"env": "env-a", "suite": "demo", "state": "broken"}
    unhealthy, quarantined = firing["alerts"]
    assert unhealthy["labels"] == {"alertname": "EnvcheckEnvironmentUnhealthy", "env": "env-a",
                                   "suite": "demo", "severity": "critical", "state": "broken"}
    assert quarantined["labels"] == {"alertname": "EnvcheckEnvironmentQuarantined",
                                     "env": "env-a", "suite": "demo", "severity": "warning",
                                     "state": "broken", "source": "auto"}
    assert unhealthy["status"] == "firing" and unhealthy["endsAt"] == "0001-01-01T00:00:00Z"
    assert unhealthy["startsAt"] == t0.isoformat().replace("+00:00", "Z")
    assert unhealthy["fingerprint"] == fingerprint(unhealthy["labels"])
    assert unhealthy["generatorURL"] == f"{EXTERNAL}/v1/environments/env-a"
    assert "env-a is broken" in unhealthy["annotations"]["summary"]
    assert "oracle_does_not_fix" in unhealthy["annotations"]["description"]
    # A resolution closes the very alerts that fired: same labels, fingerprint and start.
    assert [(a["status"], a["labels"], a["fingerprint"], a["startsAt"])
            for a in resolved["alerts"]] == [
        ("resolved", a["labels"], a["fingerprint"], a["startsAt"]) for a in firing["alerts"]]
    assert {a["endsAt"] for a in resolved["alerts"]} == {
        (t0 + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")}

    s_fire, s_resolve = bodies(receiver, "/slack")
    assert "*FIRING* env-a is broken" in s_fire["text"]
    assert "quarantined (auto)" in s_fire["text"]
    assert "*RESOLVED* env-a is no longer broken" in s_resolve["text"]
    assert "released from quarantine" in s_resolve["text"]
    assert s_fire["blocks"][0]["type"] == "section"
    assert all(d.attempts == 1 for d in store.deliveries())


def test_a_change_between_bad_states_resolves_one_alert_and_fires_the_other(
        store: Store, receiver: MisbehavingServer) -> None:
    with notifier(store, hook(receiver.url("/hook"))) as n:
        transit(store, "env-a", "unknown", "healthy")  # nothing to say: no message
        transit(store, "env-a", "healthy", "flaky", q=True)
        transit(store, "env-a", "flaky", "broken", was_q=True, q=True)
        n.wake()
        wait_for(delivered(store, 2), timeout_s=10.0, what="2 deliveries", interval_s=0.02)
    first, second = bodies(receiver)
    assert [(a["status"], a["labels"]["alertname"], a["labels"]["state"])
            for a in first["alerts"]] == [
        ("firing", "EnvcheckEnvironmentUnhealthy", "flaky"),
        ("firing", "EnvcheckEnvironmentQuarantined", "flaky")]
    assert [(a["status"], a["labels"]["state"]) for a in second["alerts"]] == [
        ("resolved", "flaky"), ("firing", "broken")]
    assert second["status"] == "firing"


def test_retries_through_an_outage_and_delivers_exactly_once(store: Store) -> None:
    first = MisbehavingServer().start()
    port = first.port
    first.route("/hook", fail(503), fail(503, retry_after="0"), default=hang(30))
    n = notifier(store, hook(first.url("/hook"), read_s=0.5))
    n.start()
    try:
        row = transit(store, "env-a", "healthy", "broken", q=True)
        n.on_cycle(CycleOutcome(None, [row]))
        wait_for(lambda: first.hits("/hook") >= 2,
                 timeout_s=10.0, what="two posts to the first receiver", interval_s=0.02)
        first.close()  # the receiver is gone: connection refused for a while
        refused = wait_for(lambda: [d for d in store.deliveries()
                                    if "connection_refused" in (d.last_error or "")
                                    and d.attempts >= 5],
                           timeout_s=10.0, what="five refused attempts", interval_s=0.02)
        assert refused[0].status is DeliveryStatus.PENDING
        with MisbehavingServer(port=port) as second:
            second.route("/hook", default=ok({}))
            [done] = wait_for(delivered(store, 1),
                              timeout_s=10.0, what="1 deliveries", interval_s=0.02)
            wait_for(lambda: caught_up(store), timeout_s=10.0, what="the cursor past it",
                     interval_s=0.02)
            n.stop(flush_s=1)  # its worker is done: nothing more can arrive
            assert second.hits("/hook") == 1
            assert json.loads(second.seen[0]["body"])["status"] == "firing"
    finally:
        n.stop(flush_s=1)
    assert done.attempts >= 5 and done.last_error is None and done.http_status == 200
    # two 503s, perhaps a request that timed out; then refused until the receiver came back
    assert first.hits("/hook") in (2, 3)


def test_a_4xx_is_not_retried_and_is_recorded_as_failed(
        store: Store, receiver: MisbehavingServer) -> None:
    receiver.route("/hook", fail(400, body=b'{"error": "bad payload"}'), default=ok({}))
    with notifier(store, hook(receiver.url("/hook"))) as n:
        transit(store, "env-a", "healthy", "broken", q=True)
        transit(store, "env-b", "healthy", "flaky")
        n.wake()
        wait_for(delivered(store, 1), timeout_s=10.0, what="1 deliveries", interval_s=0.02)
        wait_for(lambda: caught_up(store), timeout_s=10.0, what="the cursor past both",
                 interval_s=0.02)
    # stopped, its worker done: a retry of the refusal would have been posted by now
    refused, sent = sorted(store.deliveries(), key=lambda d: d.subject_id)
    assert refused.status is DeliveryStatus.FAILED and refused.attempts == 1
    assert refused.http_status == 400 and "bad payload" in (refused.last_error or "")
    assert sent.status is DeliveryStatus.DELIVERED  # a refusal does not block the line
    assert receiver.hits("/hook") == 2


def test_never_blocks_the_scheduler_while_the_receiver_hangs(store: Store) -> None:
    rows = [TransitionRow(env_id=f"env-{i % 50}", at=datetime.now(UTC), old_state="healthy",
                          new_state="broken", was_quarantined=False, quarantined=True,
                          actor="envcheck", reason="x") for i in range(1000)]
    def enqueue() -> None:
        for row in rows:
            n.on_cycle(CycleOutcome(None, [row]))
        n.on_cycle(CycleOutcome(None, rows))

    # The receiver answers nothing until it closes, far past the hang guards below: whatever
    # returns inside this block returned while the receiver hung.
    with MisbehavingServer() as receiver:
        receiver.route("/hook", default=hang(600))
        n = notifier(store, hook(receiver.url("/hook"), read_s=0.5))
        n.start()
        with Session(store.engine, expire_on_commit=False) as session:
            session.add_all(rows)
            session.commit()
        n.wake()
        wait_for(lambda: receiver.hits("/hook") >= 1,
                 timeout_s=10.0, what="a post to the receiver", interval_s=0.02)
        assert returns(enqueue), "on_cycle waited for the hung receiver"
        assert returns(lambda: n.stop(flush_s=0.5)), \
            "stop waited for the hung receiver, past its flush and request timeouts"
        [pending] = store.deliveries()
    assert pending.status is DeliveryStatus.PENDING and pending.subject_id == rows[0].id


def test_dedupes_across_restarts_and_resumes_pending(
        store: Store, receiver: MisbehavingServer) -> None:
    config = hook(receiver.url("/hook"))
    with notifier(store, config) as n:
        transit(store, "env-a", "healthy", "broken", q=True)
        transit(store, "env-a", "broken", "healthy", was_q=True)
        n.wake()
        wait_for(delivered(store, 2), timeout_s=10.0, what="2 deliveries", interval_s=0.02)
    # While no daemon runs, someone quarantines by hand (the CLI).
    set_quarantine_by_id(store, "env-b", add=True, actor="alice", reason="bad image")
    with drained(notifier(store, config, poll_s=0.05)):  # a restart: only the new one goes out
        wait_for(delivered(store, 3), timeout_s=10.0, what="3 deliveries", interval_s=0.02)
    assert receiver.hits("/hook") == 3
    assert bodies(receiver)[2]["alerts"][0]["labels"]["source"] == "manual"

    # A crash between "delivered" and the cursor write: the delivery row still dedupes.
    with Session(store.engine) as session:
        session.execute(update(WebhookRow).values(transition_cursor=0))
        session.commit()
    receiver.route("/hook", default=fail(503))
    n = notifier(store, config, poll_s=0.05)
    n.start()
    try:
        transit(store, "env-b", "unknown", "broken", was_q=True, q=True)
        wait_for(lambda: receiver.hits("/hook") >= 5,
                 timeout_s=10.0, what="five posts to the receiver", interval_s=0.02)
    finally:
        n.stop(flush_s=0.2)  # the receiver is down: left pending
    [pending] = store.deliveries(status=DeliveryStatus.PENDING)
    receiver.route("/hook", default=ok({}))
    with drained(notifier(store, config, poll_s=0.05)):
        wait_for(delivered(store, 4), timeout_s=10.0, what="4 deliveries", interval_s=0.02)
    keys = [r["headers"]["Idempotency-Key"] for r in receiver.seen if r["path"] == "/hook"]
    ok_keys = keys[:3] + keys[-1:]
    assert len(set(ok_keys)) == 4 and all(k.endswith(f":{pending.subject_id}")
                                          for k in keys[3:])
    [resumed] = [d for d in store.deliveries() if d.subject_id == pending.subject_id]
    assert resumed.status is DeliveryStatus.DELIVERED and resumed.attempts > pending.attempts


def outage_cycle(store: Store) -> None:
    """A cycle the engine failed: an infrastructure incident."""
    run = store.start_run("daemon", [])
    store.finish_run(run)
    store.record_incident(run, "engine_unreachable", 4, 4, "the engine failed")


def clean_cycle(store: Store) -> None:
    """A cycle with results and no incident: the infrastructure works again."""
    run = store.start_run("daemon", [])
    store.record(run, ProbeResult(env_id="env-a", kind=ProbeKind.TERMINAL, status=Status.PASS,
                                  reason=Reason.OK, summary="ok", duration_s=0.1,
                                  spec_hash="s", started_at=datetime.now(UTC)))
    store.finish_run(run)


def test_incidents_fire_once_and_resolve_after_a_clean_run(
        store: Store, receiver: MisbehavingServer) -> None:
    with drained(notifier(store, hook(receiver.url("/hook")))) as n:
        for _ in range(2):  # one ongoing outage: the second incident adds no message
            outage_cycle(store)
            n.on_cycle(CycleOutcome(("engine_unreachable", 4, 4, "x"), []))
        wait_for(delivered(store, 1), timeout_s=10.0, what="1 deliveries", interval_s=0.02)
        clean_cycle(store)
        n.on_cycle(CycleOutcome(None, []))
        wait_for(delivered(store, 2), timeout_s=10.0, what="2 deliveries", interval_s=0.02)
    sent = bodies(receiver)
    assert [b["status"] for b in sent] == ["firing", "resolved"], sent
    fired, resolved = sent
    assert fired["alerts"][0]["labels"] == {"alertname": "EnvcheckInfrastructureIncident",
                                            "kind": "engine_unreachable",
                                            "severity": "critical"}
    assert resolved["alerts"][0]["fingerprint"] == fired["alerts"][0]["fingerprint"]
    assert resolved["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"


def test_an_incident_recorded_while_the_alert_is_in_flight_joins_that_outage(
        store: Store, receiver: MisbehavingServer) -> None:
    """The second incident and the clean run land while the first alert's post is held:
    the outage still gets one firing message and one resolution, not two of each."""
    release = threading.Event()

    def held(handler: Any) -> None:
        release.wait(30)
        ok({})(handler)

    receiver.route("/hook", held, default=ok({}))
    with drained(notifier(store, hook(receiver.url("/hook"), read_s=60))) as n:
        outage_cycle(store)
        n.on_cycle(CycleOutcome(("engine_unreachable", 4, 4, "x"), []))
        wait_for(lambda: receiver.hits("/hook") >= 1, timeout_s=10.0,
                 what="the firing post in flight", interval_s=0.02)
        outage_cycle(store)
        clean_cycle(store)
        n.on_cycle(CycleOutcome(None, []))
        release.set()
        wait_for(delivered(store, 2), timeout_s=10.0, what="2 deliveries", interval_s=0.02)
    assert [b["status"] for b in bodies(receiver)] == ["firing", "resolved"]


def test_the_webhook_token_never_reaches_logs_or_the_store(
        store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret_path = f"/hooks/{TOKEN}"
    with MisbehavingServer() as receiver:
        receiver.route(secret_path, fail(503), fail(400), default=ok({}))
        live = receiver.url(f"{secret_path}?token={QUERY_SECRET}")
        dead = f"http://127.0.0.1:{free_port()}{secret_path}?token={QUERY_SECRET}"
        n = notifier(store, hook(live), hook(dead, "slack", "chat"))
        n.start()
        try:
            transit(store, "env-a", "healthy", "broken", q=True)
            transit(store, "env-b", "healthy", "broken", q=True)
            n.wake()
            # live: 503, then 400 (failed), then the second delivered; dead: refused, pending
            wait_for(lambda: store.deliveries(status=DeliveryStatus.DELIVERED) and any(
                d.attempts >= 3 for d in store.deliveries(status=DeliveryStatus.PENDING)),
                timeout_s=10.0, what="a delivery and a pending one tried three times",
                interval_s=0.02)
        finally:
            n.stop(flush_s=0.2)
    logs = "\n".join(JsonFormatter().format(r) for r in caplog.records) + caplog.text
    assert '"POST *** HTTP/1.1" 503' in caplog.text  # urllib3 logged the request, masked
    database = b"".join(p.read_bytes() for p in tmp_path.glob("envcheck.db*"))
    errors = " ".join(d.last_error or "" for d in store.deliveries())
    assert "connection_refused" in errors and "HTTP 400" in errors
    for secret in (TOKEN, QUERY_SECRET):
        assert secret not in logs
        assert secret.encode() not in database
        assert secret not in errors
        assert secret not in repr(hook(live))


def test_webhooks_file_reads_urls_from_env_and_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url_file = tmp_path / "slack-url"
    url_file.write_text(f"https://hooks.example/services/{TOKEN}\n")
    config = tmp_path / "webhooks.yaml"
    config.write_text(f"version: 1\nwebhooks:\n"
                      f"  - {{name: oncall, url_env: ONCALL_URL}}\n"
                      f"  - {{name: chat, format: slack, url_file: {url_file}, "
                      f"read_timeout_s: 5}}\n")
    config.chmod(0o600)
    monkeypatch.setenv("ONCALL_URL", f"http://127.0.0.1:9/hook?token={QUERY_SECRET}")
    oncall, chat = load_webhooks(config, ["http://127.0.0.1:9/plain"], "slack")[:2]
    assert (oncall.format, chat.format, chat.read_timeout_s) == ("alertmanager", "slack", 5)
    assert chat.url == f"https://hooks.example/services/{TOKEN}"
    assert oncall.id == load_webhooks(config)[0].id  # stable: from the name
    [plain] = load_webhooks(None, ["http://127.0.0.1:9/plain"], "slack")
    assert plain.name.startswith("slack-") and plain.id.startswith("wh-")

    monkeypatch.setenv("ONCALL_URL", f"ftp://x/{TOKEN}")
    with pytest.raises(WebhookConfigError, match="ONCALL_URL") as bad:
        load_webhooks(config)
    assert TOKEN not in str(bad.value)
    config.write_text(f"version: 1\nwebhooks:\n  - {{name: x, url: 'u', url_env: E}}\n"
                      f"  - {{name: y, url: 'https://h/{TOKEN}', extra: 1}}\n")
    with pytest.raises(WebhookConfigError) as bad:
        load_webhooks(config)
    assert "exactly one of url" in str(bad.value) and "webhooks[1].extra" in str(bad.value)
    assert TOKEN not in str(bad.value)


def test_delivery_records_on_both_backends(store_url: str) -> None:
    with open_store(store_url) as db:
        db.sync_environments([Environment(id="env-a", image="demo/ok:1", suite="demo")])
        first = transit(db, "env-a", "healthy", "broken", q=True)
        assert db.register_webhook("wh-1", "oncall", "slack") == (first.id, 0)  # no backlog
        db.advance_webhook("wh-1", transition=5)
        db.advance_webhook("wh-1", transition=3)  # never back
        assert db.register_webhook("wh-1", "renamed", "slack") == (5, 0)

        claimed = db.claim_delivery("wh-1", Subject.TRANSITION, 5)
        assert (claimed.status, claimed.attempts) == (DeliveryStatus.PENDING, 0)
        db.record_attempt("wh-1", Subject.TRANSITION, 5, DeliveryStatus.PENDING,
                          http_status=503, error="HTTP 503")
        done = db.record_attempt("wh-1", Subject.TRANSITION, 5, DeliveryStatus.DELIVERED,
                                 http_status=200)
        assert (done.attempts, done.last_error, done.delivered_at is not None) == (2, None, True)
        assert db.claim_delivery("wh-1", Subject.TRANSITION, 5) == done  # claimed once
        assert db.deliveries(status=DeliveryStatus.PENDING) == []

        run = db.start_run("daemon", [])
        db.finish_run(run)
        db.record_incident(run, "failure_storm", 5, 8, "x")
        [incident] = db.incidents_after(0)
        assert incident.id is not None
        db.claim_delivery("wh-1", Subject.INCIDENT, incident.id)
        db.record_attempt("wh-1", Subject.INCIDENT, incident.id, DeliveryStatus.DELIVERED)
        assert [i.id for i in db.open_incident_alerts("wh-1")] == [incident.id]
        assert db.clean_run_since(incident.at) is None
        clean = db.start_run("daemon", [])
        db.record(clean, ProbeResult(env_id="env-a", kind=ProbeKind.TERMINAL,
                                     status=Status.PASS, reason=Reason.OK, summary="ok",
                                     duration_s=0.1, spec_hash="s",
                                     started_at=datetime.now(UTC)))
        db.finish_run(clean)
        ended = db.clean_run_since(incident.at)
        assert ended is not None and ended.tzinfo is not None and ended > incident.at
