"""What a watch remembers between looks, as small pure values the scheduler holds.

- ``TagWatchState``, per watched environment: the last digest seen, and since when the tag has
  been missing. One "not found" is a single look (a registry mid-push, a tag deleted and
  pushed again); ``image_not_found`` is confirmed only by a second one at least one watch
  interval after the first, with no successful look between them.
- ``RegistryBackoff``, per registry: after a 429, looks at that registry wait until
  ``Retry-After`` (or a doubling default when it sends none), while other registries go on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from envcheck.core.results import Reason
from envcheck.registry.outcomes import RegistryFailure, TagLook

__all__ = ["Backoff", "Change", "RegistryBackoff", "TagWatchState", "WatchUpdate"]


class Change(StrEnum):
    FIRST = "first"  # the first digest seen for the environment
    UNCHANGED = "unchanged"
    MOVED = "moved"  # a new digest for the engine's platform: a new identity
    MISSING_ONCE = "missing_once"  # not found on one look: no verdict yet
    NOT_FOUND = "not_found"  # confirmed: image_not_found, the environment's
    FAILED = "failed"  # the registry failed envcheck: nothing is concluded


@dataclass(frozen=True, slots=True)
class WatchUpdate:
    change: Change
    look: TagLook | None = None
    failure: RegistryFailure | None = None
    previous_digest: str | None = None


@dataclass(frozen=True, slots=True)
class TagWatchState:
    last: TagLook | None = None
    missing_since: datetime | None = None

    def observe(self, outcome: TagLook | RegistryFailure, interval: timedelta
                ) -> tuple[TagWatchState, WatchUpdate]:
        """The state after ``outcome`` and what it changed. ``interval`` is the watch's."""
        if isinstance(outcome, TagLook):
            previous = self.last.digest if self.last is not None else None
            change = (Change.FIRST if previous is None else
                      Change.UNCHANGED if previous == outcome.digest else Change.MOVED)
            return (TagWatchState(outcome, None),
                    WatchUpdate(change, look=outcome, previous_digest=previous))
        if not outcome.not_found:
            return self, WatchUpdate(Change.FAILED, failure=outcome)
        if self.missing_since is None:
            return (replace(self, missing_since=outcome.seen_at),
                    WatchUpdate(Change.MISSING_ONCE, failure=outcome))
        if outcome.seen_at - self.missing_since >= interval:
            return self, WatchUpdate(Change.NOT_FOUND, failure=outcome)
        return self, WatchUpdate(Change.MISSING_ONCE, failure=outcome)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Looks at ``registry`` wait until ``until``: ``why`` is the 429's message."""

    registry: str
    until: datetime
    why: str
    strikes: int = 1


@dataclass
class RegistryBackoff:
    """Per-registry backoff after rate limits. Pure (times are handed in); not thread-safe
    on its own: its owner (the watcher) serialises calls."""

    default_s: float = 60.0  # when a 429 says nothing of when to come back
    max_s: float = 3600.0
    held: dict[str, Backoff] = field(default_factory=dict)

    def blocked(self, registry: str, now: datetime) -> Backoff | None:
        found = self.held.get(registry)
        return found if found is not None and now < found.until else None

    def record(self, failure: RegistryFailure) -> Backoff | None:
        """After a look: a rate limit starts (or extends) the registry's backoff."""
        if failure.reason != Reason.REGISTRY_RATE_LIMITED:
            return None
        before = self.held.get(failure.registry)
        strikes = before.strikes + 1 if before is not None else 1
        wait = failure.retry_after_s
        if wait is None:  # no Retry-After: double the default per strike in a row
            wait = self.default_s * 2 ** (strikes - 1)
        wait = min(max(wait, 1.0), self.max_s)
        backoff = Backoff(failure.registry, failure.seen_at + timedelta(seconds=wait),
                          failure.message, strikes)
        self.held[failure.registry] = backoff
        return backoff

    def clear(self, registry: str) -> None:
        """A look at ``registry`` succeeded: its strikes are forgotten."""
        self.held.pop(registry, None)
