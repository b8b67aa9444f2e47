"""A small client of envcheck's HTTP API for schedulers (``requests`` + ``tenacity``).

::

    with EnvcheckClient("http://127.0.0.1:8780", fail_mode="closed") as envcheck:
        usable = envcheck.allowlist("swe-train")
        if envcheck.is_allowed("repo-123", "swe-train"): ...

Every request has explicit (connect, read) timeouts. Connection errors, timeouts and 5xx
answers are retried with jittered exponential backoff (``retries`` times); a 4xx is an
answer and is never retried: it raises :class:`ApiError` (unknown suite, bad token ...).

GETs are conditional: the client keeps the last answer per URL, sends its ETag in
``If-None-Match`` and reuses the kept body on ``304 Not Modified``, so polling a
10,000-environment allowlist costs the server a few bytes while nothing changes.

**When envcheck cannot be reached** (after the retries) the ``fail_mode`` decides:

=================  ====================================  ======================================
                   ``allowlist(suite)``                  ``is_allowed(env, suite)``
=================  ====================================  ======================================
``"closed"``       raises :class:`EnvcheckUnavailable`   ``False``: nothing is allowed
``"open"``         the last known allowlist              membership in the last known allowlist;
                   (this client's last answer, else the  ``True`` if no list is known at all
                   export file ``allowlist-<suite>.json``
                   in ``fallback_dir``); raises
                   :class:`EnvcheckUnavailable` if none
=================  ====================================  ======================================

Closed is the default: a broken environment poisons a training run silently, an envcheck
outage is loud. Open keeps training going through an envcheck outage on the last evidence,
and admits everything when there is none; a warning is logged on every fallback and
:attr:`EnvcheckClient.last_error` holds the cause. The other reads (quarantine list,
environment detail) and the mutations raise :class:`EnvcheckUnavailable` in both modes.

Mutations send the bearer token (never logged; not part of ``repr``) and are retried like
reads: adding or releasing twice is harmless (the second answers ``changed: false``).

:meth:`EnvcheckClient.rollouts` gives a trainer a reporter of its rollouts that never blocks
its step (:mod:`envcheck.client_rollouts`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote, urlencode

import requests
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from envcheck.client_rollouts import ReporterStats, RolloutReporter
from envcheck.core.errors import EnvcheckError

__all__ = [
    "ApiError",
    "EnvcheckClient",
    "EnvcheckUnavailable",
    "FailMode",
    "QuarantinedEnvironment",
    "ReporterStats",
    "RolloutReporter",
    "TaintedInterval",
]

log = logging.getLogger("envcheck.client")

FailMode = Literal["closed", "open"]


class EnvcheckUnavailable(EnvcheckError):
    """envcheck did not answer (connection refused, timeout, 5xx) after the retries."""


class ApiError(EnvcheckError):
    """envcheck answered with a 4xx: the request is wrong (unknown suite, bad token ...)."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status, self.error, self.reason = status, error, reason


class _ServerError(Exception):
    """A 5xx answer: retried, then reported as unavailability."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.status = status


@dataclass(frozen=True, slots=True)
class QuarantinedEnvironment:
    env_id: str
    suite: str
    state: str
    source: str  # auto | manual
    actor: str
    reason: str
    since: datetime | None
    evidence: tuple[int, ...]  # ids of the probe results that decided


@dataclass(frozen=True, slots=True)
class TaintedInterval:
    """When an environment's rewards could not be trusted: drop, relabel or replay the
    samples taken in ``[start, end)`` (``end`` None: still)."""

    env_id: str
    suite: str
    start: datetime
    end: datetime | None
    image_digest: str | None
    kind: str | None  # the probe kind, "rollouts", or None: a person's quarantine
    reason: str
    basis: str  # identity | first_failure | first_failing_rollouts | manual
    flagged_at: datetime
    evidence: tuple[int, ...]  # ids of the probe results that show it

    def covers(self, at: datetime) -> bool:
        """Is a sample taken at ``at`` (timezone-aware) inside?"""
        return self.start <= at and (self.end is None or at < self.end)


Moment = datetime | str  # a time, an age ("24h", "7d") or an ISO 8601 date or time


@dataclass(frozen=True, slots=True)
class _Kept:
    etag: str
    body: Any


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, requests.ConnectionError | requests.Timeout | _ServerError)


class EnvcheckClient:
    """See the module docstring. ``session`` and ``sleep`` are injectable for tests."""

    def __init__(self, base_url: str, token: str | None = None, *,
                 timeout: tuple[float, float] = (3.05, 10.0), retries: int = 3,
                 backoff_s: tuple[float, float] = (0.2, 2.0), fail_mode: FailMode = "closed",
                 fallback_dir: Path | None = None, session: requests.Session | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if fail_mode not in ("closed", "open"):
            raise ValueError(f"fail_mode must be 'closed' or 'open', not {fail_mode!r}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.timeout, self.retries, self.fail_mode = timeout, retries, fail_mode
        self.fallback_dir = fallback_dir
        self.last_error: Exception | None = None
        self._token = token
        self._backoff, self._sleep = backoff_s, sleep
        self._own_session = session is None
        self._session = session or requests.Session()
        if self._own_session:
            # No proxies or .netrc from the environment: .netrc would even replace our token.
            self._session.trust_env = False
        self._kept: dict[str, _Kept] = {}
        self._reporters: list[RolloutReporter] = []

    def __repr__(self) -> str:
        return (f"EnvcheckClient({self.base_url!r}, fail_mode={self.fail_mode!r}, "
                f"token={'set' if self._token else 'none'})")

    # --- the feed ---------------------------------------------------------------------------

    def allowlist(self, suite: str) -> list[str]:
        """Ids a scheduler may use from ``suite`` now (see the module docstring on outages)."""
        path = f"/v1/suites/{quote(suite, safe='')}/allowlist"
        try:
            return list(self._get(path)["allowed"])
        except EnvcheckUnavailable as exc:
            if self.fail_mode == "closed":
                raise
            known = self._last_known(path, suite)
            if known is None:
                raise EnvcheckUnavailable(f"{exc}; fail-open, but no allowlist of {suite!r} "
                                          "is known yet") from exc
            log.warning("envcheck unavailable (%s): fail-open with the last known allowlist "
                        "of %s (%d environments)", exc, suite, len(known))
            return known

    def is_allowed(self, env_id: str, suite: str) -> bool:
        """May ``env_id`` of ``suite`` be used now? In an outage: False when closed; when open,
        per the last known allowlist, or True if none is known."""
        try:
            return env_id in self.allowlist(suite)
        except EnvcheckUnavailable as exc:
            verdict = self.fail_mode == "open"
            log.warning("envcheck unavailable (%s): fail-%s, %s %s", exc, self.fail_mode,
                        "allowing" if verdict else "refusing", env_id)
            return verdict

    def quarantine(self, suite: str | None = None) -> list[QuarantinedEnvironment]:
        """The quarantined environments (of ``suite``, if given)."""
        path = "/v1/quarantine" + (f"?suite={quote(suite, safe='')}" if suite else "")
        return [QuarantinedEnvironment(
            env_id=e["env_id"], suite=e["suite"], state=e["state"], source=e["source"],
            actor=e["actor"], reason=e["reason"],
            since=datetime.fromisoformat(e["since"]) if e["since"] else None,
            evidence=tuple(e["evidence"])) for e in self._get(path)["quarantined"]]

    def environment(self, env_id: str, history: int = 20) -> dict[str, Any]:
        """An environment's document: state, per-kind health, history, latest results."""
        body: dict[str, Any] = self._get(
            f"/v1/environments/{quote(env_id, safe='')}?history={history}")
        return body

    def taint(self, env_id: str, since: Moment | None = None, until: Moment | None = None
              ) -> list[TaintedInterval]:
        """The tainted intervals of one environment that meet ``[since, until]``."""
        return self._taint(f"/v1/environments/{quote(env_id, safe='')}/taint",
                           {"since": since, "until": until})

    def taint_all(self, suite: str | None = None, since: Moment | None = None,
                  until: Moment | None = None) -> list[TaintedInterval]:
        """The tainted intervals of every environment (of ``suite``) that meet
        ``[since, until]``, by environment and start."""
        return self._taint("/v1/taint", {"suite": suite, "since": since, "until": until})

    def quarantine_add(self, env_id: str, reason: str, actor: str | None = None
                       ) -> dict[str, Any]:
        """Quarantine by hand (needs the token); returns the server's answer."""
        return self._change("POST", env_id, reason, actor)

    def quarantine_release(self, env_id: str, reason: str, actor: str | None = None
                           ) -> dict[str, Any]:
        """Release by hand (needs the token); returns the server's answer."""
        return self._change("DELETE", env_id, reason, actor)

    def rollouts(self, producer: str | None = None, **options: Any) -> RolloutReporter:
        """A reporter of the trainer's rollouts to this envcheck (needs the token), with this
        client's timeouts and backoff; ``producer`` names the run (default: a fresh id), the
        options are :class:`RolloutReporter`'s. Closing the client closes it too."""
        options.setdefault("timeout", self.timeout)
        options.setdefault("backoff_s", self._backoff)
        reporter = RolloutReporter(self.base_url, self._token, producer, **options)
        self._reporters.append(reporter)
        return reporter

    # --- plumbing ---------------------------------------------------------------------------

    def _taint(self, path: str, query: dict[str, Moment | None]) -> list[TaintedInterval]:
        params = {k: v.isoformat() if isinstance(v, datetime) else v
                  for k, v in query.items() if v is not None}
        body = self._get(path + (f"?{urlencode(params)}" if params else ""))

        def at(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        return [TaintedInterval(
            env_id=i["env_id"], suite=i["suite"], start=datetime.fromisoformat(i["start"]),
            end=at(i["end"]), image_digest=i["image_digest"], kind=i["kind"],
            reason=i["reason"], basis=i["basis"],
            flagged_at=datetime.fromisoformat(i["flagged_at"]),
            evidence=tuple(i["evidence"])) for i in body["intervals"]]

    def _change(self, method: str, env_id: str, reason: str, actor: str | None
                ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        body = {"reason": reason, **({"actor": actor} if actor is not None else {})}
        response = self._send(method, f"/v1/quarantine/{quote(env_id, safe='')}",
                              headers=headers, json=body)
        answer: dict[str, Any] = self._decode(response)
        return answer

    def _get(self, path: str) -> Any:
        kept = self._kept.get(path)
        headers = {"If-None-Match": kept.etag} if kept is not None else {}
        response = self._send("GET", path, headers=headers)
        if response.status_code == 304 and kept is not None:
            return kept.body
        body = self._decode(response)
        etag = response.headers.get("ETag")
        if etag:
            self._kept[path] = _Kept(etag, body)
        return body

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        def attempt() -> requests.Response:
            response = self._session.request(method, self.base_url + path,
                                             timeout=self.timeout, allow_redirects=False,
                                             **kwargs)
            if response.status_code >= 500:
                text = response.text
                response.close()
                raise _ServerError(response.status_code, text)
            return response

        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            # exponential from backoff[0] up to backoff[1], plus up to backoff[0] of jitter
            wait=wait_exponential(multiplier=self._backoff[0], max=self._backoff[1])
            + wait_random(0, self._backoff[0]),
            retry=retry_if_exception(_transient), sleep=self._sleep, reraise=True,
            before_sleep=lambda state: log.info(
                "envcheck %s %s failed (attempt %d): %s; retrying", method, path,
                state.attempt_number, state.outcome.exception() if state.outcome else "?"))
        try:
            response = retrying(attempt)
        except (requests.RequestException, _ServerError) as exc:
            self.last_error = exc
            raise EnvcheckUnavailable(f"envcheck at {self.base_url} did not answer "
                                      f"{method} {path}: {exc}") from exc
        self.last_error = None
        return response

    def _decode(self, response: requests.Response) -> Any:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        if 400 <= status < 500:
            problem = body if isinstance(body, dict) else {}
            raise ApiError(status, str(problem.get("error", "http_error")),
                           str(problem.get("reason", response.reason or "")))
        if status != 200 or body is None:
            what = "without a JSON body" if body is None else "unexpectedly"
            error = EnvcheckUnavailable(f"envcheck answered {status} {what}")
            self.last_error = error
            raise error
        return body

    def _last_known(self, path: str, suite: str) -> list[str] | None:
        kept = self._kept.get(path)
        if kept is not None:
            return list(kept.body["allowed"])
        if self.fallback_dir is None:
            return None
        export = self.fallback_dir / f"allowlist-{suite}.json"
        try:
            doc = json.loads(export.read_text(encoding="utf-8"))
            return [str(env_id) for env_id in doc["allowed"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("no usable fallback allowlist at %s: %s", export, exc)
            return None

    def close(self) -> None:
        for reporter in self._reporters:
            reporter.close()
        if self._own_session:
            self._session.close()

    def __enter__(self) -> EnvcheckClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
