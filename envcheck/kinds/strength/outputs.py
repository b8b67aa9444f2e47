"""Wrong outputs for a script oracle (Harbor's ``solve.sh``): the files the oracle changed,
each changed a little. A verifier that rewards one does not check that output.

- Python sources: the Python operators, on the lines the oracle added or changed when the
  image had the file (the anchor rule of the gold patch's added lines), on every line of a
  file the oracle created;
- JSON: one number changed, one element or member dropped (both still parse), the file cut
  in half (it then does not: a truncated output);
- CSV: one number changed, one record dropped (never the header), the file cut in half;
- any other text: one number changed, one line dropped, the file cut in half.

Binary and empty files are skipped, and said so; so is a Python file the image had whose text
there is not known (its changed lines are not), or in which the oracle changed no line.
"""

from __future__ import annotations

import difflib
import json
import posixpath
from collections.abc import Callable, Mapping
from functools import partial
from typing import TypeVar

import libcst as cst

from envcheck.kinds.strength.diffs import unified_section
from envcheck.kinds.strength.gold import DEFAULT_CAP
from envcheck.kinds.strength.model import Operator, OutputMutant, Skipped
from envcheck.kinds.strength.pysource import PythonSource
from envcheck.kinds.strength.sampling import Generation, Rejection, Variant, seeded, take
from envcheck.kinds.strength.textspans import (
    bumped,
    csv_records,
    json_spans,
    line_spans,
    text_numbers,
    without_member,
)

__all__ = ["output_mutants"]

T = TypeVar("T")
SITES_PER_OPERATOR = 64  # a file of a million numbers offers a seeded 64 of them
_BINARY_PROBE = 8192


def _decoded(content: bytes | str) -> str | None:
    if isinstance(content, str):
        return content
    if b"\0" in content[:_BINARY_PROBE]:
        return None
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _python_check(source: PythonSource, _variant: Variant, text: str) -> Rejection | None:
    return source.check(text)


def changed_lines(original: str, text: str) -> frozenset[int]:
    """The lines of ``text`` (1-based) that ``original`` does not have there: added or
    changed, as a diff from one to the other shows them."""
    matcher = difflib.SequenceMatcher(None, original.splitlines(), text.splitlines(),
                                      autojunk=False)
    return frozenset(n + 1 for op, _, _, j1, j2 in matcher.get_opcodes()
                     if op in ("replace", "insert") for n in range(j1, j2))


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


class _TextFile:
    """A non-Python output's candidates; each file has its own seen set for duplicates."""

    def __init__(self, path: str, text: str, seed: str) -> None:
        self.path = path
        self.text = text
        self.seed = f"{seed}\0{path}"
        self.kind = posixpath.splitext(path)[1].lower()
        self.json = json_spans(text) if self.kind == ".json" else None
        self._seen: set[str] = set()

    def _spread(self, items: list[T], operator: Operator) -> list[T]:
        if len(items) <= SITES_PER_OPERATOR:
            return items
        picked = seeded(f"{self.seed}\0{operator}").sample(range(len(items)),
                                                           SITES_PER_OPERATOR)
        return [items[i] for i in sorted(picked)]

    def _variant(self, operator: Operator, offset: int, description: str,
                 render: Callable[[], str]) -> Variant:
        return Variant(operator, self.path, _line_at(self.text, offset), description, render)

    def variants(self) -> list[Variant]:
        text = self.text
        numbers = self.json.numbers if self.json is not None else text_numbers(text)
        found = []
        for a, b in self._spread(numbers, Operator.NUMBER_CHANGED):
            new = bumped(text[a:b])
            found.append(self._variant(Operator.NUMBER_CHANGED, a, f"{text[a:b]} -> {new}",
                                       partial(_splice, text, a, b, new)))
        found.extend(self._records())
        lines = text.splitlines(keepends=True)
        cut = (sum(len(line) for line in lines[:len(lines) // 2]) if len(lines) > 1
               else len(text) // 2)
        found.append(self._variant(Operator.TRUNCATED, cut, f"cut after {cut} of {len(text)} "
                                   "characters", partial(_splice, text, cut, len(text), "")))
        return found

    def _records(self) -> list[Variant]:
        text = self.text
        found = []
        if self.json is not None:
            members = [(m, k) for m in self.json.containers for k in range(len(m))]
            for m, k in self._spread(members, Operator.RECORD_DROPPED):
                shown = " ".join(text[m[k][0]:m[k][1]].split())[:60]
                found.append(self._variant(Operator.RECORD_DROPPED, m[k][0],
                                           f"JSON member `{shown}` dropped",
                                           partial(without_member, text, m, k)))
            return found
        records = csv_records(text) if self.kind in (".csv", ".tsv") else []
        operator = Operator.RECORD_DROPPED if records else Operator.LINE_DROPPED
        for a, b in self._spread(records or line_spans(text), operator):
            shown = " ".join(text[a:b].split())[:60]
            found.append(self._variant(operator, a, f"`{shown}` dropped",
                                       partial(_splice, text, a, b, "")))
        return found

    def check(self, variant: Variant, text: str) -> Rejection | None:
        if text == self.text:
            return Rejection.SAME_AS_ORIGINAL
        if text in self._seen:
            return Rejection.DUPLICATE
        if self.json is not None and variant.operator is not Operator.TRUNCATED:
            try:
                json.loads(text)
            except ValueError:
                return Rejection.NOT_JSON
        self._seen.add(text)
        return None


def _python_lines(path: str, text: str, originals: Mapping[str, bytes | str | None]
                  ) -> frozenset[int] | str | None:
    """Where a Python file's sites may be: None, every line (a file the oracle created);
    the lines it changed in the image's file; a string: why none can be told."""
    if path not in originals:
        return None
    original = originals[path]
    before = None if original is None else _decoded(original)
    if before is None:
        return "its text in the image could not be read: the lines the oracle changed are unknown"
    lines = changed_lines(before, text)
    return lines if lines else "the oracle added or changed no line of it"


def output_mutants(files: Mapping[str, bytes | str], seed: str,
                   cap: int | None = DEFAULT_CAP,
                   originals: Mapping[str, bytes | str | None] | None = None
                   ) -> Generation[OutputMutant]:
    """Up to ``cap`` mutants (None: every one) of the files an oracle wrote (``files``: a
    path and its content as the oracle left it), sampled by ``seed``. ``originals``: the
    image's content of the files the oracle changed rather than created (None: it could not
    be read), which confines a Python file's mutants to the lines the oracle changed."""
    checks: dict[str, Callable[[Variant, str], Rejection | None]] = {}
    texts: dict[str, str] = {}
    variants: list[Variant] = []
    skipped: list[Skipped] = []
    for path in sorted(files):
        text = _decoded(files[path])
        if text is None:
            skipped.append(Skipped(path, "binary"))
            continue
        if not text.strip():
            skipped.append(Skipped(path, "empty"))
            continue
        texts[path] = text
        if path.endswith(".py"):
            try:
                source = PythonSource(path, text)
            except cst.ParserSyntaxError:
                pass  # not Python 3: changed as a text
            else:
                lines = _python_lines(path, text, originals or {})
                if isinstance(lines, str):
                    skipped.append(Skipped(path, lines))
                    continue
                variants.extend(source.variants(lines))
                checks[path] = partial(_python_check, source)
                continue
        plain = _TextFile(path, text, seed)
        variants.extend(plain.variants())
        checks[path] = plain.check

    def accept(variant: Variant, text: str) -> Rejection | OutputMutant:
        why = checks[variant.file](variant, text)
        if why is not None:
            return why
        diff = unified_section(variant.file, variant.file, texts[variant.file], text)
        return OutputMutant(variant.operator, variant.file, variant.line, variant.description,
                            diff, text)

    return take(variants, seed, cap, accept, skipped)
