"""The sites of the operators shaped like real wrong fixes: the overfitting repairs that pass
weak tests (a branch or guard deleted, an early exit, a condition made trivially true or false,
a call's result replaced by its argument or dropped, an exception swallowed, a loop exit
swapped). :class:`FixSites` is a part of the site finder (:mod:`.pysites`), which calls
these methods as it visits; the anchor rule is the finder's: every line the change removes or
rewrites is one the gold patch adds (``OPERATOR_DOCS`` in :mod:`.operators` says what each
operator stands for).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from envcheck.kinds.strength import pyedits as edit
from envcheck.kinds.strength.model import Operator

__all__ = ["FixSites"]

# methods whose result is the receiver transformed: ``x.strip()`` -> ``x`` is a fix that
# forgot to normalise (other no-argument methods on a module, ``uuid.uuid4()``, make no sense)
_TRANSFORMS = frozenset({
    "strip", "lstrip", "rstrip", "lower", "upper", "casefold", "title", "capitalize",
    "copy", "resolve", "absolute", "expanduser", "decode", "encode", "keys", "values",
    "items", "ravel", "flatten", "squeeze", "tolist", "to_list", "normalize", "normcase",
    "as_posix", "isoformat", "total_seconds", "timestamp", "date", "popleft", "pop",
})
_BROAD = frozenset({"Exception", "BaseException"})


def _none_return(semicolon: Any = cst.MaybeSentinel.DEFAULT) -> cst.Return:
    """A bare ``return`` (``return None`` is refused in an async generator)."""
    return cst.Return(value=None, semicolon=semicolon)


def _swallowing(body: list[cst.BaseStatement]) -> cst.Try:
    """``try:`` ``body`` ``except Exception: pass``."""
    return cst.Try(body=cst.IndentedBlock(body=body), handlers=[cst.ExceptHandler(
        body=cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])]),
        type=cst.Name("Exception"), whitespace_after_except=cst.SimpleWhitespace(" "))])


def _raises_here(statement: cst.BaseStatement) -> bool:
    """Whether ``statement`` is a line that raises (not a block holding one)."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Raise) for small in statement.body)


def _said_only(statement: cst.BaseStatement) -> bool:
    """A string alone (a docstring) or a logging call: no logic of the fix."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)):
        return False
    value = statement.body[0].value
    return isinstance(value, edit.STRINGS) or (isinstance(value, cst.Call) and edit.is_log_call(
        value))


def _atomic(node: cst.BaseExpression) -> bool:
    return bool(node.lpar) or isinstance(node, (cst.Name, cst.Attribute, cst.Subscript,
                                                cst.Call, cst.SimpleString, cst.Integer,
                                                cst.Float, cst.List, cst.Dict, cst.Tuple,
                                                cst.Set, cst.ListComp, cst.DictComp,
                                                cst.SetComp, cst.FormattedString))


class FixSites:
    """Mixed into the site finder: what it provides is declared here."""

    module: cst.Module
    _statements: list[tuple[cst.BaseStatement, tuple[str | None, ...]]]
    _raised: set[int]

    def _add(self, op: Operator, at: cst.CSTNode, description: str, original: cst.CSTNode,
             replacement: cst.CSTNode, *anchors: cst.CSTNode, anchored: bool = False) -> None:
        raise NotImplementedError

    def _touches(self, node: cst.CSTNode) -> bool:
        raise NotImplementedError

    def _anchored(self, nodes: tuple[cst.CSTNode, ...]) -> bool:
        raise NotImplementedError

    def _code(self, node: cst.CSTNode, limit: int = 60) -> str:
        raise NotImplementedError

    def _starts_added(self, node: cst.CSTNode) -> bool:
        raise NotImplementedError

    def _init_fixes(self) -> None:
        # the scopes around the node visited: [node, "def" or "class", loops open in it]
        self._scopes: list[list[Any]] = []
        self._loops: set[int] = set()
        self._decorators: set[int] = set()
        self._statement_calls: set[int] = set()  # their result is unused: dropped, not unwrapped
        self._imported: frozenset[str] | None = None

    # -- where we are ---------------------------------------------------------------------
    def _enter(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.FunctionDef | cst.ClassDef):
            self._scopes.append([node, "def" if isinstance(node, cst.FunctionDef) else
                                 "class", 0])
        elif isinstance(node, cst.For | cst.While) and self._scopes:
            self._scopes[-1][2] += 1
            self._loops.add(id(node))
        elif isinstance(node, cst.Decorator):
            self._decorators.add(id(node.decorator))

    def _leave(self, node: cst.CSTNode) -> None:
        if self._scopes and self._scopes[-1][0] is node:
            self._scopes.pop()
        elif id(node) in self._loops:
            self._loops.discard(id(node))
            self._scopes[-1][2] -= 1

    def _in_function(self) -> bool:
        return bool(self._scopes) and self._scopes[-1][1] == "def"

    def _in_loop(self) -> bool:
        return self._in_function() and self._scopes[-1][2] > 0

    def _modules(self) -> frozenset[str]:
        """The names the file's top-level imports bind (``os``, ``np``, ``path``)."""
        if self._imported is None:
            names: set[str] = set()
            for statement in self.module.body:
                if not isinstance(statement, cst.SimpleStatementLine):
                    continue
                for small in statement.body:
                    if isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(
                            small.names, cst.ImportStar):
                        for alias in small.names:
                            bound = alias.asname.name if alias.asname else alias.name
                            names.update(edit.dotted(bound)[:1])
            self._imported = frozenset(names)
        return self._imported

    # -- conditions and branches ----------------------------------------------------------
    def _constant_conditions(self, node: cst.If | cst.IfExp, word: str) -> None:
        for op, value in ((Operator.CONDITION_TRUE, "True"),
                          (Operator.CONDITION_FALSE, "False")):
            if isinstance(node, cst.If):
                changed: cst.CSTNode = node.with_changes(
                    test=cst.Name(value),
                    whitespace_before_test=edit.spaced(node.whitespace_before_test))
            else:
                changed = node.with_changes(test=cst.Name(value), whitespace_after_if=edit.spaced(
                    node.whitespace_after_if))
            self._add(op, node.test, f"`{word} {self._code(node.test)}` -> `{word} {value}`",
                      node, changed)

    def _branches(self, node: cst.If) -> None:
        """An added ``elif`` or ``else`` clause of ``node`` deleted."""
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            self._add(Operator.BRANCH_REMOVED, orelse.test,
                      f"branch `elif {self._code(orelse.test)}:` removed", node,
                      node.with_changes(orelse=orelse.orelse), orelse.test, orelse.body)
        elif isinstance(orelse, cst.Else):
            self._add(Operator.BRANCH_REMOVED, orelse, "branch `else:` removed", node,
                      node.with_changes(orelse=None), orelse)

    def _handlers_of(self, node: cst.Try) -> None:
        """An added ``except`` clause broadened to ``except Exception``, or deleted when
        another clause (or a ``finally``) remains."""
        for i, handler in enumerate(node.handlers):
            kind = handler.type
            shown = f"except {self._code(kind)}" if kind is not None else "except"
            if kind is not None and not _BROAD.intersection(edit.dotted(kind)[-1:]):
                broad = handler.with_changes(type=cst.Name("Exception"))
                self._add(Operator.EXCEPTION_SWALLOWED, handler, f"`{shown}` -> "
                          "`except Exception`", handler, broad, handler)
            if len(node.handlers) > 1 or node.finalbody is not None:
                kept = [h for j, h in enumerate(node.handlers) if j != i]
                self._add(Operator.BRANCH_REMOVED, handler, f"handler `{shown}:` removed",
                          node, node.with_changes(handlers=kept), handler)

    # -- calls ----------------------------------------------------------------------------
    def _unwrap(self, node: cst.Call) -> None:
        """The call's result replaced by its first argument (or by its receiver for a
        transforming method with none)."""
        if id(node) in self._decorators or id(node) in self._statement_calls \
                or edit.dotted(node.func) == ["super"]:
            return
        args = node.args
        value: cst.BaseExpression | None = None
        if args and args[0].keyword is None and not args[0].star:
            func = node.func
            receiver = edit.dotted(func.value) if isinstance(func, cst.Attribute) else []
            if isinstance(func, cst.Name) or (receiver and (
                    receiver[0] in ("self", "cls") or receiver[0] in self._modules())):
                value = args[0].value
        elif not args and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in _TRANSFORMS:
            value = node.func.value
        if value is None:
            return
        alone = _atomic(value) and "\n" not in self.module.code_for_node(value)
        inner = value if alone else edit.parenthesized(value)
        replacement = inner.with_changes(lpar=[*node.lpar, *inner.lpar],
                                         rpar=[*inner.rpar, *node.rpar])
        self._add(Operator.CALL_UNWRAPPED, node, f"`{self._code(node)}` -> "
                  f"`{self._code(value)}`", node, replacement)

    # -- loops ----------------------------------------------------------------------------
    def _loop_exit(self, node: cst.Continue | cst.Break | cst.Return) -> None:
        """``continue``, ``break`` and a bare ``return`` in a loop, each as the others."""
        if isinstance(node, cst.Return) and (not self._in_loop() or (
                node.value is not None and edit.dotted(node.value) != ["None"])):
            return  # not in a loop of this function; a return of a value: return_none's
        options: list[tuple[str, cst.BaseSmallStatement]] = []
        if not isinstance(node, cst.Continue):
            options.append(("continue", cst.Continue(semicolon=node.semicolon)))
        if not isinstance(node, cst.Break):
            options.append(("break", cst.Break(semicolon=node.semicolon)))
        if not isinstance(node, cst.Return) and self._in_function():
            options.append(("return", _none_return(node.semicolon)))
        for word, replacement in options:
            self._add(Operator.LOOP_EXIT_SWAPPED, node, f"`{self._code(node)}` -> `{word}`",
                      node, replacement)

    # -- runs of added statements ---------------------------------------------------------
    def _block(self, node: cst.IndentedBlock) -> None:
        """Early exits and swallowed exceptions for each run of added statements in the
        block; a ``try`` whose one handler is added unwrapped."""
        body = list(node.body)
        added = [self._anchored((s,)) for s in body]
        starts: list[int] = []  # where a return may go: before the first statement the
        touched = [k for k, s in enumerate(body) if self._touches(s) and not _said_only(s)]
        starts += touched[:1]  # patch changes, and before each run it adds
        i = 0
        while i < len(body):
            if not added[i]:
                self._unwrap_try(node, body, i)
                i += 1
                continue
            j = i
            while j < len(body) and added[j]:
                self._unwrap_try(node, body, j)
                j += 1
            k = i
            while k < j and _said_only(body[k]):  # a docstring stays first, logging is no logic
                k += 1
            if k < j:
                starts.append(k)
                self._run(node, body, k, j)
            i = j
        self._early_returns(node, body, sorted(set(starts)))

    def _outermost(self) -> bool:
        """Not inside a branch or loop the patch added whole (the exit before that statement
        is the same wrong fix; a function's body is its own)."""
        owner = self._statements[-1][0] if self._statements else None
        return isinstance(owner, cst.FunctionDef) or owner is None or not self._anchored(
            (owner,))

    def _early_returns(self, node: cst.IndentedBlock, body: list[cst.BaseStatement],
                       starts: list[int]) -> None:
        if not (self._in_function() and self._outermost()):
            return
        for k in starts:
            early = cst.SimpleStatementLine([_none_return()])
            self._add(Operator.EARLY_RETURN, body[k], f"`return` before "
                      f"`{self._code(body[k], 40)}`", node,
                      node.with_changes(body=[*body[:k], early, *body[k:]]), anchored=True)

    def _run(self, node: cst.IndentedBlock, body: list[cst.BaseStatement], i: int,
             j: int) -> None:
        """Swallowed exceptions for the run of added statements ``body[i:j]``."""
        outermost = self._outermost()
        raising = [k for k in range(i, j) if _raises_here(body[k])]
        if raising:  # the statements that raise, from the first to the last, swallowed
            lo, hi = raising[0], raising[-1] + 1
            self._add(Operator.EXCEPTION_SWALLOWED, body[lo], f"`{self._code(body[lo], 40)}`"
                      f"{' ...' if hi - lo > 1 else ''} wrapped in `try: ... except "
                      "Exception: pass`", node,
                      node.with_changes(body=[*body[:lo], _swallowing(body[lo:hi]),
                                              *body[hi:]]), *body[lo:hi])
        guard = j  # the ifs that end the run: a guard before the statement after it
        while guard > i and isinstance(body[guard - 1], cst.If):
            guard -= 1
        if i <= guard < j < len(body) and self._in_function() and outermost and not isinstance(
                body[j], cst.FunctionDef | cst.ClassDef):
            # the guard deleted, the statement it protects wrapped instead
            shown = self._code(body[guard], 40)
            then = self._code(body[j], 40)
            self._add(Operator.EXCEPTION_SWALLOWED, body[guard], f"`{shown}`"
                      f"{' ...' if j - guard > 1 else ''} removed, `{then}` wrapped in `try: ... "
                      "except Exception: pass`", node,
                      node.with_changes(body=[*body[:guard], _swallowing([body[j]]),
                                              *body[j + 1:]]), *body[guard:j])

    def _unwrap_try(self, node: cst.IndentedBlock, body: list[cst.BaseStatement],
                    k: int) -> None:
        statement = body[k]
        if not isinstance(statement, cst.Try) or len(statement.handlers) != 1 \
                or statement.orelse is not None or statement.finalbody is not None:
            return
        handler = statement.handlers[0]
        if not (self._anchored((handler,)) and self._starts_added(statement)):
            return  # the try line and the handler are the patch's
        shown = f"except {self._code(handler.type)}" if handler.type is not None else "except"
        self._add(Operator.BRANCH_REMOVED, handler, f"`try:` / `{shown}:` unwrapped", node,
                  node.with_changes(body=[*body[:k], *statement.body.body, *body[k + 1:]]),
                  handler)
