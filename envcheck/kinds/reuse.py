"""Where a probe of a kind whose outcome is a property of the image (``Probe.reusable``) learns
whether its evidence may be reused (``health.reuse``): a collaborator found by type
(``ctx.service(ReuseAdvisor)``), as the tests probe learns its depth.

The composition root builds it over the store's evidence (``feed.reuse``); a Ray node, over
the advice its caller looked up and sent with the task. Either way the advice is checked
against the identity the probe finds on its host (``DepthAdvice.for_identity``): evidence is
reused only for the image digest and spec it is for. Without an advisor every probe is full.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from envcheck.catalogue.models import Environment
from envcheck.core.depth import DEPTH_KEY, Depth, DepthAdvice
from envcheck.core.outages import StoreOutages
from envcheck.core.results import ProbeKind

__all__ = ["ReuseAdvisor", "depth_record"]

log = logging.getLogger(__name__)

Advise = Callable[[Environment, ProbeKind], DepthAdvice | None]


PART = "reuse advice"


class ReuseAdvisor:
    """``outages``: where a store that does not answer is said, once per outage."""

    def __init__(self, advise: Advise, outages: StoreOutages | None = None) -> None:
        self._advise = advise
        self._outages = outages or StoreOutages()

    def lookup(self, env: Environment, kind: ProbeKind) -> DepthAdvice | None:
        """The advice for ``env``'s next probe of ``kind``, for the identity its evidence is
        for; None (a full probe, nothing proven) if the lookup fails: a store that does not
        answer must cost a container, never evidence."""
        try:
            advice = self._advise(env, kind)
        except Exception as exc:
            if not self._outages.failed(PART, exc, then="probing in full"):
                log.exception("reuse advice for %s %s failed: probing in full", env.id, kind)
            return None
        self._outages.ran(PART)
        return advice

    def advice(self, env: Environment, kind: ProbeKind, image_digest: str | None
               ) -> DepthAdvice | None:
        """:meth:`lookup`, held against the identity the probe found on its host."""
        advice = self.lookup(env, kind)
        if advice is None:
            return None
        return advice.for_identity(image_digest, env.spec_hash(kind))


def depth_record(advice: DepthAdvice, failing: bool) -> dict[str, Any]:
    """What a result of a reusable kind says of its depth (``core.depth.RunCount`` reads it):
    a reused one holds no run and names the evidence it stands on."""
    record: dict[str, Any] = {"mode": str(advice.depth), "why": advice.why}
    if advice.depth is Depth.REUSED:
        record.update(runs=0, failed_runs=0, image_digest=advice.image_digest,
                      full_at=advice.full_at.isoformat() if advice.full_at else None)
    else:
        record.update(runs=1, failed_runs=int(failing))
    return record


def with_depth(details: Mapping[str, Any], advice: DepthAdvice, failing: bool
               ) -> dict[str, Any]:
    return {**details, DEPTH_KEY: depth_record(advice, failing)}
