"""The fleet page's analytics: suites with what the allowlist admits, the heatmap's cells and
the infrastructure incidents."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Literal

from envcheck.health.quarantine import allowed_count
from envcheck.store import Store
from envcheck.store.tables.runs import Incident
from envcheck.store.views.fleet import SuiteOverview

__all__ = [
    "STATUS_ORDER",
    "Bucketing",
    "HeatCell",
    "Incident",
    "SuiteStats",
    "heat_cells",
    "incident_list",
    "suite_stats",
    "worst",
]

# The worst status in a bucket colours it; error (envcheck's own failure) outranks a pass so
# an incident stays visible, but never a failure of the environment.
STATUS_ORDER = ("fail", "flaky", "error", "pass", "skip")
Bucketing = Literal["hour", "run"]


@dataclass(frozen=True, slots=True)
class SuiteStats(SuiteOverview):
    """A suite's overview with what the allowlist admits of it (the quarantine policy's rule)."""

    allowed: int

    @property
    def healthy_fraction(self) -> float:
        """The share of the suite a scheduler may use now (as the allowlist counts it)."""
        return self.allowed / self.environments if self.environments else 0.0


def suite_stats(store: Store) -> list[SuiteStats]:
    return [SuiteStats(**{f.name: getattr(o, f.name) for f in fields(o)},
                       allowed=allowed_count(o.open_by_state, o.allow_degraded))
            for o in store.suite_overview()]

@dataclass(frozen=True, slots=True)
class HeatCell:
    """One cell of the fleet heatmap: an environment in a bucket (an hour or a run)."""

    env_id: str
    start: datetime  # the bucket's start (a run's: when it started)
    label: str  # what the axis shows
    status: str  # the worst status in the bucket (STATUS_ORDER)
    counts: dict[str, int]

    @property
    def results(self) -> int:
        return sum(self.counts.values())


def worst(statuses: Mapping[str, int]) -> str:
    present = [s for s in STATUS_ORDER if statuses.get(s)]
    return present[0] if present else "skip"


def heat_cells(store: Store, newest_at: datetime | None, env_ids: Sequence[str],
               bucketing: Bucketing, span: int, kinds: Sequence[str] = ()) -> list[HeatCell]:
    """Cells for ``env_ids``: the last ``span`` hours up to ``newest_at``, the newest result
    (``hour``), or the newest ``span`` runs (``run``). Buckets holding a cycle judged an
    infrastructure incident say so in their label: their failures moved no state."""
    counts: dict[tuple[str, datetime, str], Counter[str]] = {}
    incident_runs = {i.run_id for i in store.incidents(100)}
    if bucketing == "run":
        runs = store.recent_runs(span)
        started = dict(runs)
        for b in store.run_buckets(env_ids, [r for r, _ in runs], kinds):
            assert isinstance(b.bucket, str)
            at = started[b.bucket]
            label = f"{at:%m-%d %H:%M} {b.bucket[:6]}"
            if b.bucket in incident_runs:
                label += " (incident)"
            counts.setdefault((b.env_id, at, label), Counter())[b.status] += b.count
    else:
        newest = newest_at
        if newest is None:
            return []
        incident_hours = {run.started_at.replace(minute=0, second=0, microsecond=0)
                          for run in map(store.run, incident_runs) if run is not None}
        until = newest.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        for b in store.time_buckets(env_ids, until - timedelta(hours=span), until, 3600,
                                    kinds):
            assert isinstance(b.bucket, datetime)
            label = f"{b.bucket:%m-%d %H:00}" + (" (incident)" if b.bucket in incident_hours
                                                 else "")
            counts.setdefault((b.env_id, b.bucket, label), Counter())[b.status] += b.count
    return [HeatCell(env, at, label, worst(c), dict(c))
            for (env, at, label), c in sorted(counts.items(), key=lambda kv: kv[0][1])]


def incident_list(store: Store, limit: int = 20) -> list[Incident]:
    """The newest cycles judged infrastructure incidents, newest first."""
    return [Incident.model_validate(r.model_dump()) for r in store.incidents(limit)]
