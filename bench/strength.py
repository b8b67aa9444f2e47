"""Benchmark: what the wrong-fix controls cost, per environment, side by side.

    .venv/bin/python bench/strength.py [--rounds 2] [--env ID ...] [--outputs] [--json OUT]

For each environment of ``probes/demo-strength.yaml`` (or those named; ``--outputs``: the
Harbor tasks of ``probes/demo-strength-outputs.yaml``, whose wrong outputs are mutants of
the files ``solve.sh`` writes), the real tests probe
on the real engine, one probe at a time, alternating: **without** the wrong-fix controls (the
spec's ``strength`` removed), **with** them, and **reused** (with them, a second time against
a store that holds the first: nothing is played). Reported: median seconds of each, the
ratios to the probe without them, the controls' own seconds and container runs
(``details.strength.seconds``, ``runs``: the gold patch's files read back, then one run per
mutant, two for each that passes its fail-to-pass tests; for outputs: the oracle's run that
reads its files back, then one run per mutant) and the seconds per mutant.

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
from envcheck.core.results import ProbeResult

CATALOGUE = ROOT / "probes" / "demo-strength.yaml"
OUTPUTS = ROOT / "probes" / "demo-strength-outputs.yaml"


def without_strength(env: Environment) -> Environment:
    if env.harbor is not None:  # a Harbor task: its spec holds the block
        return env.model_copy(update={"harbor": env.harbor.model_copy(
            update={"strength": None})})
    assert env.tests is not None
    return env.model_copy(update={"tests": env.tests.model_copy(update={"strength": None})})


def extra(firsts: list[ProbeResult]) -> dict[str, Any]:
    infos = [f.details["strength"] for f in firsts]
    mutants = infos[0]["generated"]["mutants"]
    controls = median(i["seconds"] for i in infos)
    return {"controls_s": controls, "runs": infos[0]["runs"], "mutants": mutants,
            "per_mutant_s": controls / mutants if mutants else None,
            "score": infos[0]["score"]}


def show(row: dict[str, Any]) -> str:
    return (f"{row['env']:32} without {row['without_s']:5.1f} s  with {row['with_s']:5.1f} s "
            f"({row['ratio_with']:.2f}x; the controls {row['controls_s']:.1f} s, "
            f"{row['runs']} runs, {row['mutants']} mutants)  reused {row['reused_s']:5.1f} s "
            f"({row['ratio_reused']:.2f}x)  {row['verdict']} (score {row['score']})")




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--env", action="append", default=None)
    parser.add_argument("--outputs", action="store_true",
                        help="the wrong-output controls' demo (Harbor tasks) instead")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    plan = Plan(OUTPUTS if args.outputs else CATALOGUE, "strength", without_strength, extra,
                show)
    report = run(plan, args.rounds, args.env)
    if report is None:
        return 1
    rows = report["environments"]
    report["median_per_mutant_s"] = median(r["per_mutant_s"] for r in rows if r["per_mutant_s"])
    what = "wrong-output" if args.outputs else "wrong-fix"
    print(f"median: with the {what} controls {report['median_ratio_with']:.2f}x, reused "
          f"{report['median_ratio_reused']:.2f}x the probe without them; "
          f"{report['median_per_mutant_s']:.2f} s per mutant")
    write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
