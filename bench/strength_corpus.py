"""Benchmark: the verifier-strength generator over real fix commits of public Python projects.

    .venv/bin/python bench/strength_corpus.py GITDIR [GITDIR ...] [--commits 60] [--cap 24]
                                              [--max-added 100] [--json OUT]

Each GITDIR is a git directory (a clone's ``.git``, or a bare or mirrored repository: no work
tree is read). From each, the ``--commits`` most recent non-merge commits whose message says
fix or bug, that have a parent and add 1 to ``--max-added`` lines to non-test ``.py`` files.
Each commit stands for a task's gold patch: its diff against the parent, test files and binary
files left out (as SWE-bench's gold patches leave the tests to the test patch), and each
changed file's text at the commit as the post-image the probe reads from its container. The
commit's changes to test ``.py`` files are its test patch (as SWE-bench builds one), whose
literals the ``tested_input_only`` operator takes; a commit that changes no test file has
none, so no mutant of that operator (``--no-test-patch``: none for any task).

For each: the mutants at the probe's cap (``--cap``, seeded by the commit, timed), then every
mutant (no cap, timed), each of which is checked with ``git apply --cached --check`` against
the parent's tree in a scratch index, and the partial patches, checked the same way. Reported:
mutants per task; per operator the candidates tried, dropped by the static filters (not
compiling; the same program as the gold post-image or as another mutant; the base itself),
emitted, and those that do not apply; the **incompetent share**, (not compiling + not applying)
over (not compiling + emitted), whose target is under 10%; generation time per task.

No Docker needed. Exit 0 whatever the numbers; 1 if the benchmark itself broke (a git
directory that is not one, say).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import ROOT, git_head, host, median, percentile

sys.path.insert(0, str(ROOT))

from envcheck.kinds.strength import (
    DEFAULT_CAP,
    Rejection,
    partial_patches,
    patch_mutants,
)
from envcheck.kinds.strength.diffs import parse_patch
from envcheck.kinds.strength.model import PYTHON_OPERATORS, Operator
from envcheck.kinds.strength.paths import is_test_path
from envcheck.kinds.strength.placing import preimage

GIT_TIMEOUT = 120
EQUIVALENT = (Rejection.SAME_AS_ORIGINAL, Rejection.DUPLICATE, Rejection.SAME_AS_BASE)


class Git:
    def __init__(self, gitdir: Path, index: Path) -> None:
        self.gitdir = gitdir
        self.env = {**os.environ, "GIT_INDEX_FILE": str(index), "GIT_CONFIG_GLOBAL": "/dev/null"}

    def __call__(self, *args: str, stdin: bytes | None = None, check: bool = True
                 ) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run(["git", f"--git-dir={self.gitdir}", *args], input=stdin,
                              capture_output=True, timeout=GIT_TIMEOUT, env=self.env,
                              check=False)
        if check and done.returncode:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.decode()[:300]}")
        return done

    def text(self, *args: str) -> str:
        return self(*args).stdout.decode("utf-8", errors="surrogateescape")

    def applies(self, patch: str) -> bool:
        return self("apply", "--cached", "--check", "-", stdin=patch.encode(
            "utf-8", errors="surrogateescape"), check=False).returncode == 0


def gold_files(git: Git, sha: str, max_added: int) -> list[str] | None:
    """The text files the commit changes, tests left out, if it adds 1 to ``max_added``
    lines to non-test Python files; else None."""
    files, added = [], 0
    for row in git.text("diff", "--numstat", "--no-renames", f"{sha}^", sha).splitlines():
        plus, _, path = row.split("\t", 2)
        if plus == "-" or is_test_path(path):
            continue  # binary, or a test
        files.append(path)
        added += int(plus) if path.endswith(".py") else 0
    return files if 1 <= added <= max_added else None


def test_patch(git: Git, sha: str) -> str | None:
    """The commit's changes to test ``.py`` files, as a test patch; None if it has none."""
    paths = [row.split("\t", 2)[2] for row in git.text(
        "diff", "--numstat", "--no-renames", f"{sha}^", sha).splitlines()
        if row.split("\t", 2)[2].endswith(".py") and is_test_path(row.split("\t", 2)[2])]
    if not paths:
        return None
    return git.text("diff", "--no-renames", "--no-color", "--no-ext-diff", f"{sha}^", sha,
                    "--", *paths) or None


def fix_commits(git: Git, count: int, max_added: int) -> tuple[list[tuple[str, list[str]]], int]:
    """Up to ``count`` (commit, files) pairs, newest first; and how many commits were read."""
    found, read = [], 0
    log = git.text("log", "--no-merges", "-i", "--grep=fix", "--grep=bug", "--format=%H %P",
                   "HEAD")
    for line in log.splitlines():
        sha, *parents = line.split()
        read += 1
        if len(parents) != 1:
            continue
        files = gold_files(git, sha, max_added)
        if files:
            found.append((sha, files))
        if len(found) >= count:
            break
    return found, read


def measure(git: Git, sha: str, files: list[str], cap: int, tests: bool = True
            ) -> dict[str, Any]:
    gold = git.text("diff", "--no-renames", "--no-color", "--no-ext-diff", f"{sha}^", sha,
                    "--", *files)
    patch = parse_patch(gold)
    posts = {fp.new_path: git.text("show", f"{sha}:{fp.new_path}") for fp in patch.files
             if fp.new_path is not None and fp.new_path.endswith(".py")}
    mismatched = sum(1 for fp in patch.files if fp.old_path and fp.new_path in posts
                     and preimage(fp, posts[fp.new_path]) != git.text(
                         "show", f"{sha}^:{fp.old_path}"))
    tested = test_patch(git, sha) if tests else None
    started = time.perf_counter()
    capped = patch_mutants(gold, posts, sha, cap=cap, test_patch=tested)
    capped_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    full = patch_mutants(gold, posts, sha, cap=None, test_patch=tested)
    full_ms = (time.perf_counter() - started) * 1000
    partials = partial_patches(gold, sha, post_images=posts)
    git("read-tree", f"{sha}^")
    unapplied = Counter(str(m.operator) for m in full.mutants if not git.applies(m.patch))
    corrupted = _corrupted(gold)
    return {
        "sha": sha, "files": len(files),
        "added": sum(len(fp.added_lines()) for fp in patch.files
                     if fp.path.endswith(".py") and fp.path in posts),
        "skipped": [s.why.split(":")[0] for s in full.skipped],
        "preimage_mismatches": mismatched,
        "capped": len(capped.mutants), "capped_ms": capped_ms,
        "mutants": len(full.mutants), "full_ms": full_ms,
        "sites": {str(k): v for k, v in full.sites.items()},
        "tried": {str(k): v for k, v in full.tried.items()},
        "rejected": {f"{op}|{why.name}": n for (op, why), n in full.rejected.items()},
        "unapplied": dict(unapplied),
        "emitted": dict(Counter(str(m.operator) for m in full.mutants)),
        "test_patch": tested is not None, "notes": list(full.notes),
        "capped_tested": sum(m.operator is Operator.TESTED_INPUT_ONLY for m in capped.mutants),
        "partials": len(partials),
        "partials_unapplied": sum(not git.applies(p.patch) for p in partials),
        # the check itself checked: the gold applies, a gold with one context line changed not
        "gold_applies": git.applies(gold),
        "corrupted_refused": None if corrupted is None else not git.applies(corrupted),
    }


def _corrupted(gold: str) -> str | None:
    """``gold`` with the first line its first hunk expects changed, or None if that hunk
    expects none (a new file)."""
    lines = gold.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    if not lines[first + 1].startswith((" ", "-")):
        return None
    lines[first + 1] += " (changed)"
    return "\n".join(lines)


def operator_table(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for op in [*PYTHON_OPERATORS, None]:
        names = [str(op)] if op is not None else [str(o) for o in PYTHON_OPERATORS]
        def total(field: str, names: list[str] = names) -> int:
            return sum(t[field].get(n, 0) for t in tasks for n in names)
        def dropped(why: Rejection, names: list[str] = names) -> int:
            return sum(t["rejected"].get(f"{n}|{why.name}", 0) for t in tasks for n in names)
        not_compiling = dropped(Rejection.NOT_COMPILING)
        emitted, unapplied = total("emitted"), total("unapplied")
        competent_or_not = not_compiling + emitted
        rows.append({
            "operator": str(op) if op else "ALL", "sites": total("sites"),
            "tried": total("tried"), "equivalent": dropped(Rejection.SAME_AS_ORIGINAL),
            "duplicate": dropped(Rejection.DUPLICATE), "base": dropped(Rejection.SAME_AS_BASE),
            "not_compiling": not_compiling, "emitted": emitted, "unapplied": unapplied,
            "incompetent": (not_compiling + unapplied) / competent_or_not
            if competent_or_not else float("nan")})
    return rows


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"median {median(values):.0f}, q3 {percentile(values, 0.75):.0f}, "
            f"p90 {percentile(values, 0.9):.0f}, max {max(values):.0f}")


def report(repos: dict[str, dict[str, Any]], cap: int) -> None:
    tasks = [t for r in repos.values() for t in r["tasks"]]
    print(f"{'repository':34} {'read':>6} {'tasks':>6} {'with':>5} {'not py3':>8}")
    for name, r in repos.items():
        with_mutants = sum(t["mutants"] > 0 for t in r["tasks"])
        not_py3 = sum(s == "not Python 3" for t in r["tasks"] for s in t["skipped"])
        print(f"{name:34} {r['read']:>6} {len(r['tasks']):>6} {with_mutants:>5} {not_py3:>8}")
    if not tasks:
        print("no task found")
        return
    print(f"\n{len(tasks)} tasks; added Python lines: {spread([t['added'] for t in tasks])}")
    print(f"mutants per task at cap {cap}: {spread([t['capped'] for t in tasks])}; "
          f"zero {sum(t['capped'] == 0 for t in tasks) / len(tasks):.0%}; "
          f"capped {sum(t['mutants'] > cap for t in tasks)}")
    print(f"mutants per task, no cap: {spread([t['mutants'] for t in tasks])}")
    with_tests = [t for t in tasks if t.get("test_patch")]
    special = str(Operator.TESTED_INPUT_ONLY)

    def noted(words: str) -> int:
        return sum(any(words in n for n in t.get("notes", ())) for t in tasks)

    print(f"tasks with a test patch: {len(with_tests)} of {len(tasks)}; with a "
          f"{special} mutant: {sum(t['emitted'].get(special, 0) > 0 for t in tasks)} (in the "
          f"capped sample: {sum(t.get('capped_tested', 0) > 0 for t in tasks)}); none for want "
          f"of a test patch: {noted('no test patch')}, of a literal in it: {noted('hold no')}")
    print(f"partial patches per task: {spread([t['partials'] for t in tasks])}; "
          f"not applying {sum(t['partials_unapplied'] for t in tasks)} of "
          f"{sum(t['partials'] for t in tasks)}")
    print(f"post-images whose rebuilt base differs from the parent's file: "
          f"{sum(t['preimage_mismatches'] for t in tasks)}")
    controls = [t["corrupted_refused"] for t in tasks if t["corrupted_refused"] is not None]
    print(f"the apply check checked: the gold applies in {sum(t['gold_applies'] for t in tasks)}"
          f" of {len(tasks)}, a gold with one context line changed is refused in "
          f"{sum(controls)} of {len(controls)}")
    print(f"generation ms per task at cap {cap}: {spread([t['capped_ms'] for t in tasks])}")
    print(f"generation ms per task, no cap: {spread([t['full_ms'] for t in tasks])}\n")
    print(f"{'operator':18} {'sites':>6} {'tried':>6} {'equiv':>6} {'dup':>5} {'base':>5} "
          f"{'no-cmp':>6} {'emit':>6} {'no-apl':>6} {'incompetent':>11}")
    for row in operator_table(tasks):
        print(f"{row['operator']:18} {row['sites']:>6} {row['tried']:>6} {row['equivalent']:>6} "
              f"{row['duplicate']:>5} {row['base']:>5} {row['not_compiling']:>6} "
              f"{row['emitted']:>6} {row['unapplied']:>6} {row['incompetent']:>10.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("gitdirs", nargs="+", type=Path)
    parser.add_argument("--commits", type=int, default=60, help="fix commits per repository")
    parser.add_argument("--cap", type=int, default=DEFAULT_CAP)
    parser.add_argument("--max-added", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-test-patch", action="store_true",
                        help="no test patch for any task (no tested_input_only mutant)")
    args = parser.parse_args(argv)
    repos: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="strength-bench-") as scratch:
        for gitdir in args.gitdirs:
            git = Git(gitdir, Path(scratch) / "index")
            name = gitdir.parent.name if gitdir.name in ("repo", ".git") else gitdir.name
            try:
                commits, read = fix_commits(git, args.commits, args.max_added)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"strength_corpus: {gitdir}: {exc}", file=sys.stderr)
                return 1
            tasks = [measure(git, sha, files, args.cap, not args.no_test_patch)
                     for sha, files in commits]
            head = git.text("rev-parse", "HEAD").strip()
            repos[name] = {"read": read, "head": head, "tasks": tasks}
            print(f"{name}: {len(tasks)} tasks from {read} commits (HEAD {head[:12]})",
                  file=sys.stderr)
    report(repos, args.cap)
    if args.json:
        every = [t for r in repos.values() for t in r["tasks"]]
        args.json.write_text(json.dumps({
            "host": host(commit=git_head()), "cap": args.cap, "max_added": args.max_added,
            "repos": repos, "operators": operator_table(every)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
