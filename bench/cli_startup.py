"""Benchmark: how fast the command line starts, ``envcheck --help`` and ``envcheck gate --suite S``
on a 10,000-environment SQLite store, against the interpreter's own start and ``import typer``.

    .venv/bin/python bench/cli_startup.py [--rounds N] [--envs N] [--results-per-env K]
                                          [--rebuild] [--json OUT] [--baseline CHECKOUT]

Four commands, each a fresh process run from the repository root, as a launch script runs
them: ``python -c pass`` (the floor: the interpreter starting), ``python -c "import typer"``
(the framework), ``envcheck --help`` and ``envcheck gate --suite fleet`` (through the console
script's entry point, ``envcheck.cli:main``, on this checkout's code, output to /dev/null).
``--baseline CHECKOUT`` (another checkout of envcheck, e.g. a ``git worktree`` of main) adds
its ``--help`` and ``gate``, run from that checkout, so that a change is compared with what it
replaces under the same load. One unmeasured warm-up round, then ``--rounds`` rounds, the order
rotated every round so that drift hits every command alike. Wall time from spawn to exit, and
the child's CPU time (user + system), which a busy machine inflates less. Byte-code caching is
on for the children (``PYTHONDONTWRITEBYTECODE`` removed), as for an installed package; the
warm-up writes it.

The store is ``bench/allowlist.py``'s fleet (same recipe, same cache in ``$TMPDIR/envcheck-bench``,
built on first use: 1-2 minutes), at the newest schema, so ``gate`` reads it without migrating.
Exit 0 whatever the numbers; 1 if the benchmark itself broke (a command failed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import allowlist
import fleetcache
from common import ROOT, host, median

TARGETS_S = {"envcheck --help": 0.3, "envcheck gate": 0.5}
BASELINE = " (baseline)"
# The console script's body (envcheck.cli:main) without the script: this checkout's code.
ENTRY = "import sys; from envcheck.cli import main; sys.argv[0] = 'envcheck'; sys.exit(main())"


@dataclass
class Command:
    name: str
    argv: list[str]
    codes: tuple[int, ...] = (0,)
    root: Path = ROOT  # the checkout whose code the command runs
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def run(self, env: dict[str, str]) -> None:
        env = {**env, "PYTHONPATH": str(self.root)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(self.argv, cwd=self.root, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=120, check=False)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in self.codes:
            raise RuntimeError(f"{self.name} exited {done.returncode}: "
                               f"{done.stderr.decode(errors='replace')[-2000:]}")
        self.wall_s.append(wall)
        self.cpu_s.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def child_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["ENVCHECK_DATABASE_URL"] = url
    env["COLUMNS"] = "120"
    return env


def checkout_in_use(env: dict[str, str], root: Path) -> None:
    """The children run ``root``'s code (PYTHONPATH and cwd), whatever the venv's editable
    install says."""
    done = subprocess.run([sys.executable, "-c", "import envcheck; print(envcheck.__file__)"],
                          cwd=root, env={**env, "PYTHONPATH": str(root)}, capture_output=True,
                          text=True, check=True)
    if not Path(done.stdout.strip()).is_relative_to(root):
        raise RuntimeError(f"the children import {done.stdout.strip()}, not {root}")


def envcheck_commands(root: Path, suffix: str = "") -> list[Command]:
    py = sys.executable
    return [
        Command(f"envcheck --help{suffix}", [py, "-c", ENTRY, "--help"], root=root),
        # 0: enough of the suite is allowed; 1 would be a valid answer too, not a breakage
        Command(f"envcheck gate{suffix}", [py, "-c", ENTRY, "gate", "--suite", allowlist.SUITE],
                codes=(0, 1), root=root),
    ]


def report(commands: list[Command]) -> str:
    floor, typer_ = commands[0], commands[1]
    med = {c.name: median(c.wall_s) for c in commands}
    cpu = {c.name: median(c.cpu_s) for c in commands}
    lines = [f"{'command':<27} {'n':>3} {'median s':>9} {'min s':>7} {'max s':>7} "
             f"{'cpu s':>7} {'x floor':>8} {'x typer':>8} {'- typer s':>10}"]
    for c in commands:
        lines.append(f"{c.name:<27} {len(c.wall_s):>3} {med[c.name]:>9.3f} {min(c.wall_s):>7.3f} "
                     f"{max(c.wall_s):>7.3f} {cpu[c.name]:>7.3f} "
                     f"{med[c.name] / med[floor.name]:>8.1f} "
                     f"{med[c.name] / med[typer_.name]:>8.2f} "
                     f"{med[c.name] - med[typer_.name]:>10.3f}")
    lines.append("")
    for name, target in TARGETS_S.items():
        verdict = "PASS" if med[name] <= target else "FAIL"
        lines.append(f"{name}: median {med[name]:.3f} s (cpu {cpu[name]:.3f} s), "
                     f"target <= {target} s: {verdict}")
        base = name + BASELINE
        if base in med:
            lines.append(f"  {base}: median {med[base]:.3f} s (cpu {cpu[base]:.3f} s); "
                         f"this checkout / baseline: {med[name] / med[base]:.2f} wall, "
                         f"{cpu[name] / cpu[base]:.2f} cpu")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--envs", type=int, default=10_000)
    parser.add_argument("--results-per-env", type=int, default=100,
                        help="the allowlist bench's default, so both share one cached store")
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached store")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="another envcheck checkout whose --help and gate run alongside")
    args = parser.parse_args(argv)

    key = allowlist.cache_key(args.envs, args.results_per_env)
    with allowlist.sqlite_url(key, args.rebuild) as url:
        store, build = allowlist.open_fleet("sqlite", url, args.envs, args.results_per_env)
        try:
            listing = allowlist.allowlist(store, allowlist.SUITE)
        finally:
            store.close()
    env = child_env(url)
    py = sys.executable
    commands = [
        Command("python -c pass", [py, "-c", "pass"]),
        Command("import typer", [py, "-c", "import typer"]),
        *envcheck_commands(ROOT),
    ]
    checkout_in_use(env, ROOT)
    if args.baseline:
        baseline = args.baseline.resolve()
        checkout_in_use(env, baseline)
        commands += envcheck_commands(baseline, BASELINE)
    load_before = os.getloadavg()
    for command in commands:  # warm-up: byte-code caches, the page cache, the store's file
        command.run(env)
        command.wall_s.clear()
        command.cpu_s.clear()
    for r in range(args.rounds):
        for command in commands[r % len(commands):] + commands[:r % len(commands)]:
            command.run(env)
    load_after = os.getloadavg()

    built = fleetcache.built_text(build, " s")
    print(f"store: {args.envs} environments x {args.results_per_env} results (SQLite, "
          f"{len(listing.allowed)} allowed, {len(listing.excluded)} excluded; {built})")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{os.cpu_count()} CPUs\n")
    print(report(commands))
    if args.json:
        args.json.write_text(json.dumps({
            "commands": [{**asdict(c), "root": str(c.root)} for c in commands],
            "targets_s": TARGETS_S,
            "params": {"rounds": args.rounds, "envs": args.envs,
                       "results_per_env": args.results_per_env,
                       "baseline": str(args.baseline) if args.baseline else None},
            "host": host(load_before=load_before, load_after=load_after)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
