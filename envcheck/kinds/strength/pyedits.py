"""The rewrites the Python operators make, as libcst nodes: each keeps the whitespace around
what it changes, so the mutant differs from the original in that one place."""

from __future__ import annotations

from typing import Any

import libcst as cst

__all__ = ["FIXED_ARITY", "STRINGS", "augmented_flip", "binary_flip", "boolean_flip",
           "comparison_flip", "dotted", "integer", "is_log_call", "negated", "spaced",
           "without_argument"]

_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception",
                          "critical", "fatal", "log"})

_CMP_SWAPS: dict[type[cst.BaseCompOp], type[cst.BaseCompOp]] = {
    cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan,
    cst.GreaterThan: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.GreaterThan,
    cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal,
}
_ARITH_SWAPS: dict[type[cst.BaseBinaryOp], type[cst.BaseBinaryOp]] = {
    cst.Add: cst.Subtract, cst.Subtract: cst.Add, cst.Multiply: cst.Divide,
    cst.Divide: cst.Multiply, cst.FloorDivide: cst.Divide, cst.Modulo: cst.FloorDivide,
    cst.Power: cst.Multiply,
}
_AUG_SWAPS: dict[type[cst.BaseAugOp], type[cst.BaseAugOp]] = {
    cst.AddAssign: cst.SubtractAssign, cst.SubtractAssign: cst.AddAssign,
    cst.MultiplyAssign: cst.DivideAssign, cst.DivideAssign: cst.MultiplyAssign,
    cst.FloorDivideAssign: cst.DivideAssign,
}
STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
_SEQUENCES = (*STRINGS, cst.List, cst.Tuple)  # + on them concatenates, % formats
# builtins whose argument count is fixed: dropping one is a TypeError, not a wrong fix
FIXED_ARITY = frozenset({
    "abs", "ascii", "bin", "callable", "chr", "delattr", "divmod", "hasattr", "hash", "hex",
    "id", "isinstance", "issubclass", "len", "oct", "ord", "repr", "setattr", "type",
})


def _like(op: Any, kind: type[Any]) -> Any:
    """An operator of ``kind`` with ``op``'s whitespace on either side."""
    return kind(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)


def comparison_flip(op: cst.BaseCompOp) -> cst.BaseCompOp | None:
    swap = _CMP_SWAPS.get(type(op))
    if swap is not None:
        flipped: cst.BaseCompOp = _like(op, swap)
        return flipped
    if isinstance(op, cst.Is):
        return cst.IsNot(op.whitespace_before, cst.SimpleWhitespace(" "), op.whitespace_after)
    if isinstance(op, cst.IsNot):
        return cst.Is(op.whitespace_before, op.whitespace_after)
    if isinstance(op, cst.In):
        return cst.NotIn(op.whitespace_before, cst.SimpleWhitespace(" "), op.whitespace_after)
    if isinstance(op, cst.NotIn):
        return cst.In(op.whitespace_before, op.whitespace_after)
    return None


def boolean_flip(op: cst.BaseBooleanOp) -> cst.BaseBooleanOp:
    flipped: cst.BaseBooleanOp = _like(op, cst.Or if isinstance(op, cst.And) else cst.And)
    return flipped


def binary_flip(node: cst.BinaryOperation) -> cst.BaseBinaryOp | None:
    """The arithmetic flip, or None where the operator concatenates or formats (a string,
    list or tuple literal on either side) or repeats, which a flip only makes a TypeError."""
    swap = _ARITH_SWAPS.get(type(node.operator))
    if swap is None or (isinstance(node.operator, cst.Add | cst.Modulo | cst.Multiply)
                        and (isinstance(node.left, _SEQUENCES)
                             or isinstance(node.right, _SEQUENCES))):
        return None
    flipped: cst.BaseBinaryOp = _like(node.operator, swap)
    return flipped


def augmented_flip(node: cst.AugAssign) -> cst.BaseAugOp | None:
    swap = _AUG_SWAPS.get(type(node.operator))
    if swap is None or (isinstance(node.operator, cst.AddAssign)
                        and isinstance(node.value, _SEQUENCES)):
        return None
    flipped: cst.BaseAugOp = _like(node.operator, swap)
    return flipped


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[cst.LeftParen(), *node.lpar],
                             rpar=[*node.rpar, cst.RightParen()])


def negated(test: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and not test.lpar:
        return test.expression  # not c -> c, rather than not (not c)
    return cst.UnaryOperation(cst.Not(), parenthesized(test))


def spaced(space: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """``space``, or one blank where there was none (``if(x)`` negated is ``if not ((x))``,
    never ``ifnot``)."""
    if isinstance(space, cst.SimpleWhitespace) and not space.value:
        return cst.SimpleWhitespace(" ")
    return space


def integer(node: cst.Integer, value: int) -> cst.BaseExpression:
    """``value`` written as ``node`` was (decimal, hex, octal, binary)."""
    if value < 0:
        return cst.UnaryOperation(cst.Minus(), integer(node, -value))
    form = {"0x": hex, "0o": oct, "0b": bin}.get(node.value[:2].lower())
    return node.with_changes(value=form(value) if form else str(value))


def without_argument(call: cst.Call, i: int) -> cst.Call:
    """``call`` without its argument ``i``; dropping the last one moves its comma (or its
    lack of one) to the argument before, so ``f(a, b)`` becomes ``f(a)``."""
    args = list(call.args)
    kept = args[:i] + args[i + 1:]
    if kept and i == len(args) - 1:
        kept[-1] = kept[-1].with_changes(comma=args[i].comma)
    return call.with_changes(args=kept)


def dotted(node: cst.BaseExpression) -> list[str]:
    """``a.b.c`` as ``["a", "b", "c"]``; [] for anything else."""
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, cst.Attribute):
        return [*dotted(node.value), node.attr.value]
    return []


def _called(node: cst.BaseExpression) -> list[str]:
    """``a.b(x).c`` as ``["a", "b", "c"]``: the names along a chain of attributes and calls."""
    if isinstance(node, cst.Call):
        return _called(node.func)
    if isinstance(node, cst.Attribute):
        return [*_called(node.value), node.attr.value]
    return [node.value] if isinstance(node, cst.Name) else []


def is_log_call(call: cst.Call) -> bool:
    """``print``, ``warnings.warn``, ``sys.stderr.write`` and a logger's methods (called on
    ``logging``, ``log``, ``logger``, ``self._log``, ``logging.getLogger(...)``)."""
    names = _called(call.func)
    if names in (["print"], ["warnings", "warn"]) or names[:2] in (["sys", "stderr"],
                                                                   ["sys", "stdout"]):
        return True
    if len(names) < 2 or names[-1] not in _LOG_METHODS:
        return False
    receiver = names[-2].lower().strip("_")
    return receiver in ("log", "logging") or receiver.endswith("logger")
