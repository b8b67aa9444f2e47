"""``envcheck validate --discover``: a repository's catalogue files, found by what they hold.

A catalogue file has a top-level ``version:`` and at least one of ``suites:``, ``datasets:``
or ``data_sources:``; other YAML (CI workflows, compose files, alert rules) has not, and is
left alone. In a git repository the files searched are those git lists (tracked, or new and
not ignored), so a virtualenv or a build folder is never read; elsewhere every ``*.yaml`` and
``*.yml`` under the folder, hidden folders left out. The files found are validated together,
as one catalogue: a suite one file declares and another's dataset joins, a data source used
across files, an id taken twice, are all checked whichever file changed.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["GIT_TIMEOUT_S", "discover_catalogues", "looks_like_catalogue"]

GIT_TIMEOUT_S = 60.0
_SUFFIXES = (".yaml", ".yml")
_VERSION = re.compile(rb"^version[ \t]*:", re.M)
_SECTION = re.compile(rb"^(?:suites|datasets|data_sources)[ \t]*:", re.M)


def looks_like_catalogue(path: Path, max_bytes: int) -> bool:
    """Whether ``path`` holds a catalogue's top-level keys (a file too large or unreadable is
    taken: the loader says what is wrong with it)."""
    try:
        with path.open("rb") as f:
            head = f.read(max_bytes + 1)
    except OSError:
        return True
    if len(head) > max_bytes:
        return True
    return bool(_VERSION.search(head) and _SECTION.search(head))


def _git_listed(folder: Path) -> list[Path] | None:
    """The YAML files git lists under ``folder``; None outside a repository (or without git)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE",
                                                              "GIT_INDEX_FILE")}
    try:
        done = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--cached",
                               "--others", "--exclude-standard", "--", *(f"*{s}" for s in
                                                                        _SUFFIXES)],
                              capture_output=True, timeout=GIT_TIMEOUT_S, env=clean,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    names = done.stdout.decode(errors="surrogateescape").split("\0")
    return [folder / name for name in dict.fromkeys(names) if name]


def _walked(folder: Path) -> Iterable[Path]:
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield from (Path(top, f) for f in sorted(files) if f.endswith(_SUFFIXES))


def discover_catalogues(roots: Sequence[Path], max_bytes: int) -> list[Path]:
    """The catalogue files under ``roots`` (default: the working directory); a file named is
    taken as it is."""
    found: list[Path] = []
    for root in roots or [Path(".")]:
        if not root.is_dir():
            found.append(root)
            continue
        listed = _git_listed(root)
        candidates = listed if listed is not None else _walked(root)
        found.extend(p for p in candidates if p.is_file() and looks_like_catalogue(p, max_bytes))
    return sorted(dict.fromkeys(found))
