"""Survivors told apart from the gold patch by infection, on the real engine: the recorder in
the controls' own runs of the demo image (whose test command is hardened: ``python -I``, no
plugins, no ``conftest.py``), the gold patch against itself with no difference (addresses,
set order and object identities normalised; a time left out as it differs between two gold
runs), a mutant's changed result or state confirmed, a dropped argument the tests never vary
not distinguished; the controls' verdict from them; and an outcome stored under other rules
played again."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.catalogue.probe_specs import Oracle, Strength, TestSpec
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import new_run_id
from envcheck.kinds.adversarial.ledger import ControlsLedger, RecordedEvidence
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.strength.behaviour import difference
from envcheck.kinds.strength.controls import with_strength_controls
from envcheck.kinds.strength.diffs import parse_patch
from envcheck.kinds.strength.infection import targets
from envcheck.kinds.strength.recording import recorded
from envcheck.kinds.strength.survivors import classify, functions_changed
from envcheck.kinds.strength.verdict import RULES, Outcome, Played, Survivor
from envcheck.sandbox.base import Deadline
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT

pytestmark = pytest.mark.docker

DEMO = ROOT / "probes" / "demo-strength.yaml"
STRONG = "envcheck-demo__pyutils-6-strong"
PASSED = Verdict(Status.PASS, Reason.OK, "2 runs agree", {})
SHAPES = "textkit/shapes.py"
SHAPES_CODE = '''import time


class Box:
    def __init__(self, label):
        self.label = label
        self.seen = set()

    def add(self, *words):
        for word in words:
            self.seen.add(word)
        return sorted(self.seen)


def bag(words):
    return set(words)


def token():
    return object()


def stamp():
    return time.time()


def tag(value, context=None):
    prefix = context or ""
    return prefix + str(value)


def row(values, context=None):
    return ", ".join(tag(v, context=context) for v in values)


def render(rows, context=None):
    return [row(r, context=context) for r in rows]
'''
SHAPES_TEST = '''from textkit.shapes import Box, bag, render, stamp, tag, token


def test_shapes():
    assert Box("x").add("pear", "apple", "fig") == ["apple", "fig", "pear"]
    assert bag(["kiwi", "fig", "plum", "lime"]) == {"fig", "kiwi", "lime", "plum"}
    assert token() is not None and stamp() > 0
    assert render([[1, 2], [3]]) == ["1, 2", "3"]
    assert tag(3, context="n") == "n3"
'''
WEAK_TEST = '''from textkit.shapes import render


def test_shapes():
    assert isinstance(render([[1, 2], [3]]), list)
'''


def new_file(path: str, text: str) -> str:
    added = "".join(f"+{line}\n" for line in text.splitlines())
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{text.count(chr(10))} @@\n{added}")


def shapes_task(env: Environment, code: str, test: str, path: str = SHAPES,
                gold: str | None = None, **strength: Any) -> Environment:
    """``code`` a new module at ``path`` (or the patch ``gold``), ``test`` the fail-to-pass
    test."""
    assert env.tests is not None
    spec = env.tests.model_copy(update={
        "oracle": Oracle(patch=gold or new_file(path, code)),
        "test_patch": new_file("tests/test_shapes.py", test),
        "fail_to_pass": ["tests/test_shapes.py::test_shapes"], "pass_to_pass": [],
        "strength": Strength(**strength) if strength else env.tests.strength})
    return env.model_copy(update={"tests": spec})


@pytest.fixture(scope="module")
def demo() -> Catalogue:
    return load_catalogue([DEMO])


@pytest.fixture(scope="module")
def shapes(demo: Catalogue) -> Environment:
    return shapes_task(demo.environment(STRONG), SHAPES_CODE, SHAPES_TEST)


def test_the_gold_patch_against_itself_shows_no_difference(
        shapes: Environment, runtime: DockerRuntime) -> None:
    spec = shapes.tests
    assert spec is not None and spec.oracle is not None and spec.oracle.patch is not None
    assert "-I" in spec.command and "--noconftest" in spec.command  # hardened, unchanged
    rows = targets({SHAPES: SHAPES_CODE}, functions_changed(parse_patch(spec.oracle.patch),
                                                            {SHAPES: SHAPES_CODE}))
    assert {str(r[3]) for r in rows} == {f"{SHAPES}:{n}" for n in (
        "Box.__init__", "Box.add", "bag", "token", "stamp", "tag", "row", "render")}
    runs = []
    with ExitStack() as stack:
        ctx = ProbeContext(shapes, new_run_id(), runtime, None, stack)
        for n in range(3):
            found = recorded(ctx, spec, spec.oracle.patch, rows, f"gold {n}")
            assert found.calls is not None and found.passed, found.why
            runs.append(found.calls)
    first, again, third = runs
    test = "tests/test_shapes.py::test_shapes\t" + SHAPES
    # addresses, the order of a set of strings (hashed at random per process), identities:
    # not behaviour, and normalised away: equal in every run
    for name in ("Box.__init__", "Box.add", "bag", "token", "tag", "row", "render"):
        assert first[f"{test}:{name}"] == again[f"{test}:{name}"] == third[f"{test}:{name}"]
    assert first[f"{test}:bag"].first[0][:2] == (
        "return", "builtins.set{'fig', 'kiwi', 'lime', 'plum'}")
    assert first[f"{test}:token"].first[0][1] == "builtins.object:<object object at 0x?>"
    assert first[f"{test}:tag"].count == 4  # each call of a function, in order
    # a time is not the same twice: left out of the comparison by the two gold runs
    assert first[f"{test}:stamp"] != again[f"{test}:stamp"]
    assert difference(first, again, third) is None
    assert difference(first, again, first) is None


def test_a_survivor_that_behaves_otherwise_is_confirmed_one_that_does_not_is_not(
        shapes: Environment, runtime: DockerRuntime) -> None:
    spec = shapes.tests
    assert spec is not None
    gold = parse_patch(new_file(SHAPES, SHAPES_CODE))
    label_upper = SHAPES_CODE.replace("self.label = label", "self.label = label.upper()")
    no_context = SHAPES_CODE.replace("row(r, context=context)", "row(r)")
    mutants = [(label_upper, "label upper"), (no_context, "context dropped")]
    survivors = []
    for text, what in mutants:
        mutant = replace(_mutant(text), description=what)
        survivors.append((Played(what, Outcome.SURVIVED, "passed", SHAPES, 6, "x"), mutant))
    with ExitStack() as stack:
        ctx = ProbeContext(shapes, new_run_id(), runtime, None, stack)
        done = classify(ctx, spec, gold, {SHAPES: SHAPES_CODE}, survivors, Deadline(600))
    upper, dropped = done.survivors
    assert done.runs == 4  # the gold patch twice, each survivor once
    assert upper.survivor is Survivor.CONFIRMED, upper.why
    assert upper.why == (f"`{SHAPES}:Box.__init__` left self={SHAPES.replace('/', '.')[:-3]}"
                         ".Box(label='X', seen=builtins.set{}) in tests/test_shapes.py::"
                         "test_shapes where under the gold patch it left self=textkit.shapes."
                         "Box(label='x', seen=builtins.set{})")
    assert dropped.survivor is Survivor.NOT_DISTINGUISHED, dropped.why
    assert dropped.why.startswith("the same behaviour as the gold patch in ")


def _mutant(text: str) -> Any:
    from envcheck.kinds.strength.model import Mutant, Operator
    return Mutant(Operator.ARGUMENT_DROPPED, SHAPES, 1, "", "", new_file(SHAPES, text), text)


def render_tag_task(demo: Catalogue) -> Environment:
    """The shapes task cut to ``render`` and ``tag``: the fix threads ``context``, which the
    tests never vary."""
    code = SHAPES_CODE[SHAPES_CODE.index("def tag"):]
    return shapes_task(demo.environment(STRONG), code, SHAPES_TEST.replace(
        "Box, bag, render, stamp, tag, token", "render, tag").replace(
        '    assert Box("x").add("pear", "apple", "fig") == ["apple", "fig", "pear"]\n'
        '    assert bag(["kiwi", "fig", "plum", "lime"]) == {"fig", "kiwi", "lime", "plum"}\n'
        "    assert token() is not None and stamp() > 0\n", ""), mutants=40)


def alone(env: Environment, runtime: DockerRuntime, digest: str | None = None,
          prior: ProbeResult | None = None) -> Verdict:
    services: dict[type[Any], object] = {}
    if prior is not None:
        services[ControlsLedger] = ControlsLedger(RecordedEvidence([prior]))
    with ExitStack() as stack:
        ctx = ProbeContext(env, new_run_id(), runtime, digest, stack, services)
        return with_strength_controls(ctx, PASSED)


def test_arguments_the_tests_never_vary_make_no_false_weak(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    """Issue 36's false weak: the survivors that drop the threaded ``context`` behave as the
    fix on the tests' inputs; they are listed apart and the score counts the rest."""
    env = render_tag_task(demo)
    verdict = alone(env, runtime)
    info = verdict.details["strength"]
    apart = info["survivors_apart"]
    assert {s["description"] for s in apart} >= {
        "argument `context=context` dropped from `tag(...)`",
        "argument `context=context` dropped from `row(...)`"}, info["mutants"]
    assert all(s["class"] == "not_distinguished" for s in apart)
    assert info["survivors"] == [] and info["score"] == 1.0
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.OK), verdict.summary
    assert f"{len(apart)} survivor(s) not distinguished from the fix" in verdict.summary
    rows = info["per_operator"]["argument_dropped"]
    assert rows["not_distinguished"] >= 2 and rows["generated"] >= rows["killed"] + 2


def test_a_weak_test_is_weak_and_an_outcome_under_other_rules_is_played_again(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    code = SHAPES_CODE[SHAPES_CODE.index("def tag"):]
    env = shapes_task(demo.environment(STRONG), code, WEAK_TEST, mutants=5)
    digest = "sha256:" + "5" * 64
    first = alone(env, runtime, digest)
    info = first.details["strength"]
    assert (first.status, first.reason) == (Status.PASS, Reason.WEAK_VERIFIER), first.summary
    assert info["survivors"] and all(s["class"] == "confirmed" for s in info["survivors"])
    assert all(s["class_why"].startswith(f"`{SHAPES}:") for s in info["survivors"])
    assert info["generated"]["rules"] == RULES
    stored = ProbeResult(env.id, ProbeKind.TESTS, first.status, first.reason, first.summary,
                         1.0, digest, env.spec_hash(ProbeKind.TESTS),
                         started_at=datetime.now(UTC), details=first.details)
    again = alone(env, runtime, digest, stored)
    assert again.details["strength"]["reused"]["from"] == stored.started_at.isoformat()
    assert again.details["strength"]["runs"] == 0 and again.reason is Reason.WEAK_VERIFIER
    # the same weak_verifier recorded under the old rules: played again, not reused
    old = {**first.details, "strength": {**info, "generated": {
        **info["generated"], "rules": "operators 1; survivors none"}}}
    replayed = alone(env, runtime, digest, replace(stored, details=old))
    assert "reused" not in replayed.details["strength"]
    assert replayed.details["strength"]["runs"] > 5
    assert replayed.details["strength"]["generated"]["rules"] == RULES


def test_nothing_to_record_leaves_survivors_unclassified(shapes: Environment) -> None:
    """A gold patch that changes no function (a constant): nothing is run, and the survivors
    say why they could not be classified (they never lower the score, nor hide as 'ok')."""
    text = "LIMIT = 3\n"
    survivor = Played("3 -> 4", Outcome.SURVIVED, "passed", "textkit/limits.py", 1, "x")
    spec = shapes.tests
    assert isinstance(spec, TestSpec)
    done = classify(None, spec, parse_patch(new_file("textkit/limits.py", text)),  # type: ignore[arg-type]
                    {"textkit/limits.py": text}, [(survivor, _mutant(text))], Deadline(60))
    assert done.runs == 0
    assert [(s.survivor, s.why) for s in done.survivors] == [
        (Survivor.UNCLASSIFIED, "the gold patch changes no function to record")]
