"""Benchmark: the CPU a ``/metrics`` scrape costs at 10,000 and 100,000 environments, this
checkout against a baseline commit, side by side in one run.

    .venv/bin/python bench/metrics.py [--sizes 10000 100000] [--rounds 8] [--changes 400]
                                      [--baseline-commit 56fb801] [--json OUT]

Per size, one SQLite store is seeded in bulk (every environment synced from a generated
catalogue, one terminal result each, states mixed: 2% broken and 2% flaky, quarantined with a
transition each, 3% degraded), then copied once per side. Each side is a server process
running the daemon's own app (``envcheck.daemon.build_app``: the API and ``/metrics``) over
its copy, with the catalogue's scheduler built but not started, from the side's code
(``PYTHONPATH``: this checkout, or the baseline commit exported with ``git archive`` into a
temporary directory). Sides: **baseline** (per-environment series), **new** (the same
series), **new, per-suite** (``--metrics-series suite``).

This process scrapes each server over HTTP: a first scrape, then ``--rounds`` rounds of
changes and a scrape: ``--changes`` results stored one commit each (as the daemon's workers
store them; 400 is what 100,000 environments probed hourly store in 15 s, a usual scrape
interval), and two quarantines toggled by hand (two transitions). The server's CPU (utime +
stime from /proc/PID/stat, the HTTP layer included) is read around each scrape; "scrape CPU"
is the mean over the rounds (the clock ticks are 10 ms: one scrape alone reads too coarsely).
Every side gets the same changes (one seeded random generator); the per-environment series
of the last scrapes of baseline and new are compared line by line.

Targets (the issue): a scrape at 10,000 environments in <= 0.1 CPU-seconds, at 100,000 in
<= 1 CPU-second. Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import ROOT, git_head, host, proc_stat_fields, proc_status_kib, scratch_dir

CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGETS = {10_000: 0.1, 100_000: 1.0}  # CPU-seconds per scrape
SIDES = (("baseline", "environment"), ("new", "environment"), ("new, per-suite", "suite"))
PER_ENV_PREFIXES = ("envcheck_environment_state{", "envcheck_environment_quarantined{")


# --- the server (run as a child, with the side's code on PYTHONPATH) -------------------------

def serve(db_url: str, catalogue_path: Path, series: str) -> int:
    """The daemon's app over the store, on a free port; prints ``READY <url> <envcheck
    path>`` and serves until stdin closes."""
    import envcheck
    import envcheck.metrics
    from envcheck.api.app import serve_in_thread
    from envcheck.catalogue.loader import load_catalogue
    from envcheck.daemon import build_app
    from envcheck.feed.assess import StoreAssessment
    from envcheck.schedule.scheduler import ProbeScheduler
    from envcheck.store import open_store

    catalogue = load_catalogue([catalogue_path])
    with open_store(db_url) as store:
        scheduler = ProbeScheduler(catalogue, executor=None, store=store,  # type: ignore[arg-type]
                                   assessment=StoreAssessment(store))
        exposition: Any
        if hasattr(envcheck.metrics, "StoreMetrics"):
            exposition = envcheck.metrics.StoreMetrics(
                store, scheduler, per_environment=series == "environment")
        else:  # the baseline: one collector in a registry
            exposition = envcheck.metrics.build_registry(store, scheduler)  # type: ignore[attr-defined]
        app = build_app(store, scheduler, None, exposition, None)  # type: ignore[arg-type]
        with serve_in_thread(app) as url:
            print(f"READY {url} {Path(envcheck.__file__).parent}", flush=True)
            sys.stdin.read()
    return 0


# --- the store --------------------------------------------------------------------------------

def seed(db_url: str, catalogue_path: Path) -> dict[str, Any]:
    """Every environment synced, one terminal result each, states and transitions, in bulk."""
    from sqlalchemy import insert

    from envcheck.catalogue.loader import load_catalogue
    from envcheck.store import open_store
    from envcheck.store.core_tables import RESULTS, STATES, TRANSITIONS

    rng = random.Random(15)
    catalogue = load_catalogue([catalogue_path])
    now = datetime.now(UTC)
    results, states, transitions = [], [], []
    with open_store(db_url) as store:
        store.sync_suites(catalogue.suites)
        store.sync_environments(catalogue.environments)
        run_id = store.start_run("bench-seed", [str(catalogue_path)])
        store.finish_run(run_id)
        for env in catalogue.environments:
            draw = rng.random()
            state = ("broken" if draw < 0.02 else "flaky" if draw < 0.04
                     else "degraded" if draw < 0.07 else "healthy")
            bad = state in ("broken", "flaky")
            at = now - timedelta(seconds=rng.uniform(60, 600))
            results.append({"run_id": run_id, "env_id": env.id, "kind": "terminal",
                            "status": "fail" if bad else "pass",
                            "reason": "tool_missing" if bad else "ok", "summary": "seeded",
                            "duration_s": rng.uniform(0.2, 2.0), "image_digest": None,
                            "spec_hash": "seed", "started_at": at, "evidence": [],
                            "details": {}})
            states.append({"env_id": env.id, "suite": env.suite, "state": state,
                           "reason": "ok", "kinds": {}, "quarantined": bad,
                           "q_source": "auto" if bad else None, "q_actor": None,
                           "q_reason": "seeded" if bad else None,
                           "q_since": now if bad else None, "q_evidence": [],
                           "updated_at": now})
            if state != "healthy":
                transitions.append({"env_id": env.id, "at": now, "old_state": "unknown",
                                    "new_state": state, "was_quarantined": False,
                                    "quarantined": bad, "actor": "envcheck",
                                    "reason": "seeded", "evidence": []})
        with store.engine.begin() as conn:
            for table, rows in ((RESULTS, results), (STATES, states),
                                (TRANSITIONS, transitions)):
                for i in range(0, len(rows), 2000):
                    conn.execute(insert(table), rows[i:i + 2000])
    return {"quarantined": sum(1 for s in states if s["quarantined"]),
            "transitions": len(transitions)}


def change(db_url: str, env_ids: Sequence[str], rng: random.Random, results: int) -> None:
    """One round of changes: ``results`` results stored one commit each, two quarantines
    toggled by hand (run with the side's code, as :func:`seed` is: the other side's code
    would migrate its store, or could not open it)."""
    from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
    from envcheck.feed.assess import set_quarantine_by_id
    from envcheck.store import open_store

    with open_store(db_url) as store:
        run_id = store.start_run("bench", [])
        for _ in range(results):
            store.record(run_id, ProbeResult(
                env_id=rng.choice(env_ids), kind=ProbeKind.TERMINAL, status=Status.PASS,
                reason=Reason.OK, summary="ok", duration_s=rng.uniform(0.2, 2.0),
                spec_hash="seed", started_at=datetime.now(UTC)))
        store.finish_run(run_id)
        for env_id in rng.sample(list(env_ids), 2):
            state = store.env_state(env_id)
            quarantined = state is not None and state.quarantined
            set_quarantine_by_id(store, env_id, add=not quarantined, actor="bench",
                                 reason="bench toggles it")


# --- one side ---------------------------------------------------------------------------------

def cpu_s(pid: int) -> float:
    fields = proc_stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Server:
    def __init__(self, code_root: Path, db_url: str, catalogue: Path, series: str,
                 log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(code_root)}
        env.pop("ENVCHECK_DATABASE_URL", None)
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", db_url, str(catalogue),
             series], env=env, cwd=code_root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()  # blocks until ready or dead
        if not line or line[0] != "READY":
            raise RuntimeError(f"the server did not start; see {log}")
        self.url, self.code = line[1], Path(line[2])
        if not self.code.is_relative_to(code_root):
            raise RuntimeError(f"the server ran {self.code}, not the code under {code_root}")

    def scrape(self) -> tuple[str, float, float]:
        """(text, wall seconds, server CPU seconds)."""
        import requests

        cpu0, t0 = cpu_s(self.proc.pid), time.monotonic()
        response = requests.get(f"{self.url}/metrics", timeout=600)
        wall = time.monotonic() - t0
        response.raise_for_status()
        return response.text, wall, cpu_s(self.proc.pid) - cpu0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._log.close()


def in_side(code_root: Path, *argv: str) -> None:
    """This script's ``argv`` mode in a child running the side's code."""
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    env.pop("ENVCHECK_DATABASE_URL", None)
    subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env,
                   cwd=code_root, check=True, timeout=1800)


def measure(side: str, code_root: Path, series: str, n: int, catalogue: Path,
            args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    copy = workdir / f"{side.replace(', ', '-')}.db"
    db_url = f"sqlite:///{copy}"
    in_side(code_root, "--seed", db_url, str(catalogue))
    started = time.monotonic()
    server = Server(code_root, db_url, catalogue, series, workdir / f"{copy.stem}.log")
    out: dict[str, Any] = {"start_s": round(time.monotonic() - started, 1)}
    try:
        text, out["first_wall_s"], out["first_cpu_s"] = server.scrape()
        cpu, walls = [], []
        for round_ in range(args.rounds):  # every side gets the same changes
            in_side(code_root, "--change", db_url, str(n), str(round_), str(args.changes))
            text, wall, used = server.scrape()
            cpu.append(used)
            walls.append(wall)
        out["cpu_s"] = sum(cpu) / len(cpu)
        out["cpu_max_s"] = max(cpu)
        out["wall_s"] = sum(walls) / len(walls)
        out["bytes"] = len(text.encode())
        out["rss_mb"] = proc_status_kib("VmRSS", server.proc.pid) / 1024
        out["per_env_lines"] = sorted(line for line in text.splitlines()
                                      if line.startswith(PER_ENV_PREFIXES))
    finally:
        server.close()
    print(f"  [{n:,} {side}] first {out['first_cpu_s']:.2f} CPU-s, then "
          f"{out['cpu_s']:.3f} CPU-s per scrape (max {out['cpu_max_s']:.2f}), "
          f"{out['bytes'] / 1e6:.1f} MB", flush=True)
    return out


@contextlib.contextmanager
def exported(commit: str) -> Iterator[Path]:
    """``commit``'s envcheck package in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="envcheck-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "envcheck"],
                                 capture_output=True, check=True, timeout=120).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True, timeout=120)
        yield Path(tmp)


def run_size(n: int, args: argparse.Namespace, baseline: Path, root: Path
             ) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from daemon import catalogue_text  # the daemon bench's catalogue: terminal, hourly

    workdir = root / str(n)
    workdir.mkdir()
    catalogue = workdir / "catalogue.yaml"
    catalogue.write_text(catalogue_text(n), encoding="utf-8")
    out: dict[str, Any] = {}
    for side, series in SIDES:  # each side seeds its own store, with its own code
        code = baseline if side == "baseline" else ROOT
        out[side] = measure(side, code, series, n, catalogue, args, workdir)
    out["same_per_env_series"] = (out["baseline"].pop("per_env_lines")
                                  == out["new"].pop("per_env_lines"))
    out["new, per-suite"].pop("per_env_lines")
    return out


def report(results: dict[int, dict[str, Any]], args: argparse.Namespace) -> None:
    names = [side for side, _ in SIDES]
    print(f"\nCPU-seconds per /metrics scrape (server process, HTTP included); mean of "
          f"{args.rounds} rounds of {args.changes} results + 2 transitions each")
    print(f"{'':28}" + "".join(f"{n:>16}" for n in names) + f"{'target':>18}")
    for n, out in results.items():
        for key, label in (("first_cpu_s", "first scrape"), ("cpu_s", "scrape"),
                           ("cpu_max_s", "scrape, max"), ("wall_s", "scrape wall (s)"),
                           ("bytes", "MB"), ("rss_mb", "server RSS (MB)")):
            cells = []
            for name in names:
                value = out[name][key]
                text = f"{value / 1e6:.1f}" if key == "bytes" else (
                    f"{value:.0f}" if key == "rss_mb" else f"{value:.3f}")
                if key in ("first_cpu_s", "cpu_s") and name != "baseline":
                    text += f" ({value / max(out['baseline'][key], 1e-9):.3f}x)"
                cells.append(f"{text:>16}")
            verdict = ""
            if key == "cpu_s":
                target = TARGETS.get(n)
                if target is not None:
                    worst = max(out[name][key] for name in names[1:])
                    verdict = f"<= {target:g} {'PASS' if worst <= target else 'MISS'}"
            print(f"{f'{n:,} {label}':28}" + "".join(cells) + f"{verdict:>18}")
        print(f"{f'{n:,} same env series':28}{'yes' if out['same_per_env_series'] else 'NO':>16}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:
        return serve(argv[1], Path(argv[2]), argv[3])
    if argv[:1] == ["--seed"]:
        print(f"  seeded: {seed(argv[1], Path(argv[2]))}", flush=True)
        return 0
    if argv[:1] == ["--change"]:
        n, round_, results = int(argv[2]), int(argv[3]), int(argv[4])
        env_ids = [f"bench-{i:05d}" for i in range(n)]  # as catalogue_text names them
        change(argv[1], env_ids, random.Random(n * 1000 + round_), results)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--changes", type=int, default=400)
    parser.add_argument("--baseline-commit", default="56fb801")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    args = parser.parse_args(argv)
    results: dict[int, dict[str, Any]] = {}
    try:
        with (scratch_dir("envcheck-bench-metrics-", args.keep) as root,
              exported(args.baseline_commit) as baseline):
            for n in args.sizes:
                results[n] = run_size(n, args, baseline, root)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    report(results, args)
    if args.json:
        args.json.write_text(json.dumps({
            "host": host(commit=git_head(), baseline=args.baseline_commit), "rounds": args.rounds,
            "changes": args.changes, "results": {str(n): r for n, r in results.items()}},
            indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
