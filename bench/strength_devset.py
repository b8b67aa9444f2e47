"""Benchmark: the wrong-fix controls on a development set of real SWE-bench-style tasks.

    .venv/bin/python bench/strength_devset.py build [--force] [ID ...]
    .venv/bin/python bench/strength_devset.py run [--only ID ...] [--skip-wrong | --only-wrong]
                                                  [--json OUT]

``bench/strength_devset/`` holds the set: ``records.jsonl`` (the public records, as published),
``sources.json`` (per instance: the PyPI release its image is built from, its test command,
its split: ``calibration`` or ``held_out``) and, per instance, ``instances/<id>/``: a
**weakened** test patch (fail-to-pass assertions cut; still a valid task) and hand-written
**wrong fixes** (``wrong/*.diff``, what each is in ``wrong/README.json``) that the weakened
tests accept and the original tests reject.

``build`` downloads the sdists and a wheelhouse from PyPI (cached, gitignored) and builds one
image per instance offline (``bench/strength_devset_build.py``). ``run`` writes a catalogue
into ``bench/out/strength_devset/`` and runs ``envcheck check -p tests`` on each task, one at a
time, with ``strength: {}`` (the defaults) on (a) the original records and (b) the weakened
copies; then (c) verifies every wrong fix through ``envcheck check`` too, as a task whose gold
patch it is: under the weakened test patch it must pass (``ok``), under the original one fail
with ``oracle_does_not_fix`` (``--only-wrong`` runs (c) alone: the wrong fixes checked in
minutes, without the strength controls of (a) and (b)). Reported per instance and in total,
for the calibration split, the held-out split and all: original records called weak (target
0), weakened called weak (target >= 80%), originals not measurable (target <= 1 in 6), seconds
per task; and, per candidate ``min_score`` / ``min_competent``, what the same outcomes would
have been called.

Exit status 0 whatever the numbers; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SET_DIR = ROOT / "bench" / "strength_devset"
OUT = Path(os.environ.get("ENVCHECK_DEVSET_OUT", ROOT / "bench" / "out" / "strength_devset"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from strength_devset_build import build_all, sources, tag  # noqa: E402

CHECK_TIMEOUT_S = 1800
SCORES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
COMPETENT = (1, 2, 3, 4, 5)
SUITE = {"description": "the wrong-fix development set (bench/strength_devset.py)",
         "defaults": {"workdir": "/testbed", "user": "agent", "shell": "/bin/bash",
                      "tools": ["git", "python3"],
                      "limits": {"memory_mb": 1024, "cpus": 1.0, "pids": 256},
                      "timeouts": {"start_s": 30, "shell_s": 5, "exec_s": 120, "probe_s": "30m"},
                      "schedules": {"terminal": "5m", "dependencies": None, "tests": "6h"}}}


def records() -> dict[str, dict[str, Any]]:
    out = {}
    for line in (SET_DIR / "records.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out[rec["instance_id"]] = rec
    return out


def instance_dir(instance_id: str) -> Path:
    return SET_DIR / "instances" / instance_id


def wrong_fixes(instance_id: str) -> dict[str, str]:
    folder = instance_dir(instance_id) / "wrong"
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.diff"))}


def _task(rec: dict[str, Any], suffix: str = "", **changes: Any) -> dict[str, Any]:
    """A record as the catalogue reads it: the instance's image, no base commit (the image's
    repository is the release's tree as one commit: the test patch's files reset to HEAD)."""
    task = {**rec, "image_name": tag(rec["instance_id"]), "base_commit": None, **changes}
    task["instance_id"] = rec["instance_id"] + suffix
    return task


def write_catalogue(ids: list[str], with_wrong: bool) -> tuple[Path, dict[str, list[str]]]:
    """The catalogue of the run, and the environment ids of each part."""
    OUT.mkdir(parents=True, exist_ok=True)
    recs, src = records(), sources()
    parts: dict[str, list[dict[str, Any]]] = {"original": [], "weak": [], "wrong_weak": [],
                                              "wrong_orig": []}
    for iid in ids:
        rec = recs[iid]
        weak = (instance_dir(iid) / "weak.test_patch").read_text(encoding="utf-8")
        parts["original"].append(_task(rec))
        parts["weak"].append(_task(rec, "-weak", test_patch=weak))
        if with_wrong:
            for name, diff in wrong_fixes(iid).items():
                parts["wrong_weak"].append(_task(rec, f"-wrong-{name}-weak", patch=diff,
                                                 test_patch=weak))
                parts["wrong_orig"].append(_task(rec, f"-wrong-{name}-orig", patch=diff))
    commands = {r["repo"]: src["commands"][s["runner"]]["command"]
                for r, s in ((recs[i], src["instances"][i]) for i in ids)}
    reports = {r["repo"]: src["commands"][s["runner"]]["report"]
               for r, s in ((recs[i], src["instances"][i]) for i in ids)}
    datasets = []
    for part, tasks in parts.items():
        if not tasks:
            continue
        path = OUT / f"{part}.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
        entry: dict[str, Any] = {"id": f"devset-{part.replace('_', '-')}", "format": "swebench",
                                 "path": path.name, "suite": "devset", "image_field": "image_name",
                                 "commands": commands, "reports": reports, "reruns": 1,
                                 "timeout_s": "10m"}
        if part in ("original", "weak"):
            entry["strength"] = {}
        datasets.append(entry)
    catalogue = OUT / "devset.yaml"
    catalogue.write_text(yaml.safe_dump({"version": 1, "suites": {"devset": SUITE},
                                         "datasets": datasets}, sort_keys=False),
                         encoding="utf-8")
    return catalogue, {p: [t["instance_id"] for t in ts] for p, ts in parts.items()}


def check(catalogue: Path, env: str) -> tuple[dict[str, Any], float]:
    """``envcheck check -p tests -e ENV --json`` in a store of its own: (result, seconds)."""
    db = OUT / "store.db"
    started = time.monotonic()
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "envcheck"), "check", str(catalogue), "-p", "tests",
         "-e", env, "--json", "--concurrency", "1", "--database", f"sqlite:///{db}"],
        capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, cwd=ROOT, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.monotonic() - started
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            if result.get("probe") == "tests":
                return result, elapsed
    raise RuntimeError(f"no tests result for {env} (exit {proc.returncode}): "
                       f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def strength_row(result: dict[str, Any], seconds: float) -> dict[str, Any]:
    info = result["details"].get("strength", {})
    counts = info.get("counts", {})
    return {"status": result["status"], "reason": result["reason"], "seconds": round(seconds, 1),
            "score": info.get("score"), "new_case_score": info.get("new_case_score"),
            "killed": counts.get("killed", 0)
            + counts.get("killed_p2p", 0), "confirmed": counts.get("confirmed", 0),
            "not_distinguished": counts.get("not_distinguished", 0),
            "uncovered_hunk": counts.get("uncovered_hunk", 0),
            "unclassified": counts.get("unclassified", 0),
            "incompetent": counts.get("incompetent", 0),
            "generated": info.get("generated", {}).get("mutants"),
            "survivors": [f"{s['operator']}: {s.get('description', '')}"
                          for s in info.get("survivors", [])],
            "apart": [f"{s['operator']}: {s.get('description', '')} ({s.get('class', '')})"
                      for s in info.get("survivors_apart", [])],
            "summary": result["summary"][:400]}


def verdict(row: dict[str, Any], min_score: float, min_competent: int) -> str:
    """What the counts would be called under other thresholds: weak, ok or not_measurable."""
    told = row["killed"] + row["confirmed"]
    if told < min_competent:
        return "not_measurable"
    new_case = row.get("new_case_score")  # the new case's own score counts as well
    return "weak" if row["killed"] / told < min_score or (
        new_case is not None and new_case < min_score) else "ok"


def summarise(rows: dict[str, dict[str, Any]], split: dict[str, str]) -> dict[str, Any]:
    groups = {"calibration": [i for i in rows if split[i] == "calibration"],
              "held_out": [i for i in rows if split[i] == "held_out"], "all": list(rows)}
    out: dict[str, Any] = {}
    for name, ids in groups.items():
        if not ids:
            continue
        orig = [rows[i]["original"] for i in ids]
        weak = [rows[i]["weak"] for i in ids]
        secs = [r["seconds"] for r in orig + weak]
        out[name] = {
            "instances": len(ids),
            "original_weak": sum(r["reason"] == "weak_verifier" for r in orig),
            "weakened_weak": sum(r["reason"] == "weak_verifier" for r in weak),
            "original_not_measurable": sum(r["reason"] == "strength_not_measurable"
                                           for r in orig),
            "weakened_not_measurable": sum(r["reason"] == "strength_not_measurable"
                                           for r in weak),
            "seconds_per_task": round(sum(secs) / len(secs), 1),
            "thresholds": {f"{s}/{c}": {
                "original_weak": sum(verdict(r, s, c) == "weak" for r in orig),
                "weakened_weak": sum(verdict(r, s, c) == "weak" for r in weak),
                "original_not_measurable": sum(verdict(r, s, c) == "not_measurable"
                                               for r in orig)}
                for s in SCORES for c in COMPETENT}}
    return out


def run(ids: list[str], with_wrong: bool, only_wrong: bool = False) -> dict[str, Any]:
    """(a) and (b) for each instance, then (c) if ``with_wrong``; (c) alone if ``only_wrong``."""
    catalogue, parts = write_catalogue(ids, with_wrong or only_wrong)
    for name in ("store.db", "store.db-wal", "store.db-shm"):  # a killed run leaves its WAL
        (OUT / name).unlink(missing_ok=True)
    split = {i: sources()["instances"][i]["split"] for i in ids}
    rows: dict[str, dict[str, Any]] = {i: {"split": split[i]} for i in ids}
    for part in () if only_wrong else ("original", "weak"):
        for env, iid in zip(parts[part], ids, strict=True):
            result, seconds = check(catalogue, env)
            rows[iid][part] = strength_row(result, seconds)
            r = rows[iid][part]
            print(f"{env:40} {r['status']}/{r['reason']:24} score {r['score']} "
                  f"(killed {r['killed']}, confirmed {r['confirmed']}, apart "
                  f"{r['not_distinguished']}+{r.get('uncovered_hunk', 0)}+{r['unclassified']}, "
                  f"of {r['generated']}) "
                  f"{r['seconds']} s", flush=True)
    if with_wrong or only_wrong:
        for part, expect in (("wrong_weak", ("pass", "ok")),
                             ("wrong_orig", ("fail", "oracle_does_not_fix"))):
            for env in parts[part]:
                result, _ = check(catalogue, env)
                iid = next(i for i in ids if env.startswith(i + "-wrong-"))
                got = (result["status"], result["reason"])
                rows[iid].setdefault("wrong", {})[env] = {"expected": list(expect),
                                                          "got": list(got),
                                                          "verified": got == expect}
                print(f"{env:60} {got[0]}/{got[1]} "
                      f"{'as expected' if got == expect else 'NOT AS EXPECTED'}", flush=True)
    return {"rows": rows, "summary": summarise(
        {i: r for i, r in rows.items() if "original" in r and "weak" in r}, split)}


def markdown(report: dict[str, Any]) -> str:
    """The per-instance table and the totals, as bench/README.md shows them."""
    lines = ["| instance | split | original: verdict, score (killed/confirmed, apart) | "
             "weakened: verdict, score (killed/confirmed, apart) | s/task | wrong fixes "
             "verified |", "|---|---|---|---|---|---|"]
    for iid, row in report["rows"].items():
        if not all(part in row for part in ("original", "weak")) and not row.get("wrong"):
            continue
        cells = []
        for part in ("original", "weak"):
            r = row.get(part)
            cells.append("not run" if r is None else
                         f"{r['reason']}, {r['score']} ({r['killed']}/{r['confirmed']}, "
                         f"{r['not_distinguished']}+{r.get('uncovered_hunk', 0)}+"
                         f"{r['unclassified']})" + ("" if r.get("new_case_score") is None
                                                    else f", new case {r['new_case_score']}"))
        wrong = row.get("wrong", {})
        ok = sum(w["verified"] for w in wrong.values())
        secs = ("-" if "original" not in row or "weak" not in row else
                f"{(row['original']['seconds'] + row['weak']['seconds']) / 2:.0f}")
        lines.append(f"| {iid} | {row['split']} | {cells[0]} | {cells[1]} | {secs} | "
                     f"{ok} of {len(wrong)} runs |")
    lines += ["", "| split | instances | originals called weak | weakened called weak | "
              "originals not measurable | s/task |", "|---|---|---|---|---|---|"]
    for name, t in report["summary"].items():
        lines.append(f"| {name} | {t['instances']} | {t['original_weak']} | "
                     f"{t['weakened_weak']} of {t['instances']} | "
                     f"{t['original_not_measurable']} | {t['seconds_per_task']} |")
    lines += ["", "| min_score / min_competent | originals weak | weakened weak | originals "
              "not measurable |", "|---|---|---|---|"]
    every = report["summary"].get("all", {}).get("thresholds", {})
    for key, t in every.items():
        lines.append(f"| {key} | {t['original_weak']} | {t['weakened_weak']} | "
                     f"{t['original_not_measurable']} |")
    return "\n".join(lines)


def rows_from_store(db: Path) -> dict[str, Any]:
    """The rows of a run read back from its store (``store.db``): what a run cut short, or
    still going, has recorded so far (a task's seconds: its probe's duration)."""
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        found = {env: (status, reason, summary, seconds, json.loads(details or "{}"))
                 for env, status, reason, summary, seconds, details in con.execute(
                     "select env_id, status, reason, summary, duration_s, details "
                     "from probe_result where kind = 'tests' order by started_at")}
    ids = list(sources()["instances"])
    rows: dict[str, Any] = {}
    for env, (status, reason, summary, seconds, details) in found.items():
        result = {"status": status, "reason": reason, "summary": summary,
                  "details": details}
        base = next((i for i in ids if env == i or env.startswith(i + "-")), None)
        if base is None:
            continue
        row = rows.setdefault(base, {"split": sources()["instances"][base]["split"]})
        if env == base:
            row["original"] = strength_row(result, seconds)
        elif env == base + "-weak":
            row["weak"] = strength_row(result, seconds)
        else:
            expect = ("pass", "ok") if env.endswith("-weak") else ("fail", "oracle_does_not_fix")
            row.setdefault("wrong", {})[env] = {"expected": list(expect),
                                                "got": [status, reason],
                                                "verified": (status, reason) == expect}
    return rows


def merged(paths: list[Path]) -> dict[str, Any]:
    """The rows of several results files and stores, an instance's parts merged (a run of
    (a)/(b) and a run of (c) alone make one row)."""
    rows: dict[str, Any] = {}
    for path in paths:
        found = (rows_from_store(path) if path.suffix == ".db"
                 else json.loads(path.read_text(encoding="utf-8"))["rows"])
        for iid, row in found.items():
            old = rows.setdefault(iid, {})
            wrong = {**old.get("wrong", {}), **row.get("wrong", {})}
            old.update(row)
            if wrong:
                old["wrong"] = wrong
    split = {i: r["split"] for i, r in rows.items()}
    return {"rows": rows, "summary": summarise(
        {i: r for i, r in rows.items() if "original" in r and "weak" in r}, split)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--force", action="store_true")
    b.add_argument("ids", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("--only", nargs="*", default=None)
    which = r.add_mutually_exclusive_group()
    which.add_argument("--skip-wrong", action="store_true", help="(a) and (b) only")
    which.add_argument("--only-wrong", action="store_true",
                       help="(c) only: each wrong fix under the weakened and the original test")
    r.add_argument("--json", type=Path, default=OUT / "results.json")
    m = sub.add_parser("report", help="merge results files and print the README's tables")
    m.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    try:
        if args.cmd == "build":
            build_all(args.ids or None, force=args.force)
            return 0
        if args.cmd == "report":
            print(markdown(merged(args.files)))
            return 0
        ids = args.only or list(sources()["instances"])
        report = run(ids, with_wrong=not args.skip_wrong, only_wrong=args.only_wrong)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(json.dumps(report["summary"], indent=1))
        return 0
    except Exception as exc:  # the benchmark itself broke
        print(f"strength_devset: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
