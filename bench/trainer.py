"""A small simulated trainer beside a running envcheck daemon: it draws environments from a
suite's allowlist, "runs" rollouts in them, reports every one through the client's rollout
reporter, and at the end drops the samples envcheck says it must not train on.

One environment (``--flaky``) looks healthy to envcheck's own probes, but its sandboxes fail
``--failure-rate`` of the time "on the cluster" (``sandbox_lost``, no reward). The trainer:

1. reports ``--warmup`` clean rollouts of every environment (samples taken before anything
   went wrong: they must be kept);
2. goes on in steps (``--per-step`` rollouts of each environment a step), flushing each step
   and waiting until the daemon has looked at it, until the flaky environment is flagged by
   its rollouts; the number of its rollouts until then is set beside the sequential test's
   expected sample number (Wald's, at the daemon's default rates);
3. keeps training ``--after`` steps more (a trainer does not stop at once), then waits for
   the daemon's active probe to pass ("fails on the cluster, passes here");
4. reads the tainted intervals (``EnvcheckClient.taint_all``) and drops every sample inside
   one; prints what it kept and dropped as JSON.

Exit status 0 when the samples dropped are exactly the flaky environment's from its first
failure on, 1 when not, 2 on a usage error (the flaky environment not in the allowlist).

::

    ENVCHECK_API_TOKEN=... .venv/bin/python bench/trainer.py --api http://127.0.0.1:8787 \\
        --suite demo --flaky demo-healthy --failure-rate 0.1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from envcheck.client import EnvcheckClient, TaintedInterval
from envcheck.health.rollouts import RolloutPolicy


@dataclass(frozen=True, slots=True)
class Sample:
    """What a trainer keeps of one rollout to train on."""

    env_id: str
    at: datetime
    outcome: str
    reward: float | None


def expected_rollouts(rate: float, policy: RolloutPolicy | None = None) -> float:
    """Wald's expected sample number for the test to flag an environment failing at
    ``rate`` (beside a clean fleet), never below the rollouts counted before any flag."""
    policy = policy or RolloutPolicy()
    test = policy.test(0.0)
    assert test is not None
    drift = rate * test.fail_step + (1 - rate) * test.pass_step
    if drift <= 0:
        return math.inf
    return max(test.upper / drift, float(policy.min_rollouts))


class Trainer:
    def __init__(self, client: EnvcheckClient, envs: list[str], flaky: str, rate: float,
                 seed: int) -> None:
        self.client, self.envs, self.flaky, self.rate = client, envs, flaky, rate
        self.rng = random.Random(seed)
        self.reporter = client.rollouts(producer=f"trainer-{uuid.uuid4().hex[:8]}")
        self.samples: list[Sample] = []
        self.sent: Counter[str] = Counter()

    def step(self, per_env: int, *, failing: bool) -> None:
        """``per_env`` rollouts of every environment, reported and flushed."""
        for env_id in self.envs:
            for _ in range(per_env):
                lost = failing and env_id == self.flaky and self.rng.random() < self.rate
                outcome = "sandbox_lost" if lost else "ok"
                reward = None if lost else float(self.rng.random() < 0.5)
                at = datetime.now(UTC)
                self.reporter.report(env_id, outcome, reward=reward, at=at)
                self.samples.append(Sample(env_id, at, outcome, reward))
                self.sent[env_id] += 1
        if not self.reporter.flush(30):
            raise SystemExit(f"trainer: envcheck did not take the rollouts: "
                             f"{self.reporter.stats.last_error}")

    def rollouts_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.client.environment(self.flaky, history=0).get(
            "rollouts") or {}
        return doc

    def wait_looked(self, timeout_s: float) -> dict[str, Any]:
        """The flaky environment's rollout evidence once the daemon has counted everything
        sent (or flagged it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            doc = self.rollouts_doc()
            counted = sum((doc.get("by_outcome") or {}).values())
            if doc.get("flagged") or counted >= self.sent[self.flaky]:
                return doc
            if time.monotonic() > deadline:
                raise SystemExit(f"trainer: the daemon did not look at the rollouts within "
                                 f"{timeout_s:.0f} s (counted {counted} of "
                                 f"{self.sent[self.flaky]})")
            time.sleep(0.5)


def _covered(sample: Sample, intervals: dict[str, list[TaintedInterval]]) -> bool:
    return any(i.covers(sample.at) for i in intervals.get(sample.env_id, ()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--api", default="http://127.0.0.1:8787")
    ap.add_argument("--token", default=os.environ.get("ENVCHECK_API_TOKEN"))
    ap.add_argument("--suite", default="demo")
    ap.add_argument("--flaky", default="demo-healthy")
    ap.add_argument("--failure-rate", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=20, help="clean rollouts of each first")
    ap.add_argument("--per-step", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--after", type=int, default=2, help="steps trained after the flag")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per wait")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if not args.token:
        ap.error("the API token: --token or ENVCHECK_API_TOKEN")
    started = datetime.now(UTC)
    with EnvcheckClient(args.api, args.token, timeout=(3.05, 30.0)) as client:
        envs = sorted(client.allowlist(args.suite))
        if args.flaky not in envs:
            print(f"trainer: {args.flaky!r} is not in the allowlist of {args.suite!r} "
                  f"({len(envs)} environments)", file=sys.stderr)
            return 2
        trainer = Trainer(client, envs, args.flaky, args.failure_rate, args.seed)
        trainer.step(args.warmup, failing=False)
        trainer.wait_looked(args.timeout)
        first_failure: datetime | None = None
        flagged_after: int | None = None
        for _ in range(args.max_steps):
            trainer.step(args.per_step, failing=True)
            first_failure = first_failure or next(
                (s.at for s in trainer.samples if s.outcome != "ok"), None)
            if trainer.wait_looked(args.timeout).get("flagged"):
                flagged_after = trainer.sent[args.flaky] - args.warmup
                break
        if flagged_after is None:
            print(f"trainer: {args.flaky} was not flagged after {args.max_steps} steps",
                  file=sys.stderr)
            return 1
        for _ in range(args.after):
            trainer.step(args.per_step, failing=True)
        trainer.reporter.close(30)
        deadline = time.monotonic() + args.timeout
        while not trainer.rollouts_doc().get("confirmed"):
            if time.monotonic() > deadline:
                print("trainer: the daemon's active probe gave no verdict in time",
                      file=sys.stderr)
                return 1
            time.sleep(1.0)
        verdict = client.environment(args.flaky, history=0)
        intervals: dict[str, list[TaintedInterval]] = {}
        for interval in client.taint_all(args.suite, since=started):
            intervals.setdefault(interval.env_id, []).append(interval)
    assert first_failure is not None
    kept = [s for s in trainer.samples if not _covered(s, intervals)]
    dropped = [s for s in trainer.samples if _covered(s, intervals)]
    should = [s for s in trainer.samples if s.env_id == args.flaky and s.at >= first_failure]
    exact = {id(s) for s in dropped} == {id(s) for s in should}
    report = {
        "environments": len(envs), "samples": len(trainer.samples), "kept": len(kept),
        "dropped": len(dropped), "dropped_by_environment": dict(Counter(s.env_id
                                                                     for s in dropped)),
        "flaky": args.flaky, "failure_rate": args.failure_rate,
        "flagged_after_rollouts": flagged_after,
        "expected_rollouts": round(expected_rollouts(args.failure_rate), 1),
        "first_failure": first_failure.isoformat(),
        "state": verdict["state"], "reason": verdict["reason"],
        "confirmed": (verdict.get("rollouts") or {}).get("confirmed"),
        "intervals": [{**asdict(i), "start": i.start.isoformat(),
                       "end": i.end.isoformat() if i.end else None,
                       "flagged_at": i.flagged_at.isoformat()}
                      for found in intervals.values() for i in found],
        "dropped_exactly_the_failing_samples": exact,
        "reporter": asdict(trainer.reporter.stats),
    }
    print(json.dumps(report, indent=2, default=str))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
