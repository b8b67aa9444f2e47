"""The environment page's reads: its catalogue record, its results (as timeline lines or in
full), the image digests its results saw, and the training run's rollouts of it per hour."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select

from envcheck.store.core_tables import ENVS, RESULTS, ROLLOUTS, ROLLUPS
from envcheck.store.rollups import Histogram, duration_bucket_sql, histogram_sums
from envcheck.store.tables.results import ResultLine
from envcheck.store.tables.rollups import DURATION_COLUMNS, RollupPeriod
from envcheck.store.views.common import (
    FULL_COLUMNS,
    LINE_COLUMNS,
    MAX_PAGE,
    PageViews,
    StoredResult,
    clamp,
    stored_result,
)

__all__ = ["DigestKind", "DigestSpan", "EnvironmentRecord", "EnvironmentViews", "ResultLine",
           "RolloutCount"]

_FAILING = ("fail", "flaky")


@dataclass(frozen=True, slots=True)
class EnvironmentRecord:
    """An environment as last synced from a catalogue."""

    env_id: str
    suite: str
    image: str
    spec: dict[str, Any]
    first_seen: datetime
    last_seen: datetime
    retired_at: datetime | None = None  # left the daemon's catalogue; its history stays

    @property
    def watched(self) -> bool:
        """Its image's tag is followed in its registry (``pull: watch``, as the catalogue's
        ``Environment.watched``): its results' digests are the digests the tag named."""
        return self.spec.get("pull") == "watch" and "@" not in self.image


@dataclass(frozen=True, slots=True)
class DigestSpan:
    image_digest: str | None
    first_seen: datetime
    last_seen: datetime
    results: int
    failures: int
    kinds: tuple[str, ...]
    # durations from the histogram the rollups keep (within a bucket's width)
    p50_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None


@dataclass(frozen=True, slots=True)
class DigestKind:
    """One probe kind's stored results under one image digest: how many (and failing), and the
    newest of them."""

    image_digest: str | None
    kind: str
    results: int
    failures: int
    result_id: int
    status: str
    reason: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class RolloutCount:
    """One hour, image digest ('' for none) and outcome of an environment's rollouts: the
    counters the store adds each batch into, with the reward's."""

    hour: datetime
    image_digest: str
    outcome: str
    count: int
    reward_n: int
    reward_sum: float
    reward_sq: float
    reward_zero: int
    reward_one: int


class EnvironmentViews(PageViews):
    """The environment page: needs what :class:`PageViews` needs."""

    def environment_record(self, env_id: str) -> EnvironmentRecord | None:
        query = select(ENVS).where(ENVS.c.id == env_id)
        with self._reading() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        return EnvironmentRecord(row.id, row.suite, row.image, dict(row.spec or {}),
                                 row.first_seen, row.last_seen, row.retired_at)

    def result_lines(self, env_id: str, kinds: Sequence[str] = (), limit: int = 200,
                     before_id: int | None = None) -> list[ResultLine]:
        """An environment's results without evidence or details, newest first."""
        columns = [RESULTS.c[n] for n in LINE_COLUMNS]
        query = select(*columns).where(RESULTS.c.env_id == env_id)
        if kinds:
            query = query.where(RESULTS.c.kind.in_(list(kinds)))
        if before_id is not None:
            query = query.where(RESULTS.c.id < before_id)
        query = query.order_by(RESULTS.c.started_at.desc(), RESULTS.c.id.desc()) \
            .limit(clamp(limit))
        with self._reading() as conn:
            return [ResultLine(**r._mapping) for r in conn.execute(query)]

    def stored_results(self, result_ids: Sequence[int], env_id: str | None = None
                       ) -> list[StoredResult]:
        """The results with these ids (of ``env_id``, if given), in full, newest first."""
        ids = [int(i) for i in result_ids][:MAX_PAGE]
        if not ids:
            return []
        query = select(*(RESULTS.c[n] for n in FULL_COLUMNS)).where(RESULTS.c.id.in_(ids))
        if env_id is not None:
            query = query.where(RESULTS.c.env_id == env_id)
        query = query.order_by(RESULTS.c.started_at.desc(), RESULTS.c.id.desc())
        with self._reading() as conn:
            return [stored_result(r) for r in conn.execute(query)]

    def latest_stored(self, env_id: str) -> list[StoredResult]:
        """The newest result of each probe kind of an environment, in full, by kind."""
        rank = func.row_number().over(
            partition_by=RESULTS.c.kind,
            order_by=(RESULTS.c.started_at.desc(), RESULTS.c.id.desc())).label("rank")
        inner = (select(*(RESULTS.c[n] for n in FULL_COLUMNS), rank)
                 .where(RESULTS.c.env_id == env_id).subquery())
        query = (select(*(inner.c[n] for n in FULL_COLUMNS)).where(inner.c.rank == 1)
                 .order_by(inner.c.kind))
        with self._reading() as conn:
            return [stored_result(r) for r in conn.execute(query)]

    def stored_history(self, env_id: str, kind: str, limit: int = 50) -> list[StoredResult]:
        """An environment's newest results of one kind, in full, newest first."""
        query = (select(*(RESULTS.c[n] for n in FULL_COLUMNS))
                 .where(RESULTS.c.env_id == env_id, RESULTS.c.kind == kind)
                 .order_by(RESULTS.c.started_at.desc(), RESULTS.c.id.desc())
                 .limit(clamp(limit)))
        with self._reading() as conn:
            return [stored_result(r) for r in conn.execute(query)]

    def digest_history(self, env_id: str) -> list[DigestSpan]:
        """Each image digest the environment's results saw, newest first: the raw results
        and the rollups of those pruned, so a prune changes nothing here."""
        started, duration = RESULTS.c.started_at, RESULTS.c.duration_s
        bucket = duration_bucket_sql(duration)
        raw = (select(RESULTS.c.image_digest, RESULTS.c.kind, func.min(started),
                      func.max(started), func.count(),
                      func.sum(case((RESULTS.c.status.in_(_FAILING), 1), else_=0)),
                      func.sum(duration), func.max(duration), bucket)
               .where(RESULTS.c.env_id == env_id)
               .group_by(RESULTS.c.image_digest, RESULTS.c.kind, bucket))
        rolled = (select(ROLLUPS.c.image_digest, ROLLUPS.c.kind, func.min(ROLLUPS.c.first_at),
                         func.max(ROLLUPS.c.last_at), func.sum(ROLLUPS.c.count),
                         func.sum(case((ROLLUPS.c.status.in_(_FAILING), ROLLUPS.c.count),
                                       else_=0)),
                         func.sum(ROLLUPS.c.duration_sum), func.max(ROLLUPS.c.duration_max),
                         *histogram_sums())
                  .where(ROLLUPS.c.env_id == env_id,
                         ROLLUPS.c.period == RollupPeriod.TOTAL.value)
                  .group_by(ROLLUPS.c.image_digest, ROLLUPS.c.kind))
        with self.snapshot() as conn:  # a prune running meanwhile: before or after, not half
            raw_rows, rolled_rows = conn.execute(raw).all(), conn.execute(rolled).all()
        spans: dict[str | None, _Span] = {}

        def span(digest: str | None, first: datetime, last: datetime) -> _Span:
            found = spans.setdefault(digest or None, _Span(first, last))  # '': none, rolled
            found.first, found.last = min(found.first, first), max(found.last, last)
            return found

        for digest, kind, first, last, n, bad, seconds, top, bucket in raw_rows:
            span(digest, first, last).add(kind, bad, n, seconds, top,
                                          [n if i == bucket else 0
                                           for i in range(len(DURATION_COLUMNS))])
        for digest, kind, first, last, n, bad, seconds, top, *buckets in rolled_rows:
            span(digest, first, last).add(kind, bad, n, seconds, top, buckets)
        out = [DigestSpan(d, s.first, s.last, s.durations.count, s.failures,
                          tuple(sorted(s.kinds)), s.durations.quantile(0.5),
                          s.durations.quantile(0.95), s.durations.max_s)
               for d, s in spans.items()]
        return sorted(out, key=lambda s: s.last_seen, reverse=True)

    def digest_kinds(self, env_id: str) -> list[DigestKind]:
        """Per image digest and probe kind, the environment's stored results (not the rollups of
        pruned ones): their count and the newest, by digest then kind."""
        part = (RESULTS.c.image_digest, RESULTS.c.kind)
        newest = (RESULTS.c.started_at.desc(), RESULTS.c.id.desc())
        failing = case((RESULTS.c.status.in_(_FAILING), 1), else_=0)
        inner = (select(RESULTS.c.image_digest, RESULTS.c.kind, RESULTS.c.id, RESULTS.c.status,
                        RESULTS.c.reason, RESULTS.c.started_at,
                        func.row_number().over(partition_by=part, order_by=newest)
                        .label("rank"),
                        func.count().over(partition_by=part).label("n"),
                        func.sum(failing).over(partition_by=part).label("bad"))
                 .where(RESULTS.c.env_id == env_id).subquery())
        query = (select(inner.c.image_digest, inner.c.kind, inner.c.n, inner.c.bad,
                        inner.c.id, inner.c.status, inner.c.reason, inner.c.started_at)
                 .where(inner.c.rank == 1).order_by(inner.c.image_digest, inner.c.kind))
        with self._reading() as conn:
            return [DigestKind(d or None, kind, int(n), int(bad or 0), int(i), status, reason,
                               at)
                    for d, kind, n, bad, i, status, reason, at in conn.execute(query)]

    def rollout_counts(self, env_id: str, hours: int = 168) -> list[RolloutCount]:
        """The environment's rollout counters of the ``hours`` hours up to its newest one with
        any (not up to now: a run that stopped days ago still shows), oldest first: its hour
        rows, which the store keeps for a week (older hours are folded into day rows)."""
        columns = [ROLLOUTS.c[n] for n in RolloutCount.__dataclass_fields__]
        hourly = (ROLLOUTS.c.env_id == env_id) & (ROLLOUTS.c.period == RollupPeriod.HOUR.value)
        newest = select(func.max(ROLLOUTS.c.hour)).where(hourly)
        with self.snapshot() as conn:
            top = conn.execute(newest).scalar()
            if top is None:
                return []
            query = (select(*columns)
                     .where(hourly, ROLLOUTS.c.hour > top - timedelta(hours=max(1, hours)))
                     .order_by(ROLLOUTS.c.hour, ROLLOUTS.c.image_digest, ROLLOUTS.c.outcome))
            return [RolloutCount(*row) for row in conn.execute(query)]


@dataclass(slots=True)
class _Span:
    first: datetime
    last: datetime
    failures: int = 0
    kinds: set[str] = field(default_factory=set)
    durations: Histogram = field(default_factory=Histogram)

    def add(self, kind: str, failures: int | None, count: int, seconds: float, top: float,
            buckets: Sequence[int]) -> None:
        self.kinds.add(kind)
        self.failures += int(failures or 0)
        self.durations.merge(count, seconds, top, buckets)
