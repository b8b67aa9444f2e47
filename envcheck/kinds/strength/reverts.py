"""Wrong fixes made of the gold patch's own lines, at the level of its change blocks (a run of
removed and added lines in a hunk): part of the fix put back as it was before
(``partial_revert``), and the code the fix replaced put back inside ``try: ... except
Exception: pass`` (``exception_swallowed``: the symptom silenced rather than fixed).

They are rendered as text (the file after the gold patch with some of its lines replaced);
the static filters then check the result compiles and is a program of its own, as for every
mutant. A hunk left out whole is a partial patch (:mod:`.partial`), not one of these.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from functools import partial

from envcheck.kinds.strength.diffs import NO_NEWLINE, FilePatch, Hunk
from envcheck.kinds.strength.model import Operator
from envcheck.kinds.strength.pysource import PythonSource
from envcheck.kinds.strength.sampling import Variant

__all__ = ["Block", "change_blocks", "revert_variants"]

SHOWN = 50  # characters of a line in a description


@dataclass(frozen=True)
class Block:
    """One run of ``-`` and ``+`` lines: where its added lines start in the file after the
    patch (where the removed ones were, if it adds none), where its removed lines start in
    the file before it, and the lines on either side."""

    new_start: int
    old_start: int
    removed: tuple[str, ...]
    added: tuple[str, ...]


def change_blocks(hunk: Hunk) -> list[Block]:
    found: list[Block] = []
    new = hunk.new_start if hunk.new_len else hunk.new_start + 1
    old = hunk.old_start if hunk.old_len else hunk.old_start + 1
    start = (new, old)
    removed: list[str] = []
    added: list[str] = []
    for line in (*hunk.lines, " "):  # a context line at the end closes the last run
        if line == NO_NEWLINE:
            continue
        kind = line[:1]
        if kind in "-+":
            if not removed and not added:
                start = (new, old)
            (removed if kind == "-" else added).append(line[1:])
        elif removed or added:
            found.append(Block(*start, tuple(removed), tuple(added)))
            removed, added = [], []
        new += kind in " +"
        old += kind in " -"
    return found


class Statements:
    """Where the statements of a Python text start and end (lines), to tell whole
    statements from parts of one; none known if the host cannot parse it."""

    def __init__(self, text: str) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = ast.Module(body=[], type_ignores=[])
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
        self.starts = {n.lineno for n in nodes}
        self.ends = {n.end_lineno or n.lineno for n in nodes}
        self.lines = text.split("\n")
        # each block's statements, as (first line, decorators included; last line)
        self.bodies: list[list[tuple[int, int]]] = []
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                body = getattr(node, name, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    self.bodies.append([(min([s.lineno, *(d.lineno for d in getattr(
                        s, "decorator_list", ()))]), s.end_lineno or s.lineno) for s in body])

    def whole(self, first: int, count: int) -> bool:
        """Whether lines ``first`` to ``first + count - 1`` are whole statements (none:
        yes, nothing is cut)."""
        return not count or (first in self.starts and first + count - 1 in self.ends)

    def siblings(self, first: int, count: int) -> bool:
        """Whether lines ``first`` to ``first + count - 1`` (blank and comment lines at either
        end aside) are a run of whole statements of one block: what can be moved into
        another block as it is (none: yes)."""
        code = [n for n in range(first, first + count) if n <= len(self.lines) and (
            self.lines[n - 1].strip() and not self.lines[n - 1].lstrip().startswith("#"))]
        if not code:
            return True
        for body in self.bodies:
            starts = [start for start, _ in body]
            if code[0] in starts:
                ends = [end for _, end in body[starts.index(code[0]):]]
                return code[-1] in ends
        return False


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def _shown(line: str) -> str:
    text = line.strip()
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def revert_variants(fp: FilePatch, source: PythonSource, base: str) -> list[Variant]:
    """The partial reverts and the swallowed symptoms of ``fp``'s change blocks, on
    ``source`` (the file after the gold patch; ``base`` before it). Only whole statements
    are put back or wrapped: a part of one (an argument, a line of a call) is left alone."""
    lines = source.text.split("\n")
    found: list[Variant] = []
    after, before = Statements(source.text), Statements(base)

    def variant(op: Operator, line: int, description: str, at: int, count: int,
                new: list[str]) -> None:
        found.append(Variant(op, fp.path, line, description,
                             partial(source.with_lines, at, count, new)))

    for hunk in fp.hunks:
        blocks = change_blocks(hunk)
        for block in blocks:
            at, count = block.new_start - 1, len(block.added)
            if at + count > len(lines) or list(block.added) != lines[at:at + count]:
                continue  # the text is not what the patch says: nothing to rely on
            whole = after.whole(block.new_start, count) and before.whole(
                block.old_start, len(block.removed))
            if len(blocks) > 1 and whole and not _one_statement(block):
                first = _shown((block.added or block.removed)[0])
                variant(Operator.PARTIAL_REVERT, block.new_start, f"change at line "
                        f"{block.new_start} (`{first}`) put back as before the fix", at, count,
                        list(block.removed))
            if len(block.removed) == len(block.added) > 1:
                for k, (old, new) in enumerate(zip(block.removed, block.added, strict=True)):
                    if old != new and _indent(old) == _indent(new) and after.whole(
                            block.new_start + k, 1) and before.whole(block.old_start + k, 1):
                        variant(Operator.PARTIAL_REVERT, block.new_start + k,
                                f"`{_shown(new)}` put back as `{_shown(old)}`", at + k, 1,
                                [old])
            swallowed = _swallowed(block) if whole and block.removed else None
            if swallowed is not None:
                variant(Operator.EXCEPTION_SWALLOWED, block.new_start,
                        f"`{_shown(block.removed[0])}`{' ...' if len(block.removed) > 1 else ''}"
                        " as before the fix, in `try: ... except Exception: pass`", at, count,
                        swallowed)
    return found


def _one_statement(block: Block) -> bool:
    """Whether ``block`` only adds what reads as one statement (its first line's indent is
    the least): deleting one statement is another operator's (branch_removed, ...)."""
    code = [line for line in block.added if line.strip()]
    return not block.removed and bool(code) and all(
        len(_indent(line)) > len(_indent(code[0])) for line in code[1:])


def _swallowed(block: Block) -> list[str] | None:
    """The lines ``block`` removed, inside ``try: ... except Exception: pass``, or None
    where that makes no sense: no line removed or added, or code at the module's level."""
    code = [line for line in block.removed if line.strip() and not line.lstrip().startswith("#")]
    if all(line.strip() in ("pass", "...") for line in code) or not any(
            line.strip() for line in block.added):
        return None
    indent = min((_indent(line) for line in code), key=len)
    if not indent:
        return None  # module level: an import or a definition, not a symptom
    unit = "\t" if indent.startswith("\t") else "    "
    inner = [unit + line if line.strip() else line for line in block.removed]
    return [f"{indent}try:", *inner, f"{indent}except Exception:", f"{indent}{unit}pass"]
