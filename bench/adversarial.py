"""Benchmark: what the adversarial controls cost, per environment, side by side.

    .venv/bin/python bench/adversarial.py [--rounds 2] [--env ID ...] [--json OUT]

For each environment of ``probes/demo-hacks.yaml`` (or those named), the real tests probe on
the real engine, one probe at a time, alternating: **without** the controls (the spec's
``adversarial`` removed), **with** them (every trick played), and **reused** (with them, a
second time against a store that holds the first: the identity is unchanged, nothing is
played). Reported: median seconds of each and the ratios with/without and reused/without.

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from common import ROOT
from reused import Plan, run, write

from envcheck.catalogue.models import Environment

CATALOGUE = ROOT / "probes" / "demo-hacks.yaml"


def without_controls(env: Environment) -> Environment:
    assert env.tests is not None
    return env.model_copy(update={"tests": env.tests.model_copy(update={"adversarial": None})})


def show(row: dict[str, Any]) -> str:
    return (f"{row['env']:34} {row['tricks']} tricks  without {row['without_s']:6.1f} s  with "
            f"{row['with_s']:6.1f} s ({row['ratio_with']:.2f}x)  reused {row['reused_s']:6.1f} s "
            f"({row['ratio_reused']:.2f}x)  {row['verdict']}")


PLAN = Plan(CATALOGUE, "adversarial", without_controls,
            lambda firsts: {"tricks": len(firsts[-1].details["adversarial"]["tricks"])}, show)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--env", action="append", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(PLAN, args.rounds, args.env)
    if report is None:
        return 1
    print(f"median ratio: with controls {report['median_ratio_with']:.2f}x, reused "
          f"{report['median_ratio_reused']:.2f}x the probe without them")
    write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
