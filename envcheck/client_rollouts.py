"""The client's rollout reporter: a trainer reports every rollout it ran, and envcheck counts
them as evidence about the environments (``POST /v1/rollouts``)::

    with EnvcheckClient(url, token) as envcheck, envcheck.rollouts() as rollouts:
        ...
        rollouts.report(env_id, "verifier_timeout", image_digest=digest)

**It never blocks the trainer's step.** ``report`` checks the record, gives it the producer's
next sequence number and appends it to a bounded queue; a background thread sends the queue
in batches, gzip-compressed, when ``batch_size`` records wait or the oldest has waited
``max_age_s``. When the queue is full the oldest waiting record is dropped and counted
(``stats.dropped_overflow``): a long envcheck outage costs the oldest evidence, never the
trainer's time or memory.

**Counted once.** Each producer's sequence numbers are counted once by the server, so a batch
retried after a lost answer adds nothing twice (its records come back as ``duplicates``).
Connection errors, timeouts, 5xx, 408 and 429 (after ``Retry-After``) are retried with
jittered backoff for up to ``retry_for_s``; then the batch goes back to the head of the queue,
still within the bound, and is tried again. Any other 4xx is the sender's bug, not worth
retrying: that batch is dropped, counted (``stats.dropped_rejected``) and logged in one line.
Every record is checked when it is reported (``ValueError`` for an outcome outside the
vocabulary, a naive time, a NaN reward...), so that one bad record never costs a batch.

``flush`` waits for what was reported before it; ``close`` flushes and stops the thread; at
interpreter exit every reporter still open is closed (``exit_timeout_s``). A producer (a run
id) is fresh for every reporter unless named: a named producer must not be reused by another
process with the same sequence numbers (``first_seq`` continues a sequence, e.g. from a
checkpoint's ``next_seq``), else the server takes its records for duplicates.
"""

from __future__ import annotations

import atexit
import collections
import gzip
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_when_event_set,
    wait_exponential,
    wait_random,
)

from envcheck.client_records import checked_record, checked_text
from envcheck.core.retry_after import parse_retry_after
from envcheck.core.rollouts import MAX_BATCH_RECORDS, MAX_PRODUCER_LENGTH, MAX_SEQ, Outcome

__all__ = ["ReporterStats", "RolloutReporter"]

log = logging.getLogger("envcheck.client.rollouts")

MAX_RETRY_AFTER_S = 60.0  # a server asking for longer is waited on this long, then asked again
_TRANSIENT_STATUS = frozenset({408, 429})


class _Open:
    """The reporters still open, closed at interpreter exit."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.lock = threading.Lock()
        self.reporters: set[RolloutReporter] = set()


_OPEN = _Open()


@dataclass(frozen=True, slots=True)
class ReporterStats:
    """A reporter's counts since it started (records, except ``retries``)."""

    queued: int  # held now: waiting, or in the batch being sent
    sent: int  # in batches the server took (2xx)
    counted: int  # of those, added to their environment's counters (the server's answers)
    duplicates: int  # already counted: a retried batch whose first answer was lost
    unknown: int  # naming no environment of the catalogue (counted apart by the server)
    dropped_overflow: int  # the oldest, dropped because the queue was full
    dropped_rejected: int  # in batches the server refused with a 4xx
    retries: int  # requests tried again
    last_error: str | None  # the last failure, None once a batch goes through again


class _Unavailable(Exception):
    """A 5xx, 408 or 429 answer: retried (after ``retry_after`` seconds, if the server said)."""

    def __init__(self, status: int, text: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.retry_after = retry_after


class _Rejected(Exception):
    """An answer that says the batch itself is wrong: dropped, never retried."""


_RETRIED = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
            _Unavailable)


class RolloutReporter:
    """See the module docstring. ``EnvcheckClient.rollouts()`` makes one with the client's
    URL, token and timeouts; ``sleep`` (the pause between retries) is injectable for tests."""

    def __init__(self, base_url: str, token: str | None, producer: str | None = None, *,
                 batch_size: int = 1_000, max_age_s: float = 1.0, max_queued: int = 100_000,
                 timeout: tuple[float, float] = (3.05, 10.0),
                 backoff_s: tuple[float, float] = (0.2, 5.0), retry_for_s: float = 60.0,
                 exit_timeout_s: float = 5.0, first_seq: int = 0,
                 sleep: Callable[[float], None] | None = None) -> None:
        if not token:
            raise ValueError("reporting rollouts needs envcheck's API token")
        if not 0 < batch_size <= MAX_BATCH_RECORDS:
            raise ValueError(f"batch_size must be 1 to {MAX_BATCH_RECORDS}, not {batch_size}")
        if max_queued < batch_size:
            raise ValueError(f"max_queued ({max_queued}) must hold a batch ({batch_size})")
        if max_age_s <= 0 or retry_for_s < 0 or exit_timeout_s < 0:
            raise ValueError("max_age_s must be > 0, retry_for_s and exit_timeout_s >= 0")
        if not 0 <= first_seq <= MAX_SEQ:
            raise ValueError(f"first_seq must be 0 to {MAX_SEQ}")
        self.producer = checked_text(producer or f"run-{uuid.uuid4().hex}", "producer",
                                     MAX_PRODUCER_LENGTH)
        self.exit_timeout_s = exit_timeout_s
        self._url = base_url.rstrip("/") + "/v1/rollouts"
        self._headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip",
                         "Content-Type": "application/json"}
        self._timeout, self._batch_size, self._max_age_s = timeout, batch_size, max_age_s
        self._max_queued, self._retry_for_s = max_queued, retry_for_s
        self._backoff = (wait_exponential(multiplier=backoff_s[0], max=backoff_s[1])
                         + wait_random(0, backoff_s[0]))
        self._between_rounds_s = backoff_s[1]
        self._give_up = threading.Event()  # set when close stops waiting: retries end
        self._sleep: Callable[[float], None] = sleep or self._pause
        self._session = requests.Session()
        self._session.trust_env = False  # no proxies or .netrc from the environment
        # One lock for the queue and the counts; ``report`` holds it for an append.
        self._cond = threading.Condition(threading.Lock())
        self._pending: collections.deque[tuple[int, float, dict[str, Any]]] = \
            collections.deque()
        self._inflight: list[tuple[int, float, dict[str, Any]]] = []
        self._next_seq = first_seq
        self._flushes = 0  # flush calls waiting: send what waits, whatever its age
        self._closed = False
        self._counts = dict.fromkeys(("sent", "counted", "duplicates", "unknown",
                                      "dropped_overflow", "dropped_rejected", "retries"), 0)
        self._last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="envcheck-rollouts",
                                        daemon=True)
        self._forked = False  # in a forked child: its parent's, not to report through
        self._thread.start()
        with _OPEN.lock:
            _OPEN.reporters.add(self)

    def __repr__(self) -> str:
        return f"RolloutReporter({self._url!r}, producer={self.producer!r})"

    # --- the trainer's side -----------------------------------------------------------------

    def report(self, env_id: str, outcome: Outcome | str, *, reward: float | None = None,
               image_digest: str | None = None, at: datetime | None = None,
               durations: Mapping[str, float | None] | None = None) -> None:
        """Queue one rollout (``at`` defaults to now); returns at once. ValueError for a
        record the server would refuse (an outcome outside :class:`Outcome` ...)."""
        if self._forked:  # a child would share the producer's numbers, not the thread
            raise RuntimeError("a rollout reporter does not follow a fork: make one in the "
                               "child (EnvcheckClient.rollouts())")
        record = checked_record(env_id, outcome, reward, image_digest, at, durations)
        record["producer"] = self.producer
        with self._cond:
            if self._closed:
                raise RuntimeError("the rollout reporter is closed")
            seq = record["seq"] = self._next_seq
            self._next_seq += 1
            self._pending.append((seq, time.monotonic(), record))
            if len(self._pending) + len(self._inflight) > self._max_queued:
                self._pending.popleft()
                self._counts["dropped_overflow"] += 1
            waiting = len(self._pending)
            if waiting in (1, self._batch_size):
                self._cond.notify_all()  # the sender starts the age clock, or sends a batch

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every record reported before this call is sent (or dropped), or the
        ``timeout`` passes; whether it drained."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._next_seq - 1
            self._flushes += 1
            self._cond.notify_all()
            try:
                while self._settled_through() < target:
                    left = None if deadline is None else deadline - time.monotonic()
                    if (left is not None and left <= 0) or not self._thread.is_alive():
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self._flushes -= 1

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued (for up to ``timeout`` seconds), stop the sender; whether it
        drained. Reporting after it raises RuntimeError."""
        with self._cond:
            self._closed = True
            target = self._next_seq - 1
            self._cond.notify_all()
        with _OPEN.lock:
            _OPEN.reporters.discard(self)
        self._thread.join(timeout)
        self._give_up.set()  # a sender still retrying stops; its records stay unsent
        with self._cond:
            self._cond.notify_all()
            drained = self._settled_through() >= target
            unsent = len(self._pending) + len(self._inflight)
        self._thread.join(0.5)
        if not drained:
            log.warning("envcheck rollout reporter %s closed with %d records unsent (%s)",
                        self.producer, unsent, self._last_error or "timed out")
        return drained

    @property
    def stats(self) -> ReporterStats:
        with self._cond:
            c = self._counts
            return ReporterStats(
                queued=len(self._pending) + len(self._inflight), sent=c["sent"],
                counted=c["counted"], duplicates=c["duplicates"], unknown=c["unknown"],
                dropped_overflow=c["dropped_overflow"],
                dropped_rejected=c["dropped_rejected"], retries=c["retries"],
                last_error=self._last_error)

    @property
    def next_seq(self) -> int:
        """The sequence number the next record gets (to continue a producer elsewhere)."""
        with self._cond:
            return self._next_seq

    def __enter__(self) -> RolloutReporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- the sender thread ------------------------------------------------------------------

    def _pause(self, seconds: float) -> None:
        self._give_up.wait(seconds)  # close's deadline ends a pause between retries

    def _settled_through(self) -> int:
        """The highest sequence number up to which every record is sent or dropped."""
        held = self._inflight or self._pending
        return held[0][0] - 1 if held else self._next_seq - 1

    def _run(self) -> None:
        with self._session:
            while (batch := self._next_batch()) is not None:
                try:
                    self._deliver(batch)
                except Exception as exc:  # a bug here must not stop the sender: drop, say so
                    log.exception("envcheck rollout reporter failed on a batch of %d",
                                  len(batch))
                    self._settle(rejected=exc)

    def _next_batch(self) -> list[tuple[int, float, dict[str, Any]]] | None:
        """The next batch once one is due (taken in flight), or None when closing is done."""
        with self._cond:
            while True:
                if self._closed and (not self._pending or self._give_up.is_set()):
                    return None
                wait = None
                if self._pending:
                    age_left = self._pending[0][1] + self._max_age_s - time.monotonic()
                    if (self._closed or self._flushes or age_left <= 0
                            or len(self._pending) >= self._batch_size):
                        n = min(self._batch_size, len(self._pending))
                        self._inflight = [self._pending.popleft() for _ in range(n)]
                        return self._inflight
                    wait = age_left
                self._cond.wait(wait)

    def _deliver(self, batch: list[tuple[int, float, dict[str, Any]]]) -> None:
        body = json.dumps([record for _, _, record in batch], separators=(",", ":"),
                          default=_iso)
        try:
            answer = self._post(gzip.compress(body.encode(), compresslevel=1))
        except _RETRIED as exc:  # retried for retry_for_s: back to the queue's head
            with self._cond:
                self._pending.extendleft(reversed(self._inflight))
                self._inflight = []
                self._last_error = str(exc)
                self._cond.notify_all()
            self._sleep(self._between_rounds_s)
        except (_Rejected, requests.RequestException) as exc:
            log.warning("dropped a batch of %d rollouts: %s", len(batch), exc)
            self._settle(rejected=exc)
        else:
            self._settle(answer=answer)

    def _settle(self, answer: dict[str, Any] | None = None,
                rejected: Exception | None = None) -> None:
        with self._cond:
            n = len(self._inflight)
            self._inflight = []
            if rejected is not None:
                self._counts["dropped_rejected"] += n
                self._last_error = str(rejected)
            else:
                self._counts["sent"] += n
                for key in ("counted", "duplicates", "unknown"):
                    value = (answer or {}).get(key)
                    self._counts[key] += value if isinstance(value, int) else 0
                self._last_error = None
            self._cond.notify_all()

    def _post(self, body: bytes) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            with self._session.post(self._url, data=body, headers=self._headers,
                                    timeout=self._timeout, allow_redirects=False) as response:
                status = response.status_code
                if status >= 500 or status in _TRANSIENT_STATUS:
                    raise _Unavailable(status, response.text, parse_retry_after(
                        response.headers.get("Retry-After"), datetime.now(UTC)))
                try:
                    answer = response.json()
                except ValueError:
                    answer = None
                if not 200 <= status < 300:
                    problem = answer if isinstance(answer, dict) else {}
                    raise _Rejected(f"HTTP {status} {problem.get('error', response.reason)}: "
                                    f"{problem.get('reason', response.text[:200])}")
                return answer if isinstance(answer, dict) else {}

        retrying = Retrying(
            stop=stop_after_delay(self._retry_for_s) | stop_when_event_set(self._give_up),
            wait=self._wait, retry=retry_if_exception(lambda e: isinstance(e, _RETRIED)),
            sleep=self._sleep, reraise=True, before_sleep=self._retrying)
        result: dict[str, Any] = retrying(attempt)
        return result

    def _wait(self, state: RetryCallState) -> float:
        """The backoff, or longer when the server said how long (``Retry-After``)."""
        wait = float(self._backoff(state))
        exc = state.outcome.exception() if state.outcome else None
        after = exc.retry_after if isinstance(exc, _Unavailable) else None
        return max(wait, min(after, MAX_RETRY_AFTER_S)) if after is not None else wait

    def _retrying(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        with self._cond:
            self._counts["retries"] += 1
            self._last_error = str(exc)
        (log.warning if state.attempt_number == 1 else log.info)(
            "envcheck POST /v1/rollouts failed (attempt %d): %s; retrying",
            state.attempt_number, exc)


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _forget_after_fork() -> None:
    """A forked child leaves its parent's reporters alone: their locks may be held by a
    thread it does not have, and their records are the parent's to send."""
    for reporter in _OPEN.reporters:  # one thread in the child: read without the lock
        reporter._forked = True
    _OPEN.reset()


os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _close_at_exit() -> None:
    with _OPEN.lock:
        open_now = list(_OPEN.reporters)
    for reporter in open_now:
        reporter.close(reporter.exit_timeout_s)
