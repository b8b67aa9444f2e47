"""Where each hunk of a patch sits in the file it produced, and the file before it rebuilt.

A hunk's header says where its lines were in the tree the patch was made on; the tree it is
applied to may differ a little (a record applied to another release than its base commit), and
``git apply`` and ``patch`` then place the hunk where its lines are, nearest to the header's
line (an *offset*), ``patch --fuzz`` ignoring up to a few context lines at either end. The
mutants, the change blocks, the functions recorded and the parts of the fix left out are all
read at lines of the file *after* the patch (read from a container where it was applied), so
each hunk is looked for there the same way: its new side (context and added lines, in order)
nearest to where its header, moved by the offset of the hunk before, says it is; then with 1,
2, ... :data:`FUZZ` context lines left off at either end. A hunk found nowhere is said so
(:attr:`Placed.missing`); nothing of it is mutated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from envcheck.kinds.strength.diffs import (
    NO_NEWLINE,
    FilePatch,
    Hunk,
    PatchError,
    join_lines,
    split_lines,
)

__all__ = ["FUZZ", "Placed", "place", "preimage"]

FUZZ = 5  # context lines left off at either end at most, as the harness's ``patch --fuzz=5``


def _head(hunk: Hunk) -> str:
    """The hunk's header, its line numbers only (what follows them names the function the
    header's lines were in, which the offset may make another)."""
    return hunk.render().split("\n", maxsplit=1)[0].removesuffix(hunk.section)


@dataclass(frozen=True)
class Placed:
    """A file's section with its hunks where they sit in ``post`` (the file after it)."""

    written: FilePatch  # the section as the patch has it
    found: tuple[Hunk | None, ...]  # per hunk of ``written``: numbered where it sits, or None
    post: tuple[str, ...]
    newline_at_end: bool

    @property
    def fp(self) -> FilePatch:
        """The section with the hunks found, numbered where they sit (context lines that did
        not match, under fuzz, left off)."""
        return replace(self.written, hunks=tuple(h for h in self.found if h is not None))

    @property
    def missing(self) -> list[int]:
        """The numbers (from 1) of the hunks whose lines are nowhere in the file."""
        return [i for i, h in enumerate(self.found, 1) if h is None]

    def notes(self) -> list[str]:
        """What a reader of the mutants should know: each hunk that sits elsewhere than its
        header says, and each found nowhere."""
        said = []
        for i, (hunk, at) in enumerate(zip(self.written.hunks, self.found, strict=True), 1):
            where = f"{self.written.path}: hunk {i} ({_head(hunk)})"
            if at is None:
                said.append(f"{where} is not in the file after the gold patch: no mutant of "
                            "its lines")
                continue
            moved = _first_line(at) - _first_line(hunk) - _context(hunk, True) + _context(
                at, True)
            if moved:
                said.append(f"{where} applies {abs(moved)} line(s) "
                            f"{'below' if moved > 0 else 'above'} its header, from line "
                            f"{_first_line(at)} of the file after the patch: placed there")
        return said

    def preimage(self) -> str:
        """The file before the patch: each hunk's new side replaced by its old side.
        :class:`PatchError` if a hunk is missing (the file cannot be rebuilt without it)."""
        if self.written.old_path is None:
            return ""
        if self.missing:
            hunk = self.written.hunks[self.missing[0] - 1]
            raise PatchError(f"{self.written.path}: hunk at line {hunk.new_start} is not in "
                             "the file")
        out: list[str] = []
        pos, newline = 0, self.newline_at_end
        for hunk in self.fp.hunks:
            at = _index(hunk)
            out.extend(self.post[pos:at])
            out.extend(hunk.old_lines)
            pos = at + hunk.new_len
            if pos == len(self.post):
                newline = not hunk._marked(" -")
        out.extend(self.post[pos:])
        return join_lines(out, newline)


def _index(hunk: Hunk) -> int:
    """Where the hunk's new side starts in the file after it (0-based)."""
    return hunk.new_start - 1 if hunk.new_len else hunk.new_start


def _first_line(hunk: Hunk) -> int:
    return _index(hunk) + 1


def _context(hunk: Hunk, leading: bool) -> int:
    """How many context lines open (``leading``) or close the hunk."""
    count = 0
    body = [line for line in hunk.lines if line != NO_NEWLINE]
    for line in body if leading else reversed(body):
        if not line.startswith(" "):
            break
        count += 1
    return count


def _trimmed(hunk: Hunk, lead: int, trail: int) -> Hunk:
    """``hunk`` without its first ``lead`` and last ``trail`` context lines."""
    lines = list(hunk.lines)
    del lines[:lead]
    for _ in range(trail):
        while lines and lines[-1] == NO_NEWLINE:
            lines.pop()
        lines.pop()
    cut = lead + trail
    return replace(hunk, old_len=hunk.old_len - cut, new_len=hunk.new_len - cut,
                   lines=tuple(lines))


def _search(post: Sequence[str], want: list[str], near: int, low: int) -> int:
    """Where ``want`` sits in ``post`` at or after ``low``, nearest to ``near`` (the line
    itself first, then one after, one before, ... as ``git apply`` looks); -1 if nowhere."""
    last = len(post) - len(want)
    if last < low:
        return -1
    near = min(max(near, low), last)
    for distance in range(max(near - low, last - near) + 1):
        for at in (near + distance, near - distance) if distance else (near,):
            if low <= at <= last and list(post[at:at + len(want)]) == want:
                return at
    return -1


def place(fp: FilePatch, post_text: str) -> Placed:
    """``fp``'s hunks looked for in ``post_text`` (the file after the patch), in order, each
    after the one before."""
    post, newline = split_lines(post_text)
    found: list[Hunk | None] = []
    low = offset = shift = 0  # the first line a hunk may start at; the last offset; new - old
    for hunk in fp.hunks:
        near = _index(hunk) + offset
        lead_max, trail_max = _context(hunk, True), _context(hunk, False)
        if lead_max == len(hunk.new_lines):  # context only (no added line): not twice
            trail_max = 0
        at, placed = -1, hunk
        for fuzz in range(FUZZ + 1):
            lead, trail = min(fuzz, lead_max), min(fuzz, trail_max)
            if fuzz and (lead, trail) == (min(fuzz - 1, lead_max), min(fuzz - 1, trail_max)):
                break  # no more context to leave off
            placed = _trimmed(hunk, lead, trail) if fuzz else hunk
            want = placed.new_lines
            if not want and hunk.new_lines:
                break  # nothing left to look for
            at = _search(post, want, near + lead, low) if want else min(max(near, low),
                                                                       len(post))
            if at >= 0:
                break
        if at < 0:
            found.append(None)
        else:
            old_at = at - shift
            found.append(replace(placed, new_start=at + 1 if placed.new_len else at,
                                 old_start=old_at + 1 if placed.old_len else old_at))
            offset = at - lead - _index(hunk)
            low = at + placed.new_len
        shift += hunk.new_len - hunk.old_len
    return Placed(fp, tuple(found), tuple(post), newline)


def preimage(fp: FilePatch, post_text: str) -> str:
    """The file before the patch, from the file after it (each hunk found as :func:`place`
    finds it). :class:`PatchError` if a hunk's new side is not in ``post_text``."""
    if fp.old_path is None:
        return ""
    return place(fp, post_text).preimage()
