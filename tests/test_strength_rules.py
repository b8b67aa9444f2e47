"""The survivor rules the development set called for, on the real engine (the demo image, its
hardened command): a function called fewer times with the same results is not told apart from
the fix while a new value is (sympy-23117's call counts); a command that prints another table
and returns None is told apart by its output (flask-5063), the gold patch's output the same
twice (an address in it normalised); survivors of a part of the fix the tests pass without
are an uncovered hunk, apart and not recorded; and the fix kept only for the tested input
survives a weak test, confirmed by the value it returns for another input."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.catalogue.probe_specs import Oracle
from envcheck.core.results import Reason
from envcheck.executors.cycle import new_run_id
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.behaviour import difference
from envcheck.kinds.strength.diffs import parse_patch, unified_section
from envcheck.kinds.strength.infection import targets
from envcheck.kinds.strength.recording import recorded
from envcheck.kinds.strength.survivors import classify, functions_changed
from envcheck.kinds.strength.verdict import Outcome, Played, Survivor
from envcheck.sandbox.base import Deadline
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT
from tests.test_strength_survivors import (
    DEMO,
    STRONG,
    alone,
    new_file,
    render_tag_task,
    shapes_task,
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def demo() -> Catalogue:
    return load_catalogue([DEMO])


COUNTS = "textkit/counts.py"
COUNTS_CODE = '''def clean(word):
    return word.strip().lower()


def unique(words):
    return sorted({clean(w) for w in words})


def table(rows):
    print("Name  Size", object())
    for name, size in rows:
        print(name.ljust(5), size)
'''
COUNTS_TEST = '''from textkit.counts import table, unique


def test_shapes():
    assert unique(["a", "a", "B"]) == ["a", "b"]
    table([("x", 1)])
'''


def counted(text: str) -> Any:
    from envcheck.kinds.strength.model import Mutant, Operator
    return Mutant(Operator.CALL_UNWRAPPED, COUNTS, 1, "", "", new_file(COUNTS, text), text)


def test_counts_alone_do_not_confirm_and_output_does(demo: Catalogue,
                                                     runtime: DockerRuntime) -> None:
    """sympy-23117: a function called fewer times with the same results is not told apart
    from the fix; one that also returns a value the fix never does is. flask-5063: a command
    that prints another table and returns None is. The gold patch against itself: the same
    output, an object's address in it normalised."""
    env = shapes_task(demo.environment(STRONG), COUNTS_CODE, COUNTS_TEST, COUNTS)
    spec = env.tests
    assert spec is not None and spec.oracle is not None and spec.oracle.patch is not None
    gold = parse_patch(spec.oracle.patch)
    texts = {COUNTS: COUNTS_CODE}
    rows = targets(texts, functions_changed(gold, texts))
    fewer = COUNTS_CODE.replace("for w in words}", "for w in set(words)}")
    novel = COUNTS_CODE.replace('{clean(w) for w in words}',
                                '{clean(w) for w in [*words, "Extra"]} - {"extra"}')
    header = COUNTS_CODE.replace('print("Name  Size"', 'print("Host  Name  Size"')
    with ExitStack() as stack:
        ctx = ProbeContext(env, new_run_id(), runtime, None, stack)
        golds = [recorded(ctx, spec, spec.oracle.patch, rows, f"gold {n}") for n in (1, 2)]
        for found in golds:
            assert found.calls is not None and found.passed, found.why
        first, again = (g.calls or {} for g in golds)
        test = f"tests/test_shapes.py::test_shapes\t{COUNTS}"
        assert first[f"{test}:table"] == again[f"{test}:table"]
        assert first[f"{test}:table"].first[0][2] == (
            "stdout 'Name  Size <object object at 0x?>\\nx     1\\n'")
        assert first[f"{test}:clean"].count == 3
        assert difference(first, again, again) is None
        said = {}
        for name, text in (("fewer", fewer), ("novel", novel), ("header", header)):
            found = recorded(ctx, spec, new_file(COUNTS, text), rows, name)
            assert found.calls is not None and found.passed, found.why
            said[name] = difference(first, again, found.calls)
        survivor = Played("fewer", Outcome.SURVIVED, "passed", COUNTS, 6, "x")
        done = classify(ctx, spec, gold, texts, [(survivor, counted(fewer))], Deadline(600))
    assert said["fewer"] is None  # clean called twice instead of three times: no new value
    assert done.survivors[0].survivor is Survivor.NOT_DISTINGUISHED, done.survivors[0].why
    assert said["novel"] is not None and said["novel"].startswith(
        f"`{COUNTS}:clean` returned 'extra' in tests/test_shapes.py::test_shapes (call ")
    assert said["novel"].endswith("of 4), which it never did under the gold patch (3 call(s))")
    assert said["header"] == (
        f"`{COUNTS}:table` wrote stdout 'Host  Name  Size <object object at 0x?>\\nx     1\\n' "
        "in tests/test_shapes.py::test_shapes where under the gold patch it wrote stdout "
        "'Name  Size <object object at 0x?>\\nx     1\\n'")


TWO = "textkit/two.py"
TWO_CODE = '''def halve(value):
    if value < 0:
        value = -value
    return value // 2
'''


def test_survivors_in_a_file_the_tests_pass_without_are_apart(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    """The gold patch adds two modules, the tests use one: the patch without the other is
    rewarded, so its survivors are an uncovered part of the fix, not a weakness of the
    assertions; the score counts the rest, and those survivors are not recorded."""
    env = render_tag_task(demo)
    assert env.tests is not None and env.tests.oracle is not None
    gold = (env.tests.oracle.patch or "") + new_file(TWO, TWO_CODE)
    env = env.model_copy(update={"tests": env.tests.model_copy(
        update={"oracle": Oracle(patch=gold)})})
    verdict = alone(env, runtime)
    info = verdict.details["strength"]
    rewarded = [p for p in info["partial_patches"] if p["outcome"] == "survived"]
    assert [p["description"] for p in rewarded] == [f"{TWO} left out"], info["partial_patches"]
    apart = [s for s in info["survivors_apart"] if s["file"] == TWO]
    assert apart and all(s["class"] == "uncovered_hunk" for s in apart), apart
    assert all(s["class_why"] == f"in a part of the fix the tests pass without: {TWO} left "
               "out is rewarded" for s in apart)
    assert info["counts"]["uncovered_hunk"] == len(apart) == sum(
        row["uncovered_hunk"] for row in info["per_operator"].values())
    assert not [s for s in info["survivors"] if s["file"] == TWO]
    assert info["score"] == 1.0 and verdict.reason is Reason.OK, verdict.summary
    assert f"{len(apart)} survivor(s) in a hunk the tests pass without" in verdict.summary
    # the files read, one run per control (no pass-to-pass tests), then the gold patch twice
    # and each other survivor once, recorded: those in the uncovered file are not
    others = len(info["survivors_apart"]) + len(info["survivors"]) - len(apart)
    assert info["runs"] == 1 + len(info["mutants"]) + len(info["partial_patches"]) + (
        2 + others if others else 0)


OPS = "mathkit/ops.py"
OPS_BASE = (ROOT / "images" / "demo" / "swe-pyutils" / "testbed" / OPS).read_text()
OPS_FIXED = OPS_BASE.replace('''    return part / whole
''', '''    if whole == 0:
        return 0.0
    return 100 * part / whole
''')
PERCENT_TEST = '''from mathkit.ops import percent


def test_shapes():
    assert percent(1, 4) == 25.0
    assert isinstance(percent(1, 2), float)
'''


def test_a_gold_patch_whose_header_is_off_is_mutated_where_it_applied(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    """sphinx-8713: the record's hunk header says the fix is 5 lines below where it applies
    in the image (``git apply`` takes the offset). The mutants are made where it applied (the
    lines of ``percent`` the fix adds), none in ``clamp`` below, each applying as the gold
    patch does. The fix kept only when ``whole == 4`` (the test patch's input) passes the weak
    assertion on ``percent(1, 2)`` and is confirmed: it returns 0.5 where the fix returns
    50.0."""
    exact = unified_section(OPS, OPS, OPS_BASE, OPS_FIXED)
    assert "@@ -1,6 +1,8 @@" in exact
    env = shapes_task(demo.environment(STRONG), "", PERCENT_TEST, gold=exact.replace(
        "@@ -1,6 +1,8 @@", "@@ -6,6 +6,8 @@"), mutants=40)
    verdict = alone(env, runtime)
    info = verdict.details["strength"]
    assert any(f"{OPS}: hunk 1 (@@ -6,6 +6,8 @@) applies 5 line(s) above its header, from "
               "line 1" in n for n in info["generated"]["notes"]), info["generated"]
    lines = {m["line"] for m in info["mutants"]}
    fixed = {n for n, line in enumerate(OPS_FIXED.split("\n"), 1) if line not in OPS_BASE}
    assert fixed == {3, 4, 5} and lines and lines <= fixed, info["mutants"]
    assert info["counts"]["incompetent"] == 0, info["mutants"]
    assert "tested_input_only" in {m["operator"] for m in info["mutants"]}
    confirmed = [s for s in info["survivors"] if s["operator"] == "tested_input_only"]
    why = next(s["class_why"] for s in confirmed if "`whole == 4`" in s["description"])
    assert why == (f"`{OPS}:percent` returned 0.5 in tests/test_shapes.py::test_shapes where "
                   "under the gold patch it returned 50.0")
    assert info["per_operator"]["tested_input_only"]["confirmed"] == len(confirmed)
    assert verdict.reason is Reason.WEAK_VERIFIER or info["score"] < 1.0
