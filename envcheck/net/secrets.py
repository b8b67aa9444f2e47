"""Secrets of data sources: read when a probe needs them, never kept, masked wherever text leaves.

A secret comes only from an environment variable or a file the catalogue names. It lives in
memory for one probe of one source. Everything a probe emits (summary, details, evidence) and
every log record of the HTTP stack passes through a :class:`Redactor` first, which also masks
what looks like a credential in any URL (a password, a token-like query parameter), so even a
catalogue that writes a token into a URL does not leak it into the store.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlencode, urlsplit, urlunsplit

from envcheck.catalogue.datasources import Auth, SecretRef
from envcheck.core.errors import SecretUnavailable

__all__ = ["REDACTED", "Redactor", "auth_header", "read_secret", "read_secret_from", "redact_url",
           "secrets_in_use"]

REDACTED = "***"
# A query parameter whose name contains one of these carries a credential.
_SENSITIVE = ("token", "secret", "key", "pass", "auth", "sig", "session", "credential", "pwd")
_URL = re.compile(r"https?://[^\s'\"<>]+")
# The HTTP stack's loggers: urllib3 logs request lines (query included) at DEBUG.
_HTTP_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry", "urllib3.response",
                 "urllib3.poolmanager", "urllib3.connection")


def read_secret(auth: SecretRef) -> str:
    """The secret's value, surrounding whitespace dropped; never part of any message."""
    return read_secret_from(auth.env, auth.file)


def read_secret_from(env: str | None, file: str | None) -> str:
    """The secret in environment variable ``env`` or else in ``file`` (one of them is set),
    surrounding whitespace dropped; never part of any message. Every secret the catalogue
    names (a data source's, a registry's) is read here."""
    if env is not None:
        value = os.environ.get(env, "")
        where = f"environment variable {env}"
    else:
        assert file is not None  # the models allow exactly one of env and file
        where = f"secret file {file}"
        try:
            value = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise SecretUnavailable(f"cannot read {where}: {why}") from None
    if not value.strip():
        raise SecretUnavailable(f"{where} is not set or empty")
    return value.strip()


def auth_header(auth: Auth, secret: str) -> str:
    if auth.scheme.lower() == "basic":
        return "Basic " + base64.b64encode(secret.encode()).decode("ascii")
    return f"{auth.scheme} {secret}" if auth.scheme else secret


def _sensitive(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SENSITIVE)


def redact_url(url: str) -> str:
    """``url`` with its password and credential-like query values masked."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = netloc.replace(f":{parts.password}@", f":{REDACTED}@", 1)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:  # not parsable as a URL: mask it whole rather than guess
        return "<unparsable URL>"
    if any(_sensitive(k) for k, _ in query):
        masked = [(k, REDACTED if _sensitive(k) else v) for k, v in query]
        rebuilt = urlencode(masked, safe="*")
    else:
        rebuilt = parts.query
    return urlunsplit((parts.scheme, netloc, parts.path, rebuilt, parts.fragment))


class Redactor:
    """Masks known secret values (and the forms they travel in) and credentials in URLs."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms |= {secret, quote(secret, safe=""), quote_plus(secret),
                          base64.b64encode(secret.encode()).decode("ascii")}
        # Longest first: a secret containing another is masked whole.
        self._forms = sorted(forms, key=len, reverse=True)

    def text(self, text: str) -> str:
        for form in self._forms:
            text = text.replace(form, REDACTED)
        if "://" not in text:  # most strings hold no URL: skip the regex
            return text
        return _URL.sub(lambda m: redact_url(m.group(0)), text)

    def value(self, value: Any) -> Any:
        """``value`` with every string in it (keys included) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        return value


class _LogRedaction(logging.Filter):
    """Masks the secrets of in-flight probes in the HTTP stack's log records."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._live: Counter[str] = Counter()
        self._redactor = Redactor()

    def add(self, secret: str) -> None:
        with self._lock:
            self._live[secret] += 1
            self._redactor = Redactor(self._live)

    def discard(self, secret: str) -> None:
        with self._lock:
            self._live[secret] -= 1
            if self._live[secret] <= 0:
                del self._live[secret]
            self._redactor = Redactor(self._live)

    def filter(self, record: logging.LogRecord) -> bool:
        # Even with no secret in flight, URLs get their credential-like parts masked.
        record.msg = self._redactor.text(record.getMessage())
        record.args = ()
        return True


_LOG_REDACTION = _LogRedaction()
for _name in _HTTP_LOGGERS:
    logging.getLogger(_name).addFilter(_LOG_REDACTION)


@contextmanager
def secrets_in_use(secrets: Iterable[str]) -> Iterator[Redactor]:
    """While a probe sends ``secrets``, mask them in the HTTP stack's logs; yields the
    redactor for everything the probe itself emits."""
    held = [s for s in secrets if s]
    for secret in held:
        _LOG_REDACTION.add(secret)
    try:
        yield Redactor(held)
    finally:
        for secret in held:
            _LOG_REDACTION.discard(secret)
