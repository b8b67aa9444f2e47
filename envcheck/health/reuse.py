"""Evidence reuse: whether a scheduled probe of a kind whose outcome is a property of the image
(terminal, dependencies) must start a container, or may stand on the evidence it already has.
Pure (no I/O): the feed reads the stored state and asks here; the probe follows the advice
(``kinds.reuse``); the fleet-cost bench simulates a fleet with the same function.

An image is immutable: while its digest and the kind's spec hold, whether a tool is on PATH,
the workdir is writable, a package satisfies its specifier or a module imports cannot change.
So the probe is an **identity check** (the tag still names the digest the evidence is for, the
image is on the host; no container) when all of these hold:

- the catalogue lets the kind reuse (``reprove_every.<kind>`` is not null);
- the kind is healthy for its current identity (unknown, degraded, flaky or broken: full);
- the training run's rollouts do not flag the environment (their escalation wants proof);
- its newest full validation is younger than ``reprove_every``.

A quarantine by itself does not make the probe full: an environment quarantined for its tests
keeps a terminal and dependencies that are healthy for its image (a kind that failed is not
healthy, and is probed in full), and its release is earned by its own kind's clean probes.
Anything else is a full probe, and a probe that finds another digest or spec than the advice
is for validates in full at once (``DepthAdvice.for_identity``). A full advice for a proven
identity says so (``proven``): a slow start or shell there is the host's, not the image's.
"""

from __future__ import annotations

from datetime import datetime

from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.states import EnvState
from envcheck.health.depth import ago
from envcheck.health.rollouts import RolloutHealth
from envcheck.health.sprt import KindHealth

__all__ = ["advise_reuse"]


def advise_reuse(every_s: float | None, health: KindHealth | None, *, now: datetime,
                 rollouts: RolloutHealth | None = None) -> DepthAdvice:
    """How the next probe of a kind goes. ``every_s``: the catalogue's ``reprove_every`` for
    it (None: never reused); ``health``: the kind as last assessed (None: never)."""
    if every_s is None:
        return DepthAdvice(Depth.FULL, "full every time (reprove_every: null)")
    if health is None or health.identity is None:
        return DepthAdvice(Depth.FULL, "no evidence yet")
    digest, spec = health.identity
    proven = health.state is EnvState.HEALTHY and health.full_at is not None

    def full(why: str) -> DepthAdvice:
        return DepthAdvice(Depth.FULL, why, digest, spec, health.full_at, proven)

    if rollouts is not None and rollouts.flagged:
        return full(f"rollout failures: {rollouts.detail}")
    if health.state is not EnvState.HEALTHY:
        return full(f"suspect: {health.state} ({health.reason})")
    if health.full_at is None:
        return full("no full probe of this identity")
    if digest is None:
        return full("no image digest to check the identity against")
    since = (now - health.full_at).total_seconds()
    if since >= every_s:
        return full(f"re-proved every {ago(every_s)} (last full probe {ago(since)} ago)")
    return DepthAdvice(Depth.REUSED, f"image and spec unchanged since the full probe of "
                       f"{health.full_at.isoformat(timespec='seconds')} ({ago(since)} ago)",
                       digest, spec, health.full_at, proven)
