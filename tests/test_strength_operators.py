"""The operators shaped like real wrong fixes, each on synthetic code: what it changes, where
it stays away (lines the patch did not add, logging, docstrings, code that would not
compile), and the docs' table of operators in docs/how-to/wrong-fix.md (what each does,
what it stands for)."""

from __future__ import annotations

from pathlib import Path

from envcheck.kinds.strength import Operator
from envcheck.kinds.strength.diffs import parse_patch
from envcheck.kinds.strength.model import PYTHON_OPERATORS
from envcheck.kinds.strength.operators import OPERATOR_DOCS
from envcheck.kinds.strength.reverts import change_blocks
from tests.conftest import ROOT
from tests.test_strength_mutants import added, edits, generate


def test_branch_removed_deletes_an_added_if_elif_else_or_except(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(x):\n    if x is None:\n        return 0\n    elif x < 0:\n"
                          "        x = -x\n    else:\n        x += 1\n    try:\n"
                          "        return 10 // x\n    except ZeroDivisionError:\n"
                          "        return 1\n    except TypeError:\n        return 2\n")
    found = edits(gen, Operator.BRANCH_REMOVED)
    assert ("if x is None: / return 0 / elif x < 0: / x = -x / else: / x += 1", "pass") \
        in found  # the whole if
    assert ("elif x < 0: / x = -x", "") in found
    assert ("else: / x += 1", "") in found
    assert ("except ZeroDivisionError: / return 1", "") in found
    assert ("except TypeError: / return 2", "") in found


def test_a_try_whose_one_handler_is_added_is_unwrapped(tmp_path: Path) -> None:
    base = {"m.py": "def f(d, k):\n    value = d[k]\n    return value\n"}
    post = {"m.py": "def f(d, k):\n    try:\n        value = d[k]\n    except KeyError:\n"
                    "        value = None\n    return value\n"}
    gen = generate(tmp_path, base, post)
    # unwrapping it is the base itself: the no-op, which the negative control plays
    assert not edits(gen, Operator.BRANCH_REMOVED)
    assert ("except KeyError:", "except Exception:") in edits(gen, Operator.EXCEPTION_SWALLOWED)
    post2 = {"m.py": post["m.py"].replace("    return value\n", "    return value or 0\n")}
    gen = generate(tmp_path / "2", base, post2)
    assert ("try: / value = d[k] / except KeyError: / value = None", "value = d[k]") in \
        edits(gen, Operator.BRANCH_REMOVED)


def test_early_return_before_the_code_the_patch_changes(tmp_path: Path) -> None:
    base = {"m.py": "def f(items):\n    total = 0\n    for i in items:\n        total += i\n"
                    "    return total\n"}
    post = {"m.py": "def f(items):\n    total = 0\n    for i in items:\n"
                    "        if i is None:\n            continue\n        total += i\n"
                    "    log.debug('total %s', total)\n    if total < 0:\n        total = 0\n"
                    "    return total\n"}
    gen = generate(tmp_path, base, post)
    assert edits(gen, Operator.EARLY_RETURN) == {
        ("", "return"),  # before the guard in the loop, before the clamp after the log call
    }
    lines = sorted(m.line for m in gen.mutants if m.operator is Operator.EARLY_RETURN)
    # before the first statement the patch changes (the loop holding the guard), before each
    # run it adds (the guard, the clamp after the log call); not before the log call (7),
    # nor inside the ifs it adds (5, 9)
    assert lines == [3, 4, 8]
    # a statement changed in part: the fix that returns before it, skipping what it does
    base = {"m.py": "def load(name, parse):\n    with open(name) as f:\n"
                    "        return parse(f)\n"}
    post = {"m.py": "def load(name, parse, text=True):\n"
                    "    with open(name, 'r' if text else 'rb') as f:\n"
                    "        return parse(f)\n"}
    gen = generate(tmp_path / "part", base, post)
    assert edits(gen, Operator.EARLY_RETURN) == {("", "return")}
    assert [m.line for m in gen.mutants if m.operator is Operator.EARLY_RETURN] == [2]
    # at the module's level, or in a class body, no return can go
    gen = added(tmp_path / "mod", "X = 1\n\nclass C:\n    y = 2\n")
    assert not edits(gen, Operator.EARLY_RETURN)


def test_conditions_made_trivially_true_or_false(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(a, b):\n    if(a > 1):\n        return 1\n    elif b:\n"
                          "        return 2\n    while a:\n        a -= 1\n"
                          "    return 3 if a else 4\n")
    assert edits(gen, Operator.CONDITION_TRUE) == {
        ("if(a > 1):", "if True:"), ("elif b:", "elif True:"),
        ("return 3 if a else 4", "return 3 if True else 4")}  # never a while: it would hang
    assert edits(gen, Operator.CONDITION_FALSE) >= {("elif b:", "elif False:")}


def test_call_unwrapped_to_its_argument_or_receiver(tmp_path: Path) -> None:
    gen = added(tmp_path, "import os\nfrom pkg import helpers\n\n"
                          "def f(self, name, parts, x):\n"
                          "    path = os.path.join(name, 'x')\n    key = name.strip().lower()\n"
                          "    y = convert(x + 1) * 2\n    z = self.normalize(x)\n"
                          "    w = parts.split(',')\n    n = len(parts)\n"
                          "    helpers.register(name)\n    return sorted(parts)\n")
    assert edits(gen, Operator.CALL_UNWRAPPED) == {
        ("path = os.path.join(name, 'x')", "path = name"),
        ("key = name.strip().lower()", "key = name.strip()"),
        ("key = name.strip().lower()", "key = name.lower()"),
        ("y = convert(x + 1) * 2", "y = (x + 1) * 2"),  # parenthesised: the same meaning
        ("z = self.normalize(x)", "z = x"),
        ("return sorted(parts)", "return parts"),
    }  # not parts.split(',') (a method of a value), not len (fixed arity), not a statement


def test_call_dropped_deletes_an_added_call_statement_but_not_logging(tmp_path: Path) -> None:
    gen = added(tmp_path, "async def f(obj, log):\n    obj.infer(context=1)\n"
                          "    await obj.flush()\n    log.info('done')\n    print(obj)\n"
                          "    obj.count += 1\n")
    assert edits(gen, Operator.CALL_DROPPED) == {("obj.infer(context=1)", "pass"),
                                                 ("await obj.flush()", "pass")}
    assert ("obj.count += 1", "pass") in edits(gen, Operator.STATEMENT_REMOVED)


def test_exception_swallowed_in_its_four_shapes(tmp_path: Path) -> None:
    base = {"m.py": "def f(obj, d, k):\n    name = obj.name\n    value = d[k]\n"
                    "    return name, value\n"}
    post = {"m.py": "def f(obj, d, k):\n    name = getattr(obj, 'name', None)\n"
                    "    if k not in d:\n        raise KeyError(k)\n    value = d[k]\n"
                    "    try:\n        value = int(value)\n    except ValueError:\n"
                    "        value = 0\n    return name, value\n"}
    gen = generate(tmp_path, base, post)
    found = edits(gen, Operator.EXCEPTION_SWALLOWED)
    # the code the change replaced (git paired the name line with the lines after it), back
    # in a broad try
    assert ("name = getattr(obj, 'name', None) / if k not in d: / raise KeyError(k)",
            "try: / name = obj.name / except Exception: / pass") in found
    # the raise the fix adds, swallowed
    assert ("raise KeyError(k)", "try: / raise KeyError(k) / except Exception: / pass") in found
    # the guard deleted (not the line before it), the statement it protects wrapped
    assert ("if k not in d: / raise KeyError(k) / value = d[k]",
            "try: / value = d[k] / except Exception: / pass") in found
    # the handler broadened
    assert ("except ValueError:", "except Exception:") in found


def test_loop_exits_swapped(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(items):\n    for i in items:\n        if i is None:\n"
                          "            continue\n        if i < 0:\n            break\n"
                          "        if i == 0:\n            return\n    return items\n")
    assert edits(gen, Operator.LOOP_EXIT_SWAPPED) == {
        ("continue", "break"), ("continue", "return"), ("break", "continue"),
        ("break", "return"), ("return", "continue"), ("return", "break")}
    at_module = added(tmp_path / "top", "for i in range(3):\n    if i:\n        break\n")
    assert edits(at_module, Operator.LOOP_EXIT_SWAPPED) == {("break", "continue")}


def test_partial_reverts_of_change_blocks_and_edited_lines(tmp_path: Path) -> None:
    base = {"m.py": "def f(a, b):\n    x = g(a)\n    y = h(b)\n    z = 1\n    return x + y + z\n"}
    post = {"m.py": "def f(a, b):\n    x = g(a, strict=True)\n    y = h(b, strict=True)\n"
                    "    z = 1\n    return x + y + z * 2\n"}
    gen = generate(tmp_path, base, post)
    # each block put back, and each edited line of the first alone (which is also the
    # keyword argument dropped: the same program counts once, under either operator)
    assert edits(gen, Operator.PARTIAL_REVERT) >= {
        ("x = g(a, strict=True) / y = h(b, strict=True)", "x = g(a) / y = h(b)"),
        ("return x + y + z * 2", "return x + y + z")}
    assert edits(gen, Operator.PARTIAL_REVERT) | edits(gen, Operator.ARGUMENT_DROPPED) >= {
        ("x = g(a, strict=True)", "x = g(a)"), ("y = h(b, strict=True)", "y = h(b)")}
    # a single block whose lines are parts of one statement: nothing put back
    call = {"m.py": "def f(a):\n    return g(\n        a,\n        1,\n    )\n"}
    edited = {"m.py": "def f(a):\n    return g(\n        a,\n        2,\n    )\n"}
    assert not edits(generate(tmp_path / "2", call, edited), Operator.PARTIAL_REVERT)


def test_change_blocks_know_both_sides() -> None:
    patch = parse_patch("--- a/m.py\n+++ b/m.py\n@@ -1,5 +1,5 @@\n a\n-b\n+B\n+B2\n c\n-d\n"
                        " e\n")
    blocks = change_blocks(patch.files[0].hunks[0])
    assert [(b.new_start, b.old_start, b.removed, b.added) for b in blocks] == [
        (2, 2, ("b",), ("B", "B2")), (5, 4, ("d",), ())]


def test_every_operator_is_documented_with_what_it_stands_for() -> None:
    page = (ROOT / "docs" / "how-to" / "wrong-fix.md").read_text(encoding="utf-8")
    assert set(OPERATOR_DOCS) == set(PYTHON_OPERATORS)
    for op, (does, stands_for) in OPERATOR_DOCS.items():
        assert f"| `{op}` | {op.family} | {does} | {stands_for} |" in page, op
