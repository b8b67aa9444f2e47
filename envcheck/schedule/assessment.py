"""How closed windows are judged, as the scheduler sees it: the feed's rule, handed in."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import Protocol

from envcheck.catalogue.models import Environment
from envcheck.core.results import Previous, ProbeResult
from envcheck.store.tables.states import TransitionRow

__all__ = ["Assessment", "WindowOutcome"]


class WindowOutcome(Protocol):
    """What the assessment of a window says: an infrastructure incident, or transitions."""

    @property
    def incident(self) -> tuple[str, int, int, str] | None: ...
    @property
    def transitions(self) -> Sequence[TransitionRow]: ...


class Assessment(Protocol):
    """How closed windows are judged: the feed's rule, wired in by the daemon
    (:class:`envcheck.feed.assess.StoreAssessment`), so the scheduler decides only *when*."""

    def window(self, run_id: str, envs: Sequence[Environment],
               results: Sequence[ProbeResult], before: Previous) -> WindowOutcome: ...

    def catch_up(self, envs: Sequence[Environment]) -> Sized: ...

    def fleet(self, envs: Sequence[Environment]) -> Sized:
        """``envs`` is the whole fleet now: retire the environments it no longer names,
        bring back those it names again."""
        ...
