"""Benchmark: how often the tests probe catches a test that fails one run in three.

    .venv/bin/python bench/flaky.py [--probes 40] [--healthy 20] [--reruns K] [--json OUT]

1. The real probe, ``--probes`` times, on ``demo-tests-flaky`` (a pass-to-pass test that fails
   when ``os.urandom`` says so, ~1/3 of runs): the share of probes that say ``flaky``, with its
   Wilson 95% interval, against the theory 1 - (2/3)^k - (1/3)^k for k observations (reruns
   plus the negative control); the flaky test's observed failure rate; seconds per probe.
2. ``--healthy`` probes of ``demo-tests-healthy`` in a row: every one must pass (a ``flaky``
   here is a false alarm); the Wilson upper bound of the false-alarm rate.
3. The fixed cost of a fresh container (create, start, remove; nothing run), which every run of
   the probe pays, against the median run.
4. **Side by side** (``--side-only`` runs this alone): one probe of ``demo-tests-healthy``
   (a negative control and ``reruns`` positive runs) against the same runs done bare: per run
   one hardened ``docker run --rm`` (envcheck's flags) of the oracle, the same test command and
   a ``cat`` of its JUnit report, which is parsed. After an unmeasured warm-up, ``--rounds``
   rounds alternate the two; the ratio of the medians. Target: at most 1.15.

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import ROOT, docker_run_hardened, median

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.errors import EnvcheckError
from envcheck.core.results import ProbeKind, ProbeResult, Status
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.testvalidity.junit import parse_report
from envcheck.kinds.testvalidity.runs import render
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.docker import DockerRuntime

CATALOGUE = ROOT / "probes" / "demo-tests.yaml"
FLAKY_ENV, HEALTHY_ENV = "demo-tests-flaky", "demo-tests-healthy"
FLAKY_TEST = "tests/test_cache.py::test_mean_cache_warm"
TARGET = 0.95
SIDE_TARGET = 1.15


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def with_reruns(env: Environment, reruns: int | None) -> Environment:
    if reruns is None or env.tests is None:
        return env
    return env.model_copy(update={"tests": env.tests.model_copy(update={"reruns": reruns})})


def own_runs(env: Environment) -> Environment:
    """``env`` without adversarial controls: the probe's own runs, which a bare run can match
    (the controls play tricks no bare run plays)."""
    if env.tests is None:
        return env
    return env.model_copy(update={"tests": env.tests.model_copy(update={"adversarial": None})})


def probe_many(runtime: DockerRuntime, env: Environment, n: int, concurrency: int,
               label: str) -> list[ProbeResult]:
    results: list[ProbeResult] = []

    def progress(result: ProbeResult) -> None:
        results.append(result)
        print(f"\r{label}: {len(results)}/{n}  ({result.status}/{result.reason})      ",
              end="", file=sys.stderr, flush=True)

    run_cycle([env] * n, [ProbeKind.TESTS], runtime, new_run_id(), progress, concurrency)
    print(file=sys.stderr)
    return results


def observations(results: Sequence[ProbeResult], test_id: str) -> tuple[int, int]:
    """(failed, seen) of one test over every run of every probe (confirmations included)."""
    failed = seen = 0
    for result in results:
        for run in result.details.get("runs", []):
            if run["problem"] is None:
                seen += 1
                failed += test_id in run["not_passed"]
    return failed, seen


def container_cost(runtime: DockerRuntime, env: Environment, n: int) -> float:
    """Median seconds of create + start + remove of one hardened container, nothing run."""
    spec = SandboxSpec(env_id=env.id, image=env.image, run_id=new_run_id(), limits=env.limits)
    samples = []
    for _ in range(n):
        started = time.monotonic()
        with runtime.sandbox(spec):
            pass
        samples.append(time.monotonic() - started)
    return median(samples)


def bare_run(env: Environment, oracle: bool) -> float:
    """One run done bare: a hardened ``docker run --rm`` of the oracle, the test command and a
    read of its report (parsed: the floor must have read it). Seconds."""
    tests = env.tests
    assert tests is not None and tests.oracle is not None and tests.oracle.path is not None
    ids = [*tests.fail_to_pass, *tests.pass_to_pass]
    script = (f"{tests.oracle.path} >/dev/null || exit 1\n" if oracle else "") + \
        f"{render(tests, ids)} >/dev/null\ncat {tests.junit_path}\n"
    started = time.perf_counter()
    done = subprocess.run([*docker_run_hardened(env, f"bench-{uuid.uuid4().hex[:8]}"), "-c",
                           script], capture_output=True, timeout=120, check=False)
    took = time.perf_counter() - started
    report = parse_report(done.stdout)
    assert len(report.cases) == len(ids), done.stderr.decode()[-500:]
    return took


def side_by_side(runtime: DockerRuntime, env: Environment, rounds: int) -> dict[str, Any]:
    """The probe against the same runs done bare, alternating after a warm-up round."""
    assert env.tests is not None
    runs = 1 + env.tests.reruns
    ours: list[float] = []
    bare: list[float] = []
    verdicts: set[str] = set()
    for r in range(rounds + 1):
        started = time.perf_counter()
        [result] = run_cycle([env], [ProbeKind.TESTS], runtime, new_run_id())
        took = time.perf_counter() - started
        verdicts.add(f"{result.status}/{result.reason}")
        floor = sum(bare_run(env, oracle=k > 0) for k in range(runs))
        if r:
            ours.append(took)
            bare.append(floor)
        print(f"side by side, round {r or 'warm-up'}: envcheck {took:.2f} s, bare {floor:.2f} s",
              file=sys.stderr)
    ratio = median(ours) / median(bare)
    return {"runs": runs, "rounds": rounds, "envcheck_s": median(ours), "bare_s": median(bare),
            "ratio": ratio, "ok": ratio <= SIDE_TARGET, "verdicts": sorted(verdicts),
            "samples": {"envcheck": ours, "bare": bare}}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    catalogue = load_catalogue([args.catalogue])
    flaky_env = with_reruns(catalogue.environment(FLAKY_ENV), args.reruns)
    healthy_env = with_reruns(catalogue.environment(HEALTHY_ENV), args.reruns)
    assert flaky_env.tests is not None
    reruns = flaky_env.tests.reruns
    k = reruns + 1  # the flaky test is pass-to-pass: the negative control observes it too
    runtime = DockerRuntime.from_env()
    try:
        runtime.image_digest(flaky_env.image)  # fail early if the demo images are missing
        side = side_by_side(runtime, own_runs(healthy_env), args.rounds)
        if args.side_only:
            return {"side_by_side": side}
        flaky = probe_many(runtime, flaky_env, args.probes, args.concurrency, FLAKY_ENV)
        healthy = probe_many(runtime, healthy_env, args.healthy, args.concurrency, HEALTHY_ENV)
        overhead = container_cost(runtime, healthy_env, 10)
    finally:
        runtime.close()
    caught = sum(r.status is Status.FLAKY for r in flaky)
    failed, seen = observations(flaky, FLAKY_TEST)
    false_alarms = sum(r.status is not Status.PASS for r in healthy)
    run_s = [run["duration_s"] for r in healthy for run in r.details.get("runs", [])]
    return {
        "reruns": reruns,
        "observations_per_probe": k,
        "theory": 1 - (2 / 3) ** k - (1 / 3) ** k,
        "flaky": {
            "probes": len(flaky), "caught": caught, "rate": caught / len(flaky),
            "wilson95": wilson(caught, len(flaky)),
            "verdicts": dict(Counter(f"{r.status}/{r.reason}" for r in flaky)),
            "test_failure_rate": failed / seen if seen else None, "test_runs": seen,
            "probe_s_median": median(r.duration_s for r in flaky),
        },
        "healthy": {
            "probes": len(healthy), "not_pass": false_alarms,
            "verdicts": dict(Counter(f"{r.status}/{r.reason}" for r in healthy)),
            "false_alarm_wilson95_upper": wilson(false_alarms, len(healthy))[1],
            "probe_s_median": median(r.duration_s for r in healthy),
            "probe_s_max": max(r.duration_s for r in healthy),
            "run_s_median": median(run_s),
        },
        "container_create_start_remove_s": overhead,
        "concurrency": args.concurrency,
        "side_by_side": side,
    }


def report_side(side: dict[str, Any]) -> None:
    print(f"side by side, {side['runs']} runs per probe, median of {side['rounds']} rounds: "
          f"envcheck {side['envcheck_s']:.2f} s ({', '.join(side['verdicts'])}), bare "
          f"docker run --rm {side['bare_s']:.2f} s: ratio {side['ratio']:.2f} "
          f"(target <= {SIDE_TARGET}) {'PASS' if side['ok'] else 'OVER'}")


def report(out: dict[str, Any]) -> None:
    report_side(out["side_by_side"])
    if "flaky" not in out:
        return
    f, h = out["flaky"], out["healthy"]
    low, high = f["wilson95"]
    verdict = "PASS" if low >= TARGET else ("PASS (point estimate)" if f["rate"] >= TARGET
                                            else "FAIL")
    print(f"reruns {out['reruns']} -> {out['observations_per_probe']} observations per probe; "
          f"theory {out['theory']:.1%}")
    print(f"flaky detection: {f['caught']}/{f['probes']} = {f['rate']:.1%}  "
          f"(Wilson 95% {low:.1%} .. {high:.1%})  target >= {TARGET:.0%}: {verdict}")
    print(f"  verdicts {f['verdicts']}")
    if f["test_failure_rate"] is not None:
        print(f"  the flaky test failed {f['test_failure_rate']:.1%} of {f['test_runs']} runs")
    print(f"  seconds per probe (median): {f['probe_s_median']:.2f}")
    print(f"healthy: {h['probes'] - h['not_pass']}/{h['probes']} pass  {h['verdicts']}  "
          f"false-alarm rate <= {h['false_alarm_wilson95_upper']:.1%} (95%)")
    print(f"  seconds per probe: median {h['probe_s_median']:.2f}, max {h['probe_s_max']:.2f};"
          f" per run (median) {h['run_s_median']:.3f}")
    print(f"fresh container (create+start+remove, nothing run): "
          f"{out['container_create_start_remove_s']:.3f}s = "
          f"{out['container_create_start_remove_s'] / h['run_s_median']:.0%} of a median run")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--probes", type=int, default=40, help="probes of the flaky image")
    parser.add_argument("--healthy", type=int, default=20, help="probes of the healthy image")
    parser.add_argument("--reruns", type=int, help="override tests.reruns (default: catalogue)")
    parser.add_argument("--concurrency", type=int, default=2, help="probes at a time")
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE)
    parser.add_argument("--rounds", type=int, default=1, help="side-by-side rounds")
    parser.add_argument("--side-only", action="store_true", help="only the side-by-side")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.probes < 1 or args.healthy < 1 or args.concurrency < 1:
        parser.error("--probes, --healthy and --concurrency must be >= 1")
    try:
        out = bench(args)
    except (EnvcheckError, KeyError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
