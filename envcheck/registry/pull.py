"""The puller: an image pulled by its digest (never a moving tag), under a deadline, with
retries for what may pass, limits per registry and in all, and its bytes and seconds counted.

A pull is complete only when the engine holds an image whose ``RepoDigests`` names the
expected ``repository@digest``; it is then tagged at once as envcheck's cache
(:func:`cache_tag`), because an image pulled by digest has no tag and the engine's
``image prune`` takes it for dangling (moby/moby#42664). A pull cut at its deadline leaves
nothing the engine counts as an image: closing the stream cancels it (``pull_stream``).

Retries (tenacity, exponential, within the deadline): only failures that may pass, as the
engine's text says (a refused connection, a 5xx, a timeout of the registry's). Never a wrong
or missing credential, an image the registry does not have, a disk that filled (the caller
evicts and tries once more) or a rate limit: a 429 puts the registry in a backoff of its
own, during which its pulls fail at once without asking the engine (other registries go on).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import docker
import docker.auth
import docker.errors
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from envcheck.core.errors import EngineUnreachable, InfraError, RegistryFailed
from envcheck.core.results import Reason
from envcheck.registry.credentials import Credentials as RegistryLogin
from envcheck.registry.credentials import RegistryCredentials
from envcheck.registry.engine_failures import EngineFailure, engine_gone
from envcheck.registry.outcomes import RegistryFailure
from envcheck.registry.pull_stream import read_pull_stream
from envcheck.registry.reference import ImageReference, InvalidReference
from envcheck.registry.state import RegistryBackoff
from envcheck.registry.stats import OUTCOME_OK, OUTCOME_TIMEOUT, RegistryStats

__all__ = ["CACHE_REPOSITORY", "PullLimits", "PullTarget", "Pulled", "Puller", "auth_config",
           "cache_tag", "credentials_from", "holds", "registry_of"]

log = logging.getLogger("envcheck.registry.pull")

# Every image envcheck pulled carries a tag under this name: its own, so prune leaves it, and
# the mark by which a restarted envcheck finds its pulls (the ledger adopts what it missed).
CACHE_REPOSITORY = "envcheck-cache"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME_MAX = 255  # the engine's limit on a repository name


def registry_of(repository: str) -> str:
    """The registry host a repository lives in, as docker-py resolves it (``docker.io`` for
    a bare Docker Hub name)."""
    return str(docker.auth.resolve_repository_name(repository)[0])


@dataclass(frozen=True, slots=True)
class PullTarget:
    """What to pull: ``repository`` (``host[:port]/path``, no tag) at ``digest``."""

    repository: str
    digest: str

    def __post_init__(self) -> None:
        if not _DIGEST.match(self.digest):
            raise ValueError(f"{self.digest!r} is not a sha256 digest (sha256:<64 hex>)")
        try:
            ref = ImageReference.parse(self.repository)
        except InvalidReference as exc:
            raise ValueError(str(exc)) from None
        if "@" in self.repository or ref.tag != "latest" or self.repository.endswith(":latest"):
            raise ValueError(f"{self.repository!r} must name a repository without a tag or "
                             "digest")
        # one spelling per repository (``python`` is ``docker.io/library/python``): the
        # ledger's key, the cache tag and the engine's RepoDigests all agree on it
        object.__setattr__(self, "repository", ref.name)

    @classmethod
    def of(cls, reference: ImageReference, digest: str | None = None) -> PullTarget:
        """The watch's reference at ``digest`` (its own when it is pinned)."""
        chosen = digest or reference.digest
        if chosen is None:
            raise ValueError(f"{reference}: a pull needs a digest (never a moving tag)")
        return cls(reference.name, chosen)

    @property
    def registry(self) -> str:
        return registry_of(self.repository)

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


def cache_tag(target: PullTarget) -> tuple[str, str]:
    """The (repository, tag) envcheck tags a pull with:
    ``envcheck-cache/<registry>/<path>:<digest hex>``, the registry's ``:port`` written
    ``-port`` (a colon is not allowed there); a name past the engine's limit is shortened to
    a hash of the repository."""
    registry, path = docker.auth.resolve_repository_name(target.repository)
    name = f"{CACHE_REPOSITORY}/{str(registry).replace(':', '-')}/{path}".lower()
    if len(name) > _NAME_MAX:
        name = f"{CACHE_REPOSITORY}/{hashlib.sha256(target.repository.encode()).hexdigest()}"
    return name, target.digest.removeprefix("sha256:")


def _canonical(reference: str) -> tuple[str, str, str | None] | None:
    try:
        ref = ImageReference.parse(reference)
    except InvalidReference:
        return None
    return ref.registry, ref.repository, ref.digest


def holds(attrs: dict[str, Any], target: PullTarget) -> bool:
    """The engine's image (``inspect_image``'s answer) is ``target`` complete: its
    ``RepoDigests`` name the repository at the digest (the engine writes Docker Hub's names
    short, ``python@sha256:...``: compared as references, not as text)."""
    wanted = _canonical(target.reference)
    return any(_canonical(str(found)) == wanted for found in attrs.get("RepoDigests") or [])


def auth_config(login: RegistryLogin) -> dict[str, str]:
    """What the engine's ``X-Registry-Auth`` takes for ``login``; empty when anonymous (the
    Docker config was read already: docker-py need not read it again)."""
    if login.identity_token:
        return {"identitytoken": login.identity_token}
    if login.username and login.password:
        return {"username": login.username, "password": login.password}
    return {}


def credentials_from(registry_credentials: RegistryCredentials
                     ) -> Callable[[str], dict[str, str] | None]:
    """The puller's credentials as the tag watch reads them (the catalogue's source for the
    registry, else the Docker CLI's config and helpers), one mechanism for both."""
    return lambda registry: auth_config(registry_credentials.for_registry(registry))


@dataclass(frozen=True, slots=True)
class Pulled:
    """A complete pull: the engine's image id, the seconds the pull took (all attempts and
    waits for a slot: recorded apart from the probe's own duration), the bytes downloaded."""

    target: PullTarget
    image_id: str
    seconds: float
    downloaded: int
    attempts: int


@dataclass(frozen=True, slots=True)
class PullLimits:
    total: int = 4  # pulls at once on this engine (each already fetches 3 layers at once)
    per_registry: int = 2
    attempts: int = 3  # tries of a pull whose failure may pass
    log_every_s: float = 5.0  # progress lines per pull, at most one per this interval


class _Transient(Exception):
    """An attempt failed in a way another attempt may not (tenacity retries only this)."""

    def __init__(self, failure: EngineFailure) -> None:
        self.failure = failure
        super().__init__(failure.message)


Credentials = Callable[[str], dict[str, str] | None]


class Puller:
    """Pulls through ``api`` (docker-py's low-level client of the engine). ``credentials``
    gives the ``auth_config`` for a registry, or None to let docker-py read the Docker CLI's
    config (``DOCKER_CONFIG`` / ``~/.docker/config.json``, helpers included); what it returns
    is handed to the engine and never logged or kept."""

    def __init__(self, api: docker.APIClient, *, limits: PullLimits | None = None,
                 stats: RegistryStats | None = None,
                 credentials: Credentials | None = None,
                 backoff: RegistryBackoff | None = None) -> None:
        self._api = api
        self.limits = limits or PullLimits()
        self.stats = stats or RegistryStats()
        self._credentials = credentials
        self._all = threading.BoundedSemaphore(max(self.limits.total, 1))
        self._lock = threading.Lock()
        self._per_registry: dict[str, threading.BoundedSemaphore] = {}
        # one registry's 429s hold its pulls back (the tag watch's backoff when handed in:
        # a rate limit its looks met holds the pulls back too, and the other way round); the
        # engine hides the registry's Retry-After, so a pull's 429 takes the default wait
        self.backoff = backoff if backoff is not None else RegistryBackoff()

    def pull(self, target: PullTarget, deadline: float) -> Pulled:
        """Pull ``target`` by digest before ``deadline`` (``time.monotonic()``), tag it as
        envcheck's and return it. Raises ``RegistryFailed`` (its reason says which),
        ``ImageNotFound`` (the registry has no such manifest) or ``EngineUnreachable``."""
        begun = time.monotonic()
        registry = target.registry
        self._refuse_if_backing_off(target, registry)
        attempts = 0
        downloaded = 0

        def attempt() -> str:
            nonlocal attempts, downloaded
            attempts += 1
            image_id, got = self._attempt(target, registry, deadline)
            downloaded += got
            return image_id

        retrying = Retrying(
            retry=retry_if_exception(lambda exc: isinstance(exc, _Transient)),
            # no try that would begin past the deadline: the last failure is the answer
            stop=(stop_after_attempt(max(self.limits.attempts, 1))
                  | stop_before_delay(max(deadline - time.monotonic(), 0.0))),
            wait=wait_exponential(multiplier=1.0, max=10.0),
            before_sleep=_log_retry, reraise=True, sleep=time.sleep)
        try:
            image_id = retrying(attempt)
        except _Transient as exc:
            raise exc.failure.error(registry, target.reference) from None
        seconds = time.monotonic() - begun
        log.info("pulled", extra={"image": target.reference, "image_id": image_id,
                                  "seconds": round(seconds, 3), "downloaded_bytes": downloaded,
                                  "attempts": attempts})
        return Pulled(target, image_id, seconds, downloaded, attempts)

    def _refuse_if_backing_off(self, target: PullTarget, registry: str) -> None:
        now = datetime.now(UTC)
        with self._lock:
            held = self.backoff.blocked(registry, now)
        if held is not None:
            left = (held.until - now).total_seconds()
            raise RegistryFailed(
                f"{target.reference}: the registry {registry} rate-limited envcheck; no pull "
                f"from it for another {left:.0f}s", reason=Reason.REGISTRY_RATE_LIMITED,
                registry=registry, details={"registry": registry, "backoff_left_s":
                                            round(left, 1), "reference": target.reference,
                                            "why": held.why})

    def _slot(self, registry: str) -> threading.BoundedSemaphore:
        with self._lock:
            slot = self._per_registry.get(registry)
            if slot is None:
                slot = threading.BoundedSemaphore(max(self.limits.per_registry, 1))
                self._per_registry[registry] = slot
            return slot

    def _attempt(self, target: PullTarget, registry: str, deadline: float) -> tuple[str, int]:
        """One try: wait for a slot (in all, then for the registry), pull, confirm, tag."""
        waited = time.monotonic()
        per_registry = self._slot(registry)
        if not self._all.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            self._timed_out(target, registry, time.monotonic() - waited, 0, "waiting for a "
                            "pull slot on this engine")
        try:
            if not per_registry.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
                self._timed_out(target, registry, time.monotonic() - waited, 0,
                                f"waiting for a pull slot for {registry}")
            try:
                return self._pull_once(target, registry, deadline)
            finally:
                per_registry.release()
        finally:
            self._all.release()

    def _pull_once(self, target: PullTarget, registry: str, deadline: float
                   ) -> tuple[str, int]:
        auth = self._credentials(registry) if self._credentials is not None else None

        def start() -> Any:
            return self._api.pull(target.repository, tag=target.digest, stream=True,
                                  decode=True, auth_config=auth)

        outcome = read_pull_stream(start, deadline, what=target.reference,
                                   log_every_s=self.limits.log_every_s)
        got = outcome.progress.downloaded
        if outcome.timed_out:
            self._timed_out(target, registry, outcome.seconds, got, "pulling")
        if outcome.error is not None:
            self.stats.pulled(registry, Reason.REGISTRY_UNREACHABLE.value, outcome.seconds, got)
            if isinstance(outcome.error, EngineUnreachable):
                raise outcome.error
            raise RegistryFailed(f"{target.reference}: the pull failed: {outcome.error}",
                                 registry=registry, details={"registry": registry}
                                 ) from outcome.error
        if outcome.failure is not None:
            failure = outcome.failure
            self.stats.pulled(registry, failure.reason.value, outcome.seconds, got)
            if failure.reason is Reason.REGISTRY_RATE_LIMITED:
                with self._lock:
                    self.backoff.record(RegistryFailure(
                        failure.reason, registry, failure.message, datetime.now(UTC),
                        status=failure.status))
            if failure.transient:
                raise _Transient(failure)
            raise failure.error(registry, target.reference)
        image_id = self._confirm(target, registry, outcome.seconds, got)
        self.stats.pulled(registry, OUTCOME_OK, outcome.seconds, got)
        return image_id, got

    def _timed_out(self, target: PullTarget, registry: str, seconds: float, got: int,
                   doing: str) -> None:
        self.stats.pulled(registry, OUTCOME_TIMEOUT, seconds, got)
        raise RegistryFailed(
            f"{target.reference}: the deadline passed {doing} from {registry} "
            f"({got} bytes in {seconds:.1f}s); the pull was cancelled",
            reason=Reason.REGISTRY_UNREACHABLE, registry=registry,
            details={"registry": registry, "reference": target.reference, "timeout": True,
                     "downloaded_bytes": got, "seconds": round(seconds, 3)})

    def _confirm(self, target: PullTarget, registry: str, seconds: float, got: int) -> str:
        """The engine holds the image under the expected ``repository@digest``: tag it as
        envcheck's cache and return its id; anything less is no pull."""
        try:
            attrs = self._api.inspect_image(target.reference)
        except docker.errors.NotFound:
            self.stats.pulled(registry, Reason.REGISTRY_UNREACHABLE.value, seconds, got)
            raise RegistryFailed(f"{target.reference}: the pull ended without the image",
                                 registry=registry, details={"registry": registry}) from None
        except Exception as exc:
            raise _engine_error(exc) from exc
        if not holds(attrs, target):
            raise RegistryFailed(f"{target.reference}: the engine's image does not carry the "
                                 "expected digest", registry=registry,
                                 details={"registry": registry,
                                          "repo_digests": attrs.get("RepoDigests")})
        repository, tag = cache_tag(target)
        try:
            self._api.tag(attrs["Id"], repository, tag)
        except Exception as exc:
            raise _engine_error(exc) from exc
        return str(attrs["Id"])


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.info("pull retried", extra={"reason": str(exc)[:300], "attempt": state.attempt_number,
                                    "wait_s": state.upcoming_sleep})


def _engine_error(exc: BaseException) -> BaseException:
    """An engine call around the pull (inspect, tag) failed: the engine's fault, envcheck's
    error, never the registry's."""
    gone = engine_gone(exc)
    if gone is not None:
        return gone
    return InfraError(f"the engine refused a call after the pull: {exc}")
