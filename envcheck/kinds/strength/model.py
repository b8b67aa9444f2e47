"""What the generator hands out: a closed set of operators in families, and frozen values for
a mutant of a gold patch, a mutant of an oracle's output file and a partial patch."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["OUTPUT_FAMILIES", "PYTHON_OPERATORS", "Changed", "Family", "Mutant", "Operator",
           "OutputMutant", "PartialPatch", "Skipped"]


class Family(StrEnum):
    """What sampling spreads a task's mutants across, so one prolific operator (a file full
    of calls) does not crowd out the rest."""

    COMPARISON = "comparison"
    BOOLEAN = "boolean"
    ARITHMETIC = "arithmetic"
    CONDITION = "condition"
    CONSTANT = "constant"
    RETURN = "return"
    STATEMENT = "statement"
    CALL = "call"
    BRANCH = "branch"  # the shapes of real wrong fixes from here (pyfixes, reverts)
    EXIT = "exit"
    EXCEPTION = "exception"
    REVERT = "revert"
    SPECIAL_CASE = "special_case"  # the fix kept for the tested input only (tested)
    VALUE = "value"  # the value the fix newly returns, wrong (newcase)
    NUMBER = "number"  # the output operators' families from here
    RECORD = "record"
    TRUNCATION = "truncation"


class Operator(StrEnum):
    COMPARISON_FLIP = "comparison_flip"  # < <=, > >=, == !=, is / is not, in / not in
    BOOLEAN_FLIP = "boolean_flip"  # and <-> or
    BOOLEAN_DROP = "boolean_drop"  # a and b -> a (or b)
    ARITHMETIC_FLIP = "arithmetic_flip"  # + -, * /, // /, % //, and their augmented forms
    NEGATE_CONDITION = "negate_condition"  # if c -> if not (c), in if / elif / while / x if c
    INT_PLUS_ONE = "int_plus_one"
    INT_MINUS_ONE = "int_minus_one"
    TRUE_FALSE = "true_false"  # True <-> False
    RETURN_NONE = "return_none"  # return x -> return None
    STATEMENT_REMOVED = "statement_removed"  # -> pass (never a return: return_none is that)
    ARGUMENT_DROPPED = "argument_dropped"  # f(a, b) -> f(b), not for fixed-arity builtins
    # shaped like real wrong fixes (OPERATOR_DOCS says which each stands for)
    BRANCH_REMOVED = "branch_removed"  # an added if, elif, else or except clause deleted
    EARLY_RETURN = "early_return"  # return None before a run of added statements
    CONDITION_TRUE = "condition_true"  # if c -> if True
    CONDITION_FALSE = "condition_false"  # if c -> if False
    CALL_UNWRAPPED = "call_unwrapped"  # f(x) -> x, x.m() -> x
    CALL_DROPPED = "call_dropped"  # an added call statement deleted
    EXCEPTION_SWALLOWED = "exception_swallowed"  # try/except Exception: pass; except X broadened
    LOOP_EXIT_SWAPPED = "loop_exit_swapped"  # continue / break / return None swapped
    PARTIAL_REVERT = "partial_revert"  # one changed line or change block put back as before
    TESTED_INPUT_ONLY = "tested_input_only"  # the fix only if a parameter is a tested literal
    NEW_CASE_VALUE = "new_case_value"  # where the fix's result is new, that result made wrong
    NUMBER_CHANGED = "number_changed"  # outputs: one number + 1
    LINE_DROPPED = "line_dropped"  # outputs: one line of a text file
    RECORD_DROPPED = "record_dropped"  # outputs: one CSV row, one JSON element or member
    TRUNCATED = "truncated"  # outputs: the file cut in half

    @property
    def family(self) -> Family:
        return _FAMILIES[self]


_FAMILIES = {
    Operator.COMPARISON_FLIP: Family.COMPARISON,
    Operator.BOOLEAN_FLIP: Family.BOOLEAN,
    Operator.BOOLEAN_DROP: Family.BOOLEAN,
    Operator.ARITHMETIC_FLIP: Family.ARITHMETIC,
    Operator.NEGATE_CONDITION: Family.CONDITION,
    Operator.INT_PLUS_ONE: Family.CONSTANT,
    Operator.INT_MINUS_ONE: Family.CONSTANT,
    Operator.TRUE_FALSE: Family.CONSTANT,
    Operator.RETURN_NONE: Family.RETURN,
    Operator.STATEMENT_REMOVED: Family.STATEMENT,
    Operator.ARGUMENT_DROPPED: Family.CALL,
    Operator.BRANCH_REMOVED: Family.BRANCH,
    Operator.EARLY_RETURN: Family.EXIT,
    Operator.CONDITION_TRUE: Family.CONDITION,
    Operator.CONDITION_FALSE: Family.CONDITION,
    Operator.CALL_UNWRAPPED: Family.CALL,
    Operator.CALL_DROPPED: Family.CALL,
    Operator.EXCEPTION_SWALLOWED: Family.EXCEPTION,
    Operator.LOOP_EXIT_SWAPPED: Family.EXIT,
    Operator.PARTIAL_REVERT: Family.REVERT,
    Operator.TESTED_INPUT_ONLY: Family.SPECIAL_CASE,
    Operator.NEW_CASE_VALUE: Family.VALUE,
    Operator.NUMBER_CHANGED: Family.NUMBER,
    Operator.LINE_DROPPED: Family.RECORD,
    Operator.RECORD_DROPPED: Family.RECORD,
    Operator.TRUNCATED: Family.TRUNCATION,
}

OUTPUT_FAMILIES = frozenset({Family.NUMBER, Family.RECORD, Family.TRUNCATION})
PYTHON_OPERATORS = tuple(op for op in Operator if op.family not in OUTPUT_FAMILIES)


@dataclass(frozen=True)
class Changed:
    """One small change: which operator made it, where (``line`` of the original file,
    where the change starts), what it did in words, and its unified diff against the
    original, what a survivor is shown as."""

    operator: Operator
    file: str
    line: int
    description: str
    diff: str

    @property
    def family(self) -> Family:
        return self.operator.family

    def to_json(self) -> dict[str, Any]:
        return {"operator": str(self.operator), "family": str(self.family), "file": self.file,
                "line": self.line, "description": self.description, "diff": self.diff}


@dataclass(frozen=True)
class Mutant(Changed):
    """A wrong fix: the gold patch with one small change to a line it adds (``line`` and
    ``diff`` against the gold post-image).

    ``patch`` is the candidate, a unified diff against the base (the gold patch with this
    file's post-image replaced by the mutant's), for the same apply path as the gold patch;
    ``text`` the mutated file whole (what its recorded run's functions are found in)."""

    patch: str
    text: str = field(default="", compare=False, repr=False)
    # the gold post-image's lines it stands for, where its diff touches others (new_case_value
    # wraps the whole function: it belongs to the hunks of the fix's lines inside it)
    fix_lines: tuple[int, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class OutputMutant(Changed):
    """A wrong output: one file the oracle wrote, changed; ``content`` is what to write in
    its place after the oracle ran."""

    content: str


@dataclass(frozen=True)
class PartialPatch:
    """The gold patch with one hunk (``hunk`` its 1-based index in ``file``) or one whole
    file (``hunk`` None) left out."""

    file: str
    hunk: int | None
    description: str
    patch: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "hunk": self.hunk, "description": self.description}


@dataclass(frozen=True)
class Skipped:
    """A file the generator did not mutate, and why (binary, not Python 3, a test file)."""

    file: str
    why: str
