"""How deep a tests probe validates, and how many runs a result holds: the vocabulary the
health model advises in (``health.depth``), the probe follows (``kinds.testvalidity``) and
the store keeps (``probe_result.runs``, ``failed_runs``, ``depth``), so none of them needs
another's policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from envcheck.core.results import Status

__all__ = ["DEFAULT_HOST_SAMPLE_S", "DEPTH_KEY", "Depth", "DepthAdvice", "RunCount"]

# The key of a result's details that says how deep its probe went and how many runs it holds.
DEPTH_KEY = "depth"
# How often, by default, one terminal probe in full measures the host while the fleet's
# terminal evidence is reused (feed.reuse.HostSamples; the daemon's --host-sample-every).
DEFAULT_HOST_SAMPLE_S = 600.0


class Depth(StrEnum):
    FULL = "full"  # the whole protocol: negative control, every rerun, confirmation
    LIGHT = "light"  # the negative control and one shuffled positive run; escalates at a doubt
    FIXED = "fixed"  # the whole protocol, pinned by the catalogue (tests.depth: fixed)
    # An identity check: the image and spec are the ones a recent full probe proved, so its
    # evidence stands (no container; terminal and dependencies, see health.reuse). No runs.
    REUSED = "reused"

    @property
    def whole(self) -> bool:
        """Ran the whole protocol: a full validation of its identity."""
        return self is Depth.FULL or self is Depth.FIXED


@dataclass(frozen=True, slots=True)
class DepthAdvice:
    """What the evidence for an environment's identity (image digest, spec hash) advises.

    A light check is advised only for the identity the evidence is for: a probe that finds
    another digest or spec (the node resolves it when the probe starts) validates in full.
    """

    depth: Depth
    why: str
    image_digest: str | None = None
    spec_hash: str | None = None
    # The newest full validation of that identity, and whether it passed: what a reused
    # result stands on, and what tells a slow host from a slow image (kinds.terminal).
    full_at: datetime | None = None
    proven: bool = False

    def for_identity(self, image_digest: str | None, spec_hash: str) -> DepthAdvice:
        """This advice for a probe of that identity: a light check or a reuse for another
        is full, and proves nothing of it."""
        if self.depth not in _CONDITIONAL and not self.proven:
            return self
        if image_digest is None or image_digest != self.image_digest:
            return DepthAdvice(Depth.FULL, "new image digest: no evidence for it yet",
                               image_digest, spec_hash)
        if spec_hash != self.spec_hash:
            return DepthAdvice(Depth.FULL, "new spec: no evidence for it yet",
                               image_digest, spec_hash)
        return self


@dataclass(frozen=True, slots=True)
class RunCount:
    """How many runs a result holds and how many of them went wrong: what the health model
    weighs (a probe of 9 runs is 9 runs of evidence, a light check 2). A result that does
    not say (another kind, a result stored before) is one run, failed if it failed."""

    runs: int
    failed: int
    depth: Depth | None = None

    @classmethod
    def of(cls, status: Status, details: Mapping[str, Any]) -> RunCount:
        found = details.get(DEPTH_KEY)
        failing = status in (Status.FAIL, Status.FLAKY)
        if isinstance(found, Mapping):
            runs, failed = found.get("runs"), found.get("failed_runs")
            depth = _depth(found.get("mode"))
            if isinstance(runs, int) and isinstance(failed, int) and (
                    runs >= 1 or (runs == 0 and depth is Depth.REUSED and not failing)):
                return cls(runs, min(max(failed, int(failing)), runs), depth)
        return cls(1, int(failing))

    @classmethod
    def stored(cls, status: Status, runs: int | None, failed: int | None,
               depth: str | None) -> RunCount:
        """From a stored row's columns (NULL where the result did not say)."""
        if runs is None or failed is None:
            return cls(1, int(status in (Status.FAIL, Status.FLAKY)))
        found = _depth(depth)
        if found is Depth.REUSED:  # evidence reused: no run of its own
            return cls(0, 0, found)
        return cls(max(runs, 1), max(failed, 0), found)


def _depth(value: object) -> Depth | None:
    return Depth(value) if isinstance(value, str) and value in _DEPTHS else None


_DEPTHS = frozenset(str(d) for d in Depth)
# Advice that holds only for the identity its evidence is for.
_CONDITIONAL = frozenset({Depth.LIGHT, Depth.REUSED})
