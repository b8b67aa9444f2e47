"""How long the store keeps what: the retention windows, and what a prune did.

Free of SQLAlchemy, like :mod:`envcheck.store.urls`: the command line builds a
:class:`Retention` from its options before any store is opened. Pruning itself is
:meth:`envcheck.store.Store.prune` (:mod:`envcheck.store.prune`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

__all__ = ["Cutoffs", "PruneReport", "Retention", "day_start", "hour_start"]


def hour_start(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def day_start(at: datetime) -> datetime:
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """The instants a prune at one ``now`` compares against."""

    passes: datetime  # clean passes and skips that started before go
    others: datetime  # failures, flaky, errors and degraded passes that started before go
    hourly: datetime  # hour rollups before go (a midnight: whole days at a time)
    daily: datetime  # day rollups before go


@dataclass(frozen=True, slots=True)
class Retention:
    """Days each kind of data is kept. Raw results past their window are folded into the
    rollups and deleted, except those the health model still reads and the evidence of
    transitions and quarantines (see :mod:`envcheck.store.prune`)."""

    passes_days: float = 3.0
    others_days: float = 14.0
    # the fleet heatmap's longest span (168 h); day rows before, so the store stays flat
    # once the failures' two weeks have passed
    hourly_days: float = 7.0
    daily_days: float = 365.0
    batch: int = 2000  # rows per transaction: no write lock is held for long

    def __post_init__(self) -> None:
        for name in ("passes_days", "others_days", "hourly_days", "daily_days"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name.removesuffix('_days')} must be kept more than 0 days")
        if self.others_days < self.passes_days:
            raise ValueError(f"failures kept {self.others_days:g} days, less than passes "
                             f"({self.passes_days:g}): failures are the evidence that matters")
        if self.daily_days < self.hourly_days:
            raise ValueError(f"day rollups kept {self.daily_days:g} days, less than hour "
                             f"rollups ({self.hourly_days:g})")
        if not 1 <= self.batch <= 10_000:
            raise ValueError(f"a prune batch of {self.batch} rows: use 1 to 10000")

    def cutoffs(self, now: datetime) -> Cutoffs:
        return Cutoffs(now - timedelta(days=self.passes_days),
                       now - timedelta(days=self.others_days),
                       day_start(now - timedelta(days=self.hourly_days)),
                       day_start(now - timedelta(days=self.daily_days)))


@dataclass(slots=True)
class PruneReport:
    """What a prune did, or (``dry_run``) would do; row counts per table."""

    dry_run: bool = False
    passes_deleted: int = 0  # probe_result rows folded into the rollups and deleted
    others_deleted: int = 0
    kept_as_evidence: int = 0  # past their window, kept: a transition or quarantine cites them
    rollups_written: dict[str, int] = field(default_factory=dict)  # period -> rows added to
    hourly_deleted: int = 0
    daily_deleted: int = 0
    runs_deleted: int = 0  # check runs left without results or incidents
    rollout_hours_folded: int = 0  # rollout_rollup hour rows folded into day rows
    rollout_days_deleted: int = 0  # rollout_rollup day rows past the day retention
    rollout_unknown_deleted: int = 0  # rollout_unknown hours past the hour retention
    rollout_held_deleted: int = 0  # rollout_held hours past the hour retention
    rollout_producers_deleted: int = 0  # producers not heard from for the hour retention
    pages_freed: int = 0  # SQLite: pages given back to the file system
    pages_kept_free: int = 0  # SQLite: free pages kept for the next inserts (the reserve)
    incremental_vacuum: bool | None = None  # SQLite: does the file give pages back? (else None)

    @property
    def results_deleted(self) -> int:
        return self.passes_deleted + self.others_deleted

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "results_deleted": self.results_deleted}
