"""The files and paths checks: the answer's files anywhere the sandbox user can read them.

- **files**: each file envcheck knows to be the answer (Harbor's ``solution/`` and ``tests/``;
  a spec's oracle script or patch and its test patch; the files those patches leave, from the
  git check) is hashed on the host (SHA-256, size); in the sandbox, as the sandbox user,
  ``find /`` lists the files of those sizes (but ``/proc``, ``/sys``, ``/dev``, and ``/tmp``,
  a tmpfs in envcheck's sandboxes that hides the image's own), ``sha256sum`` hashes them and
  the matches come back. Files under :data:`MIN_BYTES` are not looked for: content that short
  is common (an empty ``__init__.py``, ``1``) and tells nothing.
- **paths**: the oracle already in the image (``oracle.path``: the probe runs it as the
  sandbox user, so the agent can run it too) and the paths ``leaks.solution`` and
  ``leaks.tests`` declare: any file under them the sandbox user can read.

Both run in one exec; their output is one line per finding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files as resources
from pathlib import Path
from typing import Literal

from envcheck.core.results import Reason
from envcheck.kinds.leaks.verdict import Checked, Finding

__all__ = ["FILES_MAX", "MIN_BYTES", "SCRIPT", "DeclaredPath", "Group", "Target", "files_script",
           "folder_targets", "read_files", "text_target"]

Group = Literal["solution", "tests"]
MIN_BYTES = 16
FILES_MAX = 1000  # files looked for: past it, the rest are not (said in the check's line)
FOUND_MAX = 200  # matches (and readable files per declared path) read back
MARK = "envcheck:leaks:"
_REASON: dict[str, Reason] = {"solution": Reason.SOLUTION_IN_IMAGE,
                              "tests": Reason.TESTS_IN_IMAGE}
# Where a delivered patch may sit while the checks run: not the image's.
DELIVERED = "/var/tmp/envcheck-leaks-*"


@dataclass(frozen=True, slots=True)
class Target:
    group: Group
    what: str  # e.g. "solution/solve.sh", "textkit/slug.py as the gold patch leaves it"
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class DeclaredPath:
    group: Group
    path: str
    what: str  # e.g. "the oracle (oracle.path)", "leaks.tests"


def text_target(text: str | None, group: Group, what: str) -> Target | None:
    if text is None:
        return None
    data = text.encode()
    return Target(group, what, hashlib.sha256(data).hexdigest(), len(data))


def folder_targets(folder: Path, group: Group, label: str) -> list[Target]:
    """Every file under ``folder`` (a task's ``solution/`` or ``tests/``), as ``label/rel``."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found.append(Target(group, f"{label}/{path.relative_to(folder).as_posix()}", digest,
                                path.stat().st_size))
    return found



SCRIPT = resources(__package__).joinpath("files.sh").read_text(encoding="utf-8")


def files_script(targets: Sequence[Target], paths: Sequence[DeclaredPath]
                 ) -> tuple[str, dict[str, str]]:
    """The script and its variables for ``targets`` (the first :data:`FILES_MAX` of those
    at least :data:`MIN_BYTES` long) and the declared ``paths``."""
    looked = looked_for(targets)
    variables = {"ENVCHECK_PATHS": "\n".join(dict.fromkeys(p.path for p in paths)),
                 "ENVCHECK_SIZES": " ".join(sorted({str(t.size) for t in looked}, key=int)),
                 "ENVCHECK_HASHES": "\n".join(sorted({t.sha256 for t in looked})),
                 "ENVCHECK_FOUND_MAX": str(FOUND_MAX), "ENVCHECK_DELIVERED": DELIVERED}
    return SCRIPT, variables


def looked_for(targets: Sequence[Target]) -> list[Target]:
    return [t for t in targets if t.size >= MIN_BYTES][:FILES_MAX]


def _matches(line: str, by_hash: dict[str, list[Target]]) -> tuple[list[Target], str] | None:
    """The targets a ``sha256sum`` line matches and the file's path, if it matches any."""
    digest, _, path = line.partition(" ")
    path = path[1:] if path.startswith(("*", " ")) else path
    found = by_hash.get(digest)
    return (found, path) if found and path else None


def read_files(output: str, timed_out: bool, targets: Sequence[Target],
               paths: Sequence[DeclaredPath], user: str, *, look: bool = True
               ) -> tuple[list[Finding], list[Checked]]:
    """The findings and the checks' lines (paths, if any were declared; files, if
    ``look``) from the script's ``output``."""
    declared = {p.path: p for p in paths}
    looked = looked_for(targets)
    by_hash: dict[str, list[Target]] = {}
    for target in looked:
        by_hash.setdefault(target.sha256, []).append(target)
    found: list[Finding] = []
    absent: list[str] = []
    done: set[str] = set()
    unplayed = None
    for line in output.splitlines():
        if not line.startswith(MARK):
            continue
        kind, _, rest = line[len(MARK):].partition("\t")
        if kind == "readable" and rest.partition("\t")[0] in declared:
            root, _, file = rest.partition("\t")
            spec = declared[root]
            found.append(Finding(_REASON[spec.group], "paths", f"{spec.what}: {file}",
                                 f"readable by {user}"))
        elif kind == "absent":
            absent.append(rest)
        elif kind == "file" and (hit := _matches(rest, by_hash)) is not None:
            found.extend(Finding(_REASON[t.group], "files", t.what, hit[1]) for t in hit[0])
        elif kind in ("paths-done", "files-done"):
            done.add(kind)
        elif kind == "unplayed":
            unplayed = rest
        elif kind == "user" and rest:
            user = rest
    checked = []
    cut = "timed out" if timed_out else "no answer"
    if paths:
        played = "paths-done" in done
        readable = sum(f.check == "paths" for f in found)
        summary = (f"{len(declared)} path(s) that hold the answer: {readable} file(s) under "
                   f"them readable by {user}" if played else f"cut short: {cut}")
        if absent:
            summary += f" ({len(absent)} not in the image, or out of its reach)"
        checked.append(Checked("paths", played, summary, cut_short=not played))
    if look:
        hits = sum(f.check == "files" for f in found)
        checked.append(_files_line(targets, looked, done, unplayed, cut, user, hits))
    return found, checked


def _files_line(targets: Sequence[Target], looked: Sequence[Target], done: set[str],
                unplayed: str | None, cut: str, user: str, hits: int) -> Checked:
    small = sum(t.size < MIN_BYTES for t in targets)
    skipped = f"; {small} under {MIN_BYTES} bytes not looked for" if small else ""
    if len(targets) - small > FILES_MAX:
        skipped += f"; {len(targets) - small - FILES_MAX} past the first {FILES_MAX} not " \
                   "looked for"
    if not looked:
        return Checked("files", False, f"nothing to look for{skipped}")
    if unplayed is not None:
        return Checked("files", False, unplayed + skipped)
    if "files-done" not in done:
        return Checked("files", False, f"cut short: {cut}{skipped}", cut_short=True)
    return Checked("files", True, f"{len(looked)} file(s) looked for by size and SHA-256 "
                   f"across / (but /proc, /sys, /dev and /tmp) as {user}: {hits} found"
                   f"{skipped}")
