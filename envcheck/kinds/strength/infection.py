"""Infection: whether a mutant the tests let through behaves differently from the gold patch
on the tests' own inputs (pure: no sandbox). This module finds what to record; the recording
read back and compared is :mod:`.behaviour`.

Mutation testing's reach, infect, propagate: a wrong fix is evidence about the assertions
only if the code it changes runs under the tests (reach) and computes something else there
(infection) that the functions the fix changes hand back to their callers (propagation).
The functions whose lines the gold patch adds are recorded while the fail-to-pass tests run
(``recorder/_envcheck_record.py``): per test and function, what each call returned or raised,
what it wrote, and its mutable arguments' state after it.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable, Mapping

__all__ = ["CLASSIFICATION_VERSION", "changed_functions", "targets"]

# 1: returns, raises and argument state, call counts included; 2: call counts alone are no
# difference, output is behaviour, survivors in a hunk no test needs are apart; 3: 256 distinct
# events kept per test and function (32 left a runner with no test names uncompared), an
# ``except ...: raise`` recorded as the raise it is (it was "returned None")
CLASSIFICATION_VERSION = "infection 3"


def _functions(text: str) -> list[tuple[str, str, list[int], int, int]]:
    """Each function of ``text``: (qualified name, name, the lines its code object may start
    on, first line, last line), in source order; a name given twice gets ``#2``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(text)
    found: list[tuple[str, str, list[int], int, int]] = []
    seen: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = prefix + child.name
                seen[qualname] = seen.get(qualname, 0) + 1
                shown = qualname if seen[qualname] == 1 else f"{qualname}#{seen[qualname]}"
                starts = [child.lineno, *(d.lineno for d in child.decorator_list)]
                found.append((shown, child.name, sorted(set(starts)), min(starts),
                              child.end_lineno or child.lineno))
                visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def changed_functions(text: str, added: Iterable[int]) -> set[str]:
    """The innermost function around each of the ``added`` lines of ``text``."""
    functions = _functions(text)
    found = set()
    for line in added:
        around = [f for f in functions if f[3] <= line <= f[4]]
        if around:
            found.add(max(around, key=lambda f: f[3])[0])
    return found


def targets(texts: Mapping[str, str], wanted: Mapping[str, set[str]]) -> list[list[object]]:
    """What the recorder is told: ``[path, name, lines, label]`` for each function of
    ``wanted`` (path -> qualified names) found in ``texts`` (path -> text)."""
    rows: list[list[object]] = []
    for path, names in sorted(wanted.items()):
        try:
            functions = _functions(texts[path])
        except (KeyError, SyntaxError, ValueError):
            continue
        for qualname, name, lines, _, _ in functions:
            if qualname in names:
                rows.append([path, name, lines, f"{path}:{qualname}"])
    return rows
