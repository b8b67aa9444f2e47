"""Mutants of a gold patch's Python: each operator on real code, the anchor rule (added lines
only; docstrings, annotations, logging skipped), the static filters, seeded sampling that does
not depend on the process (a subprocess under another PYTHONHASHSEED), and candidate patches
that real ``git apply`` and ``patch`` take against the base in a real repository."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest

from envcheck.kinds.strength import (
    Family,
    Generation,
    Mutant,
    Operator,
    Rejection,
    patch_mutants,
)
from envcheck.kinds.strength.diffs import parse_patch
from envcheck.kinds.strength.model import PYTHON_OPERATORS
from envcheck.kinds.strength.newcase import WHICH
from envcheck.kinds.strength.placing import preimage
from envcheck.kinds.strength.pysites import find_sites, is_log_call
from envcheck.kinds.strength.pysource import PythonSource, statement_lines
from tests.conftest import ROOT
from tests.gitrepo import GitRepo


def gold_of(repo: GitRepo, base: dict[str, str], post: dict[str, str]) -> str:
    repo.commit(base)
    repo.write(post)
    repo.git("add", "-A")
    return repo.git("diff", "--cached").stdout


def generate(tmp_path: Path, base: dict[str, str], post: dict[str, str], seed: str = "seed",
             cap: int | None = None) -> Generation[Mutant]:
    gold = gold_of(GitRepo(tmp_path / "repo"), base, post)
    return patch_mutants(gold, post, seed, cap=cap)


def added(tmp_path: Path, code: str, seed: str = "seed") -> Generation[Mutant]:
    """Mutants of ``code`` added as a whole new module."""
    return generate(tmp_path, {"README": "x\n"}, {"pkg/mod.py": code}, seed)


def edits(gen: Generation[Mutant], op: Operator) -> set[tuple[str, str]]:
    """Each mutant of ``op`` as (line removed, line added) of its diff, stripped."""
    found = set()
    for m in gen.mutants:
        if m.operator is not op:
            continue
        lines = m.diff.split("\n")
        minus = [x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")]
        plus = [x[1:].strip() for x in lines if x.startswith("+") and not x.startswith("+++")]
        found.add((" / ".join(minus), " / ".join(plus)))
    return found


def test_comparison_flips(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(a, b, c):\n    if a < b:\n        return 1\n"
                          "    return a is not None and b in c and a != 3\n")
    assert edits(gen, Operator.COMPARISON_FLIP) == {
        ("if a < b:", "if a <= b:"),
        ("return a is not None and b in c and a != 3", "return a is None and b in c and a != 3"),
        ("return a is not None and b in c and a != 3",
         "return a is not None and b not in c and a != 3"),
        ("return a is not None and b in c and a != 3",
         "return a is not None and b in c and a == 3"),
    }


def test_boolean_flip_and_drop(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(a, b):\n    return (a or b)\n")
    assert edits(gen, Operator.BOOLEAN_FLIP) == {("return (a or b)", "return (a and b)")}
    assert edits(gen, Operator.BOOLEAN_DROP) == {("return (a or b)", "return (a)"),
                                                 ("return (a or b)", "return (b)")}


def test_arithmetic_flips_but_not_on_strings(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(x, s):\n    n = x * 2 + 1\n    n += x\n"
                          "    return s + '!' , '%s' % s\n")
    assert edits(gen, Operator.ARITHMETIC_FLIP) == {
        ("n = x * 2 + 1", "n = x / 2 + 1"), ("n = x * 2 + 1", "n = x * 2 - 1"),
        ("n += x", "n -= x")}


def test_negated_conditions(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(a, b):\n    if(a):\n        return 1\n    elif not b:\n"
                          "        return 2\n    while a > 0:\n        a -= 1\n"
                          "    return 3 if b else 4\n")
    assert edits(gen, Operator.NEGATE_CONDITION) == {
        ("if(a):", "if not ((a)):"), ("elif not b:", "elif b:"),
        ("while a > 0:", "while not (a > 0):"),
        ("return 3 if b else 4", "return 3 if not (b) else 4")}


def test_integers_plus_and_minus_one_and_true_false(tmp_path: Path) -> None:
    gen = added(tmp_path, "LIMIT = 0x10\nFLAG = True\n\ndef f(x=0):\n    return x[3]\n")
    assert edits(gen, Operator.INT_PLUS_ONE) == {
        ("LIMIT = 0x10", "LIMIT = 0x11"), ("def f(x=0):", "def f(x=1):"),
        ("return x[3]", "return x[4]")}
    assert edits(gen, Operator.INT_MINUS_ONE) == {
        ("LIMIT = 0x10", "LIMIT = 0xf"), ("def f(x=0):", "def f(x=-1):"),
        ("return x[3]", "return x[2]")}
    assert edits(gen, Operator.TRUE_FALSE) == {("FLAG = True", "FLAG = False")}


def test_return_none_and_statements_removed(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(x):\n    y = g(x)\n    if y:\n        return(y)\n"
                          "    return None\n\ndef h():\n    return\n")
    assert edits(gen, Operator.RETURN_NONE) == {("return(y)", "return None")}
    removed = edits(gen, Operator.STATEMENT_REMOVED)
    assert ("y = g(x)", "pass") in removed
    assert not any("return" in before for before, _ in removed)
    # a whole if the patch added is a branch removed (test_strength_operators.py)
    assert ("if y: / return(y)", "pass") in edits(gen, Operator.BRANCH_REMOVED)


def test_arguments_dropped_but_not_of_fixed_arity_builtins_nor_messages(tmp_path: Path) -> None:
    gen = added(tmp_path, "def f(x, t):\n    if isinstance(x, t) and len(x):\n"
                          "        raise ValueError('bad', x)\n    return g(x, key=t)\n")
    assert edits(gen, Operator.ARGUMENT_DROPPED) == {
        ("return g(x, key=t)", "return g(key=t)"), ("return g(x, key=t)", "return g(x)")}


def test_anchor_only_added_lines_and_no_docstring_annotation_logging(tmp_path: Path) -> None:
    base = ('import logging\nlog = logging.getLogger(__name__)\n\n'
            'def f(a: int, b: int) -> bool:\n    """Doc."""\n    c = a + 1\n    return a < b\n')
    post = ('import logging\nlog = logging.getLogger(__name__)\n\n'
            'def f(a: int = 1, b: "int | None" = None) -> bool:\n'
            '    """Doc, longer: 1 < 2."""\n    c = a + 1\n'
            '    log.info("a=%d", a + 2)\n    print(a - 1)\n'
            '    x: list[int] = []\n    return a < b and b > 0\n')
    gen = generate(tmp_path, {"m.py": base}, {"m.py": post})
    # the operators that change a node where it is (the ones working on runs of statements
    # or on change blocks: test_strength_operators.py; on whole functions:
    # test_strength_newcase.py)
    found = {(m.operator, m.line) for m in gen.mutants if m.family not in (
        Family.EXIT, Family.EXCEPTION, Family.REVERT, Family.VALUE)}
    # line 4 adds `= 1` and `= None` (not the annotations), 9 an empty list, 10 a condition;
    # the docstring (5), the log call (7) and the print (8) are passed over
    assert {line for _, line in found} == {4, 9, 10}
    assert {op for op, line in found if line == 4} == {Operator.INT_PLUS_ONE,
                                                       Operator.INT_MINUS_ONE}
    assert {op for op, line in found if line == 9} == {Operator.STATEMENT_REMOVED}
    assert (Operator.BOOLEAN_DROP, 10) in found
    assert (Operator.COMPARISON_FLIP, 10) in found


def test_a_statement_partly_added_is_not_removed(tmp_path: Path) -> None:
    base = "def f(a, b):\n    return g(\n        a,\n    )\n"
    post = "def f(a, b):\n    return g(\n        a,\n        b,\n    )\n"
    gen = generate(tmp_path, {"m.py": base}, {"m.py": post})
    # not the return removed (its other lines are the base's): `b` dropped, which is the
    # base, and an early return before the statement the patch changes in part (and the
    # value f newly returns made wrong, four ways)
    assert gen.sites == {Operator.ARGUMENT_DROPPED: 1, Operator.EARLY_RETURN: 1,
                         Operator.NEW_CASE_VALUE: len(WHICH)}
    assert gen.rejected == {(Operator.ARGUMENT_DROPPED, Rejection.SAME_AS_BASE): 1}


def test_skipped_blocks_and_files(tmp_path: Path) -> None:
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    X = 1\n\n"
            "class C:\n    def __repr__(self):\n        return 'C(%d)' % (1 + 2)\n")
    gen = generate(tmp_path, {"README": "x\n"},
                   {"pkg/m.py": code, "tests/test_m.py": "assert 1 < 2\n",
                    "docs/conf.py": "x = 1\n"})
    assert gen.mutants == ()
    assert sorted((s.file, s.why) for s in gen.skipped) == [
        ("docs/conf.py", "documentation"), ("tests/test_m.py", "a test file")]


def test_not_python_3_is_said(tmp_path: Path) -> None:
    gen = generate(tmp_path, {"m.py": "x = 1\n"}, {"m.py": "print 'hello'\n"})
    assert gen.mutants == ()
    [skip] = gen.skipped
    assert skip.file == "m.py" and skip.why.startswith("not Python 3")


def test_static_filters() -> None:
    source = PythonSource("m.py", "def f(a):\n    return a and a\n")
    variants = [v for v in source.variants(None) if v.operator is Operator.BOOLEAN_DROP]
    assert [source.check(v.render()) for v in variants] == [None, Rejection.DUPLICATE]
    assert source.check("def f(a):\n    return a and a  # same\n") is Rejection.SAME_AS_ORIGINAL
    assert source.check("def f(a):\n    return a and\n") is Rejection.NOT_COMPILING


def test_a_docstring_before_a_future_import_keeps_the_bytecode_comparison() -> None:
    """A module documented and then ``from __future__``: its mutants are still compared as
    the host compiles them, so one that only rewrites an equivalent form is the same program."""
    code = ('"""A documented module."""\nfrom __future__ import annotations\n\n'
            "def f(a):\n    return a and a\n")
    source = PythonSource("m.py", code)
    variants = [v for v in source.variants(None) if v.operator is Operator.BOOLEAN_DROP]
    assert [source.check(v.render()) for v in variants] == [None, Rejection.DUPLICATE]
    assert source.check(code.replace("A documented", "Another")) is Rejection.SAME_AS_ORIGINAL


def test_every_mutant_compiles_and_is_unique(tmp_path: Path) -> None:
    code = (ROOT / "envcheck" / "kinds" / "strength" / "diffs.py").read_text()
    gen = added(tmp_path, code)
    assert len(gen.mutants) > 100
    meanings = set()
    for m in gen.mutants:
        text = applied_text(m, "pkg/mod.py", code)
        compile(text, "m.py", "exec")
        meanings.add(text)
    assert len(meanings) == len(gen.mutants)
    # every operator but the partial reverts, which need lines the patch removed, the fix
    # kept for the tested input, which needs a test patch and a change inside a function, and
    # the new case's value made wrong, which needs a function that was there before the fix
    assert {m.operator for m in gen.mutants} == set(PYTHON_OPERATORS) - {
        Operator.PARTIAL_REVERT, Operator.TESTED_INPUT_ONLY, Operator.NEW_CASE_VALUE}


def applied_text(m: Mutant, path: str, post: str) -> str:
    """The mutant's file, from its display diff applied to the gold post-image (pure)."""
    fp = parse_patch(m.diff).file(path)
    # the diff goes gold -> mutant: its preimage is the gold text; swap the sides to rebuild
    reverse = fp.__class__(fp.new_path, fp.old_path, fp.header, tuple(
        h.__class__(h.new_start, h.new_len, h.old_start, h.old_len, h.section, tuple(
            {"+": "-", "-": "+"}.get(x[:1], x[:1]) + x[1:] for x in h.lines)) for h in fp.hunks),
        fp.raw)
    return preimage(reverse, post)


# -- sampling ---------------------------------------------------------------------------

SAMPLED = ("def f(a, b, c):\n    if a < b and b <= c:\n        a = a + 1\n"
           "    c = g(a, b, c, True) * 3\n    while a > b or c:\n        return h(a, 0)\n"
           "    return a - b\n")


def test_cap_takes_families_in_turn(tmp_path: Path) -> None:
    full = added(tmp_path / "full", SAMPLED)
    families = {m.family for m in full.mutants}
    assert len(full.mutants) > 24
    capped = generate(tmp_path / "capped", {"README": "x\n"}, {"pkg/mod.py": SAMPLED},
                      cap=len(families))
    assert Counter(m.family for m in capped.mutants) == dict.fromkeys(families, 1)
    assert sum(capped.tried.values()) == len(families)
    assert capped.sites == full.sites


def test_same_seed_same_mutants_in_another_process(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    gold = gold_of(repo, {"README": "x\n"}, {"pkg/mod.py": SAMPLED})
    here = [m.to_json() for m in patch_mutants(gold, {"pkg/mod.py": SAMPLED}, "sha256:ab|1",
                                               cap=8).mutants]
    script = ("import json, sys\nfrom envcheck.kinds.strength import patch_mutants\n"
              "gold, post = json.load(sys.stdin)\n"
              "print(json.dumps([m.to_json() for m in patch_mutants("
              "gold, post, 'sha256:ab|1', cap=8).mutants]))\n")
    for hashseed in ("0", "4242"):
        out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True,
                             input=json.dumps([gold, {"pkg/mod.py": SAMPLED}]),
                             capture_output=True, timeout=120, check=True,
                             env={"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin"})
        assert json.loads(out.stdout) == here
    other = [m.to_json() for m in patch_mutants(gold, {"pkg/mod.py": SAMPLED}, "sha256:cd|1",
                                                cap=8).mutants]
    assert other != here and len(other) == len(here) == 8


# -- candidate patches against the base -------------------------------------------------

BASE = {"src/calc.py": "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\n"
                       "def unused():\n    pass\n\n\ndef clamp(x, lo, hi):\n    return x\n",
        "src/crlf.py": "def f(x):\r\n    return x\r\n",
        "src/tail.py": "def g(x):\n    return x"}
POST = {"src/calc.py": "import math\n\n\ndef area(r):\n    if r < 0:\n        raise ValueError(r)\n"
                       "    return math.pi * r * r\n\n\ndef unused():\n    pass\n\n\n"
                       "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
        "src/crlf.py": "def f(x):\r\n    return x + 1\r\n",
        "src/tail.py": "def g(x):\n    return x or 0",
        "src/new.py": "def h(a, b):\n    return a == b\n"}


def test_candidate_patches_apply_to_the_base(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    gold = gold_of(repo, BASE, POST)
    repo.git("reset", "-q", "--hard")
    repo.git("clean", "-qfd")
    for fp in parse_patch(gold).files:
        if fp.old_path is not None:
            assert preimage(fp, POST[fp.path]) == BASE[fp.path]
    gen = patch_mutants(gold, POST, "seed", cap=None)
    assert {m.file for m in gen.mutants} == set(POST)
    assert len(gen.mutants) > 15
    for i, m in enumerate(gen.mutants):
        assert repo.apply_check(m.patch).returncode == 0, (m.description, m.patch)
        assert repo.patch_dry_run(m.patch).returncode == 0, (m.description, m.patch)
        if i % 4:
            continue  # applying every one for real is slow; every fourth is enough
        tree = repo.applied(m.patch, tmp_path / "tree")
        for path, text in POST.items():
            want = applied_text(m, path, text) if path == m.file else text
            assert (tree / path).read_bytes().decode() == want, m.description


def test_a_mutant_that_undoes_the_whole_gold_patch_is_the_no_op(tmp_path: Path) -> None:
    gen = generate(tmp_path, {"m.py": "def f():\n    pass\n"},
                   {"m.py": "def f():\n    x = 1\n"})
    assert gen.rejected == {(Operator.STATEMENT_REMOVED, Rejection.SAME_AS_BASE): 1}
    assert {m.operator for m in gen.mutants} == {Operator.INT_PLUS_ONE, Operator.INT_MINUS_ONE,
                                                 Operator.EARLY_RETURN}


# -- real-world code: the incompetent share ---------------------------------------------

# three modules of different shapes (the corpus bench covers 360 real fix commits)
STDLIB = ("textwrap.py", "shlex.py", "fractions.py")


@pytest.mark.parametrize("name", STDLIB)
def test_stdlib_modules_mutated_whole_stay_competent(tmp_path: Path, name: str) -> None:
    """Standard-library modules added as new files: every line is mutated (no cap); under
    1% are dropped for not compiling, and every emitted candidate applies with git."""
    code = (Path(sysconfig.get_paths()["stdlib"]) / name).read_text()
    repo = GitRepo(tmp_path / "repo")
    gold = gold_of(repo, {"README": "x\n"}, {f"lib/{name}": code})
    repo.git("reset", "-q", "--hard")
    repo.git("clean", "-qfd")
    gen = patch_mutants(gold, {f"lib/{name}": code}, name, cap=None)
    tried = sum(gen.tried.values())
    failed = sum(n for (_, why), n in gen.rejected.items() if why is Rejection.NOT_COMPILING)
    assert tried > 200 and failed / tried < 0.01
    for m in gen.mutants[::25]:
        assert repo.apply_check(m.patch).returncode == 0, m.description
    assert {m.family for m in gen.mutants} >= {Family.COMPARISON, Family.CALL,
                                               Family.STATEMENT, Family.CONSTANT}


@pytest.mark.parametrize(("call", "logs"), [
    ("logger.info(x)", True), ("self._log.debug(x)", True), ("LOG.error(e)", True),
    ("logging.getLogger(__name__).warning(x)", True), ("self.logger.exception(e)", True),
    ("print(x)", True), ("warnings.warn(w)", True), ("sys.stderr.write(x)", True),
    ("catalog.error(x)", False), ("log.append(x)", False), ("click.echo(x)", False)])
def test_which_calls_are_logging(call: str, logs: bool) -> None:
    node = cst.parse_expression(call)
    assert isinstance(node, cst.Call)
    assert is_log_call(node) is logs


@pytest.mark.parametrize("name", ["textwrap.py", "shlex.py"])
def test_statements_visited_alone_give_the_sites_of_the_whole_file(name: str) -> None:
    """Only the top-level statements holding an added line are visited, each alone with
    its lines shifted back: the same sites as visiting the whole file."""
    code = (Path(sysconfig.get_paths()["stdlib"]) / name).read_text()
    source = PythonSource(name, code)
    lines = len(code.split("\n"))
    for seed in range(4):
        added = frozenset(random.Random(seed).sample(range(1, lines), lines // 5))
        alone = find_sites(source.module, added, statement_lines(source.module, code))
        whole = find_sites(source.module, added, None)
        assert len(alone) > 20
        assert [(s.operator, s.line, s.column, s.description, s.first_line, s.top)
                for s in alone] == [(s.operator, s.line, s.column, s.description,
                                     s.first_line, s.top) for s in whole]


def test_a_file_the_patch_only_shortens_has_no_mutant(tmp_path: Path) -> None:
    gen = generate(tmp_path, {"m.py": "import os\nimport sys\n\nx = 1\n", "n.py": "y = 1\n"},
                   {"m.py": "import os\n\nx = 1\n", "n.py": "y = 2\n"})
    assert {m.file for m in gen.mutants} == {"n.py"}
    assert gen.skipped == ()


def test_a_file_the_host_does_not_compile_is_checked_in_part_as_it_would_be_whole() -> None:
    """A file the host parses but does not compile (here a duplicate argument) is compared
    as text: its mutants are spliced statement by statement and only what changed is parsed,
    with the same texts and the same verdicts as rendering and parsing the whole file."""
    code = (Path(sysconfig.get_paths()["stdlib"]) / "shlex.py").read_text()
    code += "\n\ndef _twice(a, a):\n    return a\n"
    with pytest.raises(SyntaxError):
        compile(code, "shlex.py", "exec")
    source = PythonSource("shlex.py", code)
    lines = len(code.split("\n"))
    added = frozenset(random.Random(0).sample(range(1, lines), lines // 8))
    variants = source.variants(added)
    assert len(variants) > 20
    originals = {(s.operator, s.line, s.description): s for s in find_sites(
        source.module, added, None)}
    seen: set[str] = set()
    for variant in variants[:16]:
        text = variant.render()
        site = originals[variant.operator, variant.line, variant.description]
        assert text == source.module.deep_replace(site.original, site.replacement).code
        try:
            cst.parse_module(text)
            whole = Rejection.SAME_AS_ORIGINAL if text == code else (
                Rejection.DUPLICATE if text in seen else None)
        except cst.ParserSyntaxError:
            whole = Rejection.NOT_COMPILING
        seen.update([text] if whole is None else [])
        assert source.check(text) is whole
    at = code.split("\n").index("    return a")
    assert source.check(source.with_lines(at, 1, ["    return (a"])) is Rejection.NOT_COMPILING
    assert source.check(source.with_lines(at, 1, ["    return a"])) is Rejection.SAME_AS_ORIGINAL
