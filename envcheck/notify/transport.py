"""Webhook transports: one HTTP base with the delivery policy, one tiny class per format.

:class:`WebhookTransport` sends one POST with explicit (connect, read) timeouts, follows no
redirect, reads at most a little of an error answer, and classifies the outcome: 2xx
delivered; connection errors, timeouts, 429 and 5xx transient (worth another attempt, with
Retry-After if given); anything else refused for good. The webhook URL is a secret: every
error is redacted, and urllib3's debug log lines are masked while a request is in flight.
The formats only render an :class:`~envcheck.notify.payloads.AlertGroup` as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests
import urllib3.exceptions as u3

from envcheck.net.http import classify, parse_retry_after
from envcheck.net.secrets import Redactor, secrets_in_use
from envcheck.notify.config import WebhookConfig
from envcheck.notify.payloads import AlertGroup, alertmanager_payload, slack_payload
from envcheck.store.deliveries import DeliveryStatus

__all__ = ["TRANSPORTS", "AlertmanagerTransport", "PostResult", "SlackTransport",
           "WebhookTransport"]

_MAX_ERROR_BODY = 512


@dataclass(frozen=True, slots=True)
class PostResult:
    status: DeliveryStatus  # PENDING: a transient failure, worth another attempt
    http_status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None


def _secret_forms(url: str) -> list[str]:
    """What of a webhook URL may be a token: all of it, path and query, longer pieces."""
    parts = urlsplit(url)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    pieces = [s for s in parts.path.split("/") if len(s) >= 6]
    pieces += [v for _, v in parse_qsl(parts.query) if len(v) >= 4]
    pieces += [p for p in (parts.password, parts.username) if p]
    return [url, tail, *pieces]


class WebhookTransport:
    """One webhook over HTTP: one POST per call, explicit timeouts, the status policy, and
    errors with the URL's secrets masked. Subclasses only render a group as JSON."""

    def __init__(self, hook: WebhookConfig, session: requests.Session,
                 external_url: str) -> None:
        self.hook, self.external_url = hook, external_url
        self._session = session
        self._secrets = _secret_forms(hook.url)
        self._redactor = Redactor(self._secrets)

    def render(self, group: AlertGroup) -> dict[str, Any]:
        raise NotImplementedError

    def redact(self, text: str) -> str:
        return self._redactor.text(text)

    def post(self, body: bytes, key: str) -> PostResult:
        """POST ``body``; never raises for what the network or the receiver does."""
        headers = {"Content-Type": "application/json", "User-Agent": "envcheck-notify",
                   "Idempotency-Key": key}
        try:
            with secrets_in_use(self._secrets):  # masks them in urllib3's debug logs too
                response = self._session.post(
                    self.hook.url, data=body, headers=headers, allow_redirects=False,
                    timeout=(self.hook.connect_timeout_s, self.hook.read_timeout_s),
                    stream=True)
        except (requests.ConnectionError, requests.Timeout, u3.HTTPError, OSError) as exc:
            return PostResult(DeliveryStatus.PENDING, error=self._describe(exc))
        except requests.RequestException as exc:  # a malformed request: asking again won't help
            return PostResult(DeliveryStatus.FAILED, error=self._describe(exc))
        code, head = response.status_code, b""
        try:  # of an error answer, one read of its start (for the record), never more
            if not 200 <= code < 300:
                head = response.raw.read1(_MAX_ERROR_BODY)
        except (requests.RequestException, u3.HTTPError, OSError):
            pass  # the status is the answer; its body is a courtesy
        finally:
            response.close()
        if 200 <= code < 300:
            return PostResult(DeliveryStatus.DELIVERED, code)
        error = self.redact(f"HTTP {code}: {head.decode('utf-8', 'replace')}".strip())[:300]
        if code == 429 or code >= 500:
            after = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
            return PostResult(DeliveryStatus.PENDING, code, error, after)
        return PostResult(DeliveryStatus.FAILED, code, error)  # 3xx (not followed), 4xx

    def _describe(self, exc: BaseException) -> str:
        reason = classify(exc)
        kind = str(reason) if reason is not None else type(exc).__name__
        return self.redact(f"{kind}: {exc}")[:300]


class AlertmanagerTransport(WebhookTransport):
    def render(self, group: AlertGroup) -> dict[str, Any]:
        return alertmanager_payload(group, self.hook.name, self.external_url)


class SlackTransport(WebhookTransport):
    def render(self, group: AlertGroup) -> dict[str, Any]:
        return slack_payload(group)


TRANSPORTS: dict[str, type[WebhookTransport]] = {
    "alertmanager": AlertmanagerTransport, "slack": SlackTransport}


