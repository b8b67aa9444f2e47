"""The fix kept only for the tested input (``tested_input_only``), on synthetic code and on
standard-library modules: the literals taken from the test patch's added lines, a change
block of whole statements under ``if <param> == <literal>:`` (the old code otherwise), a
change inside a statement as ``(<new> if <param> == <literal> else <old>)``, where it stays
away (a new function, an ``elif``, module level, docstrings), none without a test patch (and
said), bounded per block, and every candidate compiling and applying with git."""

from __future__ import annotations

import ast
import re
import sysconfig
from pathlib import Path

import pytest

from envcheck.kinds.strength import Generation, Mutant, Operator, patch_mutants
from envcheck.kinds.strength.tested import LITERALS, PARAMETERS
from envcheck.kinds.strength.testinputs import Literal
from envcheck.kinds.strength.testinputs import test_literals as literals_of
from tests.gitrepo import GitRepo
from tests.test_strength_mutants import applied_text, edits, gold_of

TESTED = Operator.TESTED_INPUT_ONLY


def new_test(body: str, path: str = "tests/test_m.py") -> str:
    lines = body.strip("\n").split("\n")
    added = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{added}")


TEST = new_test('''
from m import scale


def test_scale():
    """A docstring, not an input."""
    assert scale(3, factor=-1) == -3
    assert scale(2, text=False) == "2"
    assert isinstance(scale(5), str)
''')


def generated(tmp_path: Path, base: str, post: str, test_patch: str | None = TEST,
           cap: int | None = None) -> Generation[Mutant]:
    gold = gold_of(GitRepo(tmp_path / "repo"), {"m.py": base}, {"m.py": post})
    return patch_mutants(gold, {"m.py": post}, "seed", cap=cap, test_patch=test_patch)


def test_the_literals_are_the_test_patchs_most_frequent_and_by_keyword() -> None:
    found = literals_of(TEST)
    # as often each: in the order first seen; the docstring is no input
    assert [lit.code for lit in found.literals] == ["3", "-1", "-3", "2", "False", "'2'", "5"]
    assert found.literals[4] == Literal("False", bool) and found.literals[5].kind is str
    assert found.keywords == {"factor": (Literal("-1", int),), "text": (Literal("False", bool),)}
    # the most frequent first
    many = literals_of(new_test("f(7)\nf(7)\ng('x', None)\nh(7, None, b'z', f'{y}', 1.5)"))
    assert [lit.code for lit in many.literals] == ["7", "None", "'x'"]
    long = "x" * 50
    assert not literals_of(new_test(f"assert f('{long}')"))  # a message, not an input
    assert not literals_of(new_test("f(1)", path="data/cases.txt"))  # not Python
    assert not literals_of(None) and not literals_of("not a diff")


BASE = '''def scale(value, factor=2, *, text=True, label=None):
    result = value * abs(factor)
    if text:
        return str(result)
    return result
'''
POST = '''def scale(value, factor=2, *, text=True, label=None):
    result = value * factor
    if factor < 0 and result:
        result = -result
    if text:
        return str(result)
    return result
'''


def test_a_block_of_statements_kept_for_the_tested_input_only(tmp_path: Path) -> None:
    gen = generated(tmp_path, BASE, POST)
    found = edits(gen, TESTED)
    # the block that replaced one line by three: the new lines under the test, the old else
    assert ("result = value * factor / if factor < 0 and result: / result = -result",
            "if factor == -1: / result = value * factor / if factor < 0 and result: / "
            "result = -result / else: / result = value * abs(factor)") in found
    tests = {re.search(r"when `([^`]*)`", m.description).group(1)  # type: ignore[union-attr]
             for m in gen.mutants if m.operator is TESTED}
    # factor (passed by keyword) first with its own literal, then the other ints; text gets
    # only booleans (its default is one); value, named by the block, the ints
    assert {"factor == -1", "factor == 3", "factor == -3", "text is False",
            "value == 3"} <= tests
    assert not any(t.startswith("text ==") or t.startswith("label") for t in tests)
    assert len(tests) <= PARAMETERS * LITERALS
    for m in gen.mutants:
        compile(applied_text(m, "m.py", POST), "m.py", "exec")
    assert gen.notes == ()


def test_a_block_that_only_removes_is_kept_as_before_unless_tested(tmp_path: Path) -> None:
    base = "def f(items, strict=False):\n    items = list(items)\n    items.sort()\n" \
           "    return items\n"
    post = "def f(items, strict=False):\n    items = list(items)\n    return items\n"
    gen = generated(tmp_path, base, post, new_test("assert f([2, 1], strict=True) == [2, 1]"))
    assert ("", "if strict is not True: / items.sort()") in edits(gen, TESTED)


def test_a_change_inside_a_statement_is_kept_as_an_expression(tmp_path: Path) -> None:
    base = "def f(a, context=None):\n    if a > 1:\n        return 1\n    return render(\n" \
           "        a,\n        mode='x',\n    )\n"
    post = "def f(a, context=None):\n    if a > 1 and context:\n        return 1\n" \
           "    return render(\n        a,\n        mode='x',\n        context=context,\n    )\n"
    gen = generated(tmp_path, base, post, new_test("assert f(2, context='c') == 1"))
    found = edits(gen, TESTED)
    assert ("if a > 1 and context:", "if (a > 1 and context if context == 'c' else a > 1):") \
        in found
    # (the diff shows the lines that changed: the call's own lines are the same)
    assert ("return render( / )", "return (render( / ) if context == 'c' else render( / a, / "
            "mode='x', / ))") in found
    for m in gen.mutants:
        compile(applied_text(m, "m.py", post), "m.py", "exec")


def test_where_it_stays_away(tmp_path: Path) -> None:
    base = "X = 1\n\n\ndef g(a):\n    if a:\n        return 1\n    return 2\n"
    post = ('X = 2\n\n\ndef g(a):\n    """Doc."""\n    if a:\n        return 1\n'
            "    elif a is None:\n        return 0\n    return 2\n\n\ndef h(b):\n    return b\n")
    gen = generated(tmp_path, base, post, new_test("assert g(1) == 1 and h(1) == 1"))
    # module level (X), a docstring, an elif clause, a new function: nothing to condition
    assert not edits(gen, TESTED), edits(gen, TESTED)


def test_a_block_that_is_part_of_a_statement_is_not_moved(tmp_path: Path) -> None:
    """An ``if`` and its body changed with its ``elif`` kept, a loop's head and first lines
    changed with the rest of its body kept: moved under a new ``if``, either would cut the
    statement (and not compile)."""
    base = ("def g(a, b):\n    if a > b:\n        x = 1\n    elif b:\n        x = 2\n"
            "    for i in a:\n        y = i\n        z = y\n        x += z\n    return x\n")
    post = ("def g(a, b):\n    if a >= b:\n        x = 10\n    elif b:\n        x = 2\n"
            "    for i in b:\n        y = i * 2\n        z = y\n        x += z\n    return x\n")
    gen = generated(tmp_path, base, post, new_test("assert g(3, [1]) == 2"))
    assert not any(op is TESTED for op, _ in gen.rejected), gen.rejected
    for m in gen.mutants:
        compile(applied_text(m, "m.py", post), "m.py", "exec")


def test_no_test_patch_no_mutant_and_said(tmp_path: Path) -> None:
    gen = generated(tmp_path, BASE, POST, None)
    assert not edits(gen, TESTED)
    assert gen.notes == ("no tested_input_only mutant: no test patch to take the tested "
                         "inputs from",)
    gen = generated(tmp_path / "2", BASE, POST, new_test("assert f(x) == y"))
    assert gen.notes == ("no tested_input_only mutant: the test patch's added lines hold no "
                         "int, string, boolean or None",)


def test_the_cap_keeps_the_family_with_the_others(tmp_path: Path) -> None:
    gen = generated(tmp_path, BASE, POST, cap=4)
    assert len(gen.mutants) == 4
    assert len({m.family for m in gen.mutants}) == 4  # families in turn
    full = generated(tmp_path / "full", BASE, POST)
    assert TESTED in {m.operator for m in full.mutants}


STDLIB = ("textwrap.py", "shlex.py")


@pytest.mark.parametrize("name", STDLIB)
def test_on_standard_library_modules_every_candidate_compiles_and_applies(
        tmp_path: Path, name: str) -> None:
    """A module as the fix's post-image, its base the module with comparisons and returns
    edited: every candidate of the operator compiles and applies with git."""
    post = (Path(sysconfig.get_paths()["stdlib"]) / name).read_text()
    lines = post.split("\n")
    for k, node in enumerate(n for n in ast.walk(ast.parse(post))
                             if isinstance(n, ast.Return | ast.Compare)
                             and n.lineno == n.end_lineno):
        line = lines[node.lineno - 1]
        if isinstance(node, ast.Compare) and k % 3 == 0 and " == " in line:
            lines[node.lineno - 1] = line.replace(" == ", " != ", 1)
        elif isinstance(node, ast.Return) and node.value is not None and k % 2 == 0 \
                and "#" not in line:
            lines[node.lineno - 1] = line.rstrip() + " or None"
    base = "\n".join(lines)
    compile(base, "base.py", "exec")
    repo = GitRepo(tmp_path / "repo")
    gold = gold_of(repo, {"m.py": base}, {"m.py": post})
    repo.git("reset", "-q", "--hard")
    test_patch = new_test("assert f(1, width=70) == ''\nassert g('a b', posix=True) is None")
    gen = patch_mutants(gold, {"m.py": post}, "seed", cap=None, test_patch=test_patch)
    ours = [m for m in gen.mutants if m.operator is TESTED]
    dropped = sum(n for (op, _), n in gen.rejected.items() if op is TESTED)
    assert len(ours) >= 10, gen.sites
    assert dropped <= 0.05 * (dropped + len(ours)), gen.rejected
    for m in ours:
        compile(applied_text(m, "m.py", post), name, "exec")
        assert repo.apply_check(m.patch).returncode == 0, (m.description, m.patch)
