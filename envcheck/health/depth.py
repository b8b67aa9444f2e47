"""The depth policy: how much a tests probe should validate, from the evidence for the
environment's current identity. Pure (no I/O): the feed reads the stored state and asks here;
the probe follows the advice; the bench simulates a fleet with the same function.

- **Full** (the whole protocol: negative control, every rerun, confirmation) when there is no
  evidence for the current image digest and spec, while the training run's rollouts flag the
  environment (and once after they note it ``always_solved``), when the kind is anything but
  healthy
  (unknown, degraded, flaky, broken) or quarantined, when the SPRT is not at its healthy
  bound (a failure not yet outweighed, or fewer than ~15 runs), when the clean streak since
  the newest failure is shorter than ``light_after_runs`` runs or began less than
  ``light_after_s`` ago, and at least every ``full_every_s`` however long it has been healthy.
- **Light** (the negative control and one shuffled positive run) otherwise. The probe itself
  escalates a light check to the whole protocol at the first doubt (a failing test, runs that
  disagree), and a light check holds only for the identity its evidence is for.
- **Fixed** when the catalogue pins it (``tests.depth: fixed``): always the whole protocol.
"""

from __future__ import annotations

from datetime import datetime

from envcheck.catalogue.probe_specs import AdaptiveDepth
from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.states import EnvState
from envcheck.health.rollouts import ALWAYS_SOLVED, RolloutHealth
from envcheck.health.sprt import HealthPolicy, KindHealth

__all__ = ["advise"]

# The SPRT sits on its lower bound once it has decided healthy (stored rounded to 4 places).
_AT_BOUND = 1e-3
_POLICY = HealthPolicy()


def ago(seconds: float) -> str:
    """A span as a person reads it: 45s, 12.0m, 3.5h, 1.0d."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def advise(settings: AdaptiveDepth | None, health: KindHealth | None, *, quarantined: bool,
           now: datetime, policy: HealthPolicy = _POLICY,
           rollouts: RolloutHealth | None = None) -> DepthAdvice:
    """The depth of the next tests probe. ``settings`` None: the catalogue pins a fixed
    depth; ``health``: the tests kind as last assessed (None: never); ``rollouts``: the
    environment's rollout evidence as last judged (None: none)."""
    if settings is None:
        return DepthAdvice(Depth.FIXED, "fixed depth (tests.depth: fixed)")
    if health is None or health.identity is None:
        return DepthAdvice(Depth.FULL, "no evidence yet")
    digest, spec = health.identity

    def full(why: str) -> DepthAdvice:
        return DepthAdvice(Depth.FULL, why, digest, spec)

    if rollouts is not None and rollouts.flagged:
        return full(f"rollout failures: {rollouts.detail}")
    noted = rollouts.notes_since.get(ALWAYS_SOLVED) if rollouts is not None else None
    if noted is not None and (health.full_at is None or health.full_at < noted):
        return full("always solved on the cluster: every reward 1 since "
                    f"{noted.isoformat(timespec='minutes')}")
    if quarantined:
        return full("quarantined")
    if health.state is not EnvState.HEALTHY:
        return full(f"suspect: {health.state} ({health.reason})")
    if health.llr > policy.lower + _AT_BOUND:
        return full("the SPRT has not decided healthy yet (a failure not outweighed, or too "
                    "few runs)")
    if health.clean_runs < settings.light_after_runs or health.clean_since is None:
        return full(f"{health.clean_runs} of {settings.light_after_runs} clean runs")
    span = (now - health.clean_since).total_seconds()
    if span < settings.light_after_s:
        return full(f"clean for {ago(span)} of {ago(settings.light_after_s)}")
    if health.full_at is None:
        return full("no full validation of this identity")
    since_full = (now - health.full_at).total_seconds()
    if since_full >= settings.full_every_s:
        return full(f"periodic full validation (last {ago(since_full)} ago)")
    return DepthAdvice(Depth.LIGHT, f"healthy for {health.clean_runs} runs over {ago(span)}; "
                       f"last full validation {ago(since_full)} ago", digest, spec)
