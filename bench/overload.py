"""Benchmark: the scheduler under overload, a fleet asking 1x, 2x and 10x what the host runs.

    .venv/bin/python bench/overload.py [--factors 1,2,10] [--workers 4] [--days 6]
        [--warmup-days 1] [--seed 1] [--json OUT]

No thread, no sandbox: a cost model stands in for the probes, and virtual time for the
clock. What decides is envcheck's own code: the queue (``schedule.workqueue.WorkQueue``:
dedupe, priority, rank), the ledger (``schedule.ledger.Ledger``: last results, the worth of a
probe), the overload rule (``schedule.overload.Overload``: the rank by evidence age, the
re-rank and aging) and the budget's bookkeeping (``schedule.budget.Budget``: the spend).
The timetable is modelled as it behaves: each (environment, kind) falls due on its grid of
intervals, and a due time that finds it queued or running is refused.

The fleet: two kinds per environment, ``terminal`` every 10 minutes (a probe takes 5-15 s)
and ``dependencies`` every hour (60-180 s), fixed per environment, +-20% per run; 10% of
the environments suspect, 5% quarantined (probed 4x less often). The host has
``--workers`` slots; the fleet's size is set so that its demand (sandbox-seconds per
second) is the factor times the slots.

Each factor runs twice on the same fleet and seed: **today** (work ranked by the time it
fell due, its priority fixed when it fell due) and **overload** (the rule of
``schedule/overload.py``). Per run, after the warm-up: the queue's longest length (its
bound is the fleet's jobs); the effective interval of each (environment, kind) (the
measured window over its results in it) as a multiple of its configured interval and of the
ideal stretch (the factor), median / p95 / max, for routine and quarantined work apart and
for each kind; the worst gap any (environment, kind) saw between two results (or since its
last, at the end), as a multiple of its interval; the share of probes taken in order of
evidence age (no queued work of the same priority had evidence older, in its own
intervals, by more than 5%). Then overload's figures over today's, as ratios.

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
from datetime import UTC, datetime
from typing import Any

from common import percentile

from envcheck.catalogue.models import Environment, Schedules
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.schedule.budget import Budget, BudgetLimits
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.overload import Overload
from envcheck.schedule.workqueue import Key, WorkQueue

DAY = 86400.0
KINDS = {ProbeKind.TERMINAL: (600.0, (5.0, 15.0)), ProbeKind.DEPENDENCIES: (3600.0, (60.0, 180.0))}
SUSPECT_SHARE, QUARANTINED_SHARE, FACTOR_Q = 0.10, 0.05, 4.0
IN_ORDER_SLACK = 0.05
DONE, FIRE = 0, 1  # events: a probe's end before a due time at the same instant


@dataclass
class Fleet:
    envs: dict[str, Environment]
    cost: dict[Key, float]
    suspect: set[str]
    quarantined: set[str]
    demand: float  # sandbox-seconds asked per second


def make_fleet(factor: float, workers: int, rng: random.Random) -> Fleet:
    schedules = Schedules(terminal=KINDS[ProbeKind.TERMINAL][0], tests=None, datasource=None,
                          dependencies=KINDS[ProbeKind.DEPENDENCIES][0], jitter_s=0,
                          quarantined_factor=FACTOR_Q)
    per_env = sum((lo + hi) / 2 / every for every, (lo, hi) in KINDS.values())
    per_env *= 1 - QUARANTINED_SHARE + QUARANTINED_SHARE / FACTOR_Q
    n = max(round(factor * workers / per_env), 1)
    envs, cost, suspect, quarantined = {}, {}, set(), set()
    for i in range(n):
        env = Environment(id=f"e{i:05d}", image=f"img-{i}", suite=f"s{i % 4}",
                          schedules=schedules)
        envs[env.id] = env
        for kind, (_, (lo, hi)) in KINDS.items():
            cost[(env.id, kind)] = rng.uniform(lo, hi)
        draw = rng.random()
        if draw < QUARANTINED_SHARE:
            quarantined.add(env.id)
        elif draw < QUARANTINED_SHARE + SUSPECT_SHARE:
            suspect.add(env.id)
    demand = sum(c / envs[k[0]].schedules.interval(k[1], k[0] in quarantined)  # type: ignore[operator]
                 for k, c in cost.items())
    return Fleet(envs, cost, suspect, quarantined, demand)


@dataclass
class Run:
    starts: dict[Key, list[float]] = field(default_factory=dict)
    queue_max: int = 0
    probes: int = 0
    checked: int = 0  # takes checked for order
    in_order: int = 0
    sandbox_s: float = 0.0


def simulate(fleet: Fleet, workers: int, days: float, seed: int, ordered: bool) -> Run:
    rng = random.Random(seed)
    ledger = Ledger(dict(fleet.envs))
    ledger.take_states(0, set(fleet.quarantined), set(fleet.suspect))
    overload = Overload(ledger, ordered=ordered)
    queue = WorkQueue(per_image=workers)
    budget = Budget(BudgetLimits())
    end = days * DAY
    events: list[tuple[float, int, int, Any]] = []  # (at, order, seq, payload)
    seq = itertools.count()
    for key in fleet.cost:
        env = fleet.envs[key[0]]
        every = ledger.interval(env, key[1])
        assert every is not None
        heapq.heappush(events, (rng.uniform(0, every), FIRE, next(seq), key))
    run = Run(starts={key: [] for key in fleet.cost})
    free = workers
    while events and events[0][0] < end:
        now, what, _, payload = heapq.heappop(events)
        if what == FIRE:
            key = payload
            priority = overload.priority(key[0], key[1], now)
            queue.put(priority, now, key[0], key[1], overload.rank(key[0], key[1], now, now))
            every = ledger.interval(fleet.envs[key[0]], key[1])
            assert every is not None
            heapq.heappush(events, (now + every, FIRE, next(seq), key))
        else:
            work, env, started, took = payload
            ledger.note(ProbeResult(env_id=env.id, kind=work.kind, status=Status.PASS,
                                    reason=Reason.OK, summary="ok", duration_s=took,
                                    started_at=datetime.fromtimestamp(started, UTC)), {})
            budget.charge(env.suite, took, now)
            queue.done(work, env)
            free += 1
        run.queue_max = max(run.queue_max, queue.queued)
        while free and queue.queued:
            overload.tick(queue, now)
            check = run.probes % 7 == 0  # the order check scans the queue: one take in 7
            best = _oldest(queue, ledger, now) if check else None
            picked = queue.take(fleet.envs.get)
            if picked is None:
                break
            work, env = picked
            if best is not None:
                run.checked += 1
                age = _age(ledger, work.key, now)
                run.in_order += age >= best.get(work.priority, 0.0) * (1 - IN_ORDER_SLACK)
            overload.started(work, now)
            took = fleet.cost[work.key] * rng.uniform(0.8, 1.2)
            run.starts[work.key].append(now)
            run.probes += 1
            run.sandbox_s += took
            free -= 1
            heapq.heappush(events, (now + took, DONE, next(seq), (work, env, now, took)))
    return run


def _age(ledger: Ledger, key: Key, now: float) -> float:
    """How many of its intervals old the evidence of ``key`` is (never probed: infinite)."""
    last = ledger.last_at.get(key)
    every = ledger.interval(ledger.envs[key[0]], key[1])
    return float("inf") if last is None or not every else (now - last) / every


def _oldest(queue: WorkQueue, ledger: Ledger, now: float) -> dict[int, float]:
    out: dict[int, float] = {}
    for work in queue.waiting():
        age = _age(ledger, work.key, now)
        if age > out.get(work.priority, float("-inf")):
            out[work.priority] = age
    return out


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "p95": float("nan"), "max": float("nan")}
    return {"median": percentile(values, 0.5), "p95": percentile(values, 0.95),
            "max": max(values)}


def report(fleet: Fleet, run: Run, days: float, warmup_days: float,
           workers: int) -> dict[str, Any]:
    start, end = warmup_days * DAY, days * DAY
    window = end - start
    effective: dict[str, list[float]] = {"routine": [], "quarantined": []}
    per_kind: dict[str, list[float]] = {str(k): [] for k in KINDS}
    worst: dict[str, float] = {"routine": 0.0, "quarantined": 0.0}
    for key, starts in run.starts.items():
        quarantined = key[0] in fleet.quarantined
        every = fleet.envs[key[0]].schedules.interval(key[1], quarantined)
        assert every is not None
        inside = [t for t in starts if t >= start]
        if len(inside) >= 2:  # the mean gap between its results in the window
            ratio = (inside[-1] - inside[0]) / (len(inside) - 1) / every
        else:  # at least the window, or the time since its last result if longer
            ratio = max(window, end - (starts[-1] if starts else 0.0)) / every
        group = "quarantined" if quarantined else "routine"
        effective[group].append(ratio)
        if not quarantined:
            per_kind[str(key[1])].append(ratio)
        marks = [0.0, *starts, end]
        gap = max(b - a for a, b in itertools.pairwise(marks) if b >= start)
        worst[group] = max(worst[group], gap / every)
    return {
        "environments": len(fleet.envs), "jobs": len(fleet.cost),
        "load": fleet.demand / workers,
        "queue_max": run.queue_max, "probes": run.probes,
        "utilisation": run.sandbox_s / (days * DAY * workers),
        "effective": {g: _stats(v) for g, v in effective.items()},
        "effective_by_kind": {k: _stats(v) for k, v in per_kind.items()},
        "worst_gap": worst,
        "in_order": run.in_order / max(run.checked, 1),
    }


def show(name: str, r: dict[str, Any], factor: float) -> None:
    e, q = r["effective"]["routine"], r["effective"]["quarantined"]
    kinds = ", ".join(f"{k} {v['median']:.2f}/{v['max']:.2f}"
                      for k, v in r["effective_by_kind"].items())
    print(f"  {name:8} queue max {r['queue_max']} of {r['jobs']} jobs; {r['probes']} probes, "
          f"host busy {r['utilisation']:.0%}")
    print(f"           effective interval x configured: routine median {e['median']:.2f} "
          f"p95 {e['p95']:.2f} max {e['max']:.2f} (x ideal {factor:g}: median "
          f"{e['median'] / factor:.2f}, max {e['max'] / factor:.2f}); by kind median/max: "
          f"{kinds}")
    print(f"           quarantined median {q['median']:.2f} max {q['max']:.2f}; worst gap x "
          f"interval: routine {r['worst_gap']['routine']:.1f}, quarantined "
          f"{r['worst_gap']['quarantined']:.1f}; in order of evidence age {r['in_order']:.1%}")


def ratios(new: dict[str, Any], old: dict[str, Any]) -> dict[str, float]:
    def div(a: float, b: float) -> float:
        return a / b if b else float("nan")

    kinds = list(new["effective_by_kind"])
    spread = [div(max(r["effective_by_kind"][k]["median"] for k in kinds),
                  min(r["effective_by_kind"][k]["median"] for k in kinds)) for r in (new, old)]
    return {
        "queue_max": div(new["queue_max"], old["queue_max"]),
        "routine_p95": div(new["effective"]["routine"]["p95"], old["effective"]["routine"]["p95"]),
        "routine_max": div(new["effective"]["routine"]["max"], old["effective"]["routine"]["max"]),
        "kind_spread": div(spread[0], spread[1]),
        "worst_gap_routine": div(new["worst_gap"]["routine"], old["worst_gap"]["routine"]),
        "worst_gap_quarantined": div(new["worst_gap"]["quarantined"],
                                     old["worst_gap"]["quarantined"]),
        "in_order": div(new["in_order"], old["in_order"]),
        "probes": div(new["probes"], old["probes"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factors", default="1,2,10")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--days", type=float, default=6.0)
    parser.add_argument("--warmup-days", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    try:
        for factor in (float(f) for f in args.factors.split(",")):
            fleet = make_fleet(factor, args.workers, random.Random(args.seed))
            print(f"{factor:g}x: {len(fleet.envs)} environments, {len(fleet.cost)} jobs, "
                  f"demand {fleet.demand / args.workers:.2f}x {args.workers} workers, "
                  f"{args.days:g} days ({args.warmup_days:g} warm-up)", flush=True)
            out: dict[str, Any] = {}
            for name, ordered in (("today", False), ("overload", True)):
                started = time.perf_counter()
                run = simulate(fleet, args.workers, args.days, args.seed + 1, ordered)
                out[name] = report(fleet, run, args.days, args.warmup_days, args.workers)
                out[name]["wall_s"] = round(time.perf_counter() - started, 1)
                show(name, out[name], factor)
            out["ratios"] = ratios(out["overload"], out["today"])
            print("  overload / today: " + ", ".join(f"{k} {v:.2f}"
                                                     for k, v in out["ratios"].items()))
            results[f"{factor:g}x"] = out
    except Exception as exc:  # the benchmark broke, not a number
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), **results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
