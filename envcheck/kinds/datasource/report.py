"""One probe of one data source, summarised: status, reason, availability, latency
percentiles, failures by class, retries.

- every sample good: ``pass``; ``slow_response`` (fail) if the p95 latency is over the budget;
  ``recovered_after_retry`` (a degraded pass) if any sample needed a retry;
- some samples bad: the reason is the most frequent failure class (ties: by ``PRIORITY``),
  except that any structural drift names the result; ``flaky`` when other samples were
  good (both outcomes seen), ``fail`` when none was, or on drift (a change, not noise).

Samples the sampler did not send (it stops on a spent retry budget or a timeout that outlived
its retries) count nowhere but in ``samples_not_sent``, with why, and in the summary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envcheck.catalogue.datasources import DataSource
from envcheck.core.numbers import percentile
from envcheck.core.results import DEGRADED_REASONS, CommandEvidence, Reason, Status
from envcheck.kinds.datasource.sampling import TIMEOUTS, Sample, status_failure
from envcheck.net.http import Attempt

__all__ = ["PRIORITY", "SourceReport", "error_report", "percentile", "summarise"]

PRIORITY = [
    Reason.TLS, Reason.UNREACHABLE, Reason.CONNECTION_REFUSED, Reason.TIMEOUT_CONNECT,
    Reason.CONNECTION_RESET, Reason.TIMEOUT_READ, Reason.HTTP_5XX, Reason.RATE_LIMITED,
    Reason.HTTP_4XX, Reason.UNEXPECTED_STATUS, Reason.BODY_TOO_LARGE, Reason.INVALID_JSON,
    Reason.SCHEMA_VIOLATION, Reason.SCHEMA_DRIFT, Reason.STALE_DATA, Reason.SLOW_RESPONSE,
]
EVIDENCE_BYTES = 2048


@dataclass(frozen=True, slots=True)
class SourceReport:
    source_id: str
    status: Status
    reason: Reason
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[CommandEvidence, ...] = ()

    @property
    def degraded(self) -> bool:
        return self.status is Status.PASS and self.reason in DEGRADED_REASONS


def _choose(failures: Counter[Reason]) -> Reason:
    if Reason.SCHEMA_DRIFT in failures:
        return Reason.SCHEMA_DRIFT
    return min(failures, key=lambda r: (-failures[r], PRIORITY.index(r)))


def summarise(source: DataSource, samples: list[Sample], *, via: str, shown_url: str,
              duration_s: float, accepted: str | None, auto_accepted: bool,
              budget_exhausted: bool, stopped: str | None = None) -> SourceReport:
    """The report of one probe of ``source`` (not yet redacted: the caller does it).
    ``samples`` are those sent; ``stopped`` says why the rest were not, if any were not."""
    good = [s for s in samples if s.failure is None]
    failures = Counter(s.failure for s in samples if s.failure is not None)
    retried = Counter(failure[0] for s in samples for a in s.attempts[:-1]
                      if (failure := status_failure(source, a)) is not None)
    retries = sum(len(s.attempts) - 1 for s in samples)
    latencies = [s.final.latency_s * 1000 for s in good]
    latency = ({"p50": round(percentile(latencies, 0.5), 2),
                "p95": round(percentile(latencies, 0.95), 2),
                "max": round(max(latencies), 2)} if latencies else None)
    n, budget = len(samples), source.latency_budget_ms
    if failures:
        reason = _choose(failures)
        status = Status.FAIL if not good or reason is Reason.SCHEMA_DRIFT else Status.FLAKY
        first = next(s for s in samples if s.failure is reason)
        summary = f"{reason} in {failures[reason]}/{n} samples: {first.detail}"
    elif latency is not None and latency["p95"] > budget:
        status, reason = Status.FAIL, Reason.SLOW_RESPONSE
        summary = f"p95 {latency['p95']:.0f} ms over the {budget:.0f} ms latency budget"
    else:
        status = Status.PASS
        reason = Reason.RECOVERED_AFTER_RETRY if retries else Reason.OK
        p50, p95 = (latency or {}).get("p50", 0.0), (latency or {}).get("p95", 0.0)
        summary = f"{n}/{n} ok, p50 {p50:.0f} ms, p95 {p95:.0f} ms"
        if retries:
            kinds = ", ".join(f"{k} x{c}" for k, c in sorted(retried.items()))
            summary += f", after {retries} retries ({kinds})"
    not_sent = max(source.samples - n, 0)
    if not_sent:
        summary += f"; {not_sent} of {source.samples} samples not sent: {stopped}"
    drift = next((s.drift for s in samples if s.drift), [])
    details: dict[str, Any] = {
        "status": str(status), "reason": str(reason), "url": shown_url,
        "method": source.method, "via": via, "samples": n, "ok": len(good),
        "availability": round(len(good) / n, 4), "latency_ms": latency,
        "latency_budget_ms": budget, "failures": {str(k): v for k, v in failures.items()},
        "retries": retries, "retried": {str(k): v for k, v in retried.items()},
        "retry_budget_exhausted": budget_exhausted, "duration_s": round(duration_s, 4),
        "samples_not_sent": not_sent, "not_sent_because": stopped if not_sent else None,
        "problems": [f"sample {i + 1}: {s.failure}: {s.detail}"
                     for i, s in enumerate(samples) if s.failure is not None][:5],
    }
    fingerprints = sorted({s.fingerprint for s in samples if s.fingerprint})
    if fingerprints or accepted:
        details["fingerprint"] = {"accepted": accepted, "observed": fingerprints,
                                  "accepted_now": auto_accepted}
    if drift:
        details["drift"] = drift
    shown = next((s for s in samples if s.failure is reason), samples[-1])
    evidence = _evidence(f"{source.method} {shown_url}", shown.final, duration_s)
    return SourceReport(source.id, status, reason, f"{source.id}: {summary}", details,
                        (evidence,))


def _evidence(command: str, attempt: Attempt, duration_s: float) -> CommandEvidence:
    body = attempt.body
    return CommandEvidence(
        command=command,
        exit_code=attempt.status,  # the HTTP status (None: no answer)
        duration_s=round(duration_s, 4),
        output_head=body[:EVIDENCE_BYTES].decode("utf-8", "replace") or attempt.detail,
        output_bytes=len(body),
        truncated=len(body) > EVIDENCE_BYTES or attempt.truncated,
        timed_out=attempt.failure in TIMEOUTS,
    )


def error_report(source: DataSource, reason: Reason, message: str) -> SourceReport:
    """envcheck could not probe the source (e.g. its secret is missing): ``error``."""
    return SourceReport(source.id, Status.ERROR, reason, f"{source.id}: {message}",
                        {"status": str(Status.ERROR), "reason": str(reason)})
