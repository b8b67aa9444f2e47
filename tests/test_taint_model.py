"""Taint's rule as pure logic (envcheck.health.taint): intervals from hand-made store facts.

Each case is a small record: transitions, the stored state, the results and rollout hours
the store would hold; the functional tests (tests/test_taint.py) fill a real store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from envcheck.health.taint import Basis, TaintInterval, overlapping, taint_intervals
from envcheck.health.trust import IMAGE_REASONS, UNTRUSTED_REASONS, kind_reason
from envcheck.store.tables.states import Transition
from envcheck.store.views.taint import (
    DigestFolded,
    EnvTaintFacts,
    FailingHour,
    IdentitySeen,
    StateFact,
    SuspectResult,
)

T0 = datetime(2026, 3, 2, 8, tzinfo=UTC)
A, B = "sha256:aaa", "sha256:bbb"


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def change(n: int, hours: float, old: str, new: str, reason: str, *, quarantined: bool,
           evidence: Sequence[int] = (), digest: str | None = A, actor: str = "envcheck",
           was: bool | None = None) -> Transition:
    return Transition(id=n, env_id="env-1", at=at(hours), old_state=old, new_state=new,
                      was_quarantined=quarantined if was is None else was,
                      quarantined=quarantined, actor=actor, reason=reason,
                      evidence=list(evidence), image_digest=digest)


def failed(n: int, hours: float, kind: str = "terminal", reason: str = "tool_missing", *,
           status: str = "fail", digest: str | None = A, spec: str = "s1",
           run: str = "run") -> SuspectResult:
    return SuspectResult(n, kind, status, reason, at(hours), digest, spec, run)


def seen(first: float, passed: float | None = None, kind: str = "terminal",
         digest: str | None = A, spec: str = "s1") -> IdentitySeen:
    return IdentitySeen(kind, digest, spec, at(first),
                        at(passed) if passed is not None else None)


def state(name: str, reason: str, *, quarantined: bool = False, source: str | None = None,
          kinds: dict[str, dict[str, Any]] | None = None, rollouts: dict[str, Any] | None = None,
          since: float | None = None, digest: str | None = A) -> StateFact:
    return StateFact(name, reason, quarantined, source if quarantined else None,
                     at(since) if since is not None else None, None, (), digest, kinds or {},
                     rollouts, at(100))


def kind(name: str, reason: str, digest: str | None = A, spec: str = "s1"
         ) -> dict[str, Any]:
    return {"state": name, "reason": reason, "image_digest": digest, "spec_hash": spec}


def facts(**kwargs: Any) -> EnvTaintFacts:
    return EnvTaintFacts(env_id="env-1", suite="train", **kwargs)


def one(found: list[TaintInterval]) -> TaintInterval:
    assert len(found) == 1, found
    return found[0]


# A terminal probe that never worked on digest A: an error first (envcheck's, not counted),
# then two failures, quarantined broken.
BROKEN = dict(
    transitions=(change(1, 2.5, "unknown", "broken", "broken: terminal: tool_missing",
                        quarantined=True, evidence=(2, 3)),),
    suspects=(failed(2, 1), failed(3, 2)),
    identities=(seen(0),))
BROKEN_NOW = state("broken", "terminal: tool_missing", quarantined=True, source="auto",
                   kinds={"terminal": kind("broken", "tool_missing")})


# --- what reaches back where ----------------------------------------------------------------------


def test_a_failure_every_probe_shows_reaches_back_to_the_identitys_first_appearance() -> None:
    got = one(taint_intervals(facts(**BROKEN, state=BROKEN_NOW)))
    assert (got.start, got.end, got.basis) == (at(0), None, Basis.IDENTITY)
    assert (got.kind, got.reason, got.image_digest) == ("terminal", "tool_missing", A)
    assert got.flagged_at == at(2.5)
    assert got.evidence == (2, 3)
    assert (got.env_id, got.suite) == ("env-1", "train")


def test_a_reward_hack_reaches_back_past_the_passes_before_it() -> None:
    # the identity passed cleanly from hour 0; at hour 10 a trick earned the reward
    record = facts(
        transitions=(change(1, 10.5, "healthy", "degraded",
                            "healthy -> degraded: tests: reward_hackable", quarantined=False),),
        suspects=(failed(7, 10, "tests", "reward_hackable", status="pass"),),
        identities=(seen(0, 0, kind="tests"),),
        state=state("degraded", "tests: reward_hackable",
                    kinds={"tests": kind("degraded", "reward_hackable")}))
    got = one(taint_intervals(record))
    assert (got.start, got.end, got.basis, got.kind, got.reason) == \
        (at(0), None, Basis.IDENTITY, "tests", "reward_hackable")
    assert got.flagged_at == at(10.5)
    assert got.evidence == (7,)


def test_the_identity_appeared_with_the_digests_first_result_or_rollout() -> None:
    # the tests probe first ran at hour 10, but the terminal probe saw the image at hour 2
    # and the trainer used it from hour 1
    hack = facts(
        transitions=(change(1, 10.5, "healthy", "degraded",
                            "healthy -> degraded: tests: reward_hackable", quarantined=False),),
        suspects=(failed(7, 10, "tests", "reward_hackable", status="pass"),),
        identities=(seen(2, 2), seen(10, kind="tests")),
        state=state("degraded", "tests: reward_hackable",
                    kinds={"tests": kind("degraded", "reward_hackable")}))
    assert one(taint_intervals(hack)).start == at(2)
    used = facts(**{f: getattr(hack, f) for f in ("transitions", "suspects", "identities",
                                                  "state")}, rollout_digests={A: at(1)})
    assert one(taint_intervals(used)).start == at(1)
    # unless the tests spec changed since: then the identity is the new spec's
    changed = facts(**{**{f: getattr(hack, f) for f in ("transitions", "suspects", "state")},
                       "identities": (seen(2, 2), seen(5, 5, kind="tests", spec="s0"),
                                      seen(10, kind="tests"))})
    assert one(taint_intervals(changed)).start == at(10)


def test_a_flaky_kind_reaches_back_to_its_first_failure() -> None:
    record = facts(
        transitions=(change(1, 5.5, "degraded", "flaky", "flaky: terminal: shell_slow",
                            quarantined=True, evidence=(4, 6)),),
        suspects=(failed(4, 3, reason="shell_slow"), failed(6, 5, reason="shell_slow")),
        identities=(seen(0, 0),),
        state=state("flaky", "terminal: shell_slow", quarantined=True, source="auto"))
    got = one(taint_intervals(record))
    assert (got.start, got.basis, got.reason) == (at(3), Basis.FIRST_FAILURE, "shell_slow")
    assert got.evidence == (4, 6)


def test_a_data_source_that_always_failed_reaches_back_to_its_first_failure_only() -> None:
    # a data source's failure is its server's: not a property of the image
    record = facts(
        transitions=(change(1, 4.5, "unknown", "broken", "broken: datasource: http_5xx",
                            quarantined=True, evidence=(3, 4)),),
        suspects=(failed(3, 3, "datasource", "http_5xx"), failed(4, 4, "datasource", "http_5xx")),
        identities=(seen(0, kind="datasource"),))
    got = one(taint_intervals(record))
    assert (got.start, got.basis) == (at(3), Basis.FIRST_FAILURE)


def test_pruned_first_results_are_read_from_the_rollups() -> None:
    folded = DigestFolded("terminal", A, at(-100))
    got = one(taint_intervals(facts(**{**BROKEN, "folded": (folded,)})))
    assert (got.start, got.basis) == (at(-100), Basis.IDENTITY)
    # a raw result of another spec older than the identity's first: the spec changed there,
    # and the rollups (which keep no spec) may be of the old one
    older = seen(-50, kind="terminal", spec="s0")
    got = one(taint_intervals(facts(**{**BROKEN, "folded": (folded,),
                                        "identities": (seen(0), older)})))
    assert (got.start, got.basis) == (at(0), Basis.IDENTITY)
    # a folded pass of the digest: not every probe failed, so only the first failure counts
    passed = DigestFolded("terminal", A, at(-100), at(-90))
    got = one(taint_intervals(facts(**{**BROKEN, "folded": (passed,)})))
    assert (got.start, got.basis) == (at(1), Basis.FIRST_FAILURE)


def test_failures_of_an_incident_are_not_the_first_failure() -> None:
    record = facts(
        transitions=(change(1, 5.5, "degraded", "flaky", "flaky: terminal: shell_slow",
                            quarantined=True, evidence=(4, 6)),),
        suspects=(failed(2, 2, reason="shell_slow", run="storm"),
                  failed(4, 3, reason="shell_slow"), failed(6, 5, reason="shell_slow")),
        identities=(seen(0, 0),), incident_runs=frozenset({"storm"}))
    assert one(taint_intervals(record)).start == at(3)


# --- where it closes ------------------------------------------------------------------------------


def test_it_closes_at_release() -> None:
    released = change(2, 20, "broken", "healthy", "released: healthy", quarantined=False,
                      was=True)
    record = facts(**{**BROKEN, "transitions": (*BROKEN["transitions"], released)},  # type: ignore[arg-type]
                   state=state("healthy", "ok"))
    got = one(taint_intervals(record))
    assert (got.start, got.end) == (at(0), at(20))
    assert not got.covers(at(20)) and got.covers(at(19.99)) and got.covers(at(0))


def test_it_closes_at_the_first_result_of_a_new_digest() -> None:
    released = change(2, 8.5, "broken", "healthy", "released: healthy", quarantined=False,
                      was=True, digest=B)
    record = facts(**{**BROKEN, "transitions": (*BROKEN["transitions"], released),  # type: ignore[arg-type]
                      "identities": (seen(0), seen(8, 8, digest=B))},
                   state=state("healthy", "ok", digest=B))
    assert one(taint_intervals(record)).end == at(8)


def test_a_new_digest_that_fails_too_opens_its_own_interval_where_the_old_one_closed() -> None:
    # still quarantined on digest B (one failure: degraded), then broken on B as well
    record = facts(
        transitions=(*BROKEN["transitions"],  # type: ignore[misc]
                     change(2, 8.5, "broken", "degraded", "broken -> degraded: terminal: "
                            "tool_missing", quarantined=True, digest=B),
                     change(3, 9.5, "degraded", "broken", "degraded -> broken: terminal: "
                            "tool_missing", quarantined=True, evidence=(8, 9), digest=B)),
        suspects=(*BROKEN["suspects"], failed(8, 8, digest=B), failed(9, 9, digest=B)),  # type: ignore[misc]
        identities=(seen(0), seen(8, digest=B)),
        state=state("broken", "terminal: tool_missing", quarantined=True, source="auto",
                    kinds={"terminal": kind("broken", "tool_missing", B)}, digest=B))
    old, new = taint_intervals(record)
    assert (old.start, old.end, old.image_digest) == (at(0), at(8), A)
    assert (new.start, new.end, new.image_digest, new.basis) == (at(8), None, B, Basis.IDENTITY)
    assert new.evidence == (8, 9)


def test_retiring_closes_it() -> None:
    gone = change(2, 10, "broken", "retired", "left the catalogue", quarantined=False,
                  was=True)
    record = facts(**{**BROKEN, "transitions": (*BROKEN["transitions"], gone)},  # type: ignore[arg-type]
                   state=BROKEN_NOW)
    assert one(taint_intervals(record)).end == at(10)


def test_several_intervals_each_from_its_own_evidence() -> None:
    # flaky from hour 3, released at hour 10, flaky again: the second reaches back to the
    # first failure after the release, not to hour 3
    record = facts(
        transitions=(
            change(1, 5.5, "degraded", "flaky", "flaky: terminal: shell_slow",
                   quarantined=True, evidence=(4, 6)),
            change(2, 10, "flaky", "healthy", "released: healthy", quarantined=False,
                   was=True),
            change(3, 13.5, "degraded", "flaky", "flaky: terminal: shell_slow",
                   quarantined=True, evidence=(12, 13))),
        suspects=(failed(4, 3, reason="shell_slow"), failed(6, 5, reason="shell_slow"),
                  failed(12, 12, reason="shell_slow"), failed(13, 13, reason="shell_slow")),
        identities=(seen(0, 0),),
        state=state("flaky", "terminal: shell_slow", quarantined=True, source="auto"))
    first, second = taint_intervals(record)
    assert (first.start, first.end) == (at(3), at(10))
    assert (second.start, second.end, second.basis) == (at(12), None, Basis.FIRST_FAILURE)
    assert overlapping([first, second], at(10), at(12)) == [second]
    assert overlapping([first, second], at(9), at(12)) == [first, second]
    assert overlapping([first, second], at(10), at(11)) == []
    assert overlapping([first, second], None, at(2)) == []


# --- what does not taint, and a person's word -----------------------------------------------------


def test_a_plain_degraded_does_not_taint() -> None:
    record = facts(
        transitions=(change(1, 3, "healthy", "degraded", "healthy -> degraded: terminal: "
                            "shell_slow", quarantined=False),),
        suspects=(failed(2, 2, reason="shell_slow"),), identities=(seen(0, 0),),
        state=state("degraded", "terminal: shell_slow",
                    kinds={"terminal": kind("degraded", "shell_slow")}))
    assert taint_intervals(record) == []


def test_a_taint_reason_that_came_without_a_transition_is_read_from_the_state() -> None:
    # degraded (slow shell) first; then a leak check found the answer in the image: the state
    # stayed degraded, so no transition shows it, but the stored state does
    record = facts(
        transitions=(change(1, 3, "healthy", "degraded", "healthy -> degraded: terminal: "
                            "shell_slow", quarantined=False),),
        suspects=(failed(2, 2, reason="shell_slow"),
                  failed(9, 6, "tests", "solution_in_image", status="pass")),
        identities=(seen(0, 0), seen(1, 1, kind="tests")),
        state=state("degraded", "terminal: shell_slow",
                    kinds={"terminal": kind("degraded", "shell_slow"),
                           "tests": kind("degraded", "solution_in_image")}))
    got = one(taint_intervals(record))  # from the image's first result (the terminal's)
    assert (got.kind, got.reason, got.basis, got.start, got.end) == \
        ("tests", "solution_in_image", Basis.IDENTITY, at(0), None)
    assert got.flagged_at == at(6)


def test_a_persons_quarantine_is_its_own_interval() -> None:
    record = facts(
        transitions=(change(1, 4, "healthy", "healthy", "reward hacking suspected",
                            quarantined=True, actor="alice"),
                     change(2, 9, "healthy", "healthy", "false alarm", quarantined=False,
                            actor="alice", was=True)),
        identities=(seen(0, 0),), state=state("healthy", "ok"))
    got = one(taint_intervals(record))
    assert (got.start, got.end, got.basis, got.kind, got.reason) == \
        (at(4), at(9), Basis.MANUAL, None, "reward hacking suspected")


def test_a_persons_quarantine_over_envcheck_s_outlasts_the_evidence() -> None:
    record = facts(
        transitions=(*BROKEN["transitions"],  # type: ignore[misc]
                     change(2, 3, "broken", "broken", "keep it out", quarantined=True,
                            actor="bob", was=True),
                     change(3, 6, "broken", "healthy", "broken -> healthy: ok",
                            quarantined=True, was=True)),
        suspects=BROKEN["suspects"], identities=(seen(0, 5),),
        state=state("healthy", "ok", quarantined=True, source="manual", since=3))
    evidence, person = taint_intervals(record)
    assert (evidence.start, evidence.end, evidence.basis) == (at(0), at(6), Basis.IDENTITY)
    assert (person.start, person.end, person.basis) == (at(3), None, Basis.MANUAL)


# --- the training run's rollouts ------------------------------------------------------------------


ROLLOUTS = dict(
    transitions=(change(1, 7, "healthy", "degraded",
                        "healthy -> degraded: rollouts: rollout_failures", quarantined=False),),
    failing_hours=(FailingHour(at(5), A, 3, at(5.2)), FailingHour(at(6), A, 4, at(6.1))),
    identities=(seen(0, 0),))
FLAGGED = state("degraded", "rollouts: rollout_failures (fails on the cluster, passes here)",
                rollouts={"flagged": True, "image_digest": A, "reason": "rollout_failures",
                          "first_failure_at": at(5.2).isoformat()})


def test_rollout_failures_reach_back_to_the_first_failing_rollout() -> None:
    got = one(taint_intervals(facts(**ROLLOUTS, state=FLAGGED)))
    assert (got.start, got.end, got.basis, got.kind, got.reason, got.image_digest) == \
        (at(5.2), None, Basis.FIRST_FAILING_ROLLOUTS, "rollouts", "rollout_failures", A)
    assert got.flagged_at == at(7)


def test_rollout_failures_close_at_release_and_at_a_new_rollout_digest() -> None:
    back = change(2, 9, "degraded", "healthy", "degraded -> healthy: ok", quarantined=False)
    record = facts(**{**ROLLOUTS, "transitions": (*ROLLOUTS["transitions"], back)},  # type: ignore[arg-type]
                   state=state("healthy", "ok"))
    assert one(taint_intervals(record)).end == at(9)
    moved = facts(**ROLLOUTS, state=FLAGGED, rollout_digests={A: at(0), B: at(8)})
    assert one(taint_intervals(moved)).end == at(8)


def test_rollout_failures_before_an_earlier_release_are_not_this_flags() -> None:
    record = facts(
        transitions=(change(1, 2, "healthy", "degraded",
                            "healthy -> degraded: rollouts: rollout_failures",
                            quarantined=False),
                     change(2, 3, "degraded", "healthy", "degraded -> healthy: ok",
                            quarantined=False),
                     *ROLLOUTS["transitions"]),  # type: ignore[misc]
        failing_hours=(FailingHour(at(1), A, 9, at(1.5)), *ROLLOUTS["failing_hours"]),  # type: ignore[misc]
        state=FLAGGED)
    first, second = taint_intervals(record)
    assert (first.start, first.end) == (at(1.5), at(3))
    assert (second.start, second.end) == (at(5.2), None)


# --- the vocabulary -------------------------------------------------------------------------------


def test_the_reasons_that_taint() -> None:
    assert {"reward_hackable", "weak_verifier", "solution_leaked", "solution_in_image",
            "tests_in_image"} <= IMAGE_REASONS
    assert IMAGE_REASONS | {"rollout_failures"} == UNTRUSTED_REASONS
    assert not {"shell_slow", "recovered_after_retry", "tool_missing"} & UNTRUSTED_REASONS
    assert kind_reason("healthy -> degraded: rollouts: rollout_failures (fails on the "
                       "cluster, passes here)") == ("rollouts", "rollout_failures")
    assert kind_reason("broken: terminal: tool_missing") == ("terminal", "tool_missing")
    # a release names no kind: its reason code is no taint reason either way
    assert kind_reason("released: healthy") == ("released", "healthy")


def test_the_json_line() -> None:
    got = one(taint_intervals(facts(**BROKEN, state=BROKEN_NOW)))
    assert got.to_json() == {
        "env_id": "env-1", "suite": "train", "start": at(0).isoformat(), "end": None,
        "image_digest": A, "kind": "terminal", "reason": "tool_missing", "basis": "identity",
        "flagged_at": at(2.5).isoformat(), "evidence": [2, 3]}
