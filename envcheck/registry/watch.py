"""The tag watch: a tag's current digest for the engine's platform, learned without a pull.

One look is ``HEAD /v2/<name>/manifests/<tag>`` with all four manifest media types in
``Accept``; the answer's ``Docker-Content-Digest`` is the digest (Docker Hub does not count a
HEAD as a pull). When the tag names an index (a manifest list), the identity is the entry for
the engine's platform: the index is fetched by digest once per index digest (remembered, and
taken from the previous look when it names the same index), so another platform changing in
the index moves the index's digest but not the identity. An unchanged tag costs exactly one
HEAD, plus a token request once per token lifetime on a token registry.

Every look has a deadline (``WatchSettings.deadline_s``): it ends as a ``RegistryFailure`` by
then whatever the registry does. Credentials only ever travel in headers; failure messages
and the HTTP stack's logs are redacted of them.

    watcher = TagWatcher(WatchSettings(platform="linux/amd64"))
    outcome = watcher.look(ImageReference.parse("ghcr.io/org/env:v3"), credentials)
    state, update = state.observe(outcome, interval)   # state.TagWatchState, per environment
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

import requests
import urllib3.exceptions as u3

from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.results import Reason
from envcheck.net.secrets import Redactor, secrets_in_use
from envcheck.registry import failures
from envcheck.registry.auth import Authorizer, Challenge, TokenRefused, parse_challenge
from envcheck.registry.credentials import ANONYMOUS, Credentials
from envcheck.registry.manifests import (
    ACCEPT,
    INDEX_TYPES,
    MAX_INDEX_BYTES,
    Platform,
    digest_of,
    is_index,
    platform_digest,
)
from envcheck.registry.outcomes import RegistryFailure, TagLook
from envcheck.registry.reference import ImageReference
from envcheck.registry.state import RegistryBackoff
from envcheck.registry.transport import (
    DEFAULT_CERTS_DIR,
    Answer,
    Deadline,
    DeadlinePassed,
    Timeouts,
    Transport,
)

__all__ = ["TagWatcher", "WatchSettings"]

log = logging.getLogger(__name__)
_MAX_REMEMBERED_INDEXES = 100_000


@dataclass(frozen=True, slots=True)
class WatchSettings:
    platform: str = "linux/amd64"  # the engine's (``docker info``: OSType/Architecture)
    deadline_s: float = 30.0  # a whole look: token, HEAD, index
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    certs_dir: Path = DEFAULT_CERTS_DIR  # the engine's CA files per registry
    insecure: Collection[str] = field(default_factory=tuple)  # hosts spoken to in plain HTTP


class _Look:
    """One look's running count of requests and what it sent."""

    def __init__(self, reference: ImageReference, credentials: Credentials,
                 deadline: Deadline) -> None:
        self.reference = reference
        self.credentials = credentials
        self.deadline = deadline
        self.requests = 0
        self.token_requests = 0


class TagWatcher:
    """Looks at tags; thread-safe, one per process (it holds the tokens, what each registry
    asked, the backoffs and the indexes already read)."""

    def __init__(self, settings: WatchSettings = WatchSettings(), *, clock: Clock = SYSTEM_CLOCK,
                 backoff: RegistryBackoff | None = None) -> None:
        self.settings = settings
        self.platform = Platform.parse(settings.platform)
        self._clock = clock
        self._transport = Transport(
            timeouts=Timeouts(settings.connect_timeout_s, settings.read_timeout_s),
            certs_dir=settings.certs_dir, insecure=settings.insecure, clock=clock)
        self._auth = Authorizer(self._transport, clock)
        self.backoff = backoff if backoff is not None else RegistryBackoff()
        self._lock = threading.Lock()
        # index digest -> the platform's manifest digest: content-addressed, so never stale
        self._indexes: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    def look(self, reference: ImageReference, credentials: Credentials = ANONYMOUS, *,
             previous: TagLook | None = None, deadline_s: float | None = None
             ) -> TagLook | RegistryFailure:
        """The tag's digest now, or why the registry would not say. Never raises for what a
        registry or the network does."""
        now = self._clock.now()
        if reference.pinned:
            assert reference.digest is not None
            return TagLook(reference, reference.digest, None, "", str(self.platform), now)
        with self._lock:
            blocked = self.backoff.blocked(reference.registry, now)
        if blocked is not None:
            wait = (blocked.until - now).total_seconds()
            return RegistryFailure(Reason.REGISTRY_RATE_LIMITED, reference.registry,
                                   f"backing off from registry {reference.registry} for "
                                   f"{wait:.0f} s more after: {blocked.why}", now,
                                   retry_after_s=wait)
        deadline = Deadline(deadline_s or self.settings.deadline_s, self._clock)
        look = _Look(reference, credentials, deadline)
        with secrets_in_use(credentials.secrets()) as redactor:
            outcome = self._guarded(look, previous, redactor)
        with self._lock:
            if isinstance(outcome, TagLook):
                self.backoff.clear(reference.registry)
            else:
                self.backoff.record(outcome)
        if isinstance(outcome, RegistryFailure):
            log.info("registry look failed", extra={"reference": str(reference),
                                                    "reason": str(outcome.reason),
                                                    "why": outcome.message})
        return outcome

    def _guarded(self, look: _Look, previous: TagLook | None, redactor: Redactor
                 ) -> TagLook | RegistryFailure:
        registry = look.reference.registry
        try:
            outcome = self._look(look, previous)
        except DeadlinePassed:
            outcome = failures.deadline_passed(registry, self._clock.now(),
                                               look.deadline.seconds, requests=look.requests)
        except (requests.RequestException, u3.HTTPError, OSError) as exc:
            found = failures.from_exception(exc, registry, self._clock.now(),
                                            requests=look.requests)
            if found is None:
                raise
            outcome = found
            if look.deadline.remaining() <= 0:  # the timeout was the deadline's, clipped
                outcome = failures.deadline_passed(registry, found.seen_at,
                                                   look.deadline.seconds,
                                                   requests=look.requests)
        if isinstance(outcome, RegistryFailure):
            outcome = replace(outcome, message=redactor.text(outcome.message),
                              requests=look.requests)
        return outcome

    def _look(self, look: _Look, previous: TagLook | None) -> TagLook | RegistryFailure:
        ref = look.reference
        answer = self._get(look, "HEAD", f"manifests/{ref.reference}", ACCEPT)
        if isinstance(answer, RegistryFailure):
            return answer
        if answer.status == 404:  # a HEAD has no body: its error code is read from a GET
            answer = self._get(look, "GET", f"manifests/{ref.reference}", ACCEPT)
            if isinstance(answer, RegistryFailure):
                return answer
        if answer.status != 200:
            return self._failed(look, answer)
        media_type = answer.headers.get("Content-Type", "").split(";")[0].strip()
        digest = answer.headers.get("Docker-Content-Digest")
        if not digest:  # an older registry: the digest is the body's
            body = self._get(look, "GET", f"manifests/{ref.reference}", ACCEPT)
            if isinstance(body, RegistryFailure):
                return body
            if body.status != 200:
                return self._failed(look, body)
            digest = digest_of(body.body)
        index_digest = None
        if is_index(media_type):
            index_digest = digest
            found = self._platform_digest(look, index_digest, previous)
            if isinstance(found, RegistryFailure):
                return found
            digest = found
        return TagLook(ref, digest, index_digest, media_type, str(self.platform),
                       self._clock.now(), look.requests, look.token_requests,
                       failures.rate_remaining(answer.headers))

    def _platform_digest(self, look: _Look, index_digest: str, previous: TagLook | None
                         ) -> str | RegistryFailure:
        ref = look.reference
        platform = str(self.platform)
        if previous is not None and previous.index_digest == index_digest \
                and previous.platform == platform:
            return previous.digest
        key = (f"{ref.api_host}/{ref.repository}", index_digest, platform)
        with self._lock:
            known = self._indexes.get(key)
        if known is not None:
            return known
        answer = self._get(look, "GET", f"manifests/{index_digest}", ", ".join(INDEX_TYPES),
                           max_body=MAX_INDEX_BYTES)
        if isinstance(answer, RegistryFailure):
            return answer
        if answer.status != 200:
            return self._failed(look, answer)
        now = self._clock.now()
        if digest_of(answer.body) != index_digest:
            return RegistryFailure(Reason.REGISTRY_UNREACHABLE, ref.registry,
                                   f"registry {ref.registry} answered an index for "
                                   f"{index_digest} whose content has another digest", now,
                                   requests=look.requests)
        try:
            found = platform_digest(answer.body, self.platform)
        except ValueError as exc:
            return RegistryFailure(Reason.REGISTRY_UNREACHABLE, ref.registry,
                                   f"registry {ref.registry}: {exc}", now,
                                   requests=look.requests)
        if found is None:  # the engine would fail the pull the same way
            return RegistryFailure(Reason.IMAGE_NOT_FOUND, ref.registry,
                                   f"{ref} has no image for {platform} (its index "
                                   f"{index_digest} lists other platforms)", now,
                                   code="NO_MATCHING_PLATFORM", requests=look.requests)
        with self._lock:
            self._indexes[key] = found
            while len(self._indexes) > _MAX_REMEMBERED_INDEXES:
                self._indexes.popitem(last=False)
        return found

    def _get(self, look: _Look, method: str, path: str, accept: str, *,
             max_body: int = 64 * 1024) -> Answer | RegistryFailure:
        """One request to the registry's API with the auth it asks for: sent as last asked,
        and sent once more when a 401 asks for something else (a first contact, a stale
        token). A refusal after that is the registry's answer to return."""
        ref = look.reference
        url = (f"{self._transport.base_url(ref.api_host, loopback=ref.loopback)}"
               f"/v2/{ref.repository}/{path}")
        renew = False
        for _attempt in range(2):
            try:
                auth = self._auth.authorize(ref.api_host, ref.repository, look.credentials,
                                            look.deadline, renew=renew)
            except TokenRefused as refused:
                look.token_requests += 1
                look.requests += 1
                return self._token_refused(look, refused)
            look.token_requests += auth.token_requests
            look.requests += auth.token_requests + 1
            answer = self._transport.request(method, url, look.deadline,
                                             headers={"Accept": accept, **auth.headers},
                                             max_body=max_body)
            if answer.status != 401:
                if self._auth.known(ref.api_host) is None:
                    self._auth.learn(ref.api_host, Challenge("none"))
                return answer
            challenge = parse_challenge(answer.headers.get("WWW-Authenticate", ""))
            if challenge is None:
                return answer
            before = self._auth.known(ref.api_host)
            self._auth.learn(ref.api_host, challenge)
            first_contact = before is None or before.scheme != challenge.scheme \
                or before.realm != challenge.realm
            if not (first_contact or auth.cached):
                return answer  # what it asked for was sent, and refused
            if challenge.scheme == "basic" and look.credentials.anonymous:
                return answer  # nothing to send
            renew = auth.cached
        return answer

    def _failed(self, look: _Look, answer: Answer) -> RegistryFailure:
        sent = None if look.credentials.anonymous else look.credentials.source
        return failures.from_response(answer.status, answer.headers, answer.body,
                                      look.reference.registry, self._clock.now(),
                                      credentials=sent, requests=look.requests)

    def _token_refused(self, look: _Look, refused: TokenRefused) -> RegistryFailure:
        sent = None if look.credentials.anonymous else look.credentials.source
        answer = refused.answer
        status = answer.status if answer.status != 200 else 502  # 200 without a token
        return failures.from_response(status, answer.headers, answer.body,
                                      look.reference.registry, self._clock.now(),
                                      credentials=sent, requests=look.requests,
                                      what=f"token service {refused.realm}")

    def close(self) -> None:
        self._transport.close()
