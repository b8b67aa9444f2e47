"""The depth advice for an environment's next tests probe, from what the store holds: its
tests kind as the health model last assessed it (``env_state.kinds``), its quarantine and its
rollout evidence (``env_state.rollouts``), judged by the pure policy
(:func:`envcheck.health.depth.advise`). The composition root hands :meth:`StoreDepth.advice`
to the probes (``kinds.testvalidity.depth.DepthAdvisor``); the Ray executor calls it in the
caller and sends the advice with the task."""

from __future__ import annotations

from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.depth import DepthAdvice
from envcheck.core.results import ProbeKind
from envcheck.feed.assess import stored_rollouts
from envcheck.health.depth import advise
from envcheck.health.sprt import KindHealth
from envcheck.store import Store

__all__ = ["StoreDepth"]


class StoreDepth:
    def __init__(self, store: Store, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store, self._clock = store, clock

    def advice(self, env: Environment) -> DepthAdvice | None:
        """None for an environment without a ``tests:`` spec (a Harbor task keeps its own
        protocol's depth)."""
        spec = env.tests
        if spec is None:
            return None
        settings = spec.adaptive if spec.depth == "adaptive" else None
        row = self._store.env_state(env.id)
        doc = (row.kinds or {}).get(str(ProbeKind.TESTS)) if row is not None else None
        health = KindHealth.from_json(str(ProbeKind.TESTS), doc) if doc else None
        return advise(settings, health, quarantined=bool(row is not None and row.quarantined),
                      now=self._clock.now(), rollouts=stored_rollouts(row))
