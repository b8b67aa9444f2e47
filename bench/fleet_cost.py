"""Benchmark: what a fleet's probes cost in containers, and how fast a new image digest is
detected and validated, today against evidence reuse (issue 28), simulated on a fleet.

    .venv/bin/python bench/fleet_cost.py [--envs 10000] [--days 30] [--seed 1]
        [--digest-mean-days 30] [--workers N] [--budget SECONDS] [--host-sample-every S]
        [--warmup-days 1] [--policies today,reuse] [--jobs 2] [--json OUT]
        [--pull-gb 1,3] [--pull-mbps 100] [--pull-slots N]

No sandbox runs: a cost model stands in for them (``bench/fleetsim.py``), and everything that
decides is envcheck's own code (the scheduler's queue, ledger and budget, the reuse and depth
advice, the health model and the quarantine).

The fleet (``--envs``) declares terminal (every 5 min), dependencies (1 h) and tests (6 h,
adaptive depth) per environment, at the catalogue's defaults. Its image digest changes as a
Poisson process (``--digest-mean-days``, 30 by default, as bench/adaptive.py); each digest's
tests are healthy, flaky or broken as in bench/adaptive.py, its terminal and dependencies
always pass. Costs: a full terminal or dependencies probe is one container for 1 s; an
identity check 0.02 s and none; a tests probe one container per run (30-120 s each, per
environment), the negative control, the reruns and the confirmations as bench/adaptive.py
counts them. ``--workers`` sandbox slots (default one per 30 environments: 333 at 10,000, a
Ray cluster's worth), optionally under a fleet ``--budget`` of sandbox-seconds per hour.

Policies, side by side on the same fleet: ``today`` (``reprove_every: null``: every terminal
and dependencies probe in full; a new digest is not queued: it waits for each kind's slot)
and ``reuse`` (the defaults: identity checks while the evidence stands, re-proved daily, one
host sample every 600 s, a new digest's kinds queued at once as new work).

``watch`` (issue 35, ``bench/fleetwatch.py``): reuse's defaults, the fleet's images ``pull:
watch`` images in a registry; a digest change is a tag that moves there, seen by the ``image``
kind's look (one HEAD every ``schedules.image``, 5 min), and a full probe of a digest the host
does not hold pulls it first (``--pull-gb`` at ``--pull-mbps`` through ``--pull-slots``).
``--policies reuse,watch`` puts a moved tag beside a new local digest, in one run; the watch
adds looks per environment-day, pulls and bytes pulled per environment-day for unchanged tags
(target 0) and for moved ones, and a move to its pull. Targets (issue 35): a moved tag
validated in full, the pull included, median <= 15 min, p95 <= 25 min.

Per policy, over the days after the warm-up: container starts per environment-day (the
read-only kinds, terminal and dependencies, which the issue's 312 counts; the tests apart),
sandbox-seconds per day, identity checks and host samples; from a digest change to its
detection (its first result), to its full validation (every kind in full for it), and a
broken digest to its quarantine. Targets (issue 28): <= 5 starts per environment-day for the
read-only kinds, detection within one terminal interval, full validation median <= 15 min
and p95 <= 1 h.

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from common import percentile
from fleetsim import (
    DAY,
    HOUR,
    KINDS,
    POLICIES,
    TERMINAL,
    Simulation,
    Tally,
    environments,
    make_fleet,
)
from fleetwatch import WATCH, PullModel, WatchSimulation

from envcheck.catalogue.models import Schedules

TARGET_STARTS = 5.0  # per environment-day, terminal + dependencies
TARGET_DETECT_S = Schedules().terminal or 300.0  # one terminal interval
TARGET_VALID_MEDIAN_S, TARGET_VALID_P95_S = 15 * 60.0, HOUR
TARGET_WATCH_P95_S = 25 * 60.0  # issue 35: a moved tag, the pull included
ALL_POLICIES = {**POLICIES, WATCH.name: WATCH}
TODAY_STARTS = 24 * 3600 / 300 + 24  # the 312: 288 terminal + 24 dependencies


def _stats(values: list[float], unit: float) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None, "max": None}
    return {"median": percentile(values, 0.5) / unit, "p95": percentile(values, 0.95) / unit,
            "max": max(values) / unit}


def report(sim: Simulation, tally: Tally, days: int, warmup: int) -> dict[str, Any]:
    """The figures of one policy over the days [warmup, days)."""
    n = len(sim.fleet)
    span = max(days - warmup, 1)
    env_days = n * span
    starts = {str(k): sum(tally.containers[k][warmup:days]) / env_days for k in KINDS}
    seconds = {str(k): sum(tally.sandbox_s[k][warmup:days]) / span for k in KINDS}
    end = days * DAY
    changes = [d for s in sim.fleet for d in s.digests[1:]
               if warmup * DAY <= d.start <= end - DAY]
    detected = [d.detected_at - d.start for d in changes if d.detected_at is not None]
    validated = [d.validated_at - d.start for d in changes if d.validated_at is not None]
    broken = [d for d in changes if d.kind == "broken"]
    caught = [d.quarantined_at - d.start for d in broken if d.quarantined_at is not None]
    failed = [d.failed_at - d.start for d in broken if d.failed_at is not None]
    return {
        "envs": n, "workers": sim.workers, "days": days, "warmup_days": warmup,
        "starts_per_env_day": starts,
        "read_only_starts_per_env_day": starts["terminal"] + starts["dependencies"],
        "sandbox_s_per_day": seconds, "sandbox_s_per_day_total": sum(seconds.values()),
        "identity_checks_per_env_day": sum(tally.identity[warmup:days]) / env_days,
        "host_samples": sim.samples.taken,
        "utilisation": tally.busy_s / (sim.workers * end),
        "digest_changes": len(changes),
        "detect_min": _stats(detected, 60.0), "undetected": len(changes) - len(detected),
        "validate_min": _stats(validated, 60.0), "unvalidated": len(changes) - len(validated),
        "tests_full_after_change": sum(TESTS_KIND in d.full for d in changes),
        "broken_changes": len(broken), "broken_to_quarantine_h": _stats(caught, HOUR),
        "broken_to_first_fail_h": _stats(failed, HOUR),
        "broken_not_quarantined": len(broken) - len(caught),
        "tests_queued_on_new_digest": tally.tests_full_on_new,
        "again_same_digest": tally.again_same_digest,
        "read_only_full_why_per_env_day": {k: v / env_days for k, v in sorted(
            tally.why_full.items(), key=lambda kv: -kv[1])},
        "probes": tally.probes,
        **(watch_report(sim, changes, warmup, days) if isinstance(sim, WatchSimulation)
           else {}),
    }


def watch_report(sim: WatchSimulation, changes: list[Any], warmup: int, days: int
                 ) -> dict[str, Any]:
    """The registry's figures of the watch policy: looks, pulls and bytes per
    environment-day, and a moved tag to its pull."""
    w = sim.watch
    env_days = len(sim.fleet) * max(days - warmup, 1)

    def per_day(values: list[Any]) -> float:
        return float(sum(values[warmup:days])) / env_days

    pulled = [d.pulled_at - d.start for d in changes if d.pulled_at is not None]
    return {
        "heads_per_env_day": per_day(w.heads),
        "heads_by_kind": w.heads_by_kind,
        "pulls_moved_per_env_day": per_day(w.pulls_moved),
        "gb_moved_per_env_day": per_day(w.bytes_moved) / 1e9,
        "pulls_unchanged_per_env_day": per_day(w.pulls_other),
        "gb_unchanged_per_env_day": per_day(w.bytes_other) / 1e9,
        "pulls_warmup": sum(w.pulls_other[:warmup]),
        "pull_waits": w.waits,
        "pull_model": vars(sim.model),
        "pulled_min": _stats(pulled, 60.0),
    }


TESTS_KIND = KINDS[2]


def simulate(args: argparse.Namespace, name: str) -> dict[str, Any]:
    started, cpu = time.perf_counter(), time.process_time()
    policy = ALL_POLICIES[name]
    envs = environments(args.envs, "watch" if policy.watch else "never")
    fleet = make_fleet(envs, args.days, args.digest_mean_days * DAY, args.seed)
    common = {"workers": args.workers, "budget": args.budget,
              "host_sample_s": args.host_sample_every or None, "seed": args.seed + 1,
              "warmup_days": args.warmup_days}
    if policy.watch:
        low, high = (float(x) for x in args.pull_gb.split(","))
        model = PullModel((low, high), args.pull_mbps, args.pull_slots or max(args.workers // 4, 2))
        sim: Simulation = WatchSimulation(fleet, args.days, policy, pulls=model, **common)
    else:
        sim = Simulation(fleet, args.days, policy, **common)  # type: ignore[arg-type]
    tally = sim.run()
    out = report(sim, tally, int(args.days), args.warmup_days)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    out["cpu_s"] = round(time.process_time() - cpu, 1)
    out["cpu_us_per_probe"] = round(out["cpu_s"] / max(tally.probes, 1) * 1e6, 1)
    return out


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}x" if b else "-"


def show(results: dict[str, dict[str, Any]]) -> None:
    names = list(results)
    rows: list[tuple[str, list[str], str]] = []

    def row(label: str, get: Any, spec: str = ".2f", target: str = "") -> None:
        values = [get(results[n]) for n in names]
        cells = [_fmt(v, spec) for v in values]
        if len(values) == 2 and all(isinstance(v, float | int) for v in values):
            cells.append(_ratio(float(values[1]), float(values[0])))
        rows.append((label, cells, target))

    row("container starts / env-day, terminal + dependencies",
        lambda r: r["read_only_starts_per_env_day"], target=f"<= {TARGET_STARTS:g} "
        f"(today's schedules: {TODAY_STARTS:g})")
    for kind in ("terminal", "dependencies", "tests"):
        row(f"  {kind}", lambda r, k=kind: r["starts_per_env_day"][k])
    whys = sorted({w for r in results.values() for w in r["read_only_full_why_per_env_day"]})
    for why in whys:
        row(f"    full because: {why}",
            lambda r, w=why: r["read_only_full_why_per_env_day"].get(w, 0.0))
    row("identity checks / env-day (no container)", lambda r: r["identity_checks_per_env_day"],
        ".1f")
    row("host samples (whole run)", lambda r: r["host_samples"], "d")
    row("sandbox-s per day, all kinds (M)", lambda r: r["sandbox_s_per_day_total"] / 1e6, ".3f")
    for kind in ("terminal", "dependencies", "tests"):
        row(f"  {kind} (M)", lambda r, k=kind: r["sandbox_s_per_day"][k] / 1e6, ".3f")
    row("worker slots busy", lambda r: r["utilisation"], ".1%")
    row("digest changes (measured)", lambda r: r["digest_changes"], "d")
    for stat in ("median", "p95", "max"):
        row(f"change -> detected, {stat} (min)", lambda r, s=stat: r["detect_min"][s],
            target=f"<= {TARGET_DETECT_S / 60:g}" if stat != "median" else "")
    row("  never detected", lambda r: r["undetected"], "d")
    row("change -> full validation, median (min)", lambda r: r["validate_min"]["median"],
        target=f"<= {TARGET_VALID_MEDIAN_S / 60:g}")
    row("change -> full validation, p95 (min)", lambda r: r["validate_min"]["p95"],
        target=f"<= {TARGET_VALID_P95_S / 60:g} (a moved tag, issue 35: "
        f"<= {TARGET_WATCH_P95_S / 60:g})")
    row("  never fully validated (replaced first)", lambda r: r["unvalidated"], "d")
    row("  changes with a full tests probe", lambda r: r["tests_full_after_change"], "d")
    row("broken digest -> its first failing tests result, median (h)",
        lambda r: r["broken_to_first_fail_h"]["median"])
    row("broken digest -> its first failing tests result, p95 (h)",
        lambda r: r["broken_to_first_fail_h"]["p95"])
    row("broken digest -> quarantine, median (h)",
        lambda r: r["broken_to_quarantine_h"]["median"])
    row("broken digest -> quarantine, p95 (h)", lambda r: r["broken_to_quarantine_h"]["p95"])
    row("  broken not quarantined", lambda r: r["broken_not_quarantined"], "d")
    if any("heads_per_env_day" in r for r in results.values()):
        watch_rows(row)
    row("running probes not run again (they had found the new digest)",
        lambda r: r["again_same_digest"], "d")
    width = max(len(label) for label, _, _ in rows)
    head = [*names, *(["ratio"] if len(names) == 2 else [])]
    print(f"{'':<{width}}  " + "".join(f"{h:>11}" for h in head) + "   target")
    for label, cells, target in rows:
        print(f"{label:<{width}}  " + "".join(f"{c:>11}" for c in cells) + f"   {target}")


def watch_rows(row: Any) -> None:
    """The watch policy's rows (a dash for the others)."""
    def get(key: str, sub: str | None = None) -> Any:
        def read(r: dict[str, Any]) -> Any:
            value = r.get(key)
            return value.get(sub) if sub is not None and value is not None else value
        return read

    row("tag looks (HEAD) / env-day", get("heads_per_env_day"), ".1f")
    row("pulls / env-day, unchanged tags", get("pulls_unchanged_per_env_day"), ".4f",
        target="0")
    row("GB pulled / env-day, unchanged tags", get("gb_unchanged_per_env_day"), ".4f",
        target="0")
    row("pulls / env-day, moved tags", get("pulls_moved_per_env_day"), ".4f")
    row("GB pulled / env-day, moved tags", get("gb_moved_per_env_day"), ".4f")
    row("pulls in the warm-up (the fleet's first)", get("pulls_warmup"), "d")
    row("tag move -> its pull done, median (min)", get("pulled_min", "median"))
    row("tag move -> its pull done, p95 (min)", get("pulled_min", "p95"))
    row("probes that waited on a pull of the same digest", get("pull_waits"), "d")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--digest-mean-days", type=float, default=30.0,
                        help="mean days between an environment's digest changes (Poisson)")
    parser.add_argument("--workers", type=int, default=None,
                        help="sandbox slots (default: one per 30 environments, at least 8)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="a fleet budget in sandbox-seconds per hour (default: none)")
    parser.add_argument("--host-sample-every", type=float, default=600.0, metavar="SECONDS",
                        help="the daemon's --host-sample-every (0: never)")
    parser.add_argument("--warmup-days", type=int, default=1,
                        help="days left out of the figures (the fleet's first validations)")
    parser.add_argument("--policies", default="today,reuse",
                        help="of today, reuse, watch (e.g. reuse,watch: a new local digest "
                        "against a moved tag in a registry)")
    parser.add_argument("--pull-gb", default="1,3", metavar="LOW,HIGH",
                        help="watch: a digest's bytes to pull, uniform, in GB")
    parser.add_argument("--pull-mbps", type=float, default=100.0,
                        help="watch: the registry's throughput per pull, MB/s")
    parser.add_argument("--pull-slots", type=int, default=None,
                        help="watch: pulls at once, fleet-wide (default: one per 4 worker "
                        "slots, the puller's 2 per registry on a node of 8)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="simulate the policies in this many processes at once")
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args(argv)
    if args.workers is None:
        args.workers = max(args.envs // 30, 8)
    names = [n for n in args.policies.split(",") if n]
    print(f"{args.envs} environments, {args.days} days (figures after day {args.warmup_days}), "
          f"{args.workers} worker slots, budget {args.budget or 'none'}, digests every "
          f"{args.digest_mean_days:g} days on average, seed {args.seed}", flush=True)
    try:
        if args.jobs > 1:
            with ProcessPoolExecutor(min(args.jobs, len(names))) as pool:
                futures = {n: pool.submit(simulate, args, n) for n in names}
                results = {n: f.result() for n, f in futures.items()}
        else:
            results = {n: simulate(args, n) for n in names}
    except Exception as exc:  # the benchmark broke, not a number
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    show(results)
    print("(" + ", ".join(f"{n}: {r['wall_s']} s to simulate, {r['cpu_s']} s of CPU, "
                          f"{r['cpu_us_per_probe']} us a probe" for n, r in results.items()) + ")")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), **results}, f, indent=2)
    assert TERMINAL in KINDS
    return 0


if __name__ == "__main__":
    sys.exit(main())
