"""Survivors in a part of the fix no test needs (pure: no sandbox).

When the gold patch with hunk H left out (a partial patch, :mod:`.partial`) is rewarded, the
task's tests pass without H: nothing in them needs that part of the fix. A mutant of H's lines
that survives then tells about the record (a hunk its tests do not cover), not about the
strength of its assertions, and is put apart (``Survivor.UNCOVERED``), out of the score. The
same holds for every mutant of a file whose partial patch (the file left out) is rewarded.

A mutant belongs to H when every line of the gold post-image its diff changes lies in H's lines
after the patch (its context included), H placed where it sits in the post-image
(:mod:`.placing`: a header's line numbers may be off by an offset); a line it inserts counts by
the lines on either side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from envcheck.kinds.strength.diffs import NO_NEWLINE, Patch, PatchError, parse_patch
from envcheck.kinds.strength.model import PartialPatch
from envcheck.kinds.strength.placing import place

__all__ = ["Uncovered", "touched", "uncovered_by", "uncovered_parts"]


@dataclass(frozen=True)
class Uncovered:
    """Lines ``first`` to ``last`` of a file after the gold patch, and the rewarded partial
    patch that left them out."""

    first: int
    last: int
    description: str


def uncovered_parts(gold: Patch, rewarded: Iterable[PartialPatch],
                    texts: Mapping[str, str]) -> dict[str, list[Uncovered]]:
    """Per file (as the gold patch names it after the change), the parts ``rewarded`` (the
    partial patches the tests passed) left out; ``texts``: the files after the gold patch,
    where its hunks are looked for (a hunk of a file not in it, or found nowhere in it, puts
    nothing apart)."""
    found: dict[str, list[Uncovered]] = {}
    for partial in rewarded:
        try:
            fp = gold.file(partial.file)
        except PatchError:
            continue
        text = texts.get(fp.path)
        if partial.hunk is None:
            part = Uncovered(1, 1 << 30, partial.description)
        elif 0 < partial.hunk <= len(fp.hunks) and text is not None:
            hunk = place(fp, text).found[partial.hunk - 1]
            if hunk is None:
                continue
            part = Uncovered(hunk.new_start, hunk.new_start + max(hunk.new_len, 1) - 1,
                             partial.description)
        else:
            continue
        found.setdefault(fp.path, []).append(part)
    return found


def touched(diff: str) -> set[int] | None:
    """The lines of the file before ``diff`` (one file's unified diff) it removes or replaces,
    and those on either side of a line it inserts; None if it is not one."""
    try:
        patch = parse_patch(diff)
    except PatchError:
        return None
    if len(patch.files) != 1:
        return None
    found: set[int] = set()
    for hunk in patch.files[0].hunks:
        old = hunk.old_start if hunk.old_len else hunk.old_start + 1
        replacing = False  # the run of changes removed lines: what it adds replaces them
        for line in hunk.lines:
            if line == NO_NEWLINE:
                continue
            if line.startswith("-"):
                found.add(old)
                replacing = True
            elif line.startswith("+"):
                if not replacing:
                    found.update({max(old - 1, 1), old})
            else:
                replacing = False
            old += line[:1] in " -"
    return found or None


def uncovered_by(file: str, diff: str, parts: Mapping[str, list[Uncovered]],
                 fix_lines: Iterable[int] = ()) -> str | None:
    """The description of the rewarded partial patch that leaves out every line the mutant
    of ``file`` (``diff`` against the gold post-image) changes, or, when given, every one of
    ``fix_lines`` (the fix's lines it stands for); None if there is none."""
    spans = parts.get(file)
    lines = (set(fix_lines) or touched(diff)) if spans else None
    if not spans or not lines:
        return None
    for part in spans:
        if all(part.first <= n <= part.last for n in lines):
            return part.description
    inside = [p for p in spans if any(p.first <= n <= p.last for n in lines)]
    if inside and all(any(p.first <= n <= p.last for p in inside) for n in lines):
        return "; ".join(p.description for p in inside)
    return None
