"""The environment page's analytics: the environment with its per-kind evidence, failure
rates over a window of results, the tests probe's flaky tests and its adversarial controls,
the training run's rollouts per hour, and the intervals whose rewards are tainted, drawn on
the page's charts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import altair as alt
import pandas as pd  # type: ignore[import-untyped]

from envcheck.core.depth import RunCount
from envcheck.core.results import Status
from envcheck.core.rollouts import ENVIRONMENT_OUTCOMES, TRAINER_OUTCOMES, Outcome, judged
from envcheck.feed.taint import taint
from envcheck.health.sprt import KindHealth, wilson_interval
from envcheck.health.summary import env_summary
from envcheck.store import Store
from envcheck.store.tables.results import ResultLine
from envcheck.store.tables.states import QuarantineListing
from envcheck.store.views.common import StoredResult
from envcheck.store.views.environment import DigestKind, DigestSpan, RolloutCount

__all__ = [
    "EnvironmentView",
    "FlakyReport",
    "RolloutHour",
    "TaintSpan",
    "adversarial_rows",
    "digest_rows",
    "environment_view",
    "flaky_report",
    "rollout_hours",
    "taint_layer",
    "window_rates",
]


@dataclass(frozen=True, slots=True)
class TaintSpan:
    """One interval in which an environment's rewards cannot be trusted, as plain values:
    from ``start`` to ``end`` (None: still open), and why."""

    start: datetime
    end: datetime | None = None
    reason: str = ""
    image_digest: str | None = None

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> TaintSpan:
        """From a mapping as a JSON document holds it (``start``/``end`` as datetimes or ISO
        8601 strings; ``since``/``until`` read as well)."""
        def when(*keys: str) -> datetime | None:
            found = next((value[k] for k in keys if value.get(k) is not None), None)
            return found if found is None or isinstance(found, datetime) else \
                datetime.fromisoformat(str(found))

        start = when("start", "since")
        if start is None:
            raise ValueError(f"a taint interval needs a start: {dict(value)!r}")
        return cls(start, when("end", "until"), str(value.get("reason") or ""),
                   value.get("image_digest"))


@dataclass(frozen=True, slots=True)
class EnvironmentView:
    env_id: str
    suite: str
    image: str
    state: str
    reason: str
    allowed: bool
    image_digest: str | None
    updated_at: datetime | None
    quarantine: QuarantineListing | None
    kinds: tuple[KindHealth, ...]  # as the health model last assessed them, by kind
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    data_sources: tuple[str, ...] = ()
    retired_at: datetime | None = None  # left the daemon's catalogue
    # the training run's rollouts as the health model last assessed them (env_state.rollouts:
    # state, flagged, reason, notes, ...); None: no rollout evidence
    rollouts: Mapping[str, Any] | None = None
    # the intervals whose rewards cannot be trusted (the taint feed's), drawn on the page's
    # timelines as shaded spans
    taint: tuple[TaintSpan, ...] = ()
    watched: bool = False  # pull: watch: its results' digests are those its tag named

    @property
    def quarantined(self) -> bool:
        return self.quarantine is not None


def environment_view(store: Store, env_id: str) -> EnvironmentView | None:
    """An environment's state, why, quarantine and per-kind evidence; None if unknown."""
    record = store.environment_record(env_id)
    if record is None:
        return None
    state = store.env_state(env_id)
    summary = env_summary(state, store.suite(record.suite), record.retired_at)
    tests = record.spec.get("tests") or {}
    return EnvironmentView(
        env_id=env_id, suite=record.suite, image=record.image, state=str(summary.state),
        reason=summary.reason, allowed=summary.allowed, image_digest=summary.image_digest,
        updated_at=summary.updated_at, quarantine=summary.quarantine,
        kinds=tuple(sorted(summary.kinds, key=lambda k: str(k.kind))),
        fail_to_pass=tuple(tests.get("fail_to_pass") or ()),
        pass_to_pass=tuple(tests.get("pass_to_pass") or ()),
        data_sources=tuple(record.spec.get("data_sources") or ()),
        retired_at=record.retired_at,
        rollouts=dict(state.rollouts) if state is not None and state.rollouts else None,
        taint=tuple(TaintSpan(i.start, i.end, i.reason, i.image_digest)
                    for i in taint(store, env_id=env_id)),
        watched=record.watched)


def digest_rows(spans: Sequence[DigestSpan], kinds: Iterable[DigestKind]
                ) -> list[dict[str, Any]]:
    """The digest history's rows, newest first: when each digest was first and last seen,
    its results, per probe kind the newest result's status under it (with how many), so that
    a moved tag shows whether its new digest was validated in every kind, and the results'
    duration quantiles in seconds."""
    per_digest: dict[str | None, list[str]] = {}
    for k in sorted(kinds, key=lambda k: k.kind):
        count = f" ({k.results})" if k.results > 1 else ""
        per_digest.setdefault(k.image_digest, []).append(f"{k.kind} {k.status}{count}")
    return [{"now": "◀" if i == 0 else "", "first seen": span.first_seen,
             "last seen": span.last_seen, "results": span.results, "failures": span.failures,
             "newest by kind": " · ".join(per_digest.get(span.image_digest)
                                          or span.kinds),
             "p50": span.p50_s, "p95": span.p95_s, "max": span.max_s,
             "digest": span.image_digest or "—"}
            for i, span in enumerate(spans)]


def window_rates(lines: Sequence[ResultLine]) -> dict[str, tuple[int, int, float, float]]:
    """Per kind over ``lines``: (failed runs, counted runs, Wilson low, Wilson high). Counted
    as the health model counts: runs, not probes (a tests probe holds several), of pass, fail
    and flaky results; error and skip never count."""
    tally: dict[str, list[int]] = {}
    for line in lines:
        if line.status in ("pass", "fail", "flaky"):
            count = RunCount.stored(Status(line.status), line.runs, line.failed_runs,
                                    line.depth)
            entry = tally.setdefault(line.kind, [0, 0])
            entry[0] += count.failed
            entry[1] += count.runs
    return {k: (f, n, *wilson_interval(f, n)) for k, (f, n) in sorted(tally.items())}


def adversarial_rows(latest: Sequence[StoredResult]) -> list[dict[str, Any]]:
    """The newest tests result's adversarial controls, one row per trick: those played, then
    those that could not act and those the time budget left out (none when the environment
    declares no controls or its tests probe stopped before them)."""
    tests = [s.result for s in latest if s.result.kind == "tests"]
    info = tests[0].details.get("adversarial") if tests else None
    if not isinstance(info, dict):
        return []
    played = [{"trick": t.get("trick"), "verifier": "rewarded" if t.get("rewarded") else
               "refused", "what it did": t.get("verifier"), "stands for": t.get("stands_for")}
              for t in info.get("tricks") or ()]
    idle = [{"trick": t.get("trick"), "verifier": "could not act", "what it did": t.get("why"),
             "stands for": t.get("stands_for")} for t in info.get("could_not_act") or ()]
    left = [{"trick": name, "verifier": "not played", "what it did": "probe_s reached",
             "stands for": None} for name in info.get("unplayed") or ()]
    return played + idle + left


@dataclass(frozen=True, slots=True)
class FlakyReport:
    """The tests probe's flaky tests over an environment's recent results.

    ``tests``: test id -> (times named flaky, probes read, kind of the newest verdict,
    passed/runs of the newest verdict). ``pattern``: the newest probe that named flaky tests,
    one (test, run label, phase, outcome) per cell, outcome one of ``pass``, ``fail``,
    ``fail (expected)`` (a fail-to-pass test before the oracle) or ``invalid run``.
    """

    probes: int
    tests: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    pattern: tuple[tuple[str, str, str, str], ...] = ()
    pattern_result_id: int | None = None
    pattern_at: datetime | None = None

def flaky_report(store: Store, env_id: str, limit: int = 50) -> FlakyReport:
    """The flaky tests named by the environment's newest ``limit`` tests probes."""
    history = store.stored_history(env_id, "tests", limit)
    record = store.environment_record(env_id)
    spec_f2p = set(((record.spec if record else {}).get("tests") or {}).get("fail_to_pass") or ())
    named: Counter[str] = Counter()
    newest: dict[str, tuple[str, str]] = {}
    pattern: list[tuple[str, str, str, str]] = []
    pattern_id: int | None = None
    pattern_at: datetime | None = None
    for stored in history:  # newest first
        details = stored.result.details
        flaky = details.get("flaky") or {}
        for test_id in details.get("flaky_tests") or ():
            named[test_id] += 1
            if test_id not in newest:
                info = flaky.get(test_id) or {}
                newest[test_id] = (str(info.get("kind", "?")),
                                   f"{info.get('passed', '?')}/{info.get('runs', '?')}")
        if not pattern and details.get("flaky_tests"):
            pattern_id, pattern_at = stored.id, stored.result.started_at
            pattern = _pattern(details, list(details["flaky_tests"]), spec_f2p)
    tests = {t: (n, *newest[t]) for t, n in sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))}
    return FlakyReport(len(history), tests, tuple(pattern), pattern_id, pattern_at)


def _pattern(details: Mapping[str, Any], tests: list[str], f2p: set[str]
             ) -> list[tuple[str, str, str, str]]:
    cells = []
    for run in details.get("runs") or ():
        label, phase = str(run.get("label", "?")), str(run.get("phase", "?"))
        failed = set(run.get("not_passed") or ())
        for test_id in tests:
            if run.get("problem"):
                outcome = "invalid run"
            elif test_id not in failed:
                outcome = "pass"
            elif phase == "negative" and test_id in f2p:
                outcome = "fail (expected)"
            else:
                outcome = "fail"
            cells.append((test_id, label, phase, outcome))
    return cells


# --- the training run's rollouts ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RolloutHour:
    """One hour of an environment's rollouts: by outcome, whose failures, and the reward."""

    hour: datetime
    by_outcome: dict[str, int]
    digests: tuple[str, ...]  # the image digests its rollouts named ('' for none)
    reward_n: int = 0
    reward_mean: float | None = None
    reward_std: float | None = None
    zero_share: float | None = None  # of the rollouts that carried a reward
    one_share: float | None = None

    @property
    def rollouts(self) -> int:
        return sum(self.by_outcome.values())

    @property
    def ok(self) -> int:
        return self.by_outcome.get(Outcome.OK, 0)

    @property
    def environment(self) -> int:
        """The environment's failures: the sandbox, the verifier or the reward."""
        return sum(n for o, n in self.by_outcome.items() if o in ENVIRONMENT_OUTCOMES)

    @property
    def trainer(self) -> int:
        """The trainer's: the policy's own time budget, nothing of the environment's."""
        return sum(n for o, n in self.by_outcome.items() if o in TRAINER_OUTCOMES)

    @property
    def failure_rate(self) -> float | None:
        """The environment's failures over the rollouts that judge it (ok or its failure)."""
        failed, n = judged(self.by_outcome)
        return failed / n if n else None


def rollout_hours(counts: Iterable[RolloutCount]) -> list[RolloutHour]:
    """The store's counters folded per hour (over image digests), oldest first."""
    hours: dict[datetime, list[RolloutCount]] = {}
    for c in counts:
        hours.setdefault(c.hour, []).append(c)
    out = []
    for hour, rows in sorted(hours.items()):
        by_outcome: Counter[str] = Counter()
        for c in rows:
            by_outcome[c.outcome] += c.count
        n = sum(c.reward_n for c in rows)
        total, squares = sum(c.reward_sum for c in rows), sum(c.reward_sq for c in rows)
        mean = total / n if n else None
        std = max(0.0, squares / n - (total / n) ** 2) ** 0.5 if n else None
        out.append(RolloutHour(
            hour, dict(sorted(by_outcome.items())), tuple(sorted({c.image_digest for c in rows})),
            n, mean, std, sum(c.reward_zero for c in rows) / n if n else None,
            sum(c.reward_one for c in rows) / n if n else None))
    return out


# --- taint on the timelines -----------------------------------------------------------------


def taint_layer(spans: Iterable[TaintSpan | Mapping[str, Any]], start: datetime,
                end: datetime) -> alt.Chart | None:
    """The intervals in which the environment's rewards cannot be trusted, as shaded spans
    to layer under a chart whose x axis is time (``at``) from ``start`` to ``end``: each
    clipped to that range (an open one runs to ``end``); None when none falls in it."""
    rows = []
    for given in spans:
        span = given if isinstance(given, TaintSpan) else TaintSpan.of(given)
        lo, hi = max(span.start, start), min(span.end or end, end)
        if lo < hi:
            rows.append({"from": lo, "to": hi, "taint": span.reason or "tainted",
                         "since": span.start, "until": span.end, "digest": span.image_digest})
    if not rows:
        return None
    chart: alt.Chart = alt.Chart(pd.DataFrame(rows)).mark_rect(
        color="#c62828", opacity=0.12).encode(
        x=alt.X("from:T", title=None, axis=alt.Axis(format="%m-%d %H:%M")), x2="to:T",
        tooltip=[alt.Tooltip("taint:N", title="rewards tainted"),
                 alt.Tooltip("since:T", format="%Y-%m-%d %H:%M"),
                 alt.Tooltip("until:T", format="%Y-%m-%d %H:%M"), "digest:N"])
    return chart
