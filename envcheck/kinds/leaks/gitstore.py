"""The git check: the answer in the repository's object store, or in commits after its base.

In the sandbox, as the sandbox user, in the workdir's repository (the agent's view):

1. **Commits after the base commit** (``base_commit``, else HEAD): every commit reachable
   from a ref, a reflog or a stash that descends from it (``git rev-list --all --reflog
   --ancestry-path ^BASE``), the first few listed with their subject and the refs holding
   them. Commits on other lines of history (not descending from it) are counted, not flagged:
   a stable branch is the repository's; its content is caught below if it holds the answer.
2. **The files the gold patch (and the test patch) leave**, rebuilt from the base commit's
   files in a temporary folder outside any repository (``git cat-file blob``, ``git apply``
   there, else ``patch --fuzz=5`` as the harness falls back to), hashed as git hashes blobs
   (``git hash-object`` without ``-w``: the check never writes the object it looks for), then
   looked up: in the base commit's tree (the answer's file was already there: an empty
   ``__init__.py``, not a leak), else ``git cat-file -e`` (loose or packed, reachable or not).
   A file found is then looked for in the base commit's history (``git rev-list --objects``,
   bounded): a fix that restores an old version of a file is the repository's history, not a
   leak.

The files' SHA-256 and sizes come back too: the files check looks for them anywhere in the
image.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files as resources

from envcheck.catalogue.probe_specs import TestSpec
from envcheck.core.results import Reason
from envcheck.kinds.leaks.diffs import file_changes
from envcheck.kinds.leaks.files import Group, Target
from envcheck.kinds.leaks.verdict import Checked, Finding
from envcheck.kinds.testvalidity.runs import Patch

__all__ = ["COMMITS_LISTED", "SCRIPT", "GitReport", "git_inputs", "git_script", "read_git"]

COMMITS_LISTED = 10
MARK = "envcheck:leaks:"
# The script's groups: what the patch is, whose files it leaves, what finding them means.
_GROUPS: dict[str, tuple[str, Group, Reason]] = {
    "gold": ("gold patch", "solution", Reason.SOLUTION_LEAKED),
    "tests": ("test patch", "tests", Reason.TESTS_IN_IMAGE)}

SCRIPT = resources(__package__).joinpath("git.sh").read_text(encoding="utf-8")


def _naming(group: str) -> Callable[[str], str]:
    """The shell step after a patch's delivery: its path in the script's variable."""
    return lambda path: f"{group}={shlex.quote(path)}"


def git_inputs(spec: TestSpec) -> tuple[list[Patch], dict[str, str]]:
    """The patches to deliver (the gold patch, the test patch) and the script's variables:
    the paths each reads at the base commit and the paths it leaves."""
    patches: list[Patch] = []
    variables = {"ENVCHECK_BASE": spec.base_commit or "", "ENVCHECK_LIST": str(COMMITS_LISTED)}
    texts = {"gold": spec.oracle.patch if spec.oracle is not None else None,
             "tests": spec.test_patch}
    for group, text in texts.items():
        if text is None:
            continue
        changes = file_changes(text)
        variables[f"ENVCHECK_{group.upper()}_READS"] = "\n".join(c.old for c in changes if c.old)
        variables[f"ENVCHECK_{group.upper()}_LEAVES"] = "\n".join(c.new for c in changes
                                                                  if c.new)
        what, _, _ = _GROUPS[group]
        patches.append(Patch(what, text, f"leaks-{group}", _naming(group),
                             Reason.GOLD_PATCH_DOES_NOT_APPLY if group == "gold"
                             else Reason.TEST_PATCH_DOES_NOT_APPLY))
    return patches, variables


def git_script(deliveries: str) -> str:
    """The script, after the shell steps that write the patches and name them."""
    return f"gold=; tests=\n{deliveries}\n{SCRIPT}"


@dataclass(frozen=True, slots=True)
class _Post:
    group: str
    blob: str
    where: str  # base, loose, packed or absent
    sha256: str
    size: int
    path: str


@dataclass
class GitReport:
    """What the script printed, line by line (``envcheck:leaks:KIND<TAB>...``)."""

    unplayed: str | None = None
    base: str = ""
    gitdir: str = ""
    after: str = "-"
    apart: str = "-"
    commits: list[tuple[str, str, str]] = field(default_factory=list)
    posts: list[_Post] = field(default_factory=list)
    absent: list[tuple[str, str]] = field(default_factory=list)
    noapply: list[str] = field(default_factory=list)
    history: set[str] = field(default_factory=set)
    history_rc: str | None = None
    done: bool = False


def _parse(output: str) -> GitReport:
    report = GitReport()
    for line in output.splitlines():
        if not line.startswith(MARK):
            continue
        kind, _, rest = line[len(MARK):].partition("\t")
        parts = rest.split("\t")
        if kind in ("unplayed", "cut"):
            report.unplayed = rest
        elif kind == "base" and len(parts) == 2:
            report.base, report.gitdir = parts
        elif kind == "after" and len(parts) == 2:
            report.after, report.apart = parts
        elif kind == "commit" and len(parts) == 3:
            report.commits.append((parts[0], parts[1].strip(), parts[2]))
        elif kind == "post" and len(parts) == 6 and parts[4].isdigit():
            report.posts.append(_Post(parts[0], parts[1], parts[2], parts[3], int(parts[4]),
                                      parts[5]))
        elif kind == "absent" and len(parts) == 2:
            report.absent.append((parts[0], parts[1]))
        elif kind == "noapply":
            report.noapply.append(rest)
        elif kind == "history":
            report.history.add(rest)
        elif kind == "history-rc":
            report.history_rc = rest
        elif kind == "done":
            report.done = True
    return report


def _commit_finding(report: GitReport, commit: tuple[str, str, str]) -> Finding:
    sha, refs, info = commit
    held = f"reachable from {refs}" if refs else "reachable from a reflog only"
    return Finding(Reason.SOLUTION_LEAKED, "git", f"commit {sha[:12]} {info}",
                   f"after the base commit {report.base[:12]}, {held}")


def read_git(output: str, timed_out: bool) -> tuple[list[Finding], Checked, list[Target]]:
    """The findings, the check's line, and the files the patches leave (for the files
    check) from the script's ``output``; ``timed_out``: the exec was cut short."""
    report = _parse(output)
    if report.unplayed is not None and not report.base:
        return [], Checked("git", False, report.unplayed), []
    if not report.base:
        why = "timed out before reaching the repository" if timed_out else "no answer"
        return [], Checked("git", False, why, cut_short=timed_out), []
    found = [_commit_finding(report, c) for c in report.commits]
    notes = [f"base commit {report.base[:12]} in {report.gitdir}: {report.after} commit(s) "
             f"after it"]
    if report.after.isdigit() and int(report.after) > len(report.commits):
        notes.append(f"the first {len(report.commits)} listed")
    if report.apart.isdigit() and report.after.isdigit() and int(report.apart) > int(
            report.after):
        notes.append(f"{int(report.apart) - int(report.after)} on other lines of history "
                     "(not counted)")
    history_known = report.history_rc == "0"
    targets: list[Target] = []
    for post in report.posts:
        what, group, reason = _GROUPS.get(post.group, _GROUPS["gold"])
        leaves = f"{post.path} as the {what} leaves it"
        if post.where != "base" and post.sha256 != "-":
            targets.append(Target(group, leaves, post.sha256, post.size))
        if post.where not in ("loose", "packed") or post.blob in report.history:
            continue
        where = "a loose object" if post.where == "loose" else "a packed object (or in an " \
            "alternate store)"
        if not history_known:
            where += "; whether the base commit's history holds it is unknown (the walk " \
                     "did not finish)"
        found.append(Finding(reason, "git", f"{leaves} (blob {post.blob[:12]})",
                             f"{where} in {report.gitdir}"))
    held = sum(p.where in ("loose", "packed") for p in report.posts)
    if report.posts:
        notes.append(f"{len(report.posts)} file(s) the patches leave, {held} in the object "
                     "store")
    if report.history:
        notes.append(f"{len(report.history)} of them in the base commit's history (not counted)")
    notes.extend(f"the {_GROUPS[g][0]} does not apply to the base commit's files: the files "
                 "it leaves were not looked for" for g in report.noapply if g in _GROUPS)
    if report.absent:
        notes.append(f"{len(report.absent)} file(s) the patches read are not in the base commit")
    cut = timed_out or not report.done
    if cut:
        notes.append("cut short: timed out" if timed_out else f"cut short: {report.unplayed}")
    return found, Checked("git", True, "; ".join(notes), cut_short=cut), targets
