"""Benchmark: what the answer-leak checks cost, per environment, side by side.

    .venv/bin/python bench/leaks.py [--rounds 2] [--env ID ...] [--json OUT]
    .venv/bin/python bench/leaks.py --scan IMAGE [--rounds 3]

For each environment of ``probes/demo-leaks.yaml`` (or those named), the real tests probe on
the real engine, one probe at a time, alternating: **without** the leak checks (the spec's
``leaks`` removed), **with** them, and **reused** (with them, a second time against a store
that holds the first: nothing is played). Reported: median seconds of each, the ratios to the
probe without them, and the seconds of the checks themselves (their container's start and
commands: ``details.leaks.seconds``).

With ``--scan IMAGE``: the files check alone in a container of IMAGE, as root, looking for
a Harbor task's ``solution/`` and ``tests/`` (``probes/harbor/hello-world``): its seconds
against the files the image holds (what the walk of ``/`` costs on a real-sized image).

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from common import ROOT, median
from reused import Plan, run, write

from envcheck.catalogue.models import Environment
from envcheck.executors.cycle import new_run_id
from envcheck.kinds.leaks.files import files_script, folder_targets, read_files
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.docker import DockerRuntime

CATALOGUE = ROOT / "probes" / "demo-leaks.yaml"


def without_leaks(env: Environment) -> Environment:
    if env.harbor is not None:
        return env.model_copy(update={"harbor": env.harbor.model_copy(update={"leaks": None})})
    assert env.tests is not None
    return env.model_copy(update={"tests": env.tests.model_copy(update={"leaks": None})})


def show(row: dict[str, Any]) -> str:
    return (f"{row['env']:32} without {row['without_s']:5.1f} s  with {row['with_s']:5.1f} s "
            f"({row['ratio_with']:.2f}x; the checks {row['checks_s']:.2f} s)  reused "
            f"{row['reused_s']:5.1f} s ({row['ratio_reused']:.2f}x)  {row['verdict']}")


PLAN = Plan(CATALOGUE, "leaks", without_leaks,
            lambda firsts: {"checks_s": median(f.details["leaks"]["seconds"] for f in firsts)},
            show)


def scan(image: str, runtime: DockerRuntime, rounds: int) -> dict[str, Any]:
    task = ROOT / "probes" / "harbor" / "hello-world"
    targets = (folder_targets(task / "solution", "solution", "solution")
               + folder_targets(task / "tests", "tests", "tests"))
    script, variables = files_script(targets, [])
    spec = SandboxSpec(env_id="bench-leaks", image=image, run_id=new_run_id())
    seconds = []
    with runtime.sandbox(spec) as sandbox:
        count = sandbox.exec(["sh", "-c", "find / \\( -path /proc -o -path /sys -o -path /dev "
                              "-o -path /tmp \\) -prune -o -type f -print 2>/dev/null | wc -l"],
                             user="0", timeout_s=600).text.strip()
        for _ in range(rounds):
            result = sandbox.exec(["sh", "-c", script], user="0", env=variables,
                                  timeout_s=600)
            _, checked = read_files(result.text, result.timed_out, targets, [], "root")
            assert checked[0].played, checked[0].summary
            seconds.append(result.duration_s)
    return {"image": image, "files": int(count), "scan_s": median(seconds),
            "targets": len(targets)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--env", action="append", default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--scan", metavar="IMAGE", default=None)
    args = parser.parse_args(argv)
    if args.scan is not None:
        runtime = DockerRuntime.from_env()
        try:
            row = scan(args.scan, runtime, args.rounds)
        finally:
            runtime.close()
        print(f"{row['image']}: {row['files']} files, the files check "
              f"({row['targets']} looked for) {row['scan_s']:.2f} s (median of {args.rounds})")
        return 0
    report = run(PLAN, args.rounds, args.env)
    if report is None:
        return 1
    report["median_checks_s"] = median(r["checks_s"] for r in report["environments"])
    print(f"median: with the leak checks {report['median_ratio_with']:.2f}x, reused "
          f"{report['median_ratio_reused']:.2f}x the probe without them; the checks themselves "
          f"{report['median_checks_s']:.2f} s")
    write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
