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
from envcheck.core.results import ProbeKind
from envcheck.kinds.base import ProbeContext

__all__ = ["DepthAdvisor", "plan"]

log = logging.getLogger(__name__)


class DepthAdvisor:
    def __init__(self, advise: Callable[[Environment], DepthAdvice | None]) -> None:
        self._advise = advise

    def advice(self, env: Environment) -> DepthAdvice | None:
        """The advice for ``env``'s next tests probe; None (validate in full) if the lookup
        fails: a store that does not answer must cost depth, never evidence."""
        try:
            return self._advise(env)
        except Exception:
            log.exception("depth advice for %s failed: validating in full", env.id)
            return None


def plan(ctx: ProbeContext, spec: TestSpec) -> DepthAdvice:
    """How deep this probe validates, and why."""
    if spec.depth == "fixed":
        return DepthAdvice(Depth.FIXED, "fixed depth (tests.depth: fixed)")
    advisor = ctx.service(DepthAdvisor)
    advice = advisor.advice(ctx.env) if advisor is not None else None
    if advice is None:
        return DepthAdvice(Depth.FULL, "no evidence at hand")
    return advice.for_identity(ctx.image_digest, ctx.env.spec_hash(ProbeKind.TESTS))
