"""Benchmark: how fast the rollouts' sequential test flags a failing environment, and how
rarely a healthy one, as the daemon judges them.

    .venv/bin/python bench/rollout_sprt.py [--trials 100] [--days 30] [--seed 1] [--json OUT]

No store, no sandbox: the daemon's looks are simulated on envcheck's own code
(``health.rollouts.assess_rollouts`` with the default ``RolloutPolicy``). An environment
reports ``n`` rollouts an hour, each failing the environment's way with probability ``p``;
at the end of every hour a look judges the last 24 hours of counters (the window the daemon
reads) with what the previous look said (a flag keeps its start), as the daemon does every
window. Reported:

- **false flags**: the share of trials in which a healthy environment (p 0.5% or 2%; and 5%
  beside a fleet failing 5% everywhere) is flagged at least once in ``--days``;
- **detection**: for p = 10%, the rollouts (and hours) until the first flag, median and p95,
  from a fresh start and after three clean days, beside Wald's expected sample number.
  Looks are hourly here, so a count is the end of the hour that flagged (the daemon looks
  every window and may flag within the hour).

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from envcheck.health.rollouts import HourCounts, RolloutHealth, RolloutPolicy, assess_rollouts

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RolloutPolicy()
WINDOW = int(POLICY.window_h)


def binomial(rng: random.Random, n: int, p: float) -> int:
    """Failures among ``n`` rollouts: geometric gaps, ~n·p draws."""
    if p <= 0:
        return 0
    count, i, log_q = 0, 0, math.log1p(-p)
    while True:
        i += int(math.log(1.0 - rng.random()) / log_q) + 1
        if i > n:
            return count
        count += 1


def hour(i: int, n: int, failed: int) -> list[HourCounts]:
    at = T0 + timedelta(hours=i)
    rows = [HourCounts.of(at, "ok", n - failed)] if n > failed else []
    return rows + ([HourCounts.of(at, "sandbox_lost", failed)] if failed else [])


def looks(rng: random.Random, n: int, p: float, hours: int, clean_hours: int = 0,
          fleet: float | None = None) -> int | None:
    """Hourly looks over a 24-hour window; the hour (after ``clean_hours`` clean ones) whose
    look first flags, or None."""
    rows: list[list[HourCounts]] = []
    previous: RolloutHealth | None = None
    for i in range(clean_hours + hours):
        rows.append(hour(i, n, 0 if i < clean_hours else binomial(rng, n, p)))
        window = [r for h in rows[-WINDOW:] for r in h]
        previous = assess_rollouts(window, POLICY, fleet=fleet,
                                   now=T0 + timedelta(hours=i + 1), previous=previous)
        if previous is not None and previous.flagged:
            return i - clean_hours
    return None


def wald_expected(p: float, start: float) -> float:
    test = POLICY.test(None)
    assert test is not None
    return (test.upper - start) / (p * test.fail_step + (1 - p) * test.pass_step)


def quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out: dict[str, Any] = {"false_flags": [], "detection": []}
    print(f"false flags within {args.days} days ({args.trials} trials each)")
    print(f"{'rollouts/h':>10} {'p':>6} {'fleet':>6} {'flagged':>8}")
    for n in (5, 20, 100, 1000):
        for p, fleet in ((0.005, None), (0.02, None), (0.05, 0.05)):
            flagged = sum(looks(rng, n, p, 24 * args.days, fleet=fleet) is not None
                          for _ in range(args.trials))
            share = flagged / args.trials
            out["false_flags"].append({"n": n, "p": p, "fleet": fleet, "share": share})
            print(f"{n:>10} {p:>6.3f} {fleet or '-':>6} {share:>8.1%}")
    test = POLICY.test(None)
    assert test is not None
    print("\ndetection of a 10% failure rate: rollouts until the first flag")
    print(f"{'rollouts/h':>10} {'start':>12} {'wald':>6} {'median':>7} {'p95':>6} "
          f"{'hours med':>9} {'missed':>6}")
    for n in (10, 100):
        for label, clean, start in (("fresh", 0, 0.0), ("3 clean days", 72, test.lower)):
            found = [looks(rng, n, 0.10, 24 * 7, clean_hours=clean)
                     for _ in range(args.trials)]
            hit = [h + 1 for h in found if h is not None]
            counts = [h * n for h in hit]
            row = {"n": n, "start": label, "wald": round(wald_expected(0.10, start), 1),
                   "median": quantile(counts, 0.5) if counts else None,
                   "p95": quantile(counts, 0.95) if counts else None,
                   "hours_median": quantile(hit, 0.5) if hit else None,
                   "missed": len(found) - len(hit)}
            out["detection"].append(row)
            print(f"{n:>10} {label:>12} {row['wald']:>6} {row['median']:>7} {row['p95']:>6} "
                  f"{row['hours_median']:>9} {row['missed']:>6}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # the benchmark itself broke
        print(f"rollout_sprt: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
