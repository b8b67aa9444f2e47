"""One Python file, parsed once: its mutants as :class:`Variant` s, and the static filters a
rendered mutant must pass (it compiles; it is neither the original nor another mutant).

What it costs follows what changed, not the file's size (rendering and comparing whole files
took 0.2 s a mutant on a 500-line module, and positions over a 3,600-line file 0.8 s):

- sites are looked for only in the top-level statements holding an added line (where each
  starts comes from the host's C-fast ``ast``), each statement visited alone;
- a mutant renders only the statement it changes (inside its blocks) and is spliced into the
  file's text;
- only its top-level statement is compiled and compared: its bytecode, names and constants,
  line numbers left out, so trivially equivalent mutants are the same (``x is None`` flipped
  and ``if x is None`` negated compile alike).

Compiling uses the host's interpreter, which may be older than the task's: a file the host
cannot compile (newer syntax) is checked by libcst's own parser instead (it reads Python 3.0
to 3.14 whatever runs envcheck) and compared as text, whole. Where the host still parses it,
sites are found and mutants spliced statement by statement as above, and only the statement
a mutant changes is parsed (inside ``if True:`` blocks as deep as it sits): the rest of the
text is the original's, which parsed (a 1,800-line file took 0.45 s a parse).
"""

from __future__ import annotations

import ast
import bisect
import warnings
from collections.abc import Hashable
from functools import partial
from types import CodeType

import libcst as cst

from envcheck.kinds.strength.pysites import Site, find_sites, leading_lines
from envcheck.kinds.strength.sampling import Rejection, Variant

__all__ = ["PythonSource", "statement_lines", "without_docstrings"]


class PythonSource:
    """Raises :class:`libcst.ParserSyntaxError` if ``text`` is not Python 3."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.module = cst.parse_module(text)
        self._host = self._host_key(text) is not None
        self._offsets = [0]  # where each line starts
        for line in text.split("\n")[:-1]:
            self._offsets.append(self._offsets[-1] + len(line) + 1)
        self._firsts = statement_lines(self.module, text)
        # mutant text -> its top-level statement and the code to check in its place (the
        # host: that statement's text; libcst: the code it changes, with the blocks around)
        self._rendered: dict[str, tuple[int, str]] = {}
        self._seen: set[tuple[int, Hashable]] = set()
        self._original: dict[int, Hashable | None] = {}

    def _host_key(self, text: str) -> Hashable | None:
        """What the code does, as the host compiles it (bytecode, names and constants,
        recursively; no line numbers, no docstrings): mutants equal in it are the same
        mutant, whatever their text, as in trivial compiler equivalence. None if the host
        does not compile it."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes and the like: not ours
                tree = without_docstrings(ast.parse(text, self.path))
                code = compile(tree, self.path, "exec", dont_inherit=True, optimize=0)
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
        sites = find_sites(self.module, added, self._firsts)
        return [Variant(s.operator, self.path, s.line, s.description, partial(self._render, s))
                for s in sites]

    def _top_start(self, top: int) -> int:
        """Where top-level statement ``top``'s code starts (its leading lines included)."""
        assert self._firsts is not None
        line = self._firsts[top] - leading_lines(self.module.body[top])
        return self._offsets[line - 1]

    def with_lines(self, at: int, count: int, new: list[str]) -> str:
        """The text with its ``count`` lines from ``at`` (0-based) replaced by ``new``; when
        they lie inside one top-level statement, only that statement is compared (as a
        site's mutant is)."""
        end = self._offsets[at + count] if at + count < len(self._offsets) else len(self.text)
        old = self.text[self._offsets[at]:end]
        newline = "\n" if old.endswith("\n") or at + count < len(self._offsets) else ""
        block = "".join(line + "\n" for line in new)
        block = block if newline or not block else block[:-1]
        text = self.text[:self._offsets[at]] + block + self.text[end:]
        if self._firsts is not None and count:
            starts = [f - leading_lines(s) for f, s in zip(self._firsts, self.module.body,
                                                           strict=True)]
            top = bisect.bisect_right(starts, at + 1) - 1
            last = starts[top + 1] - 1 if top + 1 < len(starts) else len(self._offsets)
            if top >= 0 and at + count <= last:
                start = self._top_start(top)
                stop = (self._top_start(top + 1) if top + 1 < len(starts) else len(self.text))
                self._rendered[text] = (top, text[start:stop + len(block) - len(old)])
        return text

    def _render(self, site: Site) -> str:
        done = self._splice(site, site.statement, site.indents, site.first_line)
        if done is None and self._firsts is not None:  # not where it was said to be
            top = self.module.body[site.top]
            done = self._splice(site, top, (), self._firsts[site.top] - leading_lines(top))
        if done is None:
            whole = self.module.deep_replace(site.original, site.replacement)
            assert isinstance(whole, cst.Module)
            done = whole.code
        return done

    def _splice(self, site: Site, statement: cst.BaseStatement,
                indents: tuple[str | None, ...], first_line: int) -> str | None:
        """The file with ``statement`` (at ``first_line``, inside blocks of ``indents``)
        rendered changed by ``site``, or None if its code is not at that line."""
        if not 0 < first_line <= len(self._offsets):
            return None
        offset = self._offsets[first_line - 1]
        newline = self.module.default_newline
        before = _code(self.module, statement, indents)
        last = not self.module.has_trailing_newline and offset + len(before) - len(
            newline) == len(self.text)
        before = before.removesuffix(newline) if last else before  # no newline at the end
        if not self.text.startswith(before, offset):
            return None
        changed = statement.deep_replace(site.original, site.replacement)
        assert isinstance(changed, cst.BaseStatement)
        after = _code(self.module, changed, indents)
        after = after.removesuffix(newline) if last else after
        text = self.text[:offset] + after + self.text[offset + len(before):]
        if self._firsts is not None and not self._host:
            self._rendered[text] = (site.top, _wrapped(self.module, changed, indents))
        elif self._firsts is not None:
            start = self._top_start(site.top)
            end = self._top_start(site.top + 1) if site.top + 1 < len(self._firsts) else len(
                self.text)
            self._rendered[text] = (site.top, text[start:end + len(after) - len(before)])
        return text

    def check(self, text: str) -> Rejection | None:
        """Why ``text`` is not a mutant to play, or None (it is then remembered, so the
        same code again is a duplicate)."""
        where, code = self._rendered.pop(text, (-1, text))  # -1: the whole file
        if not self._host:
            return self._check_text(text, code)
        if where not in self._original:
            if where < 0:
                self._original[where] = self._key(self.text)
            else:
                end = self._top_start(where + 1) if where + 1 < len(self.module.body) else None
                self._original[where] = self._key(self.text[self._top_start(where):end])
        key = self._key(code)
        if key is None:
            return Rejection.NOT_COMPILING
        if key == self._original[where]:
            return Rejection.SAME_AS_ORIGINAL
        if (where, key) in self._seen:
            return Rejection.DUPLICATE
        self._seen.add((where, key))
        return None

    def _check_text(self, text: str, changed: str) -> Rejection | None:
        """:meth:`check` for a file the host does not compile: ``text`` compared whole, as
        text, and parsed by libcst only in ``changed`` (the part that differs from the
        original, which parses; the whole text if not known)."""
        if text == self.text:
            return Rejection.SAME_AS_ORIGINAL
        if (-1, text) in self._seen:
            return Rejection.DUPLICATE
        try:
            cst.parse_module(changed)
        except cst.ParserSyntaxError:
            return Rejection.NOT_COMPILING
        self._seen.add((-1, text))
        return None


def without_docstrings(tree: ast.Module) -> ast.Module:
    """``tree`` with each docstring made a ``pass`` (in place): a change to one is no change
    to what the code does. Only statements are walked (expressions hold no docstring)."""
    def strip(body: list[ast.stmt], documented: bool) -> None:
        if documented and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body[0] = ast.copy_location(ast.Pass(), body[0])
        for statement in body:
            defines = isinstance(statement, ast.ClassDef | ast.FunctionDef
                                 | ast.AsyncFunctionDef)
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(statement, name, None)
                if isinstance(inner, list):
                    strip(inner, defines and name == "body")
            for part in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
                strip(part.body, False)

    strip(tree.body, True)
    if tree.body and isinstance(tree.body[0], ast.Pass) and len(tree.body) > 1:
        # the module's docstring goes rather than stands as a ``pass``: a ``from __future__``
        # import after it must stay the first statement, or the host compiles nothing and
        # every mutant of the file is told apart by its text alone
        del tree.body[0]
    return tree


def statement_lines(module: cst.Module, text: str) -> list[int] | None:
    """The line each top-level statement's code starts on (leading comments and blanks not
    counted), read from the host's ``ast`` (C-fast, where libcst's positions render the whole
    file); None if the two parsers do not see the same statements."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            body = ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    firsts, k = [], 0
    for statement in module.body:
        if k >= len(body):
            return None
        node = body[k]
        decorators = getattr(node, "decorator_list", [])
        firsts.append(min([node.lineno, *(d.lineno for d in decorators)]))
        k += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return firsts if k == len(body) else None


def _code(module: cst.Module, statement: cst.BaseStatement,
          indents: tuple[str | None, ...]) -> str:
    """``statement``'s code as the module writes it inside blocks of ``indents``: rendered
    inside as many ``if True:`` blocks (public libcst only), whose header lines are cut."""
    code = _wrapped(module, statement, indents)
    return code.split(module.default_newline, len(indents))[-1] if indents else code


def _wrapped(module: cst.Module, statement: cst.BaseStatement,
             indents: tuple[str | None, ...]) -> str:
    """``statement`` inside as many ``if True:`` blocks as ``indents``, as code that parses
    alone if and only if ``statement`` parses in its place."""
    node: cst.BaseStatement = statement
    for indent in reversed(indents):
        node = cst.If(test=cst.Name("True"), body=cst.IndentedBlock(body=[node], indent=indent))
    return module.code_for_node(node)


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
