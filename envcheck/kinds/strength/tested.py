"""Wrong fixes that apply the fix only to the tested input (``tested_input_only``): the
overfitting repair that special-cases the test's own example and leaves every other input as
it was before the fix.

A change block of the gold patch (a run of removed and added lines, as :mod:`.reverts` finds
them) is kept only under a condition on a parameter of the function around it and a literal
the **test patch's added lines** hold (an int, a string, ``True``, ``False`` or ``None``), the
code before the fix otherwise:

- a block of whole statements: ``if <param> == <literal>:`` the new lines ``else:`` the old
  ones (``if <param> != <literal>:`` the old ones, for a block that only removes);
- a block inside a statement (an edited condition, an argument added to a call): the smallest
  expression holding the change, ``(<new> if <param> == <literal> else <old>)``.

``None``, ``True`` and ``False`` are compared with ``is``. Parameters the block names come
first; one whose default or annotation says its type gets only literals of that type. At most
:data:`PARAMETERS` parameters and :data:`LITERALS` literals per block. Without a test patch
there is no literal, so no mutant of this operator (the generation says so).
"""

from __future__ import annotations

import ast
import re
import warnings
from functools import partial

from envcheck.kinds.strength.diffs import FilePatch
from envcheck.kinds.strength.model import Operator
from envcheck.kinds.strength.pysource import PythonSource
from envcheck.kinds.strength.reverts import Block, Statements, change_blocks
from envcheck.kinds.strength.sampling import Variant
from envcheck.kinds.strength.testinputs import TestedInputs

__all__ = ["LITERALS", "PARAMETERS", "tested_variants"]

LITERALS = 3  # per parameter of a block
PARAMETERS = 3  # per block
SHOWN = 40
_CLAUSE = re.compile(r"(elif|else|except|finally|case)\b")
_SCOPE = re.compile(r"(global|nonlocal)\b")
_TYPES = {"int": int, "str": str, "bool": bool, "float": int}


def _typed(arg: ast.arg, default: ast.expr | None) -> type | None:
    """The type a parameter's default or annotation says (None: not said, or None)."""
    if isinstance(default, ast.Constant) and default.value is not None:
        return _TYPES.get(type(default.value).__name__)
    if isinstance(arg.annotation, ast.Name):
        return _TYPES.get(arg.annotation.id)
    return None


class _Tree:
    """The post-image's functions and expressions, by position (the host's ``ast``)."""

    def __init__(self, text: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.tree = ast.parse(text)
        self.lines = text.split("\n")
        self.offsets = [0]
        for line in self.lines[:-1]:
            self.offsets.append(self.offsets[-1] + len(line) + 1)
        self.functions = [n for n in ast.walk(self.tree)
                          if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        self.expressions: list[tuple[int, int]] = []  # where each starts and ends
        self._expressions(self.tree, False)

    def at(self, line: int, column: int) -> int:
        """The text offset of ``column`` (UTF-8 bytes, as ``ast`` counts) on ``line``."""
        text = self.lines[line - 1]
        return self.offsets[line - 1] + len(text.encode()[:column].decode(errors="ignore"))

    def _expressions(self, node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.pattern):
                continue  # a match pattern's values are not expressions to rewrite
            if isinstance(child, ast.expr) and not inside and not isinstance(
                    child, ast.Slice | ast.Starred | ast.Yield | ast.YieldFrom | ast.NamedExpr
                    | ast.Await) and not isinstance(getattr(child, "ctx", None),
                                                    ast.Store | ast.Del) \
                    and child.end_lineno is not None and child.end_col_offset is not None:
                self.expressions.append((self.at(child.lineno, child.col_offset),
                                         self.at(child.end_lineno, child.end_col_offset)))
            self._expressions(child, inside or isinstance(child, ast.JoinedStr))

    def function(self, first: int, last: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function whose body holds lines ``first`` to ``last``."""
        around = [f for f in self.functions if f.body[0].lineno <= first
                  and last <= (f.end_lineno or f.lineno)]
        return max(around, key=lambda f: f.body[0].lineno, default=None)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef, named: str,
                inputs: TestedInputs) -> list[tuple[str, type | None]]:
    """Up to :data:`PARAMETERS` of the function's parameters (not ``self``, ``cls``, ``*args``
    or ``**kwargs``), with the type each is said to have: those the tests pass by keyword
    first, then those ``named`` names."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    found = list(zip(positional, [*defaults, *args.defaults], strict=True))
    found += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    found = [(a, d) for a, d in found if a.arg not in ("self", "cls")]
    found.sort(key=lambda p: (p[0].arg not in inputs.keywords,
                              not re.search(rf"\b{re.escape(p[0].arg)}\b", named)))
    return [(a.arg, _typed(a, d)) for a, d in found[:PARAMETERS]]


def _conditions(parameters: list[tuple[str, type | None]], inputs: TestedInputs,
                negated: bool = False) -> list[str]:
    """Per parameter, up to :data:`LITERALS` tests: the literals the tests pass it by
    keyword first, then the others of its type."""
    found = []
    for name, kind in parameters:
        passed = inputs.keywords.get(name, ())
        fitting = [*passed, *(lit for lit in inputs.literals if lit not in passed
                              and (kind is None or lit.kind is kind))]
        found += [lit.test(name, negated) for lit in fitting[:LITERALS]]
    return found


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def _moved(lines: tuple[str, ...], indent: str) -> list[str] | None:
    """``lines`` dedented by their own least indent and put at ``indent``; None if their
    first code line is not the least indented."""
    code = [line for line in lines if line.strip()]
    if not code:
        return None
    least = min((_indent(line) for line in code), key=len)
    if _indent(code[0]) != least or not all(line.startswith(least) for line in code):
        return None
    return [indent + line[len(least):] if line.strip() else line for line in lines]


def _statements_in(lines: tuple[str, ...]) -> bool:
    return any(line.strip() and not line.lstrip().startswith("#") for line in lines)


def _only_said(lines: tuple[str, ...]) -> bool:
    """Only comments, strings and ``pass``: no logic to special-case."""
    code = "\n".join(line.strip() for line in lines if line.strip())
    if not code:
        return True
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return False
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(
        s.value, ast.Constant)) for s in body)


def _shown(line: str) -> str:
    text = line.strip()
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def tested_variants(fp: FilePatch, source: PythonSource, base: str,
                    inputs: TestedInputs) -> list[Variant]:
    """The fix of each change block of ``fp`` kept only for a tested input, on ``source``
    (the file after the gold patch; ``base`` before it)."""
    if not inputs:
        return []
    try:
        tree = _Tree(source.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    after, before = Statements(source.text), Statements(base)
    found: list[Variant] = []
    for hunk in fp.hunks:
        for block in change_blocks(hunk):
            at, count = block.new_start - 1, len(block.added)
            if list(block.added) != tree.lines[at:at + count] or any(
                    '"""' in line or "'''" in line for line in (*block.added, *block.removed)):
                continue  # not what the patch says; a string over lines would change
            whole = after.siblings(block.new_start, count) and before.siblings(
                block.old_start, len(block.removed))
            made = _statements(block, tree, inputs) if whole else _expression(
                block, tree, inputs)
            for description, first, count, lines in made:
                found.append(Variant(Operator.TESTED_INPUT_ONLY, fp.path, block.new_start,
                                     description, partial(source.with_lines, first, count,
                                                          lines)))
    return found


Made = tuple[str, int, int, list[str]]  # description; the lines (0-based, count) replaced by


def _statements(block: Block, tree: _Tree, inputs: TestedInputs) -> list[Made]:
    """``if <test>:`` the block's new statements ``else:`` its old ones."""
    added = block.added if _statements_in(block.added) else ()
    removed = block.removed if _statements_in(block.removed) else ()
    code = [line for line in (*added, *removed) if _statements_in((line,))]
    if not code or _CLAUSE.match(code[0].strip()) or any(_SCOPE.match(line.strip())
                                                         for line in code):
        return []
    if _only_said(added) and _only_said(removed):
        return []
    where = block.new_start if added else max(block.new_start - 1, 1)
    function = tree.function(where, where + max(len(block.added), 1) - 1)
    if function is None:
        return []
    indent = _indent(code[0])
    unit = "\t" if indent.startswith("\t") else "    "
    new = _moved(added, indent + unit) if added else []
    old = _moved(removed, indent + unit) if removed else []
    if new is None or old is None:
        return []
    parameters = _parameters(function, "\n".join(code), inputs)
    shown = _shown(code[0])
    made = []
    for test in _conditions(parameters, inputs, negated=not added):
        lines = [f"{indent}if {test}:", *(new or old)]
        if new and old:
            lines += [f"{indent}else:", *old]
        made.append((f"change at line {block.new_start} (`{shown}`) applied only when "
                     f"`{test}` (as before the fix otherwise)", block.new_start - 1,
                     len(block.added), lines))
    return made


def _expression(block: Block, tree: _Tree, inputs: TestedInputs) -> list[Made]:
    """``(<new> if <test> else <old>)`` around the smallest expression holding the change."""
    if not block.added:
        return []
    text = "\n".join(tree.lines)
    start = tree.offsets[block.new_start - 1]
    end = start + len("\n".join(block.added))
    new, old = "\n".join(block.added), "\n".join(block.removed)
    prefix = 0
    while prefix < min(len(new), len(old)) and new[prefix] == old[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(new), len(old)) - prefix and new[-1 - suffix] == old[-1 - suffix]:
        suffix += 1
    if prefix + suffix == len(new):  # only removed: the expression around where it was
        prefix, suffix = max(prefix - 1, 0), max(suffix - 1, 0)
    lo, hi = start + prefix, end - suffix
    middle = old[prefix:len(old) - suffix]
    if not block.removed and text[hi:hi + 1] == "\n":
        hi += 1  # lines only added: they go with their newline
    around = [(e - s, s, e) for s, e in tree.expressions if s <= lo and hi <= e]
    for _, s, e in sorted(around):
        now, was = text[s:e], text[s:lo] + middle + text[hi:e]
        line = text.count("\n", 0, s) + 1
        last = text.count("\n", 0, e) + 1
        function = tree.function(line, last)
        if function is None or not _parses(f"({now})", f"({was})"):
            continue
        parameters = _parameters(function, f"{now}\n{was}", inputs)
        made = []
        for test in _conditions(parameters, inputs):
            changed = f"({now} if {test} else {was})"
            if not _parses(changed):
                break
            first = tree.offsets[line - 1]
            stop = tree.offsets[last] - 1 if last < len(tree.offsets) else len(text)
            lines = (text[first:s] + changed + text[e:stop]).split("\n")
            made.append((f"`{_shown(now)}` only when `{test}`, else `{_shown(was)}` as "
                         "before the fix", line - 1, last - line + 1, lines))
        return made
    return []


def _parses(*expressions: str) -> bool:
    try:
        for expression in expressions:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
