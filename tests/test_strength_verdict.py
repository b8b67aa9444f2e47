"""The wrong-fix controls' pure parts: the score over the mutants told apart from the fix
(confirmed survivors lower it, the others are listed apart), its floor (strength.min_competent)
and the degraded ``strength_not_measurable`` below it, the verdict (degraded, a fail where
required, an earlier degraded reason kept), the summary, the details (per-operator counts,
survivors with diffs, by class), unplayed mutants, and which stored outcomes are reused (the
same sample under the same rules only)."""

from __future__ import annotations

from typing import Any

import pytest

from envcheck.catalogue.probe_specs import Strength
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.base import Verdict
from envcheck.kinds.strength.play import _broken
from envcheck.kinds.strength.verdict import (
    DIFF_MAX,
    RULES,
    Outcome,
    Played,
    StrengthOutcome,
    Survivor,
    judge,
    stored_outcome,
)
from envcheck.kinds.testvalidity.junit import Case
from envcheck.kinds.testvalidity.junit import Outcome as JunitOutcome
from envcheck.kinds.testvalidity.runs import Phase, Run

PASSED = Verdict(Status.PASS, Reason.OK, "2 runs agree", {"runs": []})
PLAN = Strength()
SEED = "sha256:abc|spec"


def mutant(outcome: Outcome, n: int = 0, op: str = "comparison_flip",
           survivor: Survivor | None = None) -> Played:
    if outcome is Outcome.SURVIVED and survivor is None:
        survivor = Survivor.CONFIRMED
    return Played(f"change {n}", outcome, f"detail {n}", "pkg/mod.py", 10 + n, op,
                  f"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x{n}\n+y{n}\n",
                  survivor=survivor, why=f"why {n}" if survivor else "")


K, KP, S, INC, TO = (Outcome.KILLED, Outcome.KILLED_P2P, Outcome.SURVIVED, Outcome.INCOMPETENT,
                     Outcome.TIMEOUT)
ND, UN, UC = "not_distinguished", "unclassified", "uncovered_hunk"  # survivors of those classes


def outcome(*outcomes: Outcome | str, **kw: Any) -> StrengthOutcome:
    played = [mutant(S, i, survivor=Survivor(o)) if isinstance(o, str) and o in (ND, UN, UC)
              else mutant(Outcome(o), i) for i, o in enumerate(outcomes)]
    found = StrengthOutcome(played, **kw)
    found.generated = {"seed": SEED, "cap": PLAN.mutants, "partial": PLAN.partial,
                       "rules": RULES, "mutants": len(outcomes) + len(found.unplayed)}
    return found


@pytest.mark.parametrize(("outcomes", "score"), [
    ((K, K, KP, S), 0.75),
    ((K, K, K), 1.0),
    ((S, S, S, INC, TO), 0.0),
    ((K, S, INC, INC, TO, TO), None),  # two told apart: not measurable
    ((K, K, K, ND, ND), 1.0),  # survivors not distinguished from the fix do not count
    ((K, K, ND, ND, UN), None),
    ((), None),
])
def test_the_score_counts_the_mutants_told_apart_from_the_fix(
        outcomes: tuple[Outcome, ...], score: float | None) -> None:
    assert outcome(*outcomes).score() == score


def test_a_score_below_min_score_is_a_degraded_pass_naming_confirmed_survivors() -> None:
    verdict = judge(PASSED, outcome(K, S, S, INC, ND), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.WEAK_VERIFIER)
    assert verdict.summary.startswith(
        "weak verifier: 5 generated: 1 of 3 mutant(s) told apart from the fix killed (score "
        "0.33) (1 survivor(s) not distinguished from the fix on the tests' inputs, 1 "
        "incompetent), below 0.8; confirmed surviving: pkg/mod.py:11 change 1; pkg/mod.py:12 "
        "change 2; 2 runs agree")
    info = verdict.details["strength"]
    assert info["counts"] == {"killed": 1, "killed_p2p": 0, "survived": 3, "incompetent": 1,
                              "timeout": 0, "confirmed": 2, "not_distinguished": 1,
                              "uncovered_hunk": 0, "unclassified": 0}
    assert info["per_operator"] == {"comparison_flip": {
        "generated": 5, "same_program": 0, "not_compiling": 0, "incompetent": 1, "timeout": 0,
        "killed": 1, "confirmed": 2, "not_distinguished": 1, "uncovered_hunk": 0,
        "unclassified": 0}}
    assert [s["description"] for s in info["survivors"]] == ["change 1", "change 2"]
    assert [(s["description"], s["class"], s["class_why"]) for s in info["survivors_apart"]] \
        == [("change 4", "not_distinguished", "why 4")]
    assert info["survivors"][0]["diff"].endswith("+y1\n")
    assert info["survivors"][0]["class"] == "confirmed"
    assert all("diff" not in m for m in info["mutants"])  # diffs once, with the survivors
    assert verdict.details["runs"] == []  # the probe's own details kept
    # required: a fail (quarantines)
    required = judge(PASSED, outcome(K, S, S), Strength(require=True))
    assert (required.status, required.reason) == (Status.FAIL, Reason.WEAK_VERIFIER)
    ProbeResult("e", ProbeKind.TESTS, required.status, required.reason, "", 1.0)


def test_the_false_weak_of_issue_36_survivors_not_distinguished_leave_it_strong() -> None:
    """8 competent, 6 killed, the 2 that drop an argument the tests never vary survive: once
    those two are shown to behave as the fix, the score is 1.0, not 0.75."""
    before = judge(PASSED, outcome(K, K, K, K, K, K, S, S), PLAN)
    assert before.reason is Reason.WEAK_VERIFIER
    after = judge(PASSED, outcome(K, K, K, K, K, K, ND, ND), PLAN)
    assert (after.status, after.reason) == (Status.PASS, Reason.OK)
    assert after.summary == (
        "2 runs agree; wrong-fix controls: 8 generated: 6 of 6 mutant(s) told apart from the "
        "fix killed (score 1.00) (2 survivor(s) not distinguished from the fix on the tests' "
        "inputs)")


def test_survivors_in_a_hunk_the_tests_pass_without_are_apart_and_out_of_the_score() -> None:
    """sympy-23117's false weak: survivors in a hunk whose partial patch the tests reward tell
    about the record, not the assertions."""
    verdict = judge(PASSED, outcome(K, K, K, UC, UC, UC), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.OK), verdict.summary
    assert verdict.summary.endswith("3 of 3 mutant(s) told apart from the fix killed (score "
                                    "1.00) (3 survivor(s) in a hunk the tests pass without)")
    info = verdict.details["strength"]
    assert info["counts"]["uncovered_hunk"] == 3 and info["counts"]["confirmed"] == 0
    assert info["per_operator"]["comparison_flip"]["uncovered_hunk"] == 3
    assert [s["class"] for s in info["survivors_apart"]] == [UC] * 3
    stored = stored_outcome(info, SEED, PLAN.mutants, PLAN.partial)
    assert stored is not None and stored.survivors(Survivor.UNCOVERED) == [
        m for m in stored.mutants if m.outcome is S]


def test_too_few_told_apart_is_a_degraded_pass_of_its_own_required_or_not() -> None:
    for plan in (PLAN, Strength(require=True)):
        one = judge(PASSED, outcome(K), plan)  # issue 36: one mutant, killed
        assert (one.status, one.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
        assert one.summary == (
            "strength not measurable: 1 generated: 1 of 1 mutant(s) told apart from the fix "
            "killed; fewer than 3 told apart from the fix (1 generated); 2 runs agree")
    few = judge(PASSED, outcome(S, S, INC), PLAN)
    assert few.reason is Reason.STRENGTH_NOT_MEASURABLE
    assert few.details["strength"]["not_measurable"] == (
        "2 mutant(s) told apart from the fix (killed or confirmed survivors), fewer than 3: "
        "no score")
    # the floor is a setting
    assert judge(PASSED, outcome(K), Strength(min_competent=1)).reason is Reason.OK
    assert judge(PASSED, outcome(K, K, K, K, S), Strength(min_competent=6)).reason is \
        Reason.STRENGTH_NOT_MEASURABLE
    assert judge(PASSED, outcome(K, K, K, K, S), PLAN).reason is Reason.OK  # 0.80


def test_survivors_that_could_not_be_classified_never_decide() -> None:
    # weak only if the unclassified one were confirmed: not measurable, said with why
    verdict = judge(PASSED, outcome(K, K, K, K, S, UN), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
    assert "1 survivor(s) could not be classified and would decide (why 5)" in verdict.summary
    # with or without it the score stands: it does not matter
    assert judge(PASSED, outcome(K, K, K, K, K, K, K, K, UN), PLAN).reason is Reason.OK
    assert judge(PASSED, outcome(K, S, S, UN), PLAN).reason is Reason.WEAK_VERIFIER


def test_an_earlier_degraded_reason_stands_with_the_weakness_named() -> None:
    hackable = Verdict(Status.PASS, Reason.REWARD_HACKABLE, "reward hackable: ...", {})
    verdict = judge(hackable, outcome(S, S, S), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert "weak verifier: 3 generated: 0 of 3" in verdict.summary
    assert verdict.summary.endswith(" too")
    required = judge(hackable, outcome(S, S, S), Strength(require=True))
    assert (required.status, required.reason) == (Status.FAIL, Reason.WEAK_VERIFIER)
    unmeasured = judge(hackable, outcome(K), PLAN)
    assert (unmeasured.status, unmeasured.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert "strength not measurable" in unmeasured.summary


def test_unplayed_mutants_make_a_weak_verdict_only_if_they_could_not_change_it() -> None:
    # 2 killed, 2 survived, 4 unplayed: all 4 killed would give 6/8 = 0.75 < 0.8: weak
    assert judge(PASSED, outcome(K, K, S, S, unplayed=list("abcd")), PLAN).reason is \
        Reason.WEAK_VERIFIER
    # 4 killed, 1 survived, 0.8 reachable: no verdict
    found = outcome(K, K, S, S, unplayed=list("abcdef"))
    verdict = judge(PASSED, found, PLAN)
    assert verdict.reason is Reason.OK and "6 not played: probe_s reached" in verdict.summary
    assert verdict.details["strength"]["partial"] is True


def test_controls_not_played_are_not_measurable_and_say_why() -> None:
    verdict = judge(PASSED, StrengthOutcome(not_played="the gold patch did not apply"), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
    assert verdict.summary == ("strength not measurable: wrong-fix controls not played: the "
                               "gold patch did not apply; 2 runs agree")
    info = verdict.details["strength"]
    assert (info["played"], info["score"], info["why"]) == (False, None,
                                                             "the gold patch did not apply")


def test_partial_patches_are_reported_beside_the_score() -> None:
    found = outcome(K, K, K)
    found.partials = [Played("hunk 2 of a.py left out", S, "passed", "a.py"),
                      Played("b.py left out", K, "failed", "b.py")]
    verdict = judge(PASSED, found, PLAN)
    assert verdict.reason is Reason.OK and "1 of 2 partial patch(es) rewarded" in verdict.summary
    assert [p["outcome"] for p in verdict.details["strength"]["partial_patches"]] == [
        "survived", "killed"]
    assert verdict.details["strength"]["score"] == 1.0


def test_a_whole_outcome_is_reused_for_the_same_sample_and_rules_only() -> None:
    found = outcome(K, S, S, INC, ND)
    found.mutants[1] = Played("long", S, "d", "pkg/mod.py", 3, "return_none", "x" * (DIFF_MAX + 9),
                              survivor=Survivor.CONFIRMED, why="returned 1")
    info = judge(PASSED, found, PLAN).details["strength"]
    again = stored_outcome(info, SEED, PLAN.mutants, PLAN.partial)
    assert again is not None
    assert [(m.outcome, m.description, m.survivor, m.why) for m in again.mutants] == [
        (m.outcome, m.description, m.survivor, m.why) for m in found.mutants]
    assert again.mutants[1].diff == "x" * DIFF_MAX and again.mutants[2].diff.endswith("+y2\n")
    assert again.mutants[4].diff.endswith("+y4\n")  # a survivor listed apart keeps its diff
    rejudged = judge(PASSED, again, PLAN, reused={"from": "then"})
    assert rejudged.details["strength"]["survivors"] == info["survivors"]
    assert rejudged.details["strength"]["survivors_apart"] == info["survivors_apart"]
    assert rejudged.details["strength"]["reused"] == {"from": "then"}
    assert stored_outcome(info, "another|seed", PLAN.mutants, PLAN.partial) is None
    assert stored_outcome(info, SEED, 5, PLAN.partial) is None
    assert stored_outcome(info, SEED, PLAN.mutants, False) is None
    # played under other rules (another operator set, another classification): again
    older = {**info, "generated": {**info["generated"], "rules": "operators 1"}}
    assert stored_outcome(older, SEED, PLAN.mutants, PLAN.partial) is None
    before_rules = {**info, "generated": {k: v for k, v in info["generated"].items()
                                          if k != "rules"}}
    assert stored_outcome(before_rules, SEED, PLAN.mutants, PLAN.partial) is None
    partial = judge(PASSED, outcome(K, unplayed=["a"]), PLAN).details["strength"]
    assert stored_outcome(partial, SEED, PLAN.mutants, PLAN.partial) is None
    cut = outcome(K, K, K, UN, cut_short=True)
    assert stored_outcome(judge(PASSED, cut, PLAN).details["strength"], SEED, PLAN.mutants,
                          PLAN.partial) is None
    unplayed = judge(PASSED, StrengthOutcome(not_played="why"), PLAN).details["strength"]
    assert stored_outcome(unplayed, SEED, PLAN.mutants, PLAN.partial) is None
    bad = {**info, "mutants": [{"outcome": "maybe"}]}
    assert stored_outcome(bad, SEED, PLAN.mutants, PLAN.partial) is None


def test_min_competent_at_its_default_keeps_old_spec_hashes() -> None:
    assert "min_competent" not in Strength().model_dump()
    assert Strength(min_competent=5).model_dump()["min_competent"] == 5


def test_the_new_case_left_unchecked_is_weak_whatever_else_is_killed() -> None:
    """Twenty mutants refused, and a confirmed survivor among the ``new_case_value`` ones:
    the value the fix newly returns is never checked, a weak verifier though the score over
    all is 0.95; with that survivor killed, or only not distinguished, it is not weak."""
    killed = [mutant(K, i) for i in range(20)]
    new_case = [mutant(K, 20, "new_case_value"), mutant(S, 21, "new_case_value")]
    found = StrengthOutcome([*killed, *new_case])
    assert (found.score(), found.new_case_score()) == (pytest.approx(21 / 22), 0.5)
    assert found.weak(PLAN.min_score, PLAN.min_competent)
    verdict = judge(PASSED, found, PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.WEAK_VERIFIER)
    assert "the value the fix newly returns, made wrong: 1 of 2 killed (score 0.50)" in \
        verdict.summary
    assert verdict.details["strength"]["new_case_score"] == 0.5
    for other in (mutant(K, 21, "new_case_value"),
                  mutant(S, 21, "new_case_value", Survivor.NOT_DISTINGUISHED)):
        fine = StrengthOutcome([*killed, new_case[0], other])
        assert not fine.weak(PLAN.min_score, PLAN.min_competent)
        assert judge(PASSED, fine, PLAN).reason is Reason.OK
    # an unclassified one that would decide makes it undecided, not weak
    open_case = StrengthOutcome([*killed, new_case[0],
                                 mutant(S, 21, "new_case_value", Survivor.UNCLASSIFIED)])
    assert open_case.undecided(PLAN.min_score, PLAN.min_competent)


@pytest.mark.parametrize(("message", "sign"), [
    # the mutated module does not compile in the sandbox's Python: incompetent
    ('  File "/testbed/pkg/parse.py", line 12\n    def f(:\n          ^\nSyntaxError: invalid '
     'syntax', "SyntaxError"),
    ("E   SyntaxError: invalid syntax (parse.py, line 12)", "SyntaxError"),
    ("ImportError: cannot import name 'tokens' from 'pkg.parse'", "ImportError"),
    # a text the program parses at run time (sympify, lambdify, eval): the tests refused it
    ('  File "/testbed/pkg/parse.py", line 40, in to_expr\n    return eval(code)\n  File '
     '"<string>", line 1\n    (1\n     ^\nSyntaxError: unexpected EOF while parsing', None),
    ("SyntaxError: invalid syntax (<string>, line 1)", None),
    ("E   SyntaxError: invalid syntax (other.py, line 3)", None)])
def test_a_syntax_error_is_the_mutant_s_own_only_where_it_is_located_in_its_file(
        message: str, sign: str | None) -> None:
    run = Run(Phase.POSITIVE, ("t",), "mutant 1", outcomes={
        "t": Case("tests", "t", JunitOutcome.FAILED, message)})
    assert _broken(run, ["t"], ["pkg/parse.py"]) == sign
