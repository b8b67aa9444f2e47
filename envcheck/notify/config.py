"""Which webhooks the notifier delivers to: read once at start into frozen values.

Webhook URLs carry tokens (Slack's are the token), so a URL is a secret: it comes from a
webhooks file, an environment variable or a secret file, lives only in memory, and is never
logged, stored or part of a ``repr``. A webhook is known by its name and a stable id (a
hash), which is what logs and the store show. ``$ENVCHECK_WEBHOOKS_FILE`` (or
``--webhooks-file``)::

    version: 1
    webhooks:
      - name: oncall              # shown in logs and the store; renaming starts it afresh
        format: alertmanager      # alertmanager (webhook version "4") | slack
        url_env: ONCALL_WEBHOOK   # exactly one of url_env, url_file, url
      - name: chat
        format: slack
        url_file: /run/secrets/slack-webhook
        read_timeout_s: 5

``--webhook URL`` (repeatable; ``$ENVCHECK_WEBHOOK``, whitespace-separated) adds webhooks of
``--webhook-format`` known by a hash of their URL; a command line is visible to every user of
the host, so use it only for URLs without a token.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envcheck.catalogue.keypaths import format_path
from envcheck.catalogue.sourcefile import read_source
from envcheck.catalogue.sourcelimits import SourceLimits
from envcheck.catalogue.yamlsrc import load_yaml
from envcheck.core.errors import EnvcheckError

__all__ = ["WEBHOOKS_FILE_ENV", "WebhookConfig", "WebhookConfigError", "WebhookFormat",
           "load_webhooks"]

log = logging.getLogger("envcheck.notify.notifier")

WEBHOOKS_FILE_ENV = "ENVCHECK_WEBHOOKS_FILE"
WebhookFormat = Literal["alertmanager", "slack"]


class WebhookConfigError(EnvcheckError, ValueError):
    """The webhooks configuration is unusable; the messages never contain a URL."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    id: str  # stable: from the name (file) or a hash of the URL (command line)
    name: str
    format: WebhookFormat
    url: str = field(repr=False)
    connect_timeout_s: float = 3.05
    read_timeout_s: float = 10.0

    @classmethod
    def build(cls, name: str | None, format: WebhookFormat, url: str,
              connect_timeout_s: float = 3.05, read_timeout_s: float = 10.0) -> Self:
        basis = f"name:{name}" if name else f"url:{url}"
        digest = hashlib.sha256(f"{format}\n{basis}".encode()).hexdigest()[:16]
        return cls(f"wh-{digest}", name or f"{format}-{digest[:8]}", format, url,
                   connect_timeout_s, read_timeout_s)


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    format: WebhookFormat = "alertmanager"
    url: str | None = None
    url_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    url_file: Path | None = None
    connect_timeout_s: float = Field(3.05, gt=0, le=60)
    read_timeout_s: float = Field(10.0, gt=0, le=300)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if sum(x is not None for x in (self.url, self.url_env, self.url_file)) != 1:
            raise ValueError("give exactly one of url, url_env, url_file")
        return self


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1]
    webhooks: list[_Spec] = Field(default_factory=list)


def _checked_url(url: str, where: str) -> str:
    url = url.strip()
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise WebhookConfigError([f"{where}: not an http(s) URL (value not shown)"])
    return url


def _url_of(spec: _Spec, where: str) -> str:
    if spec.url_env is not None:
        value = os.environ.get(spec.url_env, "")
        if not value.strip():
            raise WebhookConfigError([f"{where}: environment variable {spec.url_env} is "
                                      "not set or empty"])
        return _checked_url(value, f"{where} (${spec.url_env})")
    if spec.url_file is not None:
        try:
            value = spec.url_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise WebhookConfigError([f"{where}: cannot read {spec.url_file}: {why}"]) from None
        return _checked_url(value, f"{where} ({spec.url_file})")
    assert spec.url is not None
    return _checked_url(spec.url, where)


def _from_file(path: Path) -> list[WebhookConfig]:
    text, why = read_source(path, SourceLimits())  # regular files only, size-checked
    if text is None:
        raise WebhookConfigError([f"{path}: {why}"])
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise WebhookConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning("webhooks file is readable by other users; webhook URLs carry tokens",
                    extra={"file": str(path)})
    doc = load_yaml(str(path), text)
    if doc.issues:
        raise WebhookConfigError([str(i) for i in doc.issues])
    try:
        parsed = _File.model_validate(doc.data)
    except ValidationError as exc:  # loc and message only: the input may be a URL
        raise WebhookConfigError([
            f"{path}:{doc.line_of(tuple(e['loc'])) or '?'}: {format_path(tuple(e['loc']))}: "
            f"{e['msg']}" for e in exc.errors()]) from None
    hooks: list[WebhookConfig] = []
    for i, spec in enumerate(parsed.webhooks):
        where = f"{path}:{doc.line_of(('webhooks', i)) or '?'}: webhook {spec.name!r}"
        hooks.append(WebhookConfig.build(spec.name, spec.format, _url_of(spec, where),
                                         spec.connect_timeout_s, spec.read_timeout_s))
    return hooks


def load_webhooks(file: Path | None = None, urls: Sequence[str] = (),
                  format: WebhookFormat = "alertmanager") -> tuple[WebhookConfig, ...]:
    """The webhooks of ``file`` and ``urls``; raises :class:`WebhookConfigError`."""
    hooks = _from_file(file) if file is not None else []
    hooks += [WebhookConfig.build(None, format, _checked_url(u, f"--webhook #{i + 1}"))
              for i, u in enumerate(urls)]
    seen: dict[str, str] = {}
    for hook in hooks:
        if hook.id in seen:
            raise WebhookConfigError([f"webhook {hook.name!r} is configured twice"])
        seen[hook.id] = hook.name
    return tuple(hooks)
