"""Benchmark: a SWE-bench-style dataset, its load time and the per-task cost of validating it.

    .venv/bin/python bench/dataset.py [--records N] [--rounds N] [--reruns N] [--no-engine]
                                      [--json OUT]

1. **Load**: a generated instance file of ``--records`` (10,000) records, each like a SWE-bench
   record (a ~2 KB gold patch, a ~2 KB test patch, 3 fail-to-pass and 60 pass-to-pass ids as
   JSON-encoded strings, a problem statement), as JSONL, as a JSON array and, with pyarrow, as
   Parquet; ``load_catalogue`` on a catalogue declaring it, timed over ``--rounds`` (median),
   with the process' peak RSS. Target: under 5 s.
2. **Per task** (needs the engine and the demo images): the demo task
   ``envcheck-demo__pyutils-1`` validated by envcheck (``run_cycle`` of the tests probe: a
   negative control and ``--reruns`` positive runs, each a fresh container) against the same
   protocol by hand with the docker CLI: per run one hardened ``docker run --rm -i`` (envcheck's
   flags) whose bash script writes the patches, applies them (gold, then test) and runs the
   test command, its log parsed by the same parser. Rounds alternate the two sides. Target:
   envcheck/floor at most 1.3.

Exit 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import ROOT, docker_run_hardened, git_head, median, proc_status_kib

sys.path.insert(0, str(ROOT))

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind
from envcheck.core.testlogs import TestStatus, parser
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.sandbox.docker import DockerRuntime

LOAD_TARGET_S = 5.0
RATIO_TARGET = 1.3
TASK = "envcheck-demo__pyutils-1"
CATALOGUE = """version: 1
suites:
  swe: {{ defaults: {{ workdir: /testbed, user: agent }} }}
datasets:
  - {{ id: big, format: swebench, path: {path}, suite: swe,
      image: 'swebench/sweb.eval.x86_64.{{instance_id}}:latest',
      command: 'pytest --no-header -rA --tb=no -p no:cacheprovider {{test_files}}' }}
"""


def _patch(rng: random.Random, path: str) -> str:
    body = "".join(f"+    value_{rng.getrandbits(32):08x} = {i}\n" for i in range(40))
    return (f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n"
            f"+++ b/{path}\n@@ -10,3 +10,43 @@ def f():\n     pass\n{body}     return\n")


def records(n: int) -> list[dict[str, Any]]:
    rng = random.Random(13)
    out = []
    for i in range(n):
        repo = f"org{i % 40}/repo{i % 40}"
        tests = f"tests/test_mod{i % 17}.py"
        out.append({
            "repo": repo, "instance_id": f"{repo.replace('/', '__')}-{i}",
            "base_commit": f"{rng.getrandbits(160):040x}", "version": "1.0",
            "patch": _patch(rng, f"src/mod{i % 17}.py"), "test_patch": _patch(rng, tests),
            "problem_statement": "x " * 300,
            "FAIL_TO_PASS": json.dumps([f"{tests}::test_bug_{i}_{k}" for k in range(3)]),
            "PASS_TO_PASS": json.dumps([f"{tests}::test_ok_{k}[case-{k}]" for k in range(60)]),
        })
    return out


def bench_load(n: int, rounds: int, folder: Path) -> list[dict[str, Any]]:
    data = records(n)
    files = {"jsonl": folder / "big.jsonl", "json": folder / "big.json"}
    files["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in data))
    files["json"].write_text(json.dumps(data))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        files["parquet"] = folder / "big.parquet"
        pq.write_table(pa.Table.from_pylist(data), files["parquet"])
    except ImportError:
        print("pyarrow is not installed: no Parquet row (the 'parquet' extra)")
    rows = []
    for kind, path in files.items():
        catalogue = folder / f"{kind}.yaml"
        catalogue.write_text(CATALOGUE.format(path=path.name))
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            cat = load_catalogue([catalogue])
            times.append(time.perf_counter() - started)
            assert len(cat.environments) == n
        rows.append({"format": kind, "records": n, "bytes": path.stat().st_size,
                     "median_s": median(times), "min_s": min(times),
                     "ok": median(times) < LOAD_TARGET_S})
    return rows


def _floor_run(env: Environment, run_id: str, gold: bool) -> tuple[float, dict[str, str]]:
    """One run of the protocol with the docker CLI: a hardened ``docker run --rm -i``."""
    tests = env.tests
    assert tests is not None and tests.test_patch is not None and tests.oracle is not None
    script = "set -e\ncd /testbed\n"
    if gold:
        script += f"cat > /tmp/gold.patch <<'EOF_GOLD'\n{tests.oracle.patch}EOF_GOLD\n" \
                  "git apply --verbose /tmp/gold.patch\n"
    script += (f"cat > /tmp/test.patch <<'EOF_TEST'\n{tests.test_patch}EOF_TEST\n"
               "git apply -v /tmp/test.patch\nset +e\n"
               "python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider "
               "tests/test_slug.py\n")
    argv = [*docker_run_hardened(env, run_id), "-s"]
    started = time.perf_counter()
    done = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=120,
                          check=False)
    elapsed = time.perf_counter() - started
    return elapsed, dict(parser("pytest")(done.stdout.split("\n")))


def bench_task(rounds: int, reruns: int) -> dict[str, Any]:
    cat = load_catalogue([ROOT / "probes" / "demo-swebench.yaml"])
    env = cat.environment(TASK)
    assert env.tests is not None
    env = env.model_copy(update={"tests": env.tests.model_copy(update={"reruns": reruns})})
    runtime = DockerRuntime.from_env()
    ours: list[float] = []
    floor: list[float] = []
    verdicts: set[str] = set()
    floor_ok = True
    try:
        for r in range(rounds + 1):  # round 0: an unmeasured warm-up
            started = time.perf_counter()
            [result] = run_cycle([env], [ProbeKind.TESTS], runtime, new_run_id())
            took = time.perf_counter() - started
            verdicts.add(f"{result.status}/{result.reason}")
            run_id = f"bench-{uuid.uuid4().hex[:8]}"
            total = 0.0
            for k in range(1 + reruns):
                took_run, seen = _floor_run(env, run_id, gold=k > 0)
                total += took_run
                f2p = seen.get(env.tests.fail_to_pass[0])
                floor_ok &= (f2p == TestStatus.PASSED) == (k > 0)
            if r:
                ours.append(took)
                floor.append(total)
    finally:
        runtime.close()
    ratio = median(ours) / median(floor)
    return {"task": TASK, "runs": 1 + reruns, "rounds": rounds, "envcheck_s": median(ours),
            "floor_s": median(floor), "ratio": ratio, "ok": ratio <= RATIO_TARGET,
            "envcheck_verdicts": sorted(verdicts), "floor_saw_the_protocol": floor_ok,
            "samples": {"envcheck": ours, "floor": floor}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reruns", type=int, default=3)
    ap.add_argument("--no-engine", action="store_true", help="the load time only")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report: dict[str, Any] = {"commit": git_head()}
    with tempfile.TemporaryDirectory(prefix="envcheck-bench-dataset-") as tmp:
        report["load"] = bench_load(args.records, args.rounds, Path(tmp))
    report["peak_rss_mib"] = round(proc_status_kib("VmHWM") / 1024, 1)
    print(f"load of a {args.records:,}-record instance file (target < {LOAD_TARGET_S:g} s), "
          f"median of {args.rounds}:")
    for row in report["load"]:
        print(f"  {row['format']:<8} {row['bytes'] / 1e6:7.1f} MB  {row['median_s']:6.2f} s  "
              f"(min {row['min_s']:.2f} s)  {'PASS' if row['ok'] else 'OVER'}")
    print(f"  peak RSS of this process: {report['peak_rss_mib']} MiB")
    if not args.no_engine:
        task = report["task"] = bench_task(args.rounds, args.reruns)
        print(f"per task: {task['task']}, {task['runs']} runs (negative + {args.reruns} "
              f"positive), median of {task['rounds']} rounds:")
        print(f"  envcheck {task['envcheck_s']:6.2f} s   {', '.join(task['envcheck_verdicts'])}")
        print(f"  docker   {task['floor_s']:6.2f} s   (by hand: one docker run --rm per run; "
              f"saw f2p fail then pass: {task['floor_saw_the_protocol']})")
        print(f"  ratio envcheck/docker {task['ratio']:.2f}  (target <= {RATIO_TARGET}) "
              f"{'PASS' if task['ok'] else 'OVER'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
