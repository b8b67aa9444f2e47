"""Benchmark: adaptive validation depth against today's fixed depth, simulated on a fleet.

    .venv/bin/python bench/adaptive.py [--envs 10000] [--days 30] [--seed 1] [--noise RATE]
        [--budget-share F | --budget SECONDS] [--policies fixed,adaptive]
        [--light-after-runs N] [--light-after-s S] [--full-every-s S] [--json OUT]

No sandbox runs: a cost model stands in for them. Everything that decides is envcheck's own
code: the health model (``health.sprt.assess_kind``, runs-weighted), the quarantine policy
(``health.quarantine.decide``), the depth policy (``health.depth.advise`` with the catalogue's
default ``AdaptiveDepth``, and ``DepthAdvice.for_identity``), and with a budget the
scheduler's budget and priority (``schedule.budget.Budget``, ``worth``).

The fleet (``--envs``), with known truth per image digest:

- each environment's runs take 30-120 s (uniform, fixed per environment);
- its image digest changes as a Poisson process, once every 30 days on average (a rebuild
  or a re-pushed tag); each digest is healthy (p = 0) with probability 0.90, flaky with 0.07
  (one test fails each run with probability p, uniform in 0.05-0.5), broken with 0.03 (the
  oracle does not fix: every positive run fails);
- probes come every 6 h (``tests: 6h``), every 24 h while quarantined (``quarantined_factor``
  4), the first within the first 6 h; the digest a probe sees is the one current then.

A probe follows the tests probe's protocol: the negative control, 8 positive runs (each
failing with p), and when runs disagree the confirmation (the failing run again, then a
passing one, up to 4 times each, stopping at the first that disagrees). A light check is the
negative control and one positive run, and goes on to the whole protocol at a failure.
``--noise`` adds a transient failure to any run with that probability (a slow host's
timeout): it ends the probe, ``fail`` as the first run, ``flaky`` after good ones, as the
probe says.

Per policy: sandbox-seconds per day; the share of flaky digests (p >= 0.1) quarantined within
24 h of appearing, and the median time to that quarantine; the same for 0.05 <= p < 0.1 and
for broken digests; false quarantines (a healthy digest's own evidence deciding flaky or
broken); the time from a digest change to its first full validation (median, p95); the share
of light probes. Targets (issue 16): adaptive <= 30% of fixed's sandbox-seconds, >= 95% of
flaky quarantined within 24 h, 0 false quarantines.

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from common import percentile

from envcheck.catalogue.probe_specs import DEFAULT_RERUNS, AdaptiveDepth
from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.results import ProbeKind, Reason, Status
from envcheck.core.states import EnvState, Observation
from envcheck.health.depth import advise
from envcheck.health.quarantine import QuarantineEntry, decide
from envcheck.health.sprt import EnvHealth, KindHealth, assess_kind
from envcheck.kinds.testvalidity.probe import CONFIRM
from envcheck.schedule.budget import Budget, BudgetLimits, worth

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR, DAY = 3600.0, 86400.0
INTERVAL_S, QUARANTINED_FACTOR = 6 * HOUR, 4.0
DIGEST_MEAN_S = 30 * DAY
MIX = (("healthy", 0.90), ("flaky", 0.07), ("broken", 0.03))
FLAKY_P = (0.05, 0.5)
RUN_S = (30.0, 120.0)
TICK_S = 60.0  # how often the budgeted dispatcher looks at its queue
SPEC = "spec"
TARGET_COST, TARGET_CAUGHT = 0.30, 0.95
KIND = ProbeKind.TESTS


@dataclass
class Digest:
    start: float
    end: float
    kind: str
    p: float  # a run's failure probability (flaky); 1 for broken, 0 for healthy
    quarantined_at: float | None = None  # its own evidence decided bad
    validated_at: float | None = None  # its first full validation


@dataclass
class Env:
    index: int
    run_s: float
    suite: str
    digests: list[Digest]
    history: list[Observation] = field(default_factory=list)  # of the digest current
    seen: int = -1  # the digest of the newest probe
    health: KindHealth | None = None
    entry: QuarantineEntry | None = None
    state: EnvState = EnvState.UNKNOWN
    last_at: float | None = None
    last_cost: float | None = None  # sandbox-seconds of its newest probe: the budget's estimate

    def digest_at(self, t: float) -> int:
        for i, d in enumerate(self.digests):
            if d.start <= t < d.end:
                return i
        return len(self.digests) - 1


def make_fleet(n: int, days: float, rng: random.Random) -> list[Env]:
    end = days * DAY
    fleet = []
    for i in range(n):
        starts = [0.0]
        while True:
            nxt = starts[-1] + rng.expovariate(1 / DIGEST_MEAN_S)
            if nxt >= end:
                break
            starts.append(nxt)
        digests = []
        for k, start in enumerate(starts):
            stop = starts[k + 1] if k + 1 < len(starts) else float("inf")
            kind = rng.choices([m for m, _ in MIX], [w for _, w in MIX])[0]
            p = rng.uniform(*FLAKY_P) if kind == "flaky" else float(kind == "broken")
            digests.append(Digest(start, stop, kind, p))
        fleet.append(Env(i, rng.uniform(*RUN_S), f"suite-{i % 10}", digests))
    return fleet


# --- one probe, by the tests probe's protocol ---------------------------------------------


def run_probe(rng: random.Random, digest: Digest, light: bool, noise: float
              ) -> tuple[Status, int, int]:
    """(status, runs, failed runs) of one probe of ``digest``."""
    outcomes: list[bool] = []  # True: the run passed

    def run(positive: bool) -> bool | None:
        """A run's outcome; None: a transient failure ended the probe."""
        if noise and rng.random() < noise:
            return None
        ok = not positive if digest.kind == "broken" else rng.random() >= digest.p
        outcomes.append(ok)
        return ok

    def transient(positive: bool) -> tuple[Status, int, int]:
        earlier = len(outcomes) > 1 if positive else False
        runs = len(outcomes) + 1
        return (Status.FLAKY if earlier else Status.FAIL), runs, runs - sum(outcomes)

    if run(False) is None:
        return transient(False)
    planned = 1 if light else DEFAULT_RERUNS
    for i in range(DEFAULT_RERUNS):
        if i >= planned and all(outcomes):
            break  # the light check stands
        if run(True) is None:
            return transient(True)
    failed = len(outcomes) - sum(outcomes)
    if not failed:
        return Status.PASS, len(outcomes), 0
    if failed == len(outcomes) or digest.kind == "broken":
        return Status.FAIL, len(outcomes), failed
    for _ in range(CONFIRM):  # the failing run again, then a passing one
        again = run(True)
        if again is None or again:
            break
        back = run(True)
        if back is None or not back:
            break
    return Status.FLAKY, len(outcomes), len(outcomes) - sum(outcomes)


# --- the fleet over time -------------------------------------------------------------------


@dataclass
class Tally:
    sandbox_s: float = 0.0
    probes: int = 0
    light: int = 0
    runs: int = 0
    deferred: int = 0  # probes that waited for the budget at least once
    waits: list[float] = field(default_factory=list)  # how long deferred probes waited


class Simulation:
    def __init__(self, fleet: list[Env], days: float, adaptive: bool, seed: int,
                 noise: float = 0.0, budget: float | None = None,
                 settings: AdaptiveDepth | None = None) -> None:
        self.fleet, self.end, self.adaptive = fleet, days * DAY, adaptive
        self.rng = random.Random(seed)
        self.noise = noise
        self.settings = settings or AdaptiveDepth()
        self.tally = Tally()
        self.budget = Budget(BudgetLimits(fleet=budget)) if budget is not None else None

    def at(self, t: float) -> datetime:
        return T0 + timedelta(seconds=t)

    def advice(self, env: Env, t: float, digest: str) -> DepthAdvice:
        if not self.adaptive:
            return DepthAdvice(Depth.FIXED, "fixed")
        given = advise(self.settings, env.health, quarantined=env.entry is not None,
                       now=self.at(t))
        return given.for_identity(digest, SPEC)

    def probe(self, env: Env, t: float) -> None:
        index = env.digest_at(t)
        digest = env.digests[index]
        name = f"sha256:{env.index}-{index}"
        if index != env.seen:
            env.history, env.seen = [], index  # the model counts the current digest only
        depth = self.advice(env, t, name)
        status, runs, failed = run_probe(self.rng, digest, depth.depth is Depth.LIGHT,
                                         self.noise)
        light = depth.depth is Depth.LIGHT and status is Status.PASS
        mode = Depth.LIGHT if light else (Depth.FIXED if not self.adaptive else Depth.FULL)
        reason = Reason.OK if status is Status.PASS else Reason.NONDETERMINISTIC
        if status is Status.FAIL:
            reason = Reason.ORACLE_DOES_NOT_FIX
        env.history.append(Observation(status, str(reason), self.at(t), name, SPEC, "r",
                                       len(env.history), runs, failed, mode))
        cost = runs * env.run_s
        env.last_cost = cost
        self.tally.sandbox_s += cost
        self.tally.probes += 1
        self.tally.runs += runs
        self.tally.light += light
        if not light and digest.validated_at is None:
            digest.validated_at = t
        health = assess_kind(KIND, env.history)
        env.health = health
        entry, _ = decide(env.entry, env.state, EnvHealth(str(env.index), health.state,
                                                          {KIND: health}), self.at(t))
        env.entry, env.state, env.last_at = entry, health.state, t
        if health.state.bad and digest.quarantined_at is None:
            digest.quarantined_at = t
        if self.budget is not None:
            self.budget.charge(env.suite, cost, t)

    def interval(self, env: Env) -> float:
        return INTERVAL_S * (QUARANTINED_FACTOR if env.entry is not None else 1.0)

    def run(self) -> Tally:
        due = [(self.rng.uniform(0, INTERVAL_S), env.index) for env in self.fleet]
        heapq.heapify(due)
        if self.budget is None:
            while due and due[0][0] < self.end:
                t, i = heapq.heappop(due)
                env = self.fleet[i]
                self.probe(env, t)
                heapq.heappush(due, (t + self.interval(env), i))
            return self.tally
        return self.run_budgeted(due)

    def run_budgeted(self, due: list[tuple[float, int]]) -> Tally:
        """Due probes wait in a queue ranked by the scheduler's ``worth``; every tick the
        best ones run while the budget affords them, the rest are deferred."""
        assert self.budget is not None
        queue: list[tuple[int, float, int, int]] = []
        seq = itertools.count()
        waited: dict[int, float] = {}
        t = 0.0
        limit = self.budget.limits.fleet or float("inf")
        cheapest = 2 * RUN_S[0]  # a light check of the quickest environment
        while t < self.end:
            while due and due[0][0] <= t:
                at, i = heapq.heappop(due)
                heapq.heappush(queue, (self.rank(self.fleet[i], at), at, next(seq), i))
            used = self.budget.spent(t)
            if queue and used > 0 and used + cheapest > limit:
                # nothing fits: all of it waits (what the scheduler's take finds, item by item)
                for _, at, _, i in queue:
                    if i not in waited:
                        waited[i] = at
                        self.tally.deferred += 1
                t += TICK_S
                continue
            # re-rank what waited: work deferred long enough becomes stale and rises
            queue = [(self.rank(self.fleet[i], t), at, s, i) for _, at, s, i in queue]
            heapq.heapify(queue)
            held = []
            while queue:
                item = heapq.heappop(queue)
                env = self.fleet[item[3]]
                # as the scheduler estimates: the newest probe's cost (a full one at first)
                estimate = env.last_cost or (DEFAULT_RERUNS + 1) * env.run_s
                if not self.budget.affordable(env.suite, estimate, t):
                    held.append(item)
                    if item[3] not in waited:
                        waited[item[3]] = item[1]
                        self.tally.deferred += 1
                    continue
                if item[3] in waited:
                    self.tally.waits.append(t - waited.pop(item[3]))
                self.probe(env, t)
                heapq.heappush(due, (t + self.interval(env), item[3]))
            queue = held
            heapq.heapify(queue)
            t += TICK_S
        return self.tally

    def rank(self, env: Env, t: float) -> int:
        stale = env.last_at is None or t - env.last_at > 2 * self.interval(env)
        suspect = env.state in (EnvState.DEGRADED, EnvState.FLAKY, EnvState.BROKEN)
        return worth(new=env.last_at is None, stale=stale, suspect=suspect,
                     quarantined=env.entry is not None)


# --- reading the outcome -------------------------------------------------------------------


def caught(digests: list[Digest], end: float, within: float = DAY
           ) -> tuple[int, int, list[float]]:
    """(quarantined within ``within`` of appearing, judged, every time to quarantine)."""
    judged = hit = 0
    times = []
    for d in digests:
        if d.quarantined_at is not None:
            times.append(d.quarantined_at - d.start)
        if d.start > end - within or (d.end - d.start < within and d.quarantined_at is None):
            continue  # too late in the run, or replaced before a day and never caught
        judged += 1
        hit += d.quarantined_at is not None and d.quarantined_at - d.start <= within
    return hit, judged, times


def report(fleet: list[Env], tally: Tally, days: float) -> dict[str, Any]:
    end = days * DAY
    digests = [d for env in fleet for d in env.digests if d.start < end]
    flaky = [d for d in digests if d.kind == "flaky" and d.p >= 0.1]
    mild = [d for d in digests if d.kind == "flaky" and d.p < 0.1]
    broken = [d for d in digests if d.kind == "broken"]
    healthy = [d for d in digests if d.kind == "healthy"]
    changed = [d.validated_at - d.start for d in digests
               if d.start > 0 and d.validated_at is not None]
    hit, judged, times = caught(flaky, end)
    mild_hit, mild_judged, _ = caught(mild, end)
    broken_hit, broken_judged, _ = caught(broken, end)
    return {
        "sandbox_s_per_day": tally.sandbox_s / days,
        "runs_per_day": tally.runs / days,
        "probes": tally.probes, "light_share": tally.light / max(tally.probes, 1),
        "flaky_within_24h": hit / max(judged, 1), "flaky_judged": judged,
        "median_h_to_quarantine": percentile(times, 0.5) / HOUR if times else None,
        "mild_within_24h": mild_hit / max(mild_judged, 1), "mild_judged": mild_judged,
        "broken_within_24h": broken_hit / max(broken_judged, 1),
        "false_quarantines": sum(d.quarantined_at is not None for d in healthy),
        "healthy_digests": len(healthy),
        "revalidate_h_median": percentile(changed, 0.5) / HOUR if changed else None,
        "revalidate_h_p95": percentile(changed, 0.95) / HOUR if changed else None,
        "digest_changes": sum(d.start > 0 for d in digests),
        "deferred": tally.deferred,
        "deferred_wait_h_median": percentile(tally.waits, 0.5) / HOUR if tally.waits else None,
    }


def simulate(args: argparse.Namespace, adaptive: bool, budget: float | None = None
             ) -> dict[str, Any]:
    fleet = make_fleet(args.envs, args.days, random.Random(args.seed))
    started = time.perf_counter()
    settings = AdaptiveDepth(**{k: v for k, v in (
        ("light_after_runs", args.light_after_runs), ("light_after_s", args.light_after_s),
        ("full_every_s", args.full_every_s)) if v is not None})
    tally = Simulation(fleet, args.days, adaptive, args.seed + 1, args.noise, budget,
                       settings).run()
    out = report(fleet, tally, args.days)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    return out


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def show(name: str, r: dict[str, Any], base: dict[str, Any] | None) -> None:
    ratio = f" ({r['sandbox_s_per_day'] / base['sandbox_s_per_day']:.3f}x fixed)" if base else ""
    print(f"{name}: {r['sandbox_s_per_day'] / 1e6:.2f}M sandbox-s/day{ratio}, "
          f"{r['runs_per_day']:.0f} runs/day, {r['light_share']:.1%} of "
          f"{r['probes']} probes light")
    print(f"  flaky p>=0.1 quarantined within 24 h: {r['flaky_within_24h']:.1%} of "
          f"{r['flaky_judged']}; median time to quarantine "
          f"{_fmt(r['median_h_to_quarantine'], '.1f')} h")
    print(f"  flaky p<0.1 within 24 h: {r['mild_within_24h']:.1%} of {r['mild_judged']}; "
          f"broken within 24 h: {r['broken_within_24h']:.1%}")
    print(f"  false quarantines: {r['false_quarantines']} of {r['healthy_digests']} healthy "
          f"digests; re-validated after {r['digest_changes']} digest changes in "
          f"{_fmt(r['revalidate_h_median'], '.1f')} h median, "
          f"{_fmt(r['revalidate_h_p95'], '.1f')} h p95")
    if r["deferred"]:
        print(f"  deferred by the budget: {r['deferred']} probes, median wait "
              f"{_fmt(r['deferred_wait_h_median'], '.1f')} h")
    print(f"  ({r['wall_s']} s to simulate)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--noise", type=float, default=0.0,
                        help="probability of a transient failure per run (default 0)")
    parser.add_argument("--budget-share", type=float, default=None, metavar="F",
                        help="also run adaptive under a fleet budget of F x its own mean "
                        "hourly spend (e.g. 0.8)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="also run adaptive under this fleet budget (sandbox-seconds/h)")
    parser.add_argument("--policies", default="fixed,adaptive",
                        help="which of fixed,adaptive to simulate (default both)")
    parser.add_argument("--light-after-runs", type=int, default=None, metavar="N",
                        help="tests.adaptive.light_after_runs (default: the catalogue's)")
    parser.add_argument("--light-after-s", type=float, default=None, metavar="SECONDS",
                        help="tests.adaptive.light_after_s (default: the catalogue's)")
    parser.add_argument("--full-every-s", type=float, default=None, metavar="SECONDS",
                        help="tests.adaptive.full_every_s (default: the catalogue's)")
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args(argv)
    policies = set(args.policies.split(","))
    results: dict[str, Any] = {}
    try:
        print(f"{args.envs} environments, {args.days:g} days, seed {args.seed}, "
              f"noise {args.noise:g}", flush=True)
        fixed = simulate(args, adaptive=False) if "fixed" in policies else None
        if fixed is not None:
            show("fixed", fixed, None)
            results["fixed"] = fixed
        adaptive = simulate(args, adaptive=True) if "adaptive" in policies else None
        if adaptive is not None:
            show("adaptive", adaptive, fixed)
            results["adaptive"] = adaptive
        hourly = args.budget
        if args.budget_share is not None and adaptive is not None:
            hourly = adaptive["sandbox_s_per_day"] / 24 * args.budget_share
        if hourly is not None:
            budgeted = simulate(args, adaptive=True, budget=hourly)
            show(f"adaptive, budget {hourly / 1e3:.0f}k sandbox-s/h", budgeted, fixed)
            results["budgeted"] = {**budgeted, "budget_per_hour": hourly}
    except Exception as exc:  # the benchmark broke, not a number
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), **results}, f, indent=2)
    if fixed is None or adaptive is None:
        return 0
    ratio = adaptive["sandbox_s_per_day"] / fixed["sandbox_s_per_day"]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print(f"targets: cost {ratio:.3f}x <= {TARGET_COST} {met(ratio <= TARGET_COST)}; "
          f"flaky within 24 h {adaptive['flaky_within_24h']:.1%} >= {TARGET_CAUGHT:.0%} "
          f"{met(adaptive['flaky_within_24h'] >= TARGET_CAUGHT)}; false quarantines "
          f"{adaptive['false_quarantines']} {met(adaptive['false_quarantines'] == 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
