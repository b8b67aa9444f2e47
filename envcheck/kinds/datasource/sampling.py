"""Sampling one data source: its samples, each retried while transient, each response judged.

One :class:`SourceSampler` run sends ``samples`` requests through a transport (from the host
with requests, or from inside a sandbox) and judges each final answer in a fixed order:
status, body size, JSON, JSON Schema, structural drift against the accepted fingerprint,
freshness. :mod:`envcheck.kinds.datasource.report` turns the outcomes into one report.

Retries (tenacity): transient failures (timeouts, resets, refused, 5xx, 429) are retried with
exponential backoff and jitter, honouring Retry-After, while the source's retry budget lasts;
the budget counts the waits and the retried requests of the whole probe, so a source that
fails slowly cannot stretch a cycle. Permanent failures (4xx, bad JSON, schema) are not.

Once the budget is spent, or a sample still times out after its retries, the samples left
are not sent (:attr:`SourceSampler.stopped` says why): a source that hangs costs about one
timeout plus the retry budget, not a timeout per sample.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import jsonschema
from tenacity import RetryCallState, Retrying, retry_if_result

from envcheck.catalogue.datasources import DataSource
from envcheck.core.clock import Clock
from envcheck.core.results import Reason
from envcheck.kinds.datasource.fingerprint import changes, fingerprint, shape_of
from envcheck.net.http import Attempt, HttpRequest

__all__ = ["TIMEOUTS", "TRANSIENT", "Sample", "ShapeRecord", "ShapeStore", "SourceSampler",
           "Transport", "validator"]

Transport = Callable[[HttpRequest], Attempt]
TRANSIENT = frozenset({Reason.TIMEOUT_CONNECT, Reason.TIMEOUT_READ, Reason.CONNECTION_REFUSED,
                       Reason.CONNECTION_RESET, Reason.HTTP_5XX, Reason.RATE_LIMITED})
TIMEOUTS = frozenset({Reason.TIMEOUT_CONNECT, Reason.TIMEOUT_READ})
_PERMANENT_5XX = {501, 505}  # not implemented, version not supported: asking again won't help
BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0


class ShapeRecord(Protocol):
    @property
    def fingerprint(self) -> str: ...

    @property
    def shape(self) -> Any: ...


class ShapeStore(Protocol):
    """Where fingerprints live (the result store implements it)."""

    def accepted_shape(self, source_id: str) -> ShapeRecord | None: ...

    def observe_shape(self, source_id: str, fingerprint: str, shape: Any, at: datetime, *,
                      count: int = 1, auto_accept: bool = False) -> ShapeRecord: ...


@dataclass
class Sample:
    attempts: list[Attempt]
    failure: Reason | None = None
    detail: str = ""
    fingerprint: str | None = None
    shape: Any = None
    drift: list[str] = field(default_factory=list)
    at: datetime | None = None  # when its final answer (or failure) came

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.left = seconds
        self.exhausted = False

    def spend(self, seconds: float) -> None:
        self.left -= seconds

    @property
    def spent(self) -> bool:
        return self.exhausted or self.left <= 0


def validator(source: DataSource) -> Any:
    """The source's compiled JSON Schema validator (None without a schema); build it once
    per source, not per sample."""
    schema = source.json_schema
    return None if schema is None else jsonschema.validators.validator_for(schema)(schema)


def status_failure(source: DataSource, attempt: Attempt) -> tuple[Reason, str] | None:
    if attempt.failure is not None:
        return attempt.failure, attempt.detail
    status = attempt.status
    if status == source.expected_status:
        return None
    assert status is not None  # an attempt has a failure or a status
    detail = f"{attempt.detail} (expected {source.expected_status})"
    if status == 429:
        return Reason.RATE_LIMITED, detail
    if 500 <= status <= 599:
        return Reason.HTTP_5XX, detail
    if 400 <= status <= 499:
        return Reason.HTTP_4XX, detail
    return Reason.UNEXPECTED_STATUS, detail


class SourceSampler:
    def __init__(self, source: DataSource, transport: Transport, shapes: ShapeStore,
                 clock: Clock, rng: random.Random | None = None,
                 schema_validator: Any = None) -> None:
        self.source = source
        self._validator = schema_validator if schema_validator is not None else validator(source)
        self._send = transport
        self._shapes = shapes
        self._clock = clock
        self._rng = rng or random.Random()
        self.budget = _Budget(source.retry_budget_s)
        self._json = source.format == "json" and source.method != "HEAD"
        self._accepted: ShapeRecord | None = None
        self._auto_accepted: str | None = None  # the fingerprint accepted as first seen
        self.stopped: str | None = None  # why samples were left unsent, if they were

    def run(self, request: HttpRequest) -> list[Sample]:
        """The samples sent: ``source.samples`` of them, fewer if sampling stopped early."""
        if self._json:
            self._accepted = self._shapes.accepted_shape(self.source.id)
        samples: list[Sample] = []
        while len(samples) < self.source.samples:
            sample = self._judge(self._attempts(request))
            sample.at = self._clock.now()
            samples.append(sample)
            why = self._stop_sampling(sample, len(samples))
            if why is not None and len(samples) < self.source.samples:
                self.stopped = why
                break
        self._record_shapes(samples)
        return samples

    def _stop_sampling(self, sample: Sample, number: int) -> str | None:
        """Why the samples left must not be sent, if they must not: the next would wait out
        the same timeout, or retry nothing with the budget gone."""
        if sample.failure in TIMEOUTS:
            return (f"sample {number} ended in {sample.failure} after "
                    f"{len(sample.attempts) - 1} retries")
        if self.budget.spent:
            return f"the retry budget ({self.source.retry_budget_s:g} s) is spent"
        return None

    # --- retries ------------------------------------------------------------------------

    def _attempts(self, request: HttpRequest) -> list[Attempt]:
        attempts: list[Attempt] = []

        def once() -> Attempt:
            started = self._clock.monotonic()
            attempt = self._send(request)
            if attempts:  # a retry: its time comes out of the budget
                self.budget.spend(self._clock.monotonic() - started)
            attempts.append(attempt)
            return attempt

        retrying = Retrying(
            retry=retry_if_result(self._transient),
            stop=self._stop,
            wait=self._wait,
            sleep=self._sleep,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )
        retrying(once)
        return attempts

    def _transient(self, attempt: Attempt) -> bool:
        failure = status_failure(self.source, attempt)
        if failure is None or failure[0] not in TRANSIENT:
            return False
        return attempt.status not in _PERMANENT_5XX

    def _wait(self, state: RetryCallState) -> float:
        backoff = min(BACKOFF_S * 2 ** (state.attempt_number - 1), MAX_BACKOFF_S)
        wait = backoff / 2 + self._rng.uniform(0, backoff / 2)  # "equal jitter"
        last = state.outcome.result() if state.outcome is not None else None
        retry_after = last.retry_after_s if isinstance(last, Attempt) else None
        return float(max(wait, retry_after or 0.0))

    def _stop(self, state: RetryCallState) -> bool:
        if state.attempt_number > self.source.retries:
            return True
        if state.upcoming_sleep > self.budget.left:
            self.budget.exhausted = True
            return True
        return False

    def _sleep(self, seconds: float) -> None:
        self.budget.spend(seconds)
        self._clock.sleep(seconds)

    # --- judging an answer --------------------------------------------------------------

    def _judge(self, attempts: list[Attempt]) -> Sample:
        sample = Sample(attempts)
        failure = status_failure(self.source, sample.final)
        if failure is None and sample.final.truncated:
            failure = (Reason.BODY_TOO_LARGE,
                       f"body larger than max_body_kb ({self.source.max_body_kb} KiB)")
        if failure is None and self._json:
            failure = self._content(sample)
        if failure is not None:
            sample.failure, sample.detail = failure
        return sample

    def _content(self, sample: Sample) -> tuple[Reason, str] | None:
        try:
            doc = json.loads(sample.final.body)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            return Reason.INVALID_JSON, f"not JSON: {str(exc)[:200]}"
        sample.shape = shape_of(doc)
        sample.fingerprint = fingerprint(sample.shape)
        if self._validator is not None:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(doc))
            if error is not None:
                where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                                      for p in error.absolute_path)
                return Reason.SCHEMA_VIOLATION, f"{where}: {error.message[:200]}"
        if self._accepted is None:  # the first shape ever seen is accepted automatically
            self._accepted = _Seen(sample.fingerprint, sample.shape)
            self._auto_accepted = sample.fingerprint
        elif sample.fingerprint != self._accepted.fingerprint:
            sample.drift = changes(self._accepted.shape, sample.shape)
            if sample.drift:
                return Reason.SCHEMA_DRIFT, "; ".join(sample.drift[:3])
        if self.source.freshness is not None:
            return self._freshness(doc)
        return None

    def _freshness(self, doc: Any) -> tuple[Reason, str] | None:
        assert self.source.freshness is not None
        path, max_age = self.source.freshness.field, self.source.freshness.max_age_s
        value: Any = doc
        for part in path.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return Reason.SCHEMA_VIOLATION, f"freshness field {path} is missing"
        stamp = _timestamp(value)
        if stamp is None:
            return Reason.SCHEMA_VIOLATION, f"freshness field {path} is not a timestamp"
        age = (self._clock.now() - stamp).total_seconds()
        if age > max_age:
            return Reason.STALE_DATA, f"{path} is {_duration(age)} old (max {_duration(max_age)})"
        return None

    def _record_shapes(self, samples: list[Sample]) -> None:
        # Each shape at the time of its first sample in this probe, not the probe's end.
        seen: dict[str, tuple[Any, int, datetime]] = {}
        for sample in samples:
            if sample.fingerprint is not None:
                at = sample.at or self._clock.now()
                shape, count, first = seen.get(sample.fingerprint, (sample.shape, 0, at))
                seen[sample.fingerprint] = (shape, count + 1, first)
        for fp, (shape, count, at) in seen.items():
            self._shapes.observe_shape(self.source.id, fp, shape, at, count=count,
                                       auto_accept=fp == self._auto_accepted)

    @property
    def accepted_fingerprint(self) -> str | None:
        return self._accepted.fingerprint if self._accepted is not None else None

    @property
    def auto_accepted(self) -> bool:
        return self._auto_accepted is not None


@dataclass(frozen=True, slots=True)
class _Seen:
    fingerprint: str
    shape: Any


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    return None


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
