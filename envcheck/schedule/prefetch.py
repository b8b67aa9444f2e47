"""The daemon's pulls ahead: the images of the next due probes pulled before their slots, so a
worker never waits on the registry for an image it could have had.

A thread of its own wakes every ``interval_s`` (and when work is queued) and asks for the
next due probes: the queued work first, best first, then the timetable's entries due within
``horizon_s``, soonest first. For each one of an environment envcheck pulls the image of
(``pull: watch``), that runs a container and will not stand on its evidence
(``executors.pipeline.ahead_digest``), the image's digest goes to the registry stage's
``prefetch``, in that order, which pulls what is missing while fewer than its prefetch count
wait unused and their bytes stay under its prefetch bytes (a share of the cache's budget),
evicting only the least recently used of envcheck's own pulls that nothing uses, nothing
pins, no probe was handed within the cache's minimum age, and no earlier prefetch holds for
its probe. A fleet without watched images costs nothing here: no stage, no pass.

Where the checks run on other hosts (Ray), the executor pulls ahead there
(``executors.base.PullsAhead``: on the node each check will run on, through that node's
registry stage), never into this process's engine, which runs no check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind
from envcheck.executors.cycle import Services
from envcheck.executors.pipeline import ahead_digest
from envcheck.registry.fleet import RegistryImages

__all__ = ["Prefetch"]

log = logging.getLogger(__name__)

Upcoming = Callable[[int], list[tuple[Environment, ProbeKind]]]
Ahead = Callable[[RegistryImages, list[tuple[Environment, str]]], int]


class Prefetch:
    """``upcoming(limit)``: at most ``limit`` next due (environment, kind), soonest first;
    ``services()``: the probes' collaborators now (a reload swaps them); ``ahead``: where
    the images go (default: the registry stage's own prefetch, into this host's engine)."""

    def __init__(self, upcoming: Upcoming, services: Callable[[], Services | None],
                 stopping: threading.Event, *, interval_s: float = 5.0,
                 ahead: Ahead | None = None) -> None:
        self._upcoming = upcoming
        self._services = services
        self._ahead = ahead
        self._stopping = stopping
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.started = 0  # pulls started ahead, since start

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="envcheck-prefetch",
                                        daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Work was queued: look again now rather than at the next tick."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.once()
            except Exception:  # the probes pull what a prefetch could not
                log.exception("prefetch pass failed")

    def once(self) -> int:
        """One pass; how many pulls it started."""
        services = self._services()
        registry = services.get(RegistryImages) if services is not None else None
        if not isinstance(registry, RegistryImages) or registry.prefetch_count <= 0:
            return 0
        window = registry.prefetch_count * 2  # room for those that need nothing pulled
        pairs: list[tuple[Environment, str]] = []
        chosen: set[str] = set()
        for env, kind in self._upcoming(window * 4):
            if self._stopping.is_set():
                return 0
            if env.pull != "watch" or env.id in chosen:
                continue
            digest = ahead_digest(env, [kind], services)
            if digest is not None:
                chosen.add(env.id)
                pairs.append((env, digest))
            if len(pairs) >= window:
                break
        self.passes += 1
        if self._ahead is not None:  # elsewhere; a pass with nothing new still collects
            started = self._ahead(registry, pairs)
        else:
            started = registry.prefetch(pairs) if pairs else 0
        self.started += started
        if started:
            log.info("pulling ahead of the probes", extra={"pulls": started,
                                                           "candidates": len(pairs)})
        return started
