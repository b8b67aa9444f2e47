"""The reuse advice for an environment's next probe of a kind whose outcome is a property of
the image (``health.reuse``), from what the store holds: the kind as the health model last
assessed it (``env_state.kinds``) and the rollout evidence. The composition
root hands :meth:`StoreReuse.advice` to the probes (``kinds.reuse.ReuseAdvisor``); the Ray
executor calls it in the caller and sends the advice with the task.

What is not a property of the image, the host's container start and shell latency, is still
measured: :class:`HostSamples` turns one terminal probe that would have reused its evidence
into a full one at most every ``every_s`` (the operator's ``--host-sample-every``), so a slow
host is seen whatever the fleet's size, at a fixed cost per host rather than per environment.
"""

from __future__ import annotations

import threading

from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.results import ProbeKind
from envcheck.feed.assess import stored_rollouts
from envcheck.health.depth import ago
from envcheck.health.reuse import advise_reuse
from envcheck.health.sprt import KindHealth
from envcheck.store import Store

__all__ = ["HostSamples", "StoreReuse"]


class HostSamples:
    """At most one full terminal probe every ``every_s`` to measure the host (None: never),
    counted from the newest full terminal probe of any environment. Thread-safe: the
    scheduler's workers ask at once."""

    def __init__(self, every_s: float | None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock.monotonic()  # a daemon's first probes are full: they measure it
        self.taken = 0

    def measured(self) -> None:
        """A full terminal probe is about to measure the host anyway."""
        with self._lock:
            self._last = self._clock.monotonic()

    def take(self) -> str | None:
        """Why this probe should measure the host, if a sample is due (it is then taken)."""
        if self.every_s is None:
            return None
        with self._lock:
            now = self._clock.monotonic()
            if now - self._last < self.every_s:
                return None
            self._last, self.taken = now, self.taken + 1
        return f"host sample: container start and shell latency (every {ago(self.every_s)})"

    def advise(self, kind: ProbeKind, advice: DepthAdvice) -> DepthAdvice:
        """``advice`` for a probe of ``kind``, or a full terminal probe if a host sample is
        due instead of a reuse (a full one measures the host anyway: the period restarts)."""
        if kind is not ProbeKind.TERMINAL:
            return advice
        if advice.depth is not Depth.REUSED:
            self.measured()
            return advice
        sample = self.take()
        if sample is None:
            return advice
        return DepthAdvice(Depth.FULL, sample, advice.image_digest, advice.spec_hash,
                           advice.full_at, advice.proven)


class StoreReuse:
    def __init__(self, store: Store, clock: Clock = SYSTEM_CLOCK,
                 samples: HostSamples | None = None) -> None:
        self._store, self._clock = store, clock
        self._samples = samples

    def advice(self, env: Environment, kind: ProbeKind) -> DepthAdvice | None:
        """None for a kind whose evidence is never reused (tests, datasource)."""
        if kind not in (ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES):
            return None
        row = self._store.env_state(env.id)
        doc = (row.kinds or {}).get(str(kind)) if row is not None else None
        health = KindHealth.from_json(str(kind), doc) if doc else None
        advice = advise_reuse(env.reprove_every.every(kind), health, now=self._clock.now(),
                              rollouts=stored_rollouts(row))
        return advice if self._samples is None else self._samples.advise(kind, advice)
