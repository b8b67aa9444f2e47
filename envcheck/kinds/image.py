"""The ``image`` probe kind: a watched image's tag in its registry (``pull: watch``).

One look per probe, and no container: the registry stage's ``HEAD`` of the tag (one request for
an unchanged tag). The look itself is taken where the cycle learns the environment's identity
(``executors.cycle``), so every kind of the cycle stands on the same digest; this probe says
what it means:

- the tag names a digest: ``pass``, saying whether it is the first digest seen, the same as
  before, or a move (then the new digest is a new identity, which the other kinds validate in
  full as they do any new digest);
- the registry has no such image on two looks a watch interval apart: ``fail
  image_not_found`` (a trainer pulling it would fail too); on one look only: ``error``, nothing
  concluded yet;
- the registry failed envcheck (unreachable, refused its credentials, rate-limited it):
  ``error`` with that reason, never the environment's.
"""

from __future__ import annotations

from typing import Any

from envcheck.core.results import ProbeKind, Reason, Status
from envcheck.kinds.base import Probe, ProbeContext, Verdict
from envcheck.registry.outcomes import RegistryFailure
from envcheck.registry.state import Change, WatchUpdate

__all__ = ["ImageProbe", "watch_verdict"]


class ImageProbe(Probe):
    kind = ProbeKind.IMAGE
    uses_engine = False  # a registry's answer, not the engine's

    def check(self, ctx: ProbeContext) -> Verdict:
        if ctx.watch is None:  # the cycle looked at no registry for it
            return Verdict(Status.ERROR, Reason.REGISTRY_UNREACHABLE,
                           f"{ctx.env.image}: its tag was not looked up (no registry stage "
                           "in this process)")
        return watch_verdict(ctx.env.image, ctx.watch)


def watch_verdict(image: str, update: WatchUpdate) -> Verdict:
    """What a look at ``image``'s tag says, for the ``image`` kind, and for every kind when the
    look leaves nothing to probe (the image is not there, or the registry would not say)."""
    if update.look is not None:
        look = update.look
        details: dict[str, Any] = {"watch": {**look.details(), "change": str(update.change),
                                             "previous_digest": update.previous_digest}}
        if update.change is Change.MOVED:
            summary = f"{image} moved: {update.previous_digest} -> {look.digest}"
        elif update.change is Change.FIRST:
            summary = f"{image} names {look.digest}"
        else:
            summary = f"{image} still names {look.digest}"
        return Verdict(Status.PASS, Reason.OK, summary, details)
    failure = update.failure
    assert failure is not None  # an update holds a look or a failure
    details = {"registry": failure.details()}
    if update.change is Change.NOT_FOUND:
        return Verdict(Status.FAIL, Reason.IMAGE_NOT_FOUND,
                       f"{image}: the registry has no such image (missing since two looks a "
                       f"watch interval apart): {failure.message}", details)
    if update.change is Change.MISSING_ONCE:
        return Verdict(Status.ERROR, Reason.IMAGE_NOT_FOUND,
                       f"{image}: not found on one look, confirmed only by a second look a "
                       f"watch interval later: {failure.message}", details)
    return Verdict(Status.ERROR, failure.reason, _failed(image, failure), details)


def _failed(image: str, failure: RegistryFailure) -> str:
    return f"{image}: {failure.message}"
