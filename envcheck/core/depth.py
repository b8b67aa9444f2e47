"""How deep a tests probe validates, and how many runs a result holds: the vocabulary the
health model advises in (``health.depth``), the probe follows (``kinds.testvalidity``) and
the store keeps (``probe_result.runs``, ``failed_runs``, ``depth``), so none of them needs
another's policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from envcheck.core.results import Status

__all__ = ["DEPTH_KEY", "Depth", "DepthAdvice", "RunCount"]

# The key of a result's details that says how deep its probe went and how many runs it holds.
DEPTH_KEY = "depth"


class Depth(StrEnum):
    FULL = "full"  # the whole protocol: negative control, every rerun, confirmation
    LIGHT = "light"  # the negative control and one shuffled positive run; escalates at a doubt
    FIXED = "fixed"  # the whole protocol, pinned by the catalogue (tests.depth: fixed)

    @property
    def whole(self) -> bool:
        """Ran the whole protocol: a full validation of its identity."""
        return self is not Depth.LIGHT


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

    def for_identity(self, image_digest: str | None, spec_hash: str) -> DepthAdvice:
        """This advice for a probe of that identity: a light one for another is full."""
        if self.depth is not Depth.LIGHT:
            return self
        if image_digest is None or image_digest != self.image_digest:
            return DepthAdvice(Depth.FULL, "new image digest: no evidence for it yet",
                               image_digest, spec_hash)
        if spec_hash != self.spec_hash:
            return DepthAdvice(Depth.FULL, "new tests spec: no evidence for it yet",
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
            if isinstance(runs, int) and isinstance(failed, int) and runs >= 1:
                return cls(runs, min(max(failed, int(failing)), runs),
                           _depth(found.get("mode")))
        return cls(1, int(failing))

    @classmethod
    def stored(cls, status: Status, runs: int | None, failed: int | None,
               depth: str | None) -> RunCount:
        """From a stored row's columns (NULL where the result did not say)."""
        if runs is None or failed is None:
            return cls(1, int(status in (Status.FAIL, Status.FLAKY)))
        return cls(max(runs, 1), max(failed, 0), _depth(depth))


def _depth(value: object) -> Depth | None:
    return Depth(value) if isinstance(value, str) and value in _DEPTHS else None


_DEPTHS = frozenset(str(d) for d in Depth)
