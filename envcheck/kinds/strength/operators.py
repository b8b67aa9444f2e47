"""What each wrong-fix operator does, and which real-world wrong fix it stands for: the table
the README shows (``tests/test_strength_operators.py`` holds the two together), and the
version of the operator set, part of the controls' evidence identity (an outcome played
under another set is played again).

The shapes after ``argument_dropped`` are those of the overfitting repairs that pass weak
tests in the literature on patch correctness (Smith et al., "Is the cure worse than the
disease?", FSE 2015; Xiong et al., "Identifying patch correctness in test-based program
repair", ICSE 2018; Wang et al., "Are 'Solved Issues' in SWE-bench Really Solved
Correctly?", ICSE 2026): the guard or branch deleted, the early exit, the hard-wired
condition, the call's result dropped, the exception swallowed, the loop left the wrong way,
part of the fix left out, the fix applied only to the input the test uses (the overfitting
that special-cases the test's example; Xin and Reiss, "Identifying test-suite-overfitted
patches through test case generation", ISSTA 2017).
"""

from __future__ import annotations

from envcheck.kinds.strength.model import PYTHON_OPERATORS, Operator

__all__ = ["OPERATORS_VERSION", "OPERATOR_DOCS"]

OPERATORS_VERSION = "7"  # 1: the first thirteen; 2: the shapes of real wrong fixes added;
# 3: a module whose docstring precedes a ``__future__`` import is compared by its bytecode;
# 4: the fix kept only for the tested input (the test patch's literals reach the generator);
# 5: each hunk placed where it sits in the post-image (an offset from its header's line, or
# context left off under fuzz), not at its header's line numbers; 6: the value the fix newly
# returns made wrong where it differs from before the fix; 7: the fix's value for another input
# handed back there, and what a function that returns nothing does to its arguments cut short;
# a method's old run on a copy of its instance as it was

OPERATOR_DOCS: dict[Operator, tuple[str, str]] = {
    Operator.COMPARISON_FLIP: (
        "`<` and `<=`, `>` and `>=`, `==` and `!=`, `is` and `is not`, `in` and `not in` "
        "swapped", "an off-by-one bound, a test of the wrong identity or membership"),
    Operator.BOOLEAN_FLIP: ("`and` and `or` swapped", "a condition joined the wrong way"),
    Operator.BOOLEAN_DROP: ("one operand of `and` / `or` dropped",
                            "a condition missing a case"),
    Operator.ARITHMETIC_FLIP: ("`+` and `-`, `*` and `/`, `//` and `/`, `%` and `//` swapped, "
                               "and their augmented forms", "a wrong formula"),
    Operator.NEGATE_CONDITION: ("the condition of an `if`, `elif`, `while` or `x if c else y` "
                                "negated", "a branch taken the wrong way round"),
    Operator.INT_PLUS_ONE: ("an integer + 1", "an off-by-one constant"),
    Operator.INT_MINUS_ONE: ("an integer - 1", "an off-by-one constant"),
    Operator.TRUE_FALSE: ("`True` and `False` swapped", "a flag set the wrong way"),
    Operator.RETURN_NONE: ("`return x` becomes `return None`",
                           "a stub that returns nothing"),
    Operator.STATEMENT_REMOVED: ("an added statement (not a call, a branch or a return) "
                                 "becomes `pass`", "a step of the fix forgotten"),
    Operator.ARGUMENT_DROPPED: ("one argument of an added call dropped (not of a built-in "
                                "that takes a fixed number)",
                                "an argument the fix threads through left out"),
    Operator.BRANCH_REMOVED: (
        "an added `if` deleted whole, or an added `elif`, `else` or `except` clause deleted "
        "(a `try` whose one handler the patch adds unwrapped)",
        "the guard or special case the fix needs, missing: the patch that handles only the "
        "tested path"),
    Operator.EARLY_RETURN: (
        "`return None` inserted before the first of a run of added statements in a function",
        "an early exit: the patch that returns before the new logic (or a new function "
        "left a stub)"),
    Operator.CONDITION_TRUE: ("an added `if` / `elif` / `x if c else y` condition becomes "
                              "`True`", "the special case hard-wired on: the condition the "
                                        "test happens to meet, always taken"),
    Operator.CONDITION_FALSE: ("an added `if` / `elif` / `x if c else y` condition becomes "
                               "`False`", "the new branch never taken"),
    Operator.CALL_UNWRAPPED: (
        "an added call's result replaced by its first argument (`f(x)` -> `x`, "
        "`os.path.join(a, b)` -> `a`), or a transforming method's by its receiver "
        "(`s.strip()` -> `s`)", "the conversion or normalisation the fix adds, skipped"),
    Operator.CALL_DROPPED: ("an added call statement deleted (not a logging call)",
                            "the new call (an inference, a registration, a flush) dropped"),
    Operator.EXCEPTION_SWALLOWED: (
        "added statements that raise wrapped in `try: ... except Exception: pass`; an added "
        "`except X` broadened to `except Exception`; an added guard deleted and the statement "
        "it protects wrapped in `try: ... except Exception: pass`; the code a change replaced "
        "put back inside `try: ... except Exception: pass`",
        "the symptom silenced instead of fixed: an `AttributeError` or `KeyError` swallowed by "
        "a broad `except`"),
    Operator.LOOP_EXIT_SWAPPED: ("an added `continue`, `break` or bare `return` in a loop "
                                 "swapped for one of the others",
                                 "a loop left the wrong way: `continue` turned into "
                                 "`return None`, a `break` that should skip one item"),
    Operator.PARTIAL_REVERT: (
        "one change block of a hunk holding several put back as before the fix, or one line "
        "of a block of edited lines put back as it was",
        "part of the fix left out: one of several edits made"),
    Operator.TESTED_INPUT_ONLY: (
        "a change block of the fix kept only when a parameter of the function around it "
        "equals a literal of the test patch's added lines (`if p == 1:` the new code `else:` "
        "the old; inside a statement, `(new if p == 1 else old)`), the code before the fix "
        "otherwise",
        "the fix applied only to the tested input: only a factor of -1, only `text=False`, "
        "only the int 1 (the special case that makes the test's example pass and leaves "
        "every other input broken)"),
    Operator.NEW_CASE_VALUE: (
        "a function the fix changes returns, where its result differs from the function's "
        "before the fix (or that one raised), that result changed: its first part (a number "
        "+ 1, a flag flipped, a text one character short), its last part, one part short "
        "(a list's last element, a text's last line), or the fix's latest result for another "
        "input that the function before the fix answered the same; a function that returns "
        "nothing: the argument it newly changes, its last item popped; the fix's own result "
        "everywhere else",
        "the case the issue is about handled with a value nobody checked: a factor evaluated "
        "or taken as 1, a section or a row left out, the error gone and the answer wrong, "
        "the new case sent down an old case's branch (a well-formed answer to another "
        "question), a line the fix inserts left out, while every input that worked before "
        "still does"),
}

assert set(OPERATOR_DOCS) == set(PYTHON_OPERATORS)
