"""One Python file, parsed once: its mutants as :class:`Variant` s, and the static filters a
rendered mutant must pass (it compiles; it is neither the original nor another mutant).

A mutant changes one statement: only that statement is rendered again (inside its blocks) and
spliced into the file's text, and only its top-level statement is compiled and compared (its
bytecode, names and constants, line numbers left out: trivially equivalent mutants are the
same). The cost follows the statement's size, not the file's: rendering and comparing whole
files took 0.2 s a mutant on a 500-line module. Compiling uses the host's interpreter, which
may be older than the task's: a file the host cannot compile (newer syntax) is checked by
libcst's own parser instead (it reads Python 3.0 to 3.14 whatever runs envcheck) and compared
as text.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from types import CodeType

import libcst as cst

from envcheck.kinds.strength.pysites import Site, find_sites
from envcheck.kinds.strength.sampling import Rejection, Variant

__all__ = ["PythonSource"]


class PythonSource:
    """Raises :class:`libcst.ParserSyntaxError` if ``text`` is not Python 3."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.module = cst.parse_module(text)
        self._host = self._host_key(text) is not None
        self._trimmed = False
        self._spans = self._statement_spans()
        self._line_offsets = [0]
        for line in text.split("\n")[:-1]:
            self._line_offsets.append(self._line_offsets[-1] + len(line) + 1)
        self._rendered: dict[str, tuple[int, str]] = {}  # mutant text -> statement, its text
        self._seen: set[tuple[int, Hashable]] = set()
        self._original: dict[int, Hashable | None] = {}

    def _statement_spans(self) -> list[tuple[int, int]] | None:
        """Where each top-level statement's code sits in the text, or None if the pieces
        do not add up to it (then mutants are rendered whole)."""
        codes = [self.module.code_for_node(s) for s in self.module.body]
        body = "".join(codes)
        newline = self.module.default_newline
        self._trimmed = bool(codes) and not self.module.has_trailing_newline \
            and body.endswith(newline)
        if self._trimmed:  # the file's last line has no newline: its statement neither
            codes[-1] = codes[-1].removesuffix(newline)
            body = body.removesuffix(newline)
        start = self.text.find(body)
        if start < 0 or self.text[start + len(body):].strip():
            return None
        spans = []
        for code in codes:
            spans.append((start, start + len(code)))
            start += len(code)
        return spans

    def _host_key(self, text: str) -> Hashable | None:
        """What the code does, as the host compiles it (bytecode, names and constants,
        recursively; no line numbers): mutants equal in it are the same mutant, whatever
        their text, as in trivial compiler equivalence. None if the host does not compile
        it."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes and the like: not ours
                code = compile(text, self.path, "exec", dont_inherit=True, optimize=0)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        return _shape(code)

    def _key(self, text: str) -> Hashable | None:
        if self._host:
            return self._host_key(text)
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError:
            return None
        return text

    def variants(self, added: frozenset[int] | None) -> list[Variant]:
        """A variant per site anchored on ``added`` (None: every line)."""
        module, sites = find_sites(self.module, added)
        return [Variant(s.operator, self.path, s.line, s.description, self._renderer(module, s))
                for s in sites]

    def _renderer(self, module: cst.Module, site: Site) -> Callable[[], str]:
        def render() -> str:
            if self._spans is None:
                whole = module.deep_replace(site.original, site.replacement)
                assert isinstance(whole, cst.Module)
                return whole.code
            done = self._splice(module, site, site.statement, site.indents, site.first_line)
            if done is None:  # the statement's code is not where it was said to be
                done = self._splice(module, site, module.body[site.top], (),
                                    self._first_line(site.top))
            assert done is not None, "a top-level statement's code is where it was measured"
            return done
        return render

    def _first_line(self, top: int) -> int:
        start, _ = self._spans[top] if self._spans else (0, 0)
        return self.text.count("\n", 0, start) + 1

    def _splice(self, module: cst.Module, site: Site, statement: cst.BaseStatement,
                indents: tuple[str | None, ...], first_line: int) -> str | None:
        """The file with ``statement`` (at ``first_line``, inside blocks of ``indents``)
        rendered changed by ``site``, or None if its code is not at that line."""
        assert self._spans is not None
        offset = self._line_offsets[first_line - 1] if first_line <= len(
            self._line_offsets) else -1
        newline = module.default_newline
        before = _code(module, statement, indents)
        last = self._trimmed and offset + len(before) - len(newline) == len(self.text)
        before = before.removesuffix(newline) if last else before  # no newline at the end
        if offset < 0 or not self.text.startswith(before, offset):
            return None
        changed = statement.deep_replace(site.original, site.replacement)
        assert isinstance(changed, cst.BaseStatement)
        after = _code(module, changed, indents)
        after = after.removesuffix(newline) if last else after
        text = self.text[:offset] + after + self.text[offset + len(before):]
        start, end = self._spans[site.top]
        self._rendered[text] = (site.top, text[start:end + len(after) - len(before)])
        return text

    def check(self, text: str) -> Rejection | None:
        """Why ``text`` is not a mutant to play, or None (it is then remembered, so the
        same code again is a duplicate)."""
        where, code = self._rendered.pop(text, (-1, text))  # -1: the whole file
        if where not in self._original:
            start, end = self._spans[where] if self._spans and where >= 0 else (0, None)
            self._original[where] = self._key(self.text[start:end])
        key = self._key(code)
        if key is None:
            return Rejection.NOT_COMPILING
        if key == self._original[where]:
            return Rejection.SAME_AS_ORIGINAL
        if (where, key) in self._seen:
            return Rejection.DUPLICATE
        self._seen.add((where, key))
        return None



def _code(module: cst.Module, statement: cst.BaseStatement,
          indents: tuple[str | None, ...]) -> str:
    """``statement``'s code as the module writes it inside blocks of ``indents``: rendered
    inside as many ``if True:`` blocks (public libcst only), whose header lines are cut."""
    node: cst.BaseStatement = statement
    for indent in reversed(indents):
        node = cst.If(test=cst.Name("True"), body=cst.IndentedBlock(body=[node], indent=indent))
    code = module.code_for_node(node)
    return code.split(module.default_newline, len(indents))[-1] if indents else code


def _shape(code: CodeType) -> Hashable:
    return (code.co_name, code.co_code, code.co_names, code.co_varnames, code.co_freevars,
            code.co_cellvars, code.co_flags, code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount, getattr(code, "co_exceptiontable", b""),
            tuple(_constant(c) for c in code.co_consts))


def _constant(value: object) -> Hashable:
    """A constant by type and text: ``1``, ``1.0`` and ``True`` are equal in Python, and
    ``0.0 == -0.0``, but a mutant that swaps them is a different program."""
    if isinstance(value, CodeType):
        return _shape(value)
    if isinstance(value, tuple | frozenset):
        parts = [_constant(v) for v in value]
        return type(value).__name__, tuple(parts if isinstance(value, tuple) else sorted(
            parts, key=repr))
    return type(value).__name__, repr(value)
