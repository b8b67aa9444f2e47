"""Unified diffs read into files and hunks, and written back: what the mutants and the partial
patches are made of.

A gold patch is kept as it came, section by section (a section is one file's header and
hunks); a candidate patch replaces or leaves out sections and hunks and writes the rest back
byte for byte, so it goes through the same apply path as the gold patch. Lines are split on
``\\n`` only: a carriage return or a form feed is part of a line, as ``git apply`` reads it.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["FilePatch", "Hunk", "Patch", "PatchError", "join_lines", "parse_patch", "split_lines",
           "unified_section"]

DEV_NULL = "/dev/null"
NO_NEWLINE = "\\ No newline at end of file"
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)")
_GIT_HEADER = re.compile(r"diff --git (\S+) (\S+)")


class PatchError(ValueError):
    """A patch that cannot be read, or does not match the file it is said to produce."""


def split_lines(text: str) -> tuple[list[str], bool]:
    """``text`` as lines without their ``\\n``, and whether it ends with one (an empty text
    counts as ending with one: it has no last line to lack it)."""
    if not text:
        return [], True
    lines = text.split("\n")
    if lines[-1] == "":
        return lines[:-1], True
    return lines, False


def join_lines(lines: Sequence[str], newline_at_end: bool) -> str:
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if newline_at_end else "")


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` block. ``lines`` keep their one-character prefix (`` ``, ``-``, ``+``) and
    the no-newline markers that follow them."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str  # what follows the second @@ (a function name, often)
    lines: tuple[str, ...]

    def side(self, prefixes: str) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in prefixes and line != NO_NEWLINE]

    @property
    def old_lines(self) -> list[str]:
        return self.side(" -")

    @property
    def new_lines(self) -> list[str]:
        return self.side(" +")

    def added(self) -> list[int]:
        """New-side numbers of the lines this hunk adds."""
        found, number = [], self.new_start
        for line in self.lines:
            if line.startswith("+"):
                found.append(number)
            if line[:1] in " +" and line != NO_NEWLINE:
                number += 1
        return found

    def _marked(self, prefixes: str) -> bool:
        """Whether the last line of a side is followed by the no-newline marker."""
        last = ""
        for line in self.lines:
            if line == NO_NEWLINE:
                if last[:1] in prefixes:
                    return True
            else:
                last = line
        return False

    def render(self) -> str:
        def span(start: int, length: int) -> str:
            return str(start) if length == 1 else f"{start},{length}"
        head = (f"@@ -{span(self.old_start, self.old_len)} "
                f"+{span(self.new_start, self.new_len)} @@{self.section}")
        return "\n".join([head, *self.lines]) + "\n"


@dataclass(frozen=True)
class FilePatch:
    """One file's section: its header lines as written (``diff --git``, modes, ``---``,
    ``+++``) and its hunks. A binary or header-only section has no hunks."""

    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    header: tuple[str, ...]
    hunks: tuple[Hunk, ...]
    raw: str  # the section exactly as read

    @property
    def path(self) -> str:
        """The file's path after the patch (before it, for a deletion)."""
        return self.new_path or self.old_path or ""

    @property
    def binary(self) -> bool:
        return any(h.startswith(("Binary files ", "GIT binary patch")) for h in self.header)

    def added_lines(self) -> frozenset[int]:
        return frozenset(n for hunk in self.hunks for n in hunk.added())

    def render(self, hunks: Sequence[Hunk] | None = None) -> str:
        """The section again, with ``hunks`` instead of its own (their new-side starts
        recomputed from the old side, as the hunks left out no longer shift them)."""
        if hunks is None:
            return self.raw
        shift, kept = 0, []
        for hunk in hunks:
            start = hunk.old_start + shift if hunk.old_len else hunk.old_start + shift + 1
            start = start if hunk.new_len else start - 1
            kept.append(replace(hunk, new_start=max(start, 0)))
            shift += hunk.new_len - hunk.old_len
        header = [h for h in self.header if not h.startswith("index ")]
        return "".join(["\n".join(header) + "\n", *(h.render() for h in kept)])


@dataclass(frozen=True)
class Patch:
    """A unified diff: what precedes its first section (a commit message, say) and its
    sections in order."""

    preamble: str
    files: tuple[FilePatch, ...]

    def render(self, sections: Sequence[str]) -> str:
        return self.preamble + "".join(sections)

    def file(self, path: str) -> FilePatch:
        for fp in self.files:
            if path in (fp.new_path, fp.old_path):
                return fp
        raise PatchError(f"the patch does not touch {path}")


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t", maxsplit=1)[0].strip()
    if path == DEV_NULL:
        return None
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def _section_starts(lines: Sequence[str]) -> list[int]:
    if any(line.startswith("diff --git ") for line in lines):
        return [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    return [i for i, line in enumerate(lines[:-2]) if line.startswith("--- ")
            and lines[i + 1].startswith("+++ ") and lines[i + 2].startswith("@@")]


def _read_hunk(lines: Sequence[str], at: int) -> tuple[Hunk, int]:
    match = _HUNK.match(lines[at])
    if match is None:
        raise PatchError(f"line {at + 1}: not a hunk header: {lines[at][:80]!r}")
    old_start, old_len, new_start, new_len = (
        int(g) if g is not None else 1 for g in match.group(1, 2, 3, 4))
    body: list[str] = []
    old_left, new_left, i = old_len, new_len, at + 1
    while i < len(lines) and (old_left > 0 or new_left > 0):
        line = lines[i] if lines[i] else " "  # a context line whose blank was trimmed
        kind = line[0]
        if kind not in " -+\\":
            raise PatchError(f"line {i + 1}: hunk ends early ({old_left} old, {new_left} new "
                             "lines missing)")
        if kind != "\\":
            old_left -= kind in " -"
            new_left -= kind in " +"
        body.append(line)
        i += 1
    if old_left > 0 or new_left > 0:
        raise PatchError(f"line {at + 1}: hunk truncated at the end of the patch")
    while i < len(lines) and lines[i].startswith("\\"):
        body.append(lines[i])
        i += 1
    return Hunk(old_start, old_len, new_start, new_len, match.group(5), tuple(body)), i


def _read_section(lines: Sequence[str]) -> FilePatch:
    header: list[str] = []
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        header.append(lines[i])
        i += 1
    hunks: list[Hunk] = []
    while i < len(lines):
        if not lines[i].startswith("@@"):
            i += 1  # text between sections (a trailer, a signature)
            continue
        hunk, i = _read_hunk(lines, i)
        hunks.append(hunk)
    old = new = None
    paths = [h for h in header if h.startswith(("--- ", "+++ "))]
    git = _GIT_HEADER.match(header[0]) if header else None
    if len(paths) >= 2:
        old, new = _strip_prefix(paths[0][4:]), _strip_prefix(paths[1][4:])
    elif git is not None:
        old, new = _strip_prefix(git.group(1)), _strip_prefix(git.group(2))
        if any(h.startswith("new file mode") for h in header):
            old = None
        if any(h.startswith("deleted file mode") for h in header):
            new = None
    for h in header:
        if h.startswith("rename to "):
            new = h[len("rename to "):]
    raw = "\n".join(lines) + "\n"
    return FilePatch(old, new, tuple(header), tuple(hunks), raw)


def parse_patch(text: str) -> Patch:
    """Read a unified diff (``git diff`` or plain ``diff -u``); :class:`PatchError` if it
    has no file in it or a hunk is malformed."""
    lines, _ = split_lines(text)
    starts = _section_starts(lines)
    if not starts:
        raise PatchError("no file section in the patch")
    bounds = [*starts, len(lines)]
    files = tuple(_read_section(lines[a:b]) for a, b in itertools.pairwise(bounds))
    preamble = join_lines(lines[:starts[0]], True)
    return Patch(preamble, files)


def unified_section(old_path: str | None, new_path: str | None, before: str, after: str,
                    header: Sequence[str] = (), context: int = 3) -> str:
    """A ``git diff``-style section turning ``before`` into ``after`` ("" when they are
    equal). ``header`` replaces the ``diff --git`` line and modes (kept from the gold
    patch's section, so creations and renames stay what they were)."""
    a, a_nl = split_lines(before)
    b, b_nl = split_lines(after)
    if a == b and a_nl == b_nl:
        return ""
    # the last line carries its newline state, so a change of it alone is a change
    a_cmp = [*a[:-1], a[-1] + ("" if a_nl else "\0")] if a else []
    b_cmp = [*b[:-1], b[-1] + ("" if b_nl else "\0")] if b else []
    old_name = f"a/{old_path}" if old_path is not None else DEV_NULL
    new_name = f"b/{new_path}" if new_path is not None else DEV_NULL
    head = [h for h in header if not h.startswith(("index ", "--- ", "+++ "))] or [
        f"diff --git a/{old_path or new_path} b/{new_path or old_path}"]
    out = [*head, f"--- {old_name}", f"+++ {new_name}"]
    for group in _Trimmed(a_cmp, b_cmp).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@")
        for tag, k1, k2, m1, m2 in group:
            if tag == "equal":
                out.extend(_body(" ", a, k1, k2, a_nl))
                continue
            out.extend(_body("-", a, k1, k2, a_nl))
            out.extend(_body("+", b, m1, m2, b_nl))
    return "\n".join(out) + "\n"


_Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]


class _Trimmed(difflib.SequenceMatcher[str]):
    """A line matcher that sets the common head and tail aside before matching: a mutant
    differs from its original in one place, and matching two 2,000-line files whole (blank
    lines everywhere) took seconds."""

    def __init__(self, a: list[str], b: list[str]) -> None:
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
            tail += 1
        self.head, self.tail, self.sizes = head, tail, (len(a), len(b))
        super().__init__(None, a[head:len(a) - tail], b[head:len(b) - tail], autojunk=False)

    def get_opcodes(self) -> list[_Opcode]:
        h, t = self.head, self.tail
        na, nb = self.sizes
        ops: list[_Opcode] = [("equal", 0, h, 0, h)]
        ops += [(tag, i1 + h, i2 + h, j1 + h, j2 + h)
                for tag, i1, i2, j1, j2 in super().get_opcodes()]
        ops.append(("equal", na - t, na, nb - t, nb))
        merged: list[_Opcode] = []
        for op in ops:
            if op[1] == op[2] and op[3] == op[4]:
                continue  # empty
            if merged and op[0] == "equal" and merged[-1][0] == "equal":
                merged[-1] = ("equal", merged[-1][1], op[2], merged[-1][3], op[4])
            else:
                merged.append(op)
        return merged


def _range(start: int, length: int) -> str:
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def _body(prefix: str, lines: Sequence[str], k1: int, k2: int, newline: bool) -> list[str]:
    out = []
    for k in range(k1, k2):
        out.append(prefix + lines[k])
        if k == len(lines) - 1 and not newline:
            out.append(NO_NEWLINE)
    return out
