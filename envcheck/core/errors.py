"""envcheck's one exception tree. Exceptions are for envcheck's own faults only.

::

    EnvcheckError
    ├── CatalogueError (ValueError)        a catalogue file is malformed; carries every issue
    ├── ConfigError (ValueError)           a setting the user gave (a path, an environment
    │                                       variable) cannot be used: bad input, like the above
    ├── StoreError                          the result store is unreachable or inconsistent
    │   └── StoreUnavailable                for the store's own state, not the operation's (it
    │                                       does not answer, dropped the connection, is full or
    │                                       locked, or this daemon's lease is lost): it passes
    ├── LeaseHeld                           another daemon holds the store's lease (one writer
    │                                       per store): refused, like bad input
    └── InfraError                          envcheck's infrastructure failed; maps to Status.ERROR
        ├── EngineUnreachable               the Docker engine does not answer
        ├── ImageMissing (LookupError)      the image is not present on the host
        ├── SandboxFailed                   a container could not be created or died under us
        ├── SecretUnavailable               a data source's secret env var or file is missing
        └── ExecutorUnavailable             no worker can run checks (e.g. Ray cluster unreachable)
    SandboxStartFailed                      the *image* cannot start a container: an environment
                                            verdict in transit, turned into a result by the probe
                                            base and never raised past it
    ImageBuildFailed                        a task's Dockerfile does not build: an environment
                                            verdict in transit, like the above
    ComposeFailed                           a task's compose file is refused, or one of its
                                            services does not start or become healthy: an
                                            environment verdict in transit, like the above

Third-party errors (docker, requests) are translated into these, or into reason codes,
at one boundary per backend (``envcheck.sandbox.engine``, ``envcheck.net.http``), never deeper.
"""

from __future__ import annotations

from dataclasses import dataclass

from envcheck.core.results import Reason

__all__ = [
    "CatalogueError",
    "CatalogueIssue",
    "ComposeFailed",
    "ConfigError",
    "EngineUnreachable",
    "EnvcheckError",
    "ExecutorUnavailable",
    "ImageBuildFailed",
    "ImageMissing",
    "InfraError",
    "LeaseHeld",
    "SandboxFailed",
    "SandboxStartFailed",
    "SecretUnavailable",
    "StoreError",
    "StoreUnavailable",
]


class EnvcheckError(Exception):
    """Root of every exception envcheck raises on purpose."""


@dataclass(frozen=True, slots=True)
class CatalogueIssue:
    file: str
    line: int | None
    key: str
    message: str

    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def __str__(self) -> str:
        key = f" {self.key}:" if self.key else ""
        return f"{self.location()}:{key} {self.message}"


class CatalogueError(EnvcheckError, ValueError):
    def __init__(self, issues: list[CatalogueIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class ConfigError(EnvcheckError, ValueError):
    """A setting the user gave cannot be used (e.g. a data directory that cannot be created).
    Its message is one line naming the setting, what is wrong and how to fix it."""


class StoreError(EnvcheckError):
    pass


class StoreUnavailable(StoreError):
    """The store could not take an operation for its own state, not for the operation: it
    does not answer, dropped the connection, is full or locked, or this daemon's lease on it
    is lost. It passes: the same operation may succeed later. ``reason``: the store's own
    words, one line; ``where``: which store (its URL, password masked)."""

    def __init__(self, message: str, reason: str, where: str = "") -> None:
        super().__init__(message)
        self.reason, self.where = reason, where


class LeaseHeld(EnvcheckError):
    """Another daemon holds the store's lease: the message names it (host, pid, since)."""


class InfraError(EnvcheckError):
    """envcheck could not do its job; the affected results get ``Status.ERROR``."""

    reason: Reason = Reason.CHECKER_CRASHED


class EngineUnreachable(InfraError):
    reason = Reason.ENGINE_UNREACHABLE


class ImageMissing(InfraError, LookupError):
    reason = Reason.IMAGE_MISSING


class SandboxFailed(InfraError):
    reason = Reason.CHECKER_CRASHED


class SecretUnavailable(InfraError):
    """A deployment problem (the secret was not provided), never the environment's fault."""

    reason = Reason.SECRET_UNAVAILABLE


class ExecutorUnavailable(InfraError):
    """The executor has nowhere to run checks: its cluster is unreachable or has no node
    with a Docker engine."""

    reason = Reason.NODE_UNAVAILABLE


class RegistryFailed(InfraError):
    """The registry an image lives in failed envcheck (unreachable, refused its credentials,
    rate-limited it) or the image cache had no room: envcheck's, never the environment's.
    ``reason`` is set per instance from the registry stage's classification."""

    reason = Reason.REGISTRY_UNREACHABLE

    def __init__(self, message: str, reason: Reason = Reason.REGISTRY_UNREACHABLE,
                 registry: str = "", details: dict[str, object] | None = None) -> None:
        self.reason = reason
        self.registry = registry
        self.details = dict(details or {})
        super().__init__(message)


class ImageNotFound(EnvcheckError, LookupError):
    """The registry says the reference names no image (the tag or repository is gone), seen on
    two looks a watch interval apart: the environment's defect, a trainer would fail on it too."""

    def __init__(self, message: str, registry: str = "",
                 details: dict[str, object] | None = None) -> None:
        self.registry = registry
        self.details = dict(details or {})
        super().__init__(message)


class SandboxStartFailed(EnvcheckError):
    """The environment's image could not start a container (its defect, not envcheck's)."""

    def __init__(self, message: str, duration_s: float = 0.0) -> None:
        self.duration_s = duration_s
        super().__init__(message)


class ImageBuildFailed(EnvcheckError):
    """An environment's own build context (its Dockerfile) does not build: its defect, not
    envcheck's. Carries the tail of the build log as evidence."""

    def __init__(self, message: str, log_tail: str = "", duration_s: float = 0.0) -> None:
        self.log_tail = log_tail
        self.duration_s = duration_s
        super().__init__(message)


class ComposeFailed(EnvcheckError):
    """A multi-container task's defect, not envcheck's: its compose file cannot be read or
    asks for what a sandbox refuses, or one of its services (``service``) does not start or
    become healthy in time. ``reason`` is the result's reason; ``log_tail`` the service's log
    (or Compose's output) as evidence."""

    def __init__(self, reason: Reason, message: str, *, service: str | None = None,
                 log_tail: str = "", command: str = "", duration_s: float = 0.0) -> None:
        self.reason = reason
        self.service = service
        self.log_tail = log_tail
        self.command = command
        self.duration_s = duration_s
        super().__init__(message)
