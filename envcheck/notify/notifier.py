"""The notifier: transitions and infrastructure incidents, POSTed to webhooks.

For sites without Prometheus. Each transition that fires or resolves an alert (see
:mod:`envcheck.notify.payloads`) becomes one message per webhook: Alertmanager's webhook
payload (version "4") or a Slack message. Design:

- **The store is the queue.** Transitions and incidents are already persisted; each webhook
  has cursors in the store, and a delivery row per (webhook, transition) whose uniqueness
  means a transition never reaches a webhook twice, across restarts too. A restart resumes
  at the cursor; a delivery left pending by a shutdown or an outage is sent then.
  Transitions made outside the scheduler (``envcheck quarantine``, the API) are read too.
- **It never blocks probing.** ``on_cycle`` only wakes the workers (a coalescing wake-up,
  bounded at one per worker): O(1), no I/O. Each webhook has its own worker thread, so a
  hung receiver delays only its own messages. Workers also poll every ``poll_s``.
- **Delivery** (the HTTP policy is in :mod:`envcheck.notify.transport`): transient
  failures (connection errors, timeouts, 429, 5xx) are retried with exponential backoff
  and jitter (honouring Retry-After) for as long as the daemon runs, in order per webhook
  (a resolution never overtakes its firing); any other answer is final: 2xx delivered,
  4xx failed, never retried. Every attempt is recorded (status, attempts, HTTP status,
  redacted error).
- **Shutdown** flushes for at most ``flush_s``, then leaves the rest pending for next start.

Webhook URLs carry tokens: they are masked in every error and in the HTTP stack's logs, and
never stored or logged (a webhook is its name and id, :mod:`envcheck.notify.config`). The
``Idempotency-Key`` header lets a receiver drop the one duplicate we cannot rule out: a
message whose 2xx arrived just as the process died, before the store recorded it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    wait_exponential,
    wait_random,
)

from envcheck.core.outages import StoreOutages
from envcheck.feed.assess import CycleOutcome
from envcheck.net.http import new_session
from envcheck.notify.config import WebhookConfig
from envcheck.notify.payloads import (
    AlertGroup,
    changes_alerts,
    closes_alerts,
    incident_group,
    transition_group,
)
from envcheck.notify.transport import TRANSPORTS, PostResult, WebhookTransport
from envcheck.store import Store
from envcheck.store.deliveries import DeliveryStatus, Subject
from envcheck.store.tables.states import TransitionRow

__all__ = ["Notifier", "RetryPolicy"]

log = logging.getLogger("envcheck.notify.notifier")

_BATCH = 100
_HISTORY = 200  # earlier transitions of an environment searched for what a resolution closes
_MAX_RETRY_AFTER_S = 600.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    jitter_s: float = 1.0


class _Transient(Exception):
    def __init__(self, result: PostResult) -> None:
        super().__init__(result.error)
        self.result = result


class _Worker:
    """Delivers to one webhook, in order, from its cursors in the store."""

    def __init__(self, store: Store, transport: WebhookTransport, policy: RetryPolicy,
                 poll_s: float, closing: threading.Event, halt: threading.Event,
                 outages: StoreOutages) -> None:
        self.store, self.transport, self.hook = store, transport, transport.hook
        self.outages, self.part = outages, f"notifying webhook {transport.hook.name}"
        self.poll_s, self.closing, self.halt = poll_s, closing, halt
        self.wake = threading.Event()
        self.t_cursor, self.i_cursor = store.register_webhook(self.hook.id, self.hook.name,
                                                              self.hook.format)
        self._wait = (wait_exponential(multiplier=policy.initial_backoff_s,
                                       max=policy.max_backoff_s)
                      + wait_random(0, policy.jitter_s))
        self._max_backoff = policy.max_backoff_s
        self.thread = threading.Thread(target=self._run, name=f"envcheck-notify-{self.hook.name}",
                                       daemon=True)

    def _run(self) -> None:
        # the worker's life, not a retry: a pass, then sleep until woken or poll_s is up
        while not self.halt.is_set():
            # Read before syncing: once closing, this sync sees all that came before stop().
            closing = self.closing.is_set()
            try:
                self._sync()
            except Exception as exc:  # the store, a bug: log, back off, carry on
                if not self.outages.failed(self.part, exc, then="alerts wait in the store"):
                    log.error("notifier error", extra={
                        "webhook": self.hook.name, "error": self.transport.redact(repr(exc))})
                self.halt.wait(self._max_backoff)
            else:
                self.outages.ran(self.part)
            if closing:
                return
            self.wake.wait(self.poll_s)
            self.wake.clear()

    def _sync(self) -> None:
        while not self.halt.is_set():
            batch = self.store.transitions(after_id=self.t_cursor, limit=_BATCH)
            for t in batch:
                assert t.id is not None
                group = self._group(t)
                if group is not None and not self._deliver(Subject.TRANSITION, t.id, group):
                    return
                self.t_cursor = t.id
                if group is not None:
                    self.store.advance_webhook(self.hook.id, transition=t.id)
            if batch:
                self.store.advance_webhook(self.hook.id, transition=self.t_cursor)
            if len(batch) < _BATCH:
                break
        for incident in self.store.incidents_after(self.i_cursor, limit=_BATCH):
            assert incident.id is not None
            if not self._resolve_incidents(before=incident.at):
                return
            if incident.kind not in {i.kind for i in self.store.open_incident_alerts(
                    self.hook.id)} and not self._deliver(
                    Subject.INCIDENT, incident.id, incident_group(incident, self._base)):
                return
            self.i_cursor = incident.id
            self.store.advance_webhook(self.hook.id, incident=incident.id)
        # A clean run resolves only what came before the first incident this pass has not
        # read: one recorded meanwhile (while a post was in flight) is of the same outage,
        # and the next pass must see it while that outage's alert is still open.
        unread = self.store.incidents_after(self.i_cursor, limit=1)
        self._resolve_incidents(before=unread[0].at if unread else None)

    @property
    def _base(self) -> str:
        return self.transport.external_url

    def _group(self, t: TransitionRow) -> AlertGroup | None:
        if not changes_alerts(t):
            return None
        history = self.store.transitions(t.env_id, limit=_HISTORY) if closes_alerts(t) else []
        return transition_group(t, self.store.environment_suite(t.env_id), history,
                                self._base)

    def _resolve_incidents(self, before: datetime | None) -> bool:
        """Resolve open incident alerts a clean run has ended (before ``before``)."""
        for incident in self.store.open_incident_alerts(self.hook.id):
            assert incident.id is not None
            clean = self.store.clean_run_since(incident.at)
            if clean is None or (before is not None and clean >= before):
                continue
            group = incident_group(incident, self._base, resolved_at=clean)
            if not self._deliver(Subject.INCIDENT_RESOLVED, incident.id, group):
                return False
        return True

    def _deliver(self, subject: Subject, subject_id: int, group: AlertGroup) -> bool:
        """Send one message until delivered or refused; False if halted with it pending."""
        claimed = self.store.claim_delivery(self.hook.id, subject, subject_id)
        if claimed.status is not DeliveryStatus.PENDING:
            return True  # delivered (or refused) before: never twice
        body = json.dumps(self.transport.render(group)).encode()
        key = f"{self.hook.id}:{subject}:{subject_id}"

        def attempt() -> PostResult:
            result = self.transport.post(body, key)
            self.store.record_attempt(self.hook.id, subject, subject_id, result.status,
                                      http_status=result.http_status, error=result.error)
            if result.status is DeliveryStatus.PENDING:
                raise _Transient(result)
            return result

        retrying = Retrying(retry=retry_if_exception_type(_Transient), wait=self._backoff,
                            stop=lambda _: self.halt.is_set(), sleep=self._sleep,
                            before_sleep=self._log_retry, reraise=True)
        extra = {"webhook": self.hook.name, "subject": str(subject), "id": subject_id}
        try:
            result = retrying(attempt)
        except _Transient:
            log.warning("notification left pending", extra=extra)
            return False
        if result.status is DeliveryStatus.DELIVERED:
            log.info("notification delivered", extra={**extra, "status": group.status})
        else:
            log.error("notification refused by the webhook",
                      extra={**extra, "http_status": result.http_status, "error": result.error})
        return True

    def _backoff(self, state: RetryCallState) -> float:
        wait = self._wait(state)
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Transient) and exc.result.retry_after_s is not None:
            wait = max(wait, min(exc.result.retry_after_s, _MAX_RETRY_AFTER_S))
        return wait

    def _sleep(self, seconds: float) -> None:
        self.halt.wait(seconds)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("webhook delivery failed, retrying", extra={
            "webhook": self.hook.name, "attempt": state.attempt_number,
            "error": exc.result.error if isinstance(exc, _Transient) else None,
            "retry_in_s": round(wait, 2)})


class Notifier:
    """Delivers transitions and incidents to ``webhooks``; see the module docstring.

    ``external_url`` is envcheck's own address as receivers should link to it.
    """

    def __init__(self, store: Store, webhooks: Sequence[WebhookConfig], *, external_url: str,
                 policy: RetryPolicy | None = None, poll_s: float = 5.0,
                 session_factory: Callable[[], requests.Session] = new_session,
                 outages: StoreOutages | None = None) -> None:
        self._store, self._hooks, self._external_url = store, tuple(webhooks), external_url
        self._outages = outages or StoreOutages()  # the store not answering, said once
        self._policy, self._poll_s = policy or RetryPolicy(), poll_s
        self._session_factory = session_factory
        self._closing, self._halt = threading.Event(), threading.Event()
        self._workers: list[_Worker] = []
        self._sessions: list[requests.Session] = []

    def start(self) -> None:
        for hook in self._hooks:
            session = self._session_factory()
            self._sessions.append(session)
            transport = TRANSPORTS[hook.format](hook, session, self._external_url)
            self._workers.append(_Worker(self._store, transport, self._policy, self._poll_s,
                                         self._closing, self._halt, self._outages))
        for worker in self._workers:
            worker.thread.start()
        log.info("notifier started", extra={"webhooks": [h.name for h in self._hooks]})

    def on_cycle(self, outcome: CycleOutcome) -> None:
        """The scheduler's hook: wake the workers (never blocks; they read the store)."""
        self.wake()

    def wake(self) -> None:
        for worker in self._workers:
            worker.wake.set()

    def stop(self, flush_s: float = 10.0) -> None:
        """Deliver what is due for at most ``flush_s`` (plus the timeouts of a request in
        flight); leave the rest pending for the next start."""
        self._closing.set()
        self.wake()
        deadline = time.monotonic() + flush_s
        for worker in self._workers:
            worker.thread.join(max(deadline - time.monotonic(), 0.0))
        self._halt.set()  # stops retries; a request in flight ends within its timeouts
        for worker in self._workers:
            worker.thread.join(worker.hook.connect_timeout_s + worker.hook.read_timeout_s + 1)
        for session in self._sessions:
            session.close()
        pending = {w.hook.name: len(self._store.deliveries(w.hook.id, DeliveryStatus.PENDING))
                   for w in self._workers}
        log.info("notifier stopped", extra={"pending": pending})

    def __enter__(self) -> Notifier:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
