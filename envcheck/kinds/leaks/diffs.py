"""The files a unified diff reads and writes, as ``git apply`` reads its headers.

The leak checks rebuild the files a patch leaves (its post-image) from the base commit's
files: they need the paths to take from the base commit and the paths to hash after applying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FileChange", "file_changes"]

_GIT_HEADER = re.compile(r"^diff --git a/(.+) b/(.+)$")


@dataclass(frozen=True, slots=True)
class FileChange:
    old: str | None  # the path it reads at the base commit; None: a new file
    new: str | None  # the path it leaves; None: a deleted file


def _path(field: str) -> str | None:
    """The path of a ``---``/``+++`` line's field, its a/ or b/ prefix dropped; None for
    /dev/null or a path git would have quoted (not looked up: a leak check skips it)."""
    name = field.split("\t", maxsplit=1)[0].rstrip()
    if name == "/dev/null" or name.startswith('"'):
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def _hunk_follows(lines: list[str], i: int) -> bool:
    return len(lines) > i + 2 and lines[i + 1].startswith("+++ ") and lines[i + 2].startswith(
        "@@")


def file_changes(patch: str) -> list[FileChange]:
    """Each file ``patch`` changes, in order: from its ``---``/``+++`` lines (followed by a
    hunk, as ``git apply`` wants them), or, for a pure rename or mode change (no hunk), from
    its ``diff --git`` header and rename lines."""
    changes: list[FileChange] = []
    header: tuple[str | None, str | None] | None = None  # a git section not yet closed
    lines = patch.splitlines()
    for i, line in enumerate(lines):
        found = _GIT_HEADER.match(line)
        if found is not None:
            if header is not None:
                changes.append(FileChange(*header))
            header = (found.group(1), found.group(2))
        elif header is not None and line.startswith(("new file mode", "deleted file mode",
                                                     "rename from ", "rename to ")):
            old, new = header
            if line.startswith("new file mode"):
                old = None
            elif line.startswith("deleted file mode"):
                new = None
            elif line.startswith("rename from "):
                old = line.removeprefix("rename from ")
            else:
                new = line.removeprefix("rename to ")
            header = (old, new)
        elif line.startswith("--- ") and _hunk_follows(lines, i):
            old, new = _path(line[4:]), _path(lines[i + 1][4:])
            if old is None and new is None:
                continue
            changes.append(FileChange(old, new))
            header = None  # this section's paths are taken
    if header is not None:
        changes.append(FileChange(*header))
    return [c for c in changes if "\n" not in f"{c.old}{c.new}"]
