"""The registry stage as the probes and the scheduler meet it: one object per process
(``RegistryImages``) holding the tag watch with each watched environment's last look, the
credentials, and the image cache under its budget.

- ``identity(env)``: which image the environment's tag names now, for the engine's platform:
  the last look while it is younger than the environment's watch interval (``schedules.image``),
  else one new look (one ``HEAD`` for an unchanged tag). The ``image`` probe kind asks for a new
  look every time; the other kinds take the watch's digest, so they pull and check the digest the
  watch saw, never whatever the tag names by the time the engine asks.
- ``local(env, digest)``: the engine's image for that digest, pulled on demand under the budget.
- ``prefetch(pairs)``: pull ahead what the scheduler will run next.

It fetches and remembers; which verdict a look makes is ``kinds.image``'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import docker
import docker.utils

from envcheck.catalogue.models import Catalogue, Environment
from envcheck.catalogue.registries import RegistryCredentials as CatalogueCredentials
from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.errors import RegistryFailed
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.registry.cache import ImageCache, parse_budget, reconcile
from envcheck.registry.credentials import CredentialSource, RegistryCredentials
from envcheck.registry.images import LocalImage, LocalImages
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.outcomes import RegistryFailure, TagLook
from envcheck.registry.pull import Puller, PullTarget, credentials_from
from envcheck.registry.reference import ImageReference
from envcheck.registry.sizes import ManifestSizes
from envcheck.registry.state import Change, RegistryBackoff, TagWatchState, WatchUpdate
from envcheck.registry.stats import RegistryStats
from envcheck.registry.watch import TagWatcher, WatchSettings

__all__ = ["CHECK_PREFETCH_BYTES", "RegistryImages", "RegistrySettings", "RegistryStage",
           "catalogue_repositories", "catalogue_sources", "prefetch_bound"]

log = logging.getLogger("envcheck.registry")
ENGINE_TIMEOUT_S = 60.0  # each engine call of the stage; a pull has its own deadline


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    data_dir: Path  # the ledger lives under it, one file per engine
    image_cache: str | None = None  # the budget: "20GiB", "30%"; None: no budget
    docker_config: str | None = None  # a config.json; None: the Docker CLI's own lookup
    look_deadline_s: float = 30.0
    pull_deadline_s: float = 1800.0
    certs_dir: Path | None = None  # the engine's CA files per registry (tests: their own)
    # pulled ahead of their probes: at most this many images waiting unused (0: no prefetch)
    prefetch_count: int = 4
    # and at most these bytes of them: a share of the budget ("50%") or bytes ("2GiB"); the
    # daemon keeps half for the images it will probe again
    prefetch_bytes: str = "50%"


# ``envcheck check``'s pipeline: its images are released as their probes end, so the whole
# budget may be ahead (the bench's side A builds its stage with the same)
CHECK_PREFETCH_BYTES = "100%"


def catalogue_repositories(catalogue: Catalogue) -> frozenset[str]:
    """The repositories of the images envcheck pulls for ``catalogue``, as a pull names them
    (``docker.io/library/python``)."""
    return frozenset(ImageReference.parse(env.image).name
                     for env in catalogue.environments if env.pull == "watch")


def catalogue_sources(registries: Iterable[CatalogueCredentials]) -> dict[str, CredentialSource]:
    """The catalogue's credentials per registry, as the stage reads them."""
    return {r.host: CredentialSource(env=r.password.env, file=r.password.file,
                                     username=r.username) for r in registries}


class RegistryImages:
    """One per process: thread-safe."""

    def __init__(self, watcher: TagWatcher, credentials: RegistryCredentials,
                 images: LocalImages | None, *, clock: Clock = SYSTEM_CLOCK,
                 pull_deadline_s: float = 1800.0, pins: _Pins | None = None) -> None:
        self.watcher = watcher
        self.credentials = credentials
        self.images = images
        self.stats = images.stats if images is not None else RegistryStats()
        self._clock = clock
        self._pull_deadline_s = pull_deadline_s
        self._lock = threading.Lock()
        self._states: dict[str, TagWatchState] = {}
        self._pins = pins if pins is not None else _Pins()
        # how it was opened (``on_engine``): what a Ray node's stage is opened with too
        self.settings: RegistrySettings | None = None
        self.engine_id: str | None = None

    @classmethod
    def for_catalogue(cls, catalogue: Catalogue, settings: RegistrySettings
                      ) -> RegistryImages | None:
        """The stage over the engine ``DOCKER_HOST`` names, if ``catalogue`` has an image
        envcheck pulls (``pull: watch``); None for a fleet of local images (it stays offline)."""
        if not any(env.pull == "watch" for env in catalogue.environments):
            return None
        api = docker.APIClient(**docker.utils.kwargs_from_env(), timeout=ENGINE_TIMEOUT_S)
        return cls.open(api, catalogue, settings)

    @classmethod
    def open(cls, api: docker.APIClient, catalogue: Catalogue,
             settings: RegistrySettings) -> RegistryImages:
        """The stage over the engine behind ``api``, for ``catalogue``'s registries: its
        ledger settled with the engine (a pull a killed process left half done is dropped),
        adopting the images tagged as envcheck's of the repositories the catalogue names."""
        named = catalogue_repositories(catalogue)
        fleet = cls.on_engine(api, settings, catalogue_sources(catalogue.registries),
                              adopt=lambda target: target.repository in named)
        fleet.follow(catalogue)
        return fleet

    @classmethod
    def on_engine(cls, api: docker.APIClient, settings: RegistrySettings,
                  sources: Mapping[str, CredentialSource], *,
                  adopt: Callable[[PullTarget], bool] | None = None,
                  stats: RegistryStats | None = None) -> RegistryImages:
        """The stage over the engine behind ``api`` with no catalogue (a Ray node's: the
        caller hands its credential sources and pins with each task): its ledger, the
        engine's own (``ledger_path``), settled with the engine; the images tagged as
        envcheck's but missing from it adopted when ``adopt`` says so (at start none; each
        when a probe first uses it, ``LocalImages``); ``stats``: the counters to add to (a
        node's process keeps one across the stages it opens)."""
        info: dict[str, Any] = api.info()
        platform = f"{info.get('OSType') or 'linux'}/{_architecture(info)}"
        backoff = RegistryBackoff()
        watch = WatchSettings(platform=platform, deadline_s=settings.look_deadline_s)
        if settings.certs_dir is not None:
            watch = WatchSettings(platform=platform, deadline_s=settings.look_deadline_s,
                                  certs_dir=settings.certs_dir)
        watcher = TagWatcher(watch, backoff=backoff)
        credentials = RegistryCredentials(sources, docker_config=settings.docker_config)
        stats = stats if stats is not None else RegistryStats()
        engine_id = str(info.get("ID") or "engine")
        ledger = SqliteLedger(ledger_path(settings.data_dir, engine_id), engine_id)
        reconcile(api, ledger, adopt=adopt or (lambda _: False))
        budget = parse_budget(settings.image_cache) if settings.image_cache else None
        pins = _Pins()
        cache = ImageCache(api, ledger, budget, stats=stats, pinned=pins.get)
        puller = Puller(api, stats=stats, credentials=credentials_from(credentials),
                        backoff=backoff)
        images = LocalImages(api, puller, cache, sizes=ManifestSizes(watcher, credentials),
                             prefetch_count=settings.prefetch_count,
                             prefetch_bytes=prefetch_bound(settings.prefetch_bytes, cache))
        cache.measure()  # what earlier processes left in the cache, for the metrics
        fleet = cls(watcher, credentials, images, pull_deadline_s=settings.pull_deadline_s,
                    pins=pins)
        fleet.settings = settings
        fleet.engine_id = engine_id
        return fleet

    def follow(self, catalogue: Catalogue) -> None:
        """A new catalogue (a reload): its credentials, and the images it pins."""
        self.credentials.replace_sources(catalogue_sources(catalogue.registries))
        pinned = set()
        for env in catalogue.environments:
            if env.pull == "watch" and env.keep:
                ref = ImageReference.parse(env.image)
                pinned.add(ref.name if ref.digest is None else f"{ref.name}@{ref.digest}")
                with self._lock:
                    last = self._states.get(env.id, TagWatchState()).last
                if last is not None:
                    pinned.add(last.digest)
        self._pins.held = frozenset(pinned)

    @property
    def pull_deadline_s(self) -> float:
        return self._pull_deadline_s

    @property
    def pinning(self) -> _Pins:
        """Where the cache reads the pins at each eviction (shared by a node's task stages)."""
        return self._pins

    @property
    def pins(self) -> frozenset[str]:
        """What the catalogue pins (``keep: true``): never evicted."""
        return self._pins.held

    def pin(self, held: frozenset[str]) -> None:
        """Pins handed in by a caller that has the catalogue (a Ray node's stage)."""
        self._pins.held = held

    def seed(self, catalogue: Catalogue, results: Iterable[ProbeResult]) -> int:
        """What the watch saw before this process, from the newest stored ``image`` result
        of each watched environment: the digest its tag named (so a move shows as one), or
        since when the tag has been missing (so a second look can confirm it). Only fills
        what this process has not looked at itself; how many environments it seeded."""
        envs = {env.id: env for env in catalogue.environments if env.watched()}
        seeded = 0
        for result in results:
            env = envs.get(result.env_id)
            if env is None or result.kind is not ProbeKind.IMAGE:
                continue
            state = _stored_state(env, result)
            if state is None:
                continue
            with self._lock:
                if result.env_id not in self._states:
                    self._states[result.env_id] = state
                    seeded += 1
        return seeded

    def identity(self, env: Environment, *, fresh: bool) -> WatchUpdate:
        """What ``env``'s tag names now (see the module's doc). Never raises for what a
        registry does: a failure is the update's ``failure``."""
        ref = ImageReference.parse(env.image)
        interval = timedelta(seconds=env.schedules.image or 300.0)
        with self._lock:
            state = self._states.get(env.id, TagWatchState())
        last = state.last
        # the image kind's own look fires every interval give or take its jitter: another kind
        # that took only the interval as the look's age would look again about once in 16
        # (measured by bench/registry_steady.py), a HEAD that says nothing new
        young = interval + timedelta(seconds=env.schedules.jitter_s)
        if (not fresh and last is not None and last.reference == ref
                and self._clock.now() - last.seen_at < young):
            return WatchUpdate(Change.UNCHANGED, look=last, previous_digest=last.digest)
        try:
            credentials = self.credentials.for_registry(ref.registry)
        except RegistryFailed as exc:
            failure = RegistryFailure(exc.reason, ref.registry, str(exc), self._clock.now())
            return WatchUpdate(Change.FAILED, failure=failure)
        started = time.monotonic()
        outcome = self.watcher.look(ref, credentials,
                                    previous=last if last is not None and last.reference == ref
                                    else None)
        self.stats.looked(ref.registry,
                          "ok" if isinstance(outcome, TagLook) else str(outcome.reason),
                          time.monotonic() - started, outcome.rate_remaining)
        with self._lock:
            state = self._states.get(env.id, TagWatchState())
            state, update = state.observe(outcome, interval)
            self._states[env.id] = state
        if update.change is Change.MOVED:
            log.info("a watched tag moved", extra={"env": env.id, "reference": str(ref),
                                                   "from": update.previous_digest,
                                                   "to": update.look.digest if update.look
                                                   else None})
        return update

    def local(self, env: Environment, digest: str) -> LocalImage:
        """The engine's image of ``env``'s repository at ``digest``, pulled if missing."""
        if self.images is None:
            raise RegistryFailed("no image cache on this host: envcheck pulls no image here",
                                 registry=ImageReference.parse(env.image).registry)
        ref = ImageReference.parse(env.image)
        deadline = time.monotonic() + self._pull_deadline_s
        return self.images.ensure(ref.name, digest, deadline)

    def prefetch(self, wanted: Iterable[tuple[Environment, str]]) -> int:
        """Pull ahead the images of ``wanted`` (soonest first), within the cache's bounds;
        how many pulls were started."""
        if self.images is None or self.images.prefetch_count <= 0:
            return 0
        targets = [PullTarget(ImageReference.parse(env.image).name, digest)
                   for env, digest in wanted]
        return len(self.images.prefetch(targets))

    @property
    def prefetch_count(self) -> int:
        """How many images may wait pulled ahead of their probes (0: none)."""
        return self.images.prefetch_count if self.images is not None else 0

    def release(self, env: Environment, digest: str) -> None:
        """The probes that wanted ``env``'s image at ``digest`` are done with it: it may be
        evicted at once (``envcheck check``'s pipeline), least recently used first."""
        if self.images is not None:
            self.images.release(PullTarget(ImageReference.parse(env.image).name, digest))

    def watched_digest(self, env_id: str) -> str | None:
        """The digest the last look saw (for a task handed to another node)."""
        with self._lock:
            last = self._states.get(env_id, TagWatchState()).last
        return last.digest if last is not None else None

    def close(self) -> None:
        if self.images is not None:
            self.images.close()


class RegistryStage:
    """The stage for a process whose catalogue changes (the daemon's reloads): opened the
    first time a catalogue has an image envcheck pulls, then following each new catalogue."""

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings
        self.current: RegistryImages | None = None
        self._lock = threading.Lock()

    def for_catalogue(self, catalogue: Catalogue,
                      stored: Callable[[list[str]], Iterable[ProbeResult]] | None = None
                      ) -> RegistryImages | None:
        """``stored(env_ids)``: the newest stored ``image`` results, which seed the watch
        when the stage opens."""
        with self._lock:
            if self.current is None:
                self.current = RegistryImages.for_catalogue(catalogue, self.settings)
                if self.current is not None and stored is not None:
                    ids = [env.id for env in catalogue.environments if env.watched()]
                    try:
                        self.current.seed(catalogue, stored(ids))
                    except Exception as exc:  # the store's: the watch starts afresh
                        log.warning("the watch starts without its stored looks",
                                    extra={"error": f"{type(exc).__name__}: {exc}"})
            else:
                self.current.follow(catalogue)
            return self.current

    def close(self) -> None:
        with self._lock:
            if self.current is not None:
                self.current.close()


def _stored_state(env: Environment, result: ProbeResult) -> TagWatchState | None:
    watch = result.details.get("watch") if isinstance(result.details, dict) else None
    ref = ImageReference.parse(env.image)
    if result.status is Status.PASS and isinstance(watch, dict) and result.image_digest:
        if watch.get("reference") not in (None, str(ref)):
            return None  # the catalogue names another image now
        look = TagLook(ref, result.image_digest, watch.get("index_digest"),
                       str(watch.get("media_type") or ""), str(watch.get("platform") or ""),
                       result.started_at)
        return TagWatchState(look, None)
    if result.reason is Reason.IMAGE_NOT_FOUND:
        since = result.started_at
        if result.status is Status.FAIL:  # confirmed already: the next miss confirms it again
            since -= timedelta(seconds=env.schedules.image or 300.0)
        return TagWatchState(None, since)
    return None


class _Pins:
    """What the catalogue pins (``keep: true``), read by the cache at each eviction."""

    def __init__(self) -> None:
        self.held: frozenset[str] = frozenset()

    def get(self) -> frozenset[str]:
        return self.held


def prefetch_bound(text: str, cache: ImageCache) -> int | None:
    """``50%``: that share of the cache's budget (None without a budget: the count alone
    bounds the prefetch); else bytes."""
    bound = parse_budget(text, "the prefetch's bytes")
    if bound.bytes is not None:
        return bound.bytes
    budget = cache.budget_bytes
    return None if budget is None or bound.share is None else int(budget * bound.share)


def _architecture(info: dict[str, Any]) -> str:
    arch = str(info.get("Architecture") or "x86_64")
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(arch, arch)
