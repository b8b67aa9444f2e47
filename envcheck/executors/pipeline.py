"""Images pulled ahead of the probes that need them (``pull: watch``), so a sandbox slot does
not wait on the registry.

- ``ahead_digest(env, kinds, services)``: the digest whose image a probe of ``env`` will run
  a container of, if it will: none for the ``image`` kind alone (one ``HEAD``), nor for a
  probe that will stand on its evidence (``ReuseAdvisor``: an unchanged tag pulls nothing).
  The daemon's scheduler asks it of its next due probes (``schedule.prefetch``).
- ``ImagePipeline``: ``envcheck check`` over a catalogue or dataset whose images add up to
  more than the image cache's budget, run as a pipeline. While the cycle's threads probe
  environments in order, a thread of its own pulls the images of the next environments not
  yet started (bounded by the cache's prefetch count and bytes), and each environment's image
  is released once its probes are done, so the cache evicts it first (least recently used of
  envcheck's own pulls) instead of holding it for its minimum age. Each watched environment is
  looked up once per cycle whoever asks first (the pipeline or the probe), so a cycle still
  costs one ``HEAD`` per tag.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future

from envcheck.catalogue.models import Environment
from envcheck.core.depth import Depth
from envcheck.core.results import ProbeKind
from envcheck.kinds import load_probe
from envcheck.kinds.base import Services
from envcheck.kinds.reuse import ReuseAdvisor
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.images import LocalImage
from envcheck.registry.pull import PullTarget
from envcheck.registry.reference import ImageReference
from envcheck.registry.state import WatchUpdate

__all__ = ["ImagePipeline", "ahead_digest", "container_kinds"]

log = logging.getLogger(__name__)

# How many environments past the next not started the pipeline looks up ahead: enough to
# fill the prefetch count when some need nothing pulled.
LOOKAHEAD_FACTOR = 2


def container_kinds(env: Environment, kinds: Iterable[ProbeKind]) -> list[ProbeKind]:
    """The kinds of ``kinds`` that would run a container of ``env``'s image."""
    declared = env.declared_kinds()
    return [kind for kind in kinds if kind is not ProbeKind.IMAGE and kind in declared]


def ahead_digest(env: Environment, kinds: Sequence[ProbeKind], services: Services | None,
                 look: Callable[[Environment], WatchUpdate] | None = None) -> str | None:
    """The registry digest of the image a probe of ``env`` for ``kinds`` will run a container
    of, or None: not a watched image, no kind that runs a container, the tag not known (the
    look failed: the probe says why), or every such kind stands on its evidence for that
    digest. ``look``: how the tag is looked up (default: the stage's last look within its
    interval, else one ``HEAD``, as the probe itself does)."""
    if env.pull != "watch" or services is None:
        return None
    wanted = container_kinds(env, kinds)
    registry = services.get(RegistryImages)
    if not wanted or not isinstance(registry, RegistryImages):
        return None
    digest = ImageReference.parse(env.image).digest
    if digest is None:
        update = look(env) if look is not None else registry.identity(env, fresh=False)
        digest = update.look.digest if update.look is not None else None
    if digest is None:
        return None
    advisor = services.get(ReuseAdvisor)
    if isinstance(advisor, ReuseAdvisor) and all(
            _reused(advisor, env, kind, digest) for kind in wanted):
        return None
    return digest


def _reused(advisor: ReuseAdvisor, env: Environment, kind: ProbeKind, digest: str) -> bool:
    if not load_probe(kind).reusable:
        return False
    advice = advisor.advice(env, kind, digest)
    return advice is not None and advice.depth is Depth.REUSED


class ImagePipeline:
    """One ``envcheck check`` cycle's pulls ahead (see the module's doc). ``on_change`` is
    called (from any thread) when an image of the cycle became local."""

    def __init__(self, registry: RegistryImages, envs: Sequence[Environment],
                 kinds: Sequence[ProbeKind]) -> None:
        self.registry = registry
        self._kinds = list(kinds)
        self._fresh = ProbeKind.IMAGE in kinds
        self._order = [env for env in envs if container_kinds(env, kinds)
                       and env.pull == "watch"]
        self.total = len({env.image for env in self._order})  # images the cycle runs
        self._lock = threading.Lock()
        self._looks: dict[str, Future[WatchUpdate]] = {}
        self._targets: dict[PullTarget, set[str]] = {}  # the cycle's images -> their envs
        self._started: set[str] = set()
        self._ready: set[PullTarget] = set()
        self.pulled_bytes = 0
        self.pulls = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_change: Callable[[], None] | None = None

    # --- the cycle's side ---------------------------------------------------------------------
    def start(self) -> None:
        if self.registry.images is not None:
            self.registry.images.listeners.append(self._on_local)
        if self._order and self.registry.prefetch_count > 0:
            self._thread = threading.Thread(target=self._feed, name="envcheck-pull-ahead",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
        if self.registry.images is not None:
            with contextlib.suppress(ValueError):
                self.registry.images.listeners.remove(self._on_local)

    def identity(self, env: Environment) -> WatchUpdate:
        """``env``'s tag looked up once this cycle, whoever asks first."""
        with self._lock:
            future = self._looks.get(env.id)
            mine = future is None
            if future is None:
                future = self._looks[env.id] = Future()
        if mine:
            try:
                update = self.registry.identity(env, fresh=self._fresh)
            except BaseException as exc:
                future.set_exception(exc)
                raise
            if update.look is not None:
                target = PullTarget(ImageReference.parse(env.image).name, update.look.digest)
                with self._lock:
                    self._targets.setdefault(target, set()).add(env.id)
            future.set_result(update)
        return future.result()

    def started(self, env: Environment) -> None:
        with self._lock:
            self._started.add(env.id)
        self._wake.set()

    def done(self, env: Environment) -> None:
        """``env``'s probes are done: its image goes first when room is needed."""
        digest = ImageReference.parse(env.image).digest
        with self._lock:
            future = self._looks.get(env.id)
        if digest is None and future is not None and future.done() and not future.exception():
            look = future.result().look
            digest = look.digest if look is not None else None
        if digest is not None and env.pull == "watch":
            self.registry.release(env, digest)
        self._wake.set()

    def progress(self) -> tuple[int, int, int]:
        """(images of the cycle made local, images of the cycle, bytes pulled)."""
        with self._lock:
            return len(self._ready), self.total, self.pulled_bytes

    # --- ahead -------------------------------------------------------------------------------
    def _on_local(self, target: PullTarget, local: LocalImage, ahead: bool) -> None:
        with self._lock:
            if target not in self._targets:
                return
            self._ready.add(target)
            if local.pulled:
                self.pulls += 1
                self.pulled_bytes += local.downloaded
        self._wake.set()  # a pull ended: room for the next one now, not at the next tick
        if self.on_change is not None:
            self.on_change()

    def _feed(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._ahead()
            except Exception:  # the probes pull what the prefetch could not
                log.exception("pulling ahead failed")

    def _ahead(self) -> None:
        with self._lock:
            upcoming = [env for env in self._order if env.id not in self._started]
        window = max(self.registry.prefetch_count, 1) * LOOKAHEAD_FACTOR
        services: Services = {RegistryImages: self.registry}
        pairs = []
        for env in upcoming[:window]:
            if self._stop.is_set():
                return
            digest = ahead_digest(env, self._kinds, services, look=self.identity)
            if digest is not None:
                pairs.append((env, digest))
        if pairs:
            self.registry.prefetch(pairs)
