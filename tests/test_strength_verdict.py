"""The wrong-fix controls' pure parts: the score and its floor of competent mutants, the
verdict (degraded, a fail where required, an earlier degraded reason kept), the summary, the
details (per-operator counts, survivors with diffs), unplayed mutants, and which stored
outcomes are reused."""

from __future__ import annotations

from typing import Any

import pytest

from envcheck.catalogue.probe_specs import Strength
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.base import Verdict
from envcheck.kinds.strength.verdict import (
    DIFF_MAX,
    Outcome,
    Played,
    StrengthOutcome,
    judge,
    stored_outcome,
)

PASSED = Verdict(Status.PASS, Reason.OK, "2 runs agree", {"runs": []})
PLAN = Strength()
SEED = "sha256:abc|spec"


def mutant(outcome: Outcome, n: int = 0, op: str = "comparison_flip") -> Played:
    return Played(f"change {n}", outcome, f"detail {n}", "pkg/mod.py", 10 + n, op,
                  f"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x{n}\n+y{n}\n")


def outcome(*outcomes: Outcome, **kw: Any) -> StrengthOutcome:
    found = StrengthOutcome([mutant(o, i) for i, o in enumerate(outcomes)], **kw)
    found.generated = {"seed": SEED, "cap": PLAN.mutants, "partial": PLAN.partial}
    return found


K, KP, S, INC, TO = (Outcome.KILLED, Outcome.KILLED_P2P, Outcome.SURVIVED, Outcome.INCOMPETENT,
                     Outcome.TIMEOUT)


@pytest.mark.parametrize(("outcomes", "score"), [
    ((K, K, KP, S), 0.75),
    ((K, K, K), 1.0),
    ((S, S, S, INC, TO), 0.0),
    ((K, S, INC, INC, TO, TO), None),  # two competent: not measurable
    ((), None),
])
def test_the_score_counts_competent_mutants_only(outcomes: tuple[Outcome, ...],
                                                 score: float | None) -> None:
    assert outcome(*outcomes).score() == score


def test_a_score_below_min_score_is_a_degraded_pass_naming_survivors() -> None:
    verdict = judge(PASSED, outcome(K, S, S, INC), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.WEAK_VERIFIER)
    assert verdict.summary.startswith(
        "weak verifier: 1 of 3 competent mutant(s) killed (score 0.33) (1 incompetent), "
        "below 0.8; surviving: pkg/mod.py:11 change 1; pkg/mod.py:12 change 2; 2 runs agree")
    info = verdict.details["strength"]
    assert info["counts"] == {"killed": 1, "killed_p2p": 0, "survived": 2, "incompetent": 1,
                              "timeout": 0}
    assert info["per_operator"] == {"comparison_flip": info["counts"]}
    assert [s["description"] for s in info["survivors"]] == ["change 1", "change 2"]
    assert info["survivors"][0]["diff"].endswith("+y1\n")
    assert all("diff" not in m for m in info["mutants"])  # diffs once, with the survivors
    assert verdict.details["runs"] == []  # the probe's own details kept
    # required: a fail (quarantines)
    required = judge(PASSED, outcome(K, S, S), Strength(require=True))
    assert (required.status, required.reason) == (Status.FAIL, Reason.WEAK_VERIFIER)
    ProbeResult("e", ProbeKind.TESTS, required.status, required.reason, "", 1.0)


def test_a_strong_or_unmeasurable_score_leaves_the_verdict_standing() -> None:
    strong = judge(PASSED, outcome(K, K, K, K, S), PLAN)
    assert (strong.status, strong.reason) == (Status.PASS, Reason.OK)
    assert strong.summary == ("2 runs agree; wrong-fix controls: 4 of 5 competent mutant(s) "
                              "killed (score 0.80)")
    few = judge(PASSED, outcome(S, S, INC), PLAN)
    assert (few.status, few.reason) == (Status.PASS, Reason.OK)
    assert few.details["strength"]["not_measurable"] == ("2 competent mutant(s), fewer than 3: "
                                                         "no score")
    assert "not measurable" in few.summary


def test_an_earlier_degraded_reason_stands_with_the_weakness_named() -> None:
    hackable = Verdict(Status.PASS, Reason.REWARD_HACKABLE, "reward hackable: ...", {})
    verdict = judge(hackable, outcome(S, S, S), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert "weak verifier: 0 of 3" in verdict.summary and verdict.summary.endswith(" too")
    required = judge(hackable, outcome(S, S, S), Strength(require=True))
    assert (required.status, required.reason) == (Status.FAIL, Reason.WEAK_VERIFIER)


def test_unplayed_mutants_make_a_weak_verdict_only_if_they_could_not_change_it() -> None:
    # 2 killed, 2 survived, 4 unplayed: all 4 killed would give 6/8 = 0.75 < 0.8: weak
    assert judge(PASSED, outcome(K, K, S, S, unplayed=list("abcd")), PLAN).reason is \
        Reason.WEAK_VERIFIER
    # 4 killed, 1 survived, 0.8 reachable: no verdict
    found = outcome(K, K, S, S, unplayed=list("abcdef"))
    verdict = judge(PASSED, found, PLAN)
    assert verdict.reason is Reason.OK and "6 not played: probe_s reached" in verdict.summary
    assert verdict.details["strength"]["partial"] is True


def test_controls_not_played_give_no_score_and_say_why() -> None:
    verdict = judge(PASSED, StrengthOutcome(not_played="the gold patch did not apply"), PLAN)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.OK)
    assert verdict.summary == "2 runs agree; wrong-fix controls not played: the gold patch " \
                              "did not apply"
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


def test_a_whole_outcome_is_reused_for_the_same_sample_only() -> None:
    found = outcome(K, S, S, INC)
    found.mutants[1] = Played("long", S, "d", "pkg/mod.py", 3, "return_none", "x" * (DIFF_MAX + 9))
    info = judge(PASSED, found, PLAN).details["strength"]
    again = stored_outcome(info, SEED, PLAN.mutants, PLAN.partial)
    assert again is not None
    assert [(m.outcome, m.description) for m in again.mutants] == [
        (m.outcome, m.description) for m in found.mutants]
    assert again.mutants[1].diff == "x" * DIFF_MAX and again.mutants[2].diff.endswith("+y2\n")
    rejudged = judge(PASSED, again, PLAN, reused={"from": "then"})
    assert rejudged.details["strength"]["survivors"] == info["survivors"]
    assert rejudged.details["strength"]["reused"] == {"from": "then"}
    assert stored_outcome(info, "another|seed", PLAN.mutants, PLAN.partial) is None
    assert stored_outcome(info, SEED, 5, PLAN.partial) is None
    assert stored_outcome(info, SEED, PLAN.mutants, False) is None
    partial = judge(PASSED, outcome(K, unplayed=["a"]), PLAN).details["strength"]
    assert stored_outcome(partial, SEED, PLAN.mutants, PLAN.partial) is None
    unplayed = judge(PASSED, StrengthOutcome(not_played="why"), PLAN).details["strength"]
    assert stored_outcome(unplayed, SEED, PLAN.mutants, PLAN.partial) is None
    bad = {**info, "mutants": [{"outcome": "maybe"}]}
    assert stored_outcome(bad, SEED, PLAN.mutants, PLAN.partial) is None
