"""Benchmark: a 10,000-environment catalogue loaded, and the daemon started and reloaded with it,
side by side with a baseline checkout (by default main at 56fb801, before the fast reader).

    .venv/bin/python bench/catalogue.py [--envs 10000] [--rounds 3] [--no-daemon]
                                        [--baseline REV] [--json OUT]

The catalogue is generated: ``--envs`` environments in 8 suites with defaults, a quarter each
terminal-only, with ``dependencies``, with ``tests`` (fail-to-pass and pass-to-pass ids, an
oracle) and with data sources, each with its own labels (~4 MB at 10,000), like
``probes/demo*.yaml``. The baseline is exported from git (``git archive``) into a temporary
folder; each side runs with ``PYTHONPATH`` pointing at its own tree.

1. **Load** (no engine needed): ``load_catalogue`` in a fresh process per measurement, rounds
   alternating the two sides: the call's wall time and RSS (peak minus the RSS before it,
   and the process' peak), then, in another fresh process, the tracemalloc peak. Also the
   same catalogue with one unknown key in its last environment: the time to the error, and
   the messages, which must be the same on both sides, as must the models loaded (a digest
   of every model's JSON). Targets: at most 2 s and 150 MB (the process' peak RSS).
2. **Daemon** (needs the engine): per side a real ``envcheck daemon`` on its own SQLite store,
   seeded (bench/daemon.py's ``seed``: a recent passing result per declared kind, a healthy
   state) so no probe is due; spawn to ready (``/readyz`` and the start-up assessment
   logged), then SIGHUP with the catalogue unchanged and with 1% of its environments on a new
   image, each reload's seconds as the daemon logs them. Targets: ready in 3 s, a reload in
   1 s.

Exit 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    KINDS,
    ROOT,
    SUITES,
    fleet_text,
    git_head,
    host,
    median,
    proc_stat,
    rss_mb,
    running,
)

LOAD_TARGET_S = 2.0
MEMORY_TARGET_MB = 150.0
READY_TARGET_S = 3.0
RELOAD_TARGET_S = 1.0
BASELINE = "56fb801"
# --- the baseline -----------------------------------------------------------------------------


def export(rev: str, into: Path) -> Path:
    """``rev`` of this repository as a plain folder (its ``envcheck`` package importable)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True, timeout=120)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True,
                   timeout=120)
    return into


# --- load, in a fresh process -----------------------------------------------------------------

MEASURE = r"""
import hashlib, json, sys, time
mode, path = sys.argv[1], sys.argv[2]

def status(key):
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0

from envcheck.catalogue.loader import load_catalogue
from envcheck.core.errors import CatalogueError

if mode == "trace":
    import tracemalloc
    tracemalloc.start()
before = status("VmRSS")
started, cpu = time.perf_counter(), time.process_time()
try:
    catalogue, issues = load_catalogue([path]), None
except CatalogueError as exc:
    catalogue, issues = None, [str(i) for i in exc.issues]
out = {"seconds": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
       "rss_before_mb": before, "rss_peak_mb": status("VmHWM")}
out["rss_delta_mb"] = out["rss_peak_mb"] - before
if mode == "trace":
    out["traced_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
elif catalogue is not None:
    digest = hashlib.sha256()
    for model in (*catalogue.suites, *catalogue.environments, *catalogue.data_sources):
        digest.update(model.model_dump_json().encode())
    out["digest"], out["environments"] = digest.hexdigest(), len(catalogue.environments)
else:
    out["issues"] = issues
print(json.dumps(out))
"""


def measure(tree: Path, mode: str, path: Path, workdir: Path) -> dict[str, Any]:
    """One load in a fresh interpreter importing ``tree``'s envcheck (run from ``workdir``,
    so that no checkout on the current directory shadows it)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", MEASURE, mode, str(path)], cwd=workdir,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"loading with {tree} failed: {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def load_side_by_side(sides: dict[str, Path], good: Path, bad: Path, rounds: int,
                      workdir: Path) -> dict[str, dict[str, Any]]:
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    traced: dict[str, list[float]] = {name: [] for name in sides}
    errors: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for r in range(rounds):
        for name, tree in sides.items():  # alternating: drift hits both alike
            samples[name].append(measure(tree, "time", good, workdir))
            traced[name].append(measure(tree, "trace", good, workdir)["traced_peak_mb"])
            errors[name].append(measure(tree, "time", bad, workdir))
            print(f"[load] round {r + 1}/{rounds} {name}: "
                  f"{samples[name][-1]['seconds']:.2f} s, "
                  f"peak RSS {samples[name][-1]['rss_peak_mb']:.0f} MB", flush=True)
    out: dict[str, dict[str, Any]] = {}
    for name in sides:
        ok, bad_runs = samples[name], errors[name]
        if any("digest" not in s for s in ok) or any(not s.get("issues") for s in bad_runs):
            raise RuntimeError(f"{name}: the catalogue did not load, or the bad one did: "
                               f"{ok[0].get('issues')}")
        out[name] = {
            "load_s": median(s["seconds"] for s in ok),
            "load_cpu_s": median(s["cpu_s"] for s in ok),
            "rss_peak_mb": median(s["rss_peak_mb"] for s in ok),
            "rss_delta_mb": median(s["rss_delta_mb"] for s in ok),
            "traced_peak_mb": median(traced[name]),
            "error_s": median(s["seconds"] for s in bad_runs),
            "environments": ok[0].get("environments"),
            "digests": sorted({s.get("digest") for s in ok}),
            "issues": bad_runs[0].get("issues"),
            "samples": ok, "error_samples": bad_runs, "traced_samples": traced[name],
        }
    return out


# --- the daemon -------------------------------------------------------------------------------


SEED = (f"import pathlib, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); "
        "from daemon import seed; seed(sys.argv[1], pathlib.Path(sys.argv[2]))")


def daemon_side(name: str, tree: Path, n: int, root: Path) -> dict[str, Any]:
    workdir = root / f"daemon-{name}"
    (workdir / "data").mkdir(parents=True)
    catalogue = workdir / "catalogue.yaml"
    catalogue.write_text(fleet_text(n), encoding="utf-8")
    # seeded by the side's own code: its store must be at the side's schema revision
    subprocess.run([sys.executable, "-c", SEED, f"sqlite:///{workdir / 'data' / 'envcheck.db'}",
                    str(catalogue)], env={**os.environ, "PYTHONPATH": str(tree)}, cwd=workdir,
                   check=True, timeout=600)
    out: dict[str, Any] = {}
    with running(workdir, catalogue, 2, {"PYTHONPATH": str(tree)}) as d:
        out["ready_s"] = round(d.wait_for("readiness", d.ready, 600), 2)
        out["ready_cpu_s"], _ = proc_stat(d.proc.pid)
        out["rss_ready_mb"], _ = rss_mb(d.proc.pid)
        for key, text in (("reload_same", fleet_text(n)),
                          ("reload_changed", fleet_text(n, changed_every=100))):
            catalogue.write_text(text, encoding="utf-8")
            reloads = d.count("catalogue reloaded")
            cpu, _ = proc_stat(d.proc.pid)
            d.proc.send_signal(signal.SIGHUP)
            d.wait_for("the reload", lambda r=reloads: d.count("catalogue reloaded") > r, 600)
            out[f"{key}_cpu_s"] = proc_stat(d.proc.pid)[0] - cpu
            out[f"{key}_s"] = [e for e in d.events() if e.get("event") == "catalogue reloaded"][
                -1]["seconds"]
        out["probes_run"] = d.count("probe result")
        out["exit"] = d.stop()
    print(f"[daemon] {name}: ready in {out['ready_s']} s, reloads {out['reload_same_s']} s "
          f"(unchanged) and {out['reload_changed_s']} s (1% changed)", flush=True)
    return out


# --- report -----------------------------------------------------------------------------------

ROWS = [
    ("load_s", "load (s)", "{:.2f}", LOAD_TARGET_S),
    ("load_cpu_s", "  its CPU time (s)", "{:.2f}", None),
    ("rss_peak_mb", "process peak RSS (MB)", "{:.0f}", MEMORY_TARGET_MB),
    ("rss_delta_mb", "RSS added by the load (MB)", "{:.0f}", None),
    ("traced_peak_mb", "tracemalloc peak (MB)", "{:.0f}", None),
    ("error_s", "load to one error (s)", "{:.2f}", None),
    ("ready_s", "daemon spawn to ready (s)", "{:.2f}", READY_TARGET_S),
    ("ready_cpu_s", "  its CPU time (s)", "{:.2f}", None),
    ("rss_ready_mb", "daemon RSS when ready (MB)", "{:.0f}", None),
    ("reload_same_s", "SIGHUP reload, same (s)", "{:.3f}", RELOAD_TARGET_S),
    ("reload_same_cpu_s", "  its CPU time (s)", "{:.3f}", None),
    ("reload_changed_s", "SIGHUP reload, 1% new (s)", "{:.3f}", RELOAD_TARGET_S),
    ("reload_changed_cpu_s", "  its CPU time (s)", "{:.3f}", None),
]


def report(results: dict[str, dict[str, Any]], baseline: str) -> None:
    base, new = results[baseline], results["this tree"]
    print(f"\n{'':30}{baseline:>14}{'this tree':>12}{'ratio':>8}{'target':>16}")
    for key, label, fmt, target in ROWS:
        if key not in new or key not in base:
            continue
        b, n = base[key], new[key]
        ratio = f"{n / b:.2f}x" if b else "-"
        verdict = f"<= {target:g} {'PASS' if n <= target else 'MISS'}" if target else ""
        print(f"{label:30}{fmt.format(b):>14}{fmt.format(n):>12}{ratio:>8}{verdict:>16}")
    same_models = base["digests"] == new["digests"] and len(new["digests"]) == 1
    print(f"\nsame models on both sides: {'yes' if same_models else 'NO'}; "
          f"same error messages: {'yes' if base['issues'] == new['issues'] else 'NO'}")
    for line in new["issues"] or []:
        print(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--envs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=BASELINE, help="the git revision to compare with")
    parser.add_argument("--no-daemon", action="store_true", help="the load only (no engine)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="envcheck-bench-catalogue-") as tmp:
        root = Path(tmp)
        sides = {args.baseline: export(args.baseline, root / "baseline"), "this tree": ROOT}
        good, bad = root / "fleet.yaml", root / "fleet-bad.yaml"
        good.write_text(fleet_text(args.envs), encoding="utf-8")
        bad.write_text(fleet_text(args.envs, bad_last=True), encoding="utf-8")
        size_mb = good.stat().st_size / 2**20
        print(f"catalogue: {args.envs} environments in {SUITES} suites "
              f"({', '.join(KINDS)}), {size_mb:.1f} MB", flush=True)
        try:
            results = load_side_by_side(sides, good, bad, args.rounds, root)
            if not args.no_daemon:
                for name, tree in sides.items():
                    results[name].update(daemon_side(name, tree, args.envs, root))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"benchmark failed: {exc}", file=sys.stderr)
            return 1
    report(results, args.baseline)
    if args.json:
        args.json.write_text(json.dumps({
            "host": host(platform=platform.platform(), commit=git_head()),
            "environments": args.envs, "catalogue_mb": round(size_mb, 2),
            "baseline": args.baseline, "results": results,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
