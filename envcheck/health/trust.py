"""Which states and reasons say an environment's rewards cannot be trusted: the vocabulary of
taint (:mod:`envcheck.health.taint`), for every reader that needs to tell."""

from __future__ import annotations

import re

from envcheck.core.results import LEAK_REASONS, ProbeKind, Reason
from envcheck.core.states import EnvState

__all__ = ["IMAGE_KINDS", "IMAGE_REASONS", "PROBE_KINDS", "ROLLOUTS_KIND", "ROLLOUT_FAILURES",
           "UNTRUSTED_REASONS", "UNTRUSTED_STATES", "degraded_untrusted", "kind_reason"]

ROLLOUTS_KIND = "rollouts"  # what an interval found by the training run's rollouts names
ROLLOUT_FAILURES = str(Reason.ROLLOUT_FAILURES)
PROBE_KINDS: frozenset[str] = frozenset(str(k) for k in ProbeKind)

IMAGE_REASONS: frozenset[str] = frozenset(str(r) for r in (
    Reason.REWARD_HACKABLE, Reason.WEAK_VERIFIER, Reason.NOP_REWARDED,
    Reason.F2P_PASSES_BEFORE_ORACLE, *LEAK_REASONS))
"""Reasons that are a property of the image and spec, whatever probe found them: a verifier
that a trick, a no-op or a wrong fix gets the reward from; an answer or the hidden tests
where the agent can read them. The image held it from its first appearance, so an interval
for one reaches back there."""

UNTRUSTED_REASONS: frozenset[str] = IMAGE_REASONS | {ROLLOUT_FAILURES}
"""Reasons for which a **degraded** environment's rewards cannot be trusted: those of
:data:`IMAGE_REASONS` (the reward itself is wrong), and ``rollout_failures`` (the training
run's sandboxes fail well above the fleet's rate: the state reason
``rollouts: rollout_failures``, with or without "fails on the cluster, passes here"). Any
other degraded (a slow shell, a pass after retries, a first failure of a new image) gives
rewards that still mean what they say: no taint. Flaky and broken environments
(:data:`UNTRUSTED_STATES`) are untrusted whatever their reason."""

UNTRUSTED_STATES: frozenset[str] = frozenset({str(EnvState.FLAKY), str(EnvState.BROKEN)})

IMAGE_KINDS: frozenset[str] = frozenset(str(k) for k in (
    ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS))
"""Kinds that probe the image itself: a failure every probe of an identity shows is the
image's (a data source's failure is its server's, which may have failed only now)."""

# the "kind: reason" a state's reason, or a transition's, ends with (a rollouts flag may add
# a parenthesis: "rollouts: rollout_failures (fails on the cluster, passes here)")
_KIND_REASON = re.compile(r"([a-z_]+): ([a-z_]+)(?: \([^()]*\))?\s*$")


def kind_reason(text: str | None) -> tuple[str, str] | None:
    """The (kind, reason code) a reason text ends with, if it does."""
    found = _KIND_REASON.search(text or "")
    return (found.group(1), found.group(2)) if found else None


def degraded_untrusted(state: str, code: str | None) -> bool:
    """Degraded for a reason that taints?"""
    return state == str(EnvState.DEGRADED) and code in UNTRUSTED_REASONS
