"""Where a tests probe learns how deep to validate (``core.depth``), as it learns of earlier
adversarial evidence: from a collaborator found by type (``ctx.service(DepthAdvisor)``).

The composition root builds the advisor over the store's evidence and the health model's
depth policy (``feed.depth``); a Ray node, over the advice its caller looked up and sent with
the task. Either way the advice is checked against the identity the probe finds: a light
check is for the image digest and spec its evidence is for, and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import TestSpec
from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.outages import StoreOutages
from envcheck.core.results import ProbeKind
from envcheck.kinds.base import ProbeContext

__all__ = ["DepthAdvisor", "plan"]

log = logging.getLogger(__name__)


PART = "depth advice"


class DepthAdvisor:
    """``outages``: where a store that does not answer is said, once per outage."""

    def __init__(self, advise: Callable[[Environment], DepthAdvice | None],
                 outages: StoreOutages | None = None) -> None:
        self._advise = advise
        self._outages = outages or StoreOutages()

    def advice(self, env: Environment) -> DepthAdvice | None:
        """The advice for ``env``'s next tests probe; None (validate in full) if the lookup
        fails: a store that does not answer must cost depth, never evidence."""
        try:
            advice = self._advise(env)
        except Exception as exc:
            if not self._outages.failed(PART, exc, then="validating in full"):
                log.exception("depth advice for %s failed: validating in full", env.id)
            return None
        self._outages.ran(PART)
        return advice


def plan(ctx: ProbeContext, spec: TestSpec) -> DepthAdvice:
    """How deep this probe validates, and why."""
    if spec.depth == "fixed":
        return DepthAdvice(Depth.FIXED, "fixed depth (tests.depth: fixed)")
    advisor = ctx.service(DepthAdvisor)
    advice = advisor.advice(ctx.env) if advisor is not None else None
    if advice is None:
        return DepthAdvice(Depth.FULL, "no evidence at hand")
    return advice.for_identity(ctx.image_digest, ctx.env.spec_hash(ProbeKind.TESTS))
