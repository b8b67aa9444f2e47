"""Benchmark: what envcheck pays on cold images, against the batched floor, in one run.

    .venv/bin/python bench/cold.py [--rounds N] [--drop-caches] [--json OUT]

Two comparisons, side by side in every round:

A. **terminal+dependencies** over six SWE-style demo images: envcheck's
   ``run_cycle(envs, [TERMINAL, DEPENDENCIES], runtime, run_id, concurrency=1)`` (the two
   read-only kinds share one container) against the batched floor: per image ``docker run -d``
   with envcheck's hardening, ONE ``docker exec`` of the terminal's login script and the
   dependency script together, ``docker rm -f -v``.
B. **tests**: one probe of ``demo-tests-healthy`` (a negative control and the reruns, each in
   a fresh container) against the same runs done bare (a hardened ``docker run --rm`` each).

Cold: every side of every round runs on **fresh copies** of its images (a new image under a
new tag, built ``FROM`` the demo image with a label: a new image ID no container was ever
created from). With ``--drop-caches`` the kernel's page cache is also dropped before each side
(host-wide: every process on the host re-reads its files afterwards; only where the kernel
lets this process write ``/proc/sys/vm/drop_caches``). The warm-up round runs on copies of
its own, so it warms this process (imports, the CLI binary), never a measured image.

Rounds alternate which side goes first, so drift hits both alike. The exit status is 0
whatever the ratios; 1 if the benchmark itself broke (a crash, a container left behind).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from common import ROOT, TimedSandbox, git_head, host, median
from flaky import bare_run, own_runs
from terminal import BenchError, DockerCli, check_leaks

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.dependencies.state import SCRIPT, parse_output, script_env
from envcheck.kinds.terminal import DONE, login_script
from envcheck.sandbox.base import Sandbox, SandboxSpec
from envcheck.sandbox.docker import DockerRuntime

log = logging.getLogger("bench.cold")

TARGET_TD = 1.2
TARGET_TESTS = 1.15
# Six SWE-style task images of the demo fleet (a repository, pytest, git, tmux; one user).
IMAGES = ("swe-pyutils", "healthy", "hack-resistant", "tests-flaky", "tests-p2p-broken",
          "tests-order-dependent")
COPY_REPO = "envcheck-bench-cold"
COPY_LABEL = "org.envcheck.bench.cold"
TESTS_CATALOGUE = ROOT / "probes" / "demo-tests.yaml"
TESTS_ENV = "demo-tests-healthy"
DROP_CACHES = Path("/proc/sys/vm/drop_caches")

# The demo-deps suite's declarations (probes/demo-deps.yaml), on each of the six images.
CATALOGUE = """\
version: 1
suites:
  cold:
    description: bench/cold.py's six SWE-style images
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      limits: { memory_mb: 512, cpus: 1.0, pids: 256 }
      timeouts: { start_s: 15, shell_s: 2, exec_s: 30 }
      dependencies:
        python: { pytest: ">=7.2,<8", pluggy: ">=1.0", packaging: ">=23" }
        debian: { python3: ">= 3.11", git: ">= 1:2.39", tmux: ">= 3.3", ca-certificates: "*" }
        executables: { python3: '^Python 3\\.11\\.', git: '^git version 2\\.', tmux: '^tmux 3\\.' }
        imports: [pytest]
    environments:
"""


def fleet(names: Sequence[str]) -> list[Environment]:
    lines = [CATALOGUE]
    for name in names:
        lines.append(f"      - id: cold-{name}\n        image: envcheck-demo/{name}:latest\n")
        if name.startswith("swe-"):
            lines.append("        workdir: /testbed\n")
    with tempfile.TemporaryDirectory(prefix="envcheck-cold-") as tmp:
        path = Path(tmp) / "cold.yaml"
        path.write_text("".join(lines), encoding="utf-8")
        return list(load_catalogue([path]).environments)


# --- cold images ----------------------------------------------------------------------------


class Copies:
    """Fresh copies of images: a new image ID each, never run; removed at the end."""

    def __init__(self, runtime: DockerRuntime) -> None:
        self._client = runtime.client
        self.tags: list[str] = []

    def make(self, image: str) -> str:
        nonce = uuid.uuid4().hex[:12]
        name = image.split("/", 1)[-1].split(":", 1)[0]
        tag = f"{COPY_REPO}/{name}:{nonce}"
        dockerfile = f"FROM {image}\nLABEL {COPY_LABEL}={nonce}\n".encode()
        self._client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True,
                                  forcerm=True, pull=False, network_mode="none",
                                  timeout=120)
        self.tags.append(tag)
        return tag

    def of(self, env: Environment) -> Environment:
        return env.model_copy(update={"image": self.make(env.image)})

    def remove(self) -> None:
        for tag in self.tags:
            try:
                self._client.images.remove(tag, force=True)
            except Exception as exc:  # a leftover tag is untidy, not a broken benchmark
                log.warning("could not remove %s: %s", tag, exc)
        self.tags.clear()


def drop_caches() -> None:
    os.sync()
    DROP_CACHES.write_text("3\n", encoding="ascii")


def can_drop_caches() -> bool:
    try:
        drop_caches()
    except OSError as exc:
        log.warning("cannot drop the page cache here (%s): fresh copies only", exc)
        return False
    return True


# --- envcheck, timed by a transparent wrapper around its runtime -----------------------------


@dataclass
class Phases:
    totals: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] = self.totals.get(phase, 0.0) + seconds


class TimedRuntime:
    def __init__(self, inner: DockerRuntime) -> None:
        self._inner = inner
        self.phases = Phases()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def image_digest(self, image: str) -> str:
        started = time.monotonic()
        try:
            return self._inner.image_digest(image)
        finally:
            self.phases.add("digest", time.monotonic() - started)

    @contextmanager
    def sandbox(self, spec: SandboxSpec) -> Iterator[Sandbox]:
        started = time.monotonic()
        removing = started
        with self._inner.sandbox(spec) as sandbox:
            self.phases.add("start", time.monotonic() - started)
            try:
                yield TimedSandbox(sandbox, self.phases,
                                   lambda argv: "login" if "-l" in argv else "deps")
            finally:
                removing = time.monotonic()
        self.phases.add("rm", time.monotonic() - removing)


@dataclass
class Side:
    wall_s: float
    phases: dict[str, float]
    outcomes: list[str]


def envcheck_td(envs: Sequence[Environment], runtime: TimedRuntime) -> Side:
    runtime.phases = Phases()
    started = time.monotonic()
    results = run_cycle(envs, [ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES], runtime,  # type: ignore[arg-type]
                        new_run_id(), concurrency=1)
    wall = time.monotonic() - started
    phases = dict(runtime.phases.totals)
    phases["other"] = max(wall - sum(phases.values()), 0.0)
    return Side(wall, phases, [f"{r.kind}:{r.status}/{r.reason}" for r in results])


# --- the batched floor: run -d, one exec, rm -f -------------------------------------------


def floor_td(cli: DockerCli, envs: Sequence[Environment], run_id: str) -> Side:
    phases = Phases()
    outcomes: list[str] = []
    started = time.monotonic()
    for env in envs:
        assert env.dependencies is not None
        nonce = uuid.uuid4().hex[:16]
        variables = script_env(env, env.dependencies, nonce)
        # The login script in a login shell, then the dependency script under /bin/sh (as
        # envcheck runs it), in ONE exec; the dependency inputs travel as variables.
        script = login_script(env) + '/bin/sh -c "$ENVCHECK_DEPS_SCRIPT"\n'
        mark = time.monotonic()
        proc = cli.run(*cli.run_args(env, run_id), timeout_s=env.timeouts.start_s + 30)
        phases.add("start", time.monotonic() - mark)
        if proc.returncode != 0:
            raise BenchError(f"floor: {env.image} did not start: {proc.stderr.decode()[-300:]}")
        cid = proc.stdout.decode().strip()
        try:
            args = ["exec", "-u", env.user]
            for key, value in {**variables, "ENVCHECK_DEPS_SCRIPT": SCRIPT}.items():
                args += ["-e", f"{key}={value}"]
            mark = time.monotonic()
            done = cli.run(*args, cid, env.shell, "-l", "-c", script,
                           timeout_s=2 * env.timeouts.exec_s)
            phases.add("exec", time.monotonic() - mark)
            text = done.stdout.decode("utf-8", "replace")
            state = parse_output(text, nonce)
            outcomes.append(f"login={'ok' if DONE in text else 'broken'} "
                            f"deps={'complete' if state.complete else 'cut'}")
        finally:
            mark = time.monotonic()
            cli.run("rm", "-f", "-v", cid)
            phases.add("rm", time.monotonic() - mark)
    wall = time.monotonic() - started
    totals = dict(phases.totals)
    totals["other"] = max(wall - sum(totals.values()), 0.0)
    return Side(wall, totals, outcomes)


# --- the tests probe against bare runs -----------------------------------------------------


def tests_env() -> Environment:
    return own_runs(load_catalogue([TESTS_CATALOGUE]).environment(TESTS_ENV))


def envcheck_tests(env: Environment, runtime: DockerRuntime) -> Side:
    started = time.monotonic()
    [result] = run_cycle([env], [ProbeKind.TESTS], runtime, new_run_id(), concurrency=1)
    wall = time.monotonic() - started
    runs = result.details.get("runs", [])
    return Side(wall, {"container_start": float(result.details.get("container_start_s", 0))},
                [f"{result.status}/{result.reason} ({len(runs)} runs)"])


def bare_tests(env: Environment) -> Side:
    assert env.tests is not None
    started = time.monotonic()
    for k in range(1 + env.tests.reruns):
        bare_run(env, oracle=k > 0)
    return Side(time.monotonic() - started, {}, [f"{1 + env.tests.reruns} runs"])


# --- rounds ---------------------------------------------------------------------------------


@dataclass
class Pair:
    ours: list[Side] = field(default_factory=list)
    floor: list[Side] = field(default_factory=list)

    def summary(self, target: float) -> dict[str, Any]:
        a, b = median(s.wall_s for s in self.ours), median(s.wall_s for s in self.floor)
        rounds = [x.wall_s / y.wall_s for x, y in zip(self.ours, self.floor, strict=True)]
        phases = sorted({p for s in self.ours for p in s.phases})
        floor_phases = sorted({p for s in self.floor for p in s.phases})
        return {
            "envcheck_s": a, "floor_s": b, "ratio": a / b, "target": target,
            # each round's two sides ran back to back: their ratio cancels the drift of a
            # machine whose load moves from one minute to the next
            "paired_ratio": median(rounds), "ok": median(rounds) <= target,
            "round_ratios": rounds,
            "samples": {"envcheck": [s.wall_s for s in self.ours],
                        "floor": [s.wall_s for s in self.floor]},
            "phases": {"envcheck": {p: median(s.phases.get(p, 0.0) for s in self.ours)
                                    for p in phases},
                       "floor": {p: median(s.phases.get(p, 0.0) for s in self.floor)
                                 for p in floor_phases}},
            "outcomes": {"envcheck": sorted({o for s in self.ours for o in s.outcomes}),
                         "floor": sorted({o for s in self.floor for o in s.outcomes})},
        }


def side_round(first_ours: bool, ours: Callable[[], Side], floor: Callable[[], Side],
               cold: Callable[[], None]) -> tuple[Side, Side]:
    done: dict[bool, Side] = {}
    for mine in (first_ours, not first_ours):
        cold()
        done[mine] = ours() if mine else floor()
    return done[True], done[False]


def bench(args: argparse.Namespace) -> dict[str, Any]:
    binary = shutil.which("docker")
    if binary is None:
        raise BenchError("the docker CLI is not on PATH")
    cli = DockerCli(binary)
    tag = f"bench-cold-{os.getpid()}"  # envcheck's containers of this run, and no others'
    os.environ["ENVCHECK_CONTAINER_TAG"] = tag
    runtime = DockerRuntime.from_env()
    timed = TimedRuntime(runtime)
    copies = Copies(runtime)
    envs = fleet(IMAGES)
    tenv = tests_env()
    dropping = args.drop_caches and can_drop_caches()
    cold: Callable[[], None] = drop_caches if dropping else (lambda: None)
    td, tests = Pair(), Pair()
    loads: list[float] = []
    run_ids: set[str] = set()
    try:
        for n in range(args.warmup + args.rounds):
            label = "warm-up" if n < args.warmup else f"round {n - args.warmup + 1}"
            first_ours = n % 2 == 0
            # fresh copies for each side of the round, made before either is measured
            ours_envs = [copies.of(e) for e in envs]
            floor_envs = [copies.of(e) for e in envs]
            ours_tests, floor_tests = copies.of(tenv), copies.of(tenv)
            floor_run = new_run_id()
            run_ids.add(floor_run)
            loads.append(os.getloadavg()[0])
            a = side_round(first_ours, partial(envcheck_td, ours_envs, timed),
                           partial(floor_td, cli, floor_envs, floor_run), cold)
            b = side_round(not first_ours, partial(envcheck_tests, ours_tests, runtime),
                           partial(bare_tests, floor_tests), cold)
            copies.remove()
            leaked = check_leaks(cli, run_ids) + runtime.containers(tag)
            if leaked:
                raise BenchError(f"{label}: container(s) left behind: {leaked}")
            print(f"{label} (load {loads[-1]:.2f}): terminal+dependencies envcheck "
                  f"{a[0].wall_s:.2f} s, floor {a[1].wall_s:.2f} s; tests envcheck "
                  f"{b[0].wall_s:.2f} s, bare {b[1].wall_s:.2f} s", file=sys.stderr, flush=True)
            if n >= args.warmup:
                td.ours.append(a[0])
                td.floor.append(a[1])
                tests.ours.append(b[0])
                tests.floor.append(b[1])
    finally:
        copies.remove()
        check_leaks(cli, run_ids, warn=True)
        runtime.close()
    return {
        "terminal_dependencies": td.summary(TARGET_TD),
        "tests": tests.summary(TARGET_TESTS),
        "rounds": args.rounds, "warmup": args.warmup,
        "cold": "fresh copies + page cache dropped" if dropping else "fresh copies",
        "images": [e.image for e in envs], "tests_env": TESTS_ENV,
        "load_avg_1m": {"min": min(loads), "max": max(loads), "samples": loads},
        "host": host(git=git_head(), at=datetime.now(UTC).isoformat(timespec="seconds"),
                     docker_server=cli.text("version", "--format", "{{.Server.Version}}")),
    }


def report(out: dict[str, Any]) -> None:
    load = out["load_avg_1m"]
    print(f"\ncold images ({out['cold']}), {out['rounds']} rounds, "
          f"load average {load['min']:.2f}-{load['max']:.2f} (1 min)")
    for key, name in (("terminal_dependencies", "terminal+dependencies, 6 images"),
                      ("tests", f"tests, {TESTS_ENV}")):
        s = out[key]
        rounds = ", ".join(f"{r:.2f}" for r in s["round_ratios"])
        print(f"\n{name}: envcheck {s['envcheck_s']:.2f} s, floor {s['floor_s']:.2f} s "
              f"(medians): ratio of the medians {s['ratio']:.2f}; median of the round ratios "
              f"{s['paired_ratio']:.2f} (rounds {rounds}; target <= {s['target']}) "
              f"{'PASS' if s['ok'] else 'OVER'}")
        for side in ("envcheck", "floor"):
            phases = "  ".join(f"{p} {v:.3f}" for p, v in s["phases"][side].items())
            print(f"  {side:<8} phases (s, median): {phases}")
            print(f"  {side:<8} saw: {'; '.join(s['outcomes'][side])}")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds, on copies "
                        "of their own (default 1)")
    parser.add_argument("--drop-caches", action="store_true", help="drop the page cache "
                        "before each side (host-wide; needs a writable drop_caches)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be >= 1 and --warmup >= 0")
    try:
        out = bench(args)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        print(f"bench: {type(exc).__name__}", file=sys.stderr)
        return 130
    report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
