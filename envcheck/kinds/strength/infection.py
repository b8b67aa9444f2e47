"""Infection: whether a mutant the tests let through behaves differently from the gold patch
on the tests' own inputs (pure: no sandbox).

Mutation testing's reach, infect, propagate: a wrong fix is evidence about the assertions
only if the code it changes runs under the tests (reach) and computes something else there
(infection) that the functions the fix changes hand back to their callers (propagation).
The functions whose lines the gold patch adds are recorded while the fail-to-pass tests run
(``recorder/_envcheck_record.py``): per test and function, what each call returned or raised
and its mutable arguments' state after it. The gold patch is recorded twice: what differs
between those two runs is not behaviour (a time, a random number) and is left out of the
comparison; addresses and the order of sets and dicts never reach it.
"""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["CLASSIFICATION_VERSION", "Calls", "RecordError", "changed_functions",
           "difference", "parse_recording", "targets"]

CLASSIFICATION_VERSION = "infection 1"
SHOWN = 100  # characters of a value in a difference said


class RecordError(ValueError):
    """A recording that cannot be used, and why."""


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


@dataclass(frozen=True)
class Calls:
    """One function's calls in one test: how many, a digest of them all, the first ones."""

    count: int
    digest: str
    first: tuple[tuple[str, ...], ...]  # each: kind, value, then name=state per argument


def _event(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or len(raw) != 3 or not isinstance(raw[2], list):
        raise RecordError("an event is not [kind, value, state]")
    return (str(raw[0]), str(raw[1]), *(f"{n}={v}" for n, v in raw[2]))


def parse_recording(text: str) -> dict[str, Calls]:
    """The recorder's output (one JSON line per process) as calls per ``test\\tfunction``;
    RecordError if there is none, or a tracer displaced the recorder."""
    merged: dict[str, list[Calls]] = {}
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise RecordError("no process wrote a recording (the tests' Python did not load "
                          "the recorder)")
    for line in lines:
        try:
            data = json.loads(line)
            if data.get("displaced"):
                raise RecordError("another tracer (coverage, a debugger) displaced the "
                                  "recorder")
            for key, (count, digest, first) in data["calls"].items():
                calls = Calls(int(count), str(digest), tuple(_event(e) for e in first))
                merged.setdefault(key, []).append(calls)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RecordError(f"an unreadable recording: {exc}"[:200]) from exc
    found = {}
    for key, parts in merged.items():  # the same test in several processes: one, in order
        parts.sort(key=lambda c: c.digest)
        found[key] = parts[0] if len(parts) == 1 else Calls(
            sum(c.count for c in parts), "+".join(c.digest for c in parts),
            tuple(e for c in parts for e in c.first))
    return found


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def _where(key: str) -> tuple[str, str]:
    test, _, label = key.partition("\t")
    return label, (f" in {test}" if test else "")


def _said(event: tuple[str, ...], part: int) -> str:
    if part in {0, 1}:
        return f"{'raised' if event[0] == 'raise' else 'returned'} {_cut(event[1])}"
    return f"left {_cut(event[part])}"


def _first_change(key: str, gold: Calls, again: Calls, mutant: Calls) -> str | None:
    """Where ``mutant`` departs from the gold patch in what both gold runs agree on."""
    label, where = _where(key)
    if gold.count == again.count and mutant.count != gold.count:
        return (f"`{label}` was called {mutant.count} time(s){where} where under the gold "
                f"patch it was called {gold.count} time(s)")
    for i, (g, a) in enumerate(zip(gold.first, again.first, strict=False)):
        m = mutant.first[i] if i < len(mutant.first) else None
        for part in range(max(len(g), len(a))):
            stable = part < len(g) and part < len(a) and g[part] == a[part]
            if not stable:
                continue
            if m is None or part >= len(m) or m[part] != g[part]:
                if m is None:
                    return f"`{label}` stopped after {i} call(s){where}"
                shown = part if part > 1 or m[0] == g[0] else 0
                return (f"`{label}` {_said(m, shown)}{where} where under the gold patch it "
                        f"{_said(g, shown)}")
    return None


def difference(gold: Mapping[str, Calls], again: Mapping[str, Calls],
               mutant: Mapping[str, Calls]) -> str | None:
    """The first behaviour in which ``mutant`` differs from the gold patch on what the two
    gold runs (``gold``, ``again``) agree on, said in words; None: no difference."""
    for key in sorted(set(gold) | set(again) | set(mutant)):
        g, a, m = gold.get(key), again.get(key), mutant.get(key)
        label, where = _where(key)
        if g is None or a is None:
            if g is None and a is None and m is not None:
                return f"`{label}` was called{where}, which under the gold patch it is not"
            continue  # reached in one gold run only: not behaviour to rely on
        if m is None:
            return f"`{label}` was never called{where}, which under the gold patch it is"
        if g == a:
            if m != g:
                return _first_change(key, g, a, m) or (
                    f"`{label}` behaved differently{where} after its first "
                    f"{len(g.first)} call(s)")
            continue
        found = _first_change(key, g, a, m)
        if found is not None:
            return found
    return None
