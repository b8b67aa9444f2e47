"""Where a Python source can be mutated: one :class:`Site` per (node, operator), found with
libcst, which keeps the file's formatting and comments exactly as written.

The anchor rule: a site counts only when every line of the code it changes is a line the gold
patch adds (for an operator swap, the operator's own line; for a removal, the whole removed
code). Skipped outright: docstrings and other bare strings, annotations, f-strings (messages),
``if TYPE_CHECKING:`` blocks, ``__repr__`` / ``__str__``, logging, ``print`` and
``warnings.warn`` calls, and the arguments of a raised exception (its message): changing them
changes nothing a test should pin.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from envcheck.kinds.strength import pyedits as edit
from envcheck.kinds.strength.model import Operator
from envcheck.kinds.strength.pyedits import is_log_call
from envcheck.kinds.strength.pyfixes import FixSites

__all__ = ["Site", "find_sites", "is_log_call", "leading_lines"]

@dataclass(frozen=True)
class Site:
    operator: Operator
    line: int
    column: int
    description: str
    original: cst.CSTNode
    replacement: cst.CSTNode
    top: int  # the top-level statement (index in the module's body) the site is in
    statement: cst.BaseStatement  # the innermost statement the site is in
    first_line: int  # the statement's first line, its leading comments and blanks included
    indents: tuple[str | None, ...]  # the blocks around it (None: the module's indent)


class _Finder(FixSites, cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module, added: frozenset[int] | None, shift: int = 0,
                 top: int = -1) -> None:
        """``module`` is the file's (its config writes code); the tree visited may be one
        of its top-level statements alone (``top``, its index), whose lines are the file's
        less ``shift``."""
        super().__init__()
        self.module = module
        self.added = added
        self._lines = added or frozenset()
        self._shift = shift
        self.sites: list[Site] = []
        self._elifs: set[int] = set()
        self._raised: set[int] = set()
        self._tops = {id(stmt): i for i, stmt in enumerate(module.body)} if top < 0 else {}
        self._top = top
        self._blocks: list[tuple[cst.IndentedBlock, str | None]] = []
        self._statements: list[tuple[cst.BaseStatement, tuple[str | None, ...]]] = []
        self._init_fixes()
        self._handlers: dict[type[cst.CSTNode], Callable[[Any], bool | None]] = {
            cst.Annotation: lambda _: False, cst.FormattedString: lambda _: False,
            cst.FunctionDef: lambda n: n.name.value not in ("__repr__", "__str__"),
            cst.Call: self._call, cst.Expr: self._expr, cst.If: self._if,
            cst.While: self._while, cst.For: self._remove_block, cst.With: self._remove_block,
            cst.Try: self._try, cst.IfExp: self._if_exp, cst.IndentedBlock: self._block,
            cst.Continue: self._loop_exit, cst.Break: self._loop_exit,
            cst.Assign: self._remove_small, cst.AugAssign: self._aug_assign,
            cst.AnnAssign: self._ann_assign,
            cst.Raise: self._raise, cst.Del: self._remove_small,
            cst.Assert: self._remove_small, cst.Return: self._return,
            cst.Comparison: self._comparison, cst.BooleanOperation: self._boolean,
            cst.BinaryOperation: self._binary, cst.Integer: self._integer,
            cst.Name: self._name,
        }

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.added is not None and not isinstance(node, cst.Module):
            span = self._range(node)
            if not self._lines.intersection(range(span.start.line, span.end.line + 1)):
                return False  # no added line in it: nothing of it can be anchored
        self._top = self._tops.get(id(node), self._top)
        if isinstance(node, cst.BaseStatement) and id(node) not in self._elifs:
            blocks = tuple(indent for _, indent in self._blocks)
            self._statements.append((node, blocks))  # an elif goes with its if
        elif isinstance(node, cst.IndentedBlock):
            self._blocks.append((node, node.indent))
        self._enter(node)
        handler = self._handlers.get(type(node))
        return handler is None or handler(node) is not False  # False: not its children

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._leave(original_node)
        if self._statements and self._statements[-1][0] is original_node:
            self._statements.pop()
        elif self._blocks and self._blocks[-1][0] is original_node:
            self._blocks.pop()

    # -- the anchor rule ------------------------------------------------------------------
    def _range(self, node: cst.CSTNode) -> CodeRange:
        span = self.get_metadata(PositionProvider, node)
        if not self._shift:
            return span
        return CodeRange((span.start.line + self._shift, span.start.column),
                         (span.end.line + self._shift, span.end.column))

    def _touches(self, node: cst.CSTNode) -> bool:
        """Whether an added line is among ``node``'s."""
        span = self._range(node)
        return self.added is None or bool(self._lines.intersection(
            range(span.start.line, span.end.line + 1)))

    def _starts_added(self, node: cst.CSTNode) -> bool:
        return self.added is None or self._range(node).start.line in self.added

    def _anchored(self, nodes: tuple[cst.CSTNode, ...]) -> bool:
        if self.added is None:
            return True
        for node in nodes:
            span = self._range(node)
            if any(n not in self.added for n in range(span.start.line, span.end.line + 1)):
                return False
        return True

    def _add(self, op: Operator, at: cst.CSTNode, description: str, original: cst.CSTNode,
             replacement: cst.CSTNode, *anchors: cst.CSTNode, anchored: bool = False) -> None:
        """A site changing ``original`` into ``replacement``, reported at ``at``, anchored on
        ``anchors`` (by default ``at``): the code that the change rewrites or removes
        (``anchored``: the caller checked it; an insertion removes nothing)."""
        if anchored or self._anchored(anchors or (at,)):
            start = self._range(at).start
            statement, blocks = self._statements[-1]
            first = self._range(_head(statement)).start.line - leading_lines(statement)
            self.sites.append(Site(op, start.line, start.column, description, original,
                                   replacement, self._top, statement, first, blocks))

    def _code(self, node: cst.CSTNode, limit: int = 60) -> str:
        text = " ".join(self.module.code_for_node(node).split())
        return text if len(text) <= limit else text[:limit - 3] + "..."

    def _swap(self, old: cst.CSTNode, new: cst.CSTNode | None, op: Operator) -> None:
        if new is not None:
            self._add(op, old, f"`{self._code(old)}` -> `{self._code(new)}`", old, new)

    # -- statements -----------------------------------------------------------------------
    def _call(self, node: cst.Call) -> bool:
        if is_log_call(node):
            return False
        if id(node) in self._raised or (isinstance(node.func, cst.Name)
                                        and node.func.value in edit.FIXED_ARITY):
            return True  # a raised exception's message; a builtin that takes so many
        self._unwrap(node)
        name = self._code(node.func, 30)
        for i, arg in enumerate(node.args):
            shown = self._code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
            named = (arg.keyword,) if arg.keyword is not None else ()
            self._add(Operator.ARGUMENT_DROPPED, arg,  # anchored without its comma's blank
                      f"argument `{shown}` dropped from `{name}(...)`", node,
                      edit.without_argument(node, i), arg.value, *named)
        return True

    def _expr(self, node: cst.Expr) -> bool:
        if isinstance(node.value, edit.STRINGS):
            return False  # a docstring, or a string said for nothing
        value = node.value.expression if isinstance(node.value, cst.Await) else node.value
        if isinstance(value, cst.Call):
            if not is_log_call(value):
                self._add(Operator.CALL_DROPPED, node, f"call `{self._code(value)}` removed",
                          node, cst.Pass(semicolon=node.semicolon))
                self._statement_calls.add(id(value))
        else:
            self._remove_small(node)
        return True

    def _remove_small(self, node: cst.BaseSmallStatement) -> None:
        self._add(Operator.STATEMENT_REMOVED, node, f"statement `{self._code(node)}` removed",
                  node, cst.Pass(semicolon=node.semicolon))

    def _ann_assign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:  # a bare annotation is no statement to remove
            self._remove_small(node)

    def _remove_block(self, node: cst.BaseCompoundStatement,
                      op: Operator = Operator.STATEMENT_REMOVED) -> None:
        first = self._code(node).split(":")[0]
        replacement = cst.SimpleStatementLine([cst.Pass()], leading_lines=node.leading_lines)
        self._add(op, node, f"block `{first}:` removed", node, replacement)

    def _try(self, node: cst.Try) -> None:
        self._remove_block(node)
        self._handlers_of(node)

    def _raise(self, node: cst.Raise) -> None:
        if isinstance(node.exc, cst.Call):
            self._raised.add(id(node.exc))
        self._remove_small(node)

    def _return(self, node: cst.Return) -> None:
        self._loop_exit(node)
        value = node.value
        if value is None or (isinstance(value, cst.Name) and value.value == "None"):
            return
        changed = node.with_changes(value=cst.Name("None"),
                                    whitespace_after_return=cst.SimpleWhitespace(" "))
        self._add(Operator.RETURN_NONE, node,
                  f"`return {self._code(value)}` -> `return None`", node, changed)

    def _aug_assign(self, node: cst.AugAssign) -> None:
        self._remove_small(node)
        self._swap(node.operator, edit.augmented_flip(node), Operator.ARITHMETIC_FLIP)

    # -- conditions -----------------------------------------------------------------------
    def _if(self, node: cst.If) -> bool:
        if edit.dotted(node.test)[-1:] == ["TYPE_CHECKING"]:
            return False
        elif_ = id(node) in self._elifs
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))
        changed = node.with_changes(test=edit.negated(node.test),
                                    whitespace_before_test=edit.spaced(
                                        node.whitespace_before_test))
        word = "elif" if elif_ else "if"
        self._add(Operator.NEGATE_CONDITION, node.test,
                  f"`{word} {self._code(node.test)}` negated", node, changed)
        self._constant_conditions(node, word)
        self._branches(node)
        if not elif_:  # an elif goes with its if
            self._remove_block(node, Operator.BRANCH_REMOVED)
        return True

    def _while(self, node: cst.While) -> None:
        changed = node.with_changes(test=edit.negated(node.test),
                                    whitespace_after_while=edit.spaced(
                                        node.whitespace_after_while))
        self._add(Operator.NEGATE_CONDITION, node.test,
                  f"`while {self._code(node.test)}` negated", node, changed)
        self._remove_block(node)

    def _if_exp(self, node: cst.IfExp) -> None:
        changed = node.with_changes(test=edit.negated(node.test),
                                    whitespace_after_if=edit.spaced(node.whitespace_after_if))
        self._add(Operator.NEGATE_CONDITION, node.test,
                  f"condition `{self._code(node.test)}` negated", node, changed)
        self._constant_conditions(node, "if")

    # -- expressions ----------------------------------------------------------------------
    def _comparison(self, node: cst.Comparison) -> None:
        for target in node.comparisons:
            self._swap(target.operator, edit.comparison_flip(target.operator),
                       Operator.COMPARISON_FLIP)

    def _boolean(self, node: cst.BooleanOperation) -> None:
        op = node.operator
        self._swap(op, edit.boolean_flip(op), Operator.BOOLEAN_FLIP)
        word = self._code(op)
        for kept, dropped in ((node.left, node.right), (node.right, node.left)):
            carried = kept.with_changes(lpar=[*node.lpar, *kept.lpar],
                                        rpar=[*kept.rpar, *node.rpar])
            shown = (f"{word} {self._code(dropped)}" if dropped is node.right
                     else f"{self._code(dropped)} {word}")
            self._add(Operator.BOOLEAN_DROP, dropped, f"`{shown}` dropped", node, carried,
                      dropped, op)

    def _binary(self, node: cst.BinaryOperation) -> None:
        self._swap(node.operator, edit.binary_flip(node), Operator.ARITHMETIC_FLIP)

    def _integer(self, node: cst.Integer) -> None:
        value = node.evaluated_value
        for op, changed in ((Operator.INT_PLUS_ONE, value + 1),
                            (Operator.INT_MINUS_ONE, value - 1)):
            self._add(op, node, f"{node.value} -> {changed}", node, edit.integer(node, changed))

    def _name(self, node: cst.Name) -> None:
        if node.value in ("True", "False"):
            self._swap(node, node.with_changes(
                value="False" if node.value == "True" else "True"), Operator.TRUE_FALSE)


def find_sites(module: cst.Module, added: frozenset[int] | None,
               first_lines: Sequence[int] | None = None) -> list[Site]:
    """The sites of ``module`` anchored on ``added`` (None: every line), in source order.

    With ``first_lines`` (the line each top-level statement's code starts on, its leading
    comments and blanks not counted), only the statements holding an added line are
    visited, each alone: positions cost a rendering of the code they cover, and a fix adds
    a few lines to a file of thousands."""
    if added is not None and not added:
        return []  # the patch only removes lines here
    if added is None or first_lines is None:
        found = _visit(module, module, added, 0, -1)
    else:
        lines = sorted(added)
        found = []
        for i, statement in enumerate(module.body):
            first = first_lines[i] - leading_lines(statement)
            last = first_lines[i + 1] - leading_lines(module.body[i + 1]) - 1 \
                if i + 1 < len(module.body) else max(lines)
            at = bisect.bisect_left(lines, first)
            if at == len(lines) or lines[at] > last:
                continue
            alone = cst.Module(body=[statement], default_indent=module.default_indent,
                               default_newline=module.default_newline)
            found += _visit(alone, module, added, first - 1, i)
    return sorted(found, key=lambda s: (s.line, s.column, s.operator))


def leading_lines(statement: cst.BaseStatement) -> int:
    if isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return len(statement.leading_lines)
    return 0


def _head(statement: cst.BaseStatement) -> cst.CSTNode:
    """Where ``statement``'s code starts: its first decorator's ``@`` (a definition's
    position is its ``def`` or ``class`` line)."""
    decorators = getattr(statement, "decorators", ())
    return decorators[0] if decorators else statement


def _visit(tree: cst.Module, module: cst.Module, added: frozenset[int] | None, shift: int,
           top: int) -> list[Site]:
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)  # parsed: no node is shared
    finder = _Finder(module, added, shift, top)
    wrapper.visit(finder)
    return finder.sites
