"""What a task's test patch passes to the code under test: the literals of its added lines
(ints, strings, ``True``, ``False``, ``None``), the most frequent first, and those passed by
keyword (``text=False``), which the fix kept only for the tested input (:mod:`.tested`)
compares a parameter with (pure)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envcheck.kinds.strength.diffs import PatchError, parse_patch

__all__ = ["KEPT", "Literal", "TestedInputs", "test_literals"]

KEPT = 8  # literals taken from the test patch, the most frequent first
CHARS = 40  # a longer string is a message or a fixture, not an input to special-case


@dataclass(frozen=True)
class Literal:
    """A literal as written (``-1``, ``'text'``, ``None``) and its type."""

    code: str
    kind: type

    def test(self, name: str, negated: bool = False) -> str:
        if self.kind in (bool, type(None)):
            return f"{name} {'is not' if negated else 'is'} {self.code}"
        return f"{name} {'!=' if negated else '=='} {self.code}"


def _tokens(line: str) -> list[tokenize.TokenInfo]:
    found: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
            found.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return found


def _literals_of(line: str) -> list[tuple[str | None, Literal]]:
    """Each literal of ``line``, with the keyword it is passed as (``factor=-1``), if any."""
    found: list[tuple[str | None, Literal]] = []
    tokens = [t for t in _tokens(line) if t.type not in (
        tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER, tokenize.INDENT,
        tokenize.DEDENT)]
    for i, token in enumerate(tokens):
        literal, first = None, i
        if token.type == tokenize.NAME and token.string in ("True", "False", "None"):
            literal = Literal(token.string, type(ast.literal_eval(token.string)))
        elif token.type == tokenize.NUMBER:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):
                continue
            if type(value) is not int:
                continue
            prior = tokens[i - 2] if i > 1 else None
            if i and tokens[i - 1].string == "-" and (
                    prior is None or (prior.type == tokenize.OP and prior.string not in ")]}")
                    or prior.string in ("return", "in", "is", "not", "and", "or", "else")):
                value, first = -value, i - 1
            literal = Literal(repr(value), int)
        elif token.type == tokenize.STRING and len(tokens) > 1 and not re.match(
                r"[A-Za-z]*[fFbB]", token.string):  # alone on its line: a docstring
            try:
                text = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):
                continue
            if isinstance(text, str) and len(text) <= CHARS and "\n" not in text:
                literal = Literal(repr(text), str)
        if literal is not None:
            keyword = tokens[first - 2].string if first > 1 and tokens[first - 1].string == "=" \
                and tokens[first - 2].type == tokenize.NAME else None
            found.append((keyword, literal))
    return found


@dataclass(frozen=True)
class TestedInputs:
    """What the test patch's added lines pass: its literals, the most frequent first, and
    per keyword (``text=False``) the literals passed as it."""

    literals: tuple[Literal, ...] = ()
    keywords: Mapping[str, tuple[Literal, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.literals)


def _ranked(counts: Counter[Any], order: dict[Any, int]) -> list[Any]:
    return sorted(counts, key=lambda k: (-counts[k], order[k]))


def test_literals(test_patch: str | None) -> TestedInputs:
    """The literals in the added lines of the test patch's Python files (at most
    :data:`KEPT`, the most frequent first, then in the order first seen); none without a
    test patch."""
    if not test_patch:
        return TestedInputs()
    try:
        patch = parse_patch(test_patch)
    except PatchError:
        return TestedInputs()
    counts: Counter[Literal] = Counter()
    passed: Counter[tuple[str, Literal]] = Counter()
    order: dict[Any, int] = {}
    for fp in patch.files:
        if not fp.path.endswith(".py"):
            continue
        for hunk in fp.hunks:
            for line in hunk.lines:
                if not line.startswith("+"):
                    continue
                for keyword, literal in _literals_of(line[1:]):
                    counts[literal] += 1
                    order.setdefault(literal, len(order))
                    if keyword is not None:
                        passed[keyword, literal] += 1
                        order.setdefault((keyword, literal), len(order))
    keywords: dict[str, list[Literal]] = {}
    for keyword, literal in _ranked(passed, order):
        keywords.setdefault(keyword, []).append(literal)
    return TestedInputs(tuple(_ranked(counts, order)[:KEPT]),
                        {k: tuple(v[:KEPT]) for k, v in keywords.items()})
