"""The health model and quarantine policy: pure, property-based (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envcheck.core.results import ProbeKind, Status
from envcheck.core.states import EnvState, Observation
from envcheck.health.quarantine import (
    QuarantineEntry,
    Source,
    Standing,
    allowed,
    decide,
    manual,
    standing,
)
from envcheck.health.sprt import HealthPolicy, assess_env, assess_kind, wilson_interval
from envcheck.health.summary import env_summary
from envcheck.store.sql import FeedRow
from envcheck.store.tables.catalogue import SuiteRow
from envcheck.store.tables.states import EnvStateRow, QuarantineListing

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KIND = ProbeKind.TERMINAL
CODES = {"p": Status.PASS, "f": Status.FAIL, "k": Status.FLAKY, "e": Status.ERROR,
         "s": Status.SKIP}


def history(seq: str, digest: str = "sha256:a", start: int = 0, run: str = "r"
            ) -> list[Observation]:
    return [Observation(CODES[c], "ok" if c in "ps" else "tool_missing",
                        T0 + timedelta(minutes=start + i), digest, "spec", f"{run}{start + i}",
                        start + i)
            for i, c in enumerate(seq)]


outcomes = st.text(alphabet="pfkes", max_size=60)
clean = st.text(alphabet="pes", max_size=60)


def test_sprt_defaults_match_the_design() -> None:
    policy = HealthPolicy()
    assert policy.fail_step == pytest.approx(2.303, abs=1e-3)
    assert policy.pass_step == pytest.approx(-0.203, abs=1e-3)
    assert policy.upper == pytest.approx(2.944, abs=1e-3)
    assert assess_kind(KIND, history("f")).state is EnvState.DEGRADED
    assert assess_kind(KIND, history("ff")).state is EnvState.BROKEN
    assert assess_kind(KIND, history("pff")).state is EnvState.FLAKY
    assert assess_kind(KIND, history("k")).state is EnvState.FLAKY


def test_release_takes_the_statistics_not_one_pass() -> None:
    assert assess_kind(KIND, history("ff" + "p" * 14)).state is EnvState.FLAKY
    assert assess_kind(KIND, history("ff" + "p" * 15)).state is EnvState.HEALTHY


@given(clean)
def test_no_failure_evidence_no_quarantine(seq: str) -> None:
    health = assess_env("e", [KIND], history(seq))
    assert not health.state.bad
    entry, _ = decide(None, EnvState.UNKNOWN, health, T0)
    assert entry is None


@given(outcomes, st.lists(st.integers(min_value=0, max_value=60), max_size=10))
def test_error_results_never_change_state(seq: str, positions: list[int]) -> None:
    chars = list(seq)
    for pos in sorted(positions, reverse=True):
        chars.insert(min(pos, len(chars)), "e")
    with_errors = "".join(chars)
    a = assess_kind(KIND, history(seq.replace("e", "")))
    b = assess_kind(KIND, history(with_errors))
    assert (a.state, a.passes, a.failures) == (b.state, b.passes, b.failures)
    assert a.llr == pytest.approx(b.llr)


@given(outcomes, outcomes)
def test_new_digest_resets_evidence(old: str, new: str) -> None:
    combined = history(old, "sha256:old") + history(new, "sha256:new", start=len(old))
    fresh = history(new, "sha256:new", start=len(old))
    a, b = assess_kind(KIND, combined), assess_kind(KIND, fresh)
    if any(c in "pfk" for c in new):
        assert (a.state, a.passes, a.failures, a.identity) == (b.state, b.passes, b.failures,
                                                               b.identity)


@given(outcomes)
def test_incident_cycles_never_change_state(seq: str) -> None:
    base = history("pppp")
    storm = history(seq, start=4, run="incident")
    incidents = frozenset(o.run_id for o in storm)
    a = assess_kind(KIND, base)
    b = assess_kind(KIND, base + storm, incidents=incidents)
    assert (a.state, a.passes, a.failures) == (b.state, b.passes, b.failures)


@given(st.lists(outcomes, min_size=1, max_size=8))
def test_manual_entry_is_never_auto_released(rounds: list[str]) -> None:
    entry: QuarantineEntry | None = QuarantineEntry("e", Source.MANUAL, T0, "alice", "suspect")
    state = EnvState.UNKNOWN
    seen = ""
    for seq in rounds:
        seen += seq
        health = assess_env("e", [KIND], history(seen))
        entry, _ = decide(entry, state, health, T0)
        state = health.state
        assert entry is not None
        assert entry.source is Source.MANUAL


@given(outcomes)
def test_auto_quarantine_follows_state(seq: str) -> None:
    entry: QuarantineEntry | None = None
    state = EnvState.UNKNOWN
    for i in range(1, len(seq) + 1):
        health = assess_env("e", [KIND], history(seq[:i]))
        entry, transition = decide(entry, state, health, T0)
        if health.state.bad:
            assert entry is not None
        if health.state is EnvState.HEALTHY:
            assert entry is None
        if transition is not None:
            assert transition.old_state == state
            assert transition.new_state == health.state
        state = health.state


def test_env_is_the_worst_kind_and_unknown_beats_healthy() -> None:
    obs = [(ProbeKind.TERMINAL, o) for o in history("pp")]
    assert assess_env("e", [ProbeKind.TERMINAL, ProbeKind.TESTS], obs).state is EnvState.UNKNOWN
    obs += [(ProbeKind.TESTS, o) for o in history("ff", start=2)]
    health = assess_env("e", [ProbeKind.TERMINAL, ProbeKind.TESTS], obs)
    assert health.state is EnvState.BROKEN
    assert health.reason == "tests: tool_missing"


def test_manual_changes_need_actor_and_reason() -> None:
    with pytest.raises(ValueError, match="actor"):
        manual("e", EnvState.HEALTHY, None, add=True, actor="", reason="x", now=T0)
    entry, transition = manual("e", EnvState.HEALTHY, None, add=True, actor="bob",
                               reason="license", now=T0)
    assert entry is not None
    assert transition is not None
    assert (transition.actor, transition.quarantined) == ("bob", True)
    entry, transition = manual("e", EnvState.HEALTHY, entry, add=False, actor="bob",
                               reason="cleared", now=T0)
    assert entry is None
    assert transition is not None
    assert not transition.quarantined


def test_allowlist_rule() -> None:
    assert allowed(EnvState.HEALTHY, False, allow_degraded=False)
    assert not allowed(EnvState.HEALTHY, True, allow_degraded=True)
    assert not allowed(EnvState.DEGRADED, False, allow_degraded=False)
    assert allowed(EnvState.DEGRADED, False, allow_degraded=True)
    assert not allowed(EnvState.UNKNOWN, False, allow_degraded=True)


def test_standing_is_the_same_for_every_reader() -> None:
    never = Standing(EnvState.UNKNOWN, "never checked", quarantined=False, allowed=False)
    assert standing(None, allow_degraded=True) == never
    assert standing(FeedRow("a", None, None, False, None, None), allow_degraded=True) == never
    degraded = FeedRow("a", "degraded", "tests: slow", False, None, None)
    assert standing(degraded, allow_degraded=True).allowed
    assert standing(degraded, allow_degraded=False) == Standing(
        EnvState.DEGRADED, "tests: slow", quarantined=False, allowed=False)
    held = EnvStateRow(env_id="a", suite="s", state="healthy", quarantined=True,
                       q_source="manual", q_actor="alice", q_reason="hacked")
    assert standing(held, allow_degraded=True) == Standing(
        EnvState.HEALTHY, "ok", quarantined=True, allowed=False)


def test_env_summary_embeds_the_quarantine_record() -> None:
    since = datetime(2026, 1, 6, 12, 5, tzinfo=UTC)
    row = EnvStateRow(env_id="a", suite="s", state="healthy", quarantined=True,
                      q_source="manual", q_actor="alice", q_reason="hacked", q_since=since,
                      q_evidence=[7], kinds={"terminal": {"state": "healthy", "passes": 3}})
    summary = env_summary(row, SuiteRow(id="s"))
    assert (summary.state, summary.reason, summary.allowed) == (EnvState.HEALTHY, "ok", False)
    assert summary.quarantine == QuarantineListing(
        env_id="a", suite="s", state="healthy", source="manual", actor="alice",
        reason="hacked", since=since, evidence=[7])
    assert summary.quarantine.to_json()["since"] == "2026-01-06T12:05:00+00:00"
    assert [(str(k.kind), k.passes) for k in summary.kinds] == [("terminal", 3)]
    released = env_summary(row.model_copy(update={"quarantined": False}), None)
    assert (released.quarantine, released.allowed) == (None, True)
    unknown = env_summary(None, SuiteRow(id="s", allow_degraded=True))
    assert (unknown.state, unknown.reason, unknown.allowed, unknown.quarantine,
            unknown.kinds) == (EnvState.UNKNOWN, "never checked", False, None, ())


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=500), st.integers(min_value=1, max_value=500))
def test_wilson_interval_brackets_the_rate(failures: int, runs: int) -> None:
    failures = min(failures, runs)
    low, high = wilson_interval(failures, runs)
    assert 0.0 <= low <= failures / runs <= high <= 1.0


def test_wilson_known_value() -> None:
    low, high = wilson_interval(0, 5)
    assert low == 0.0
    assert high == pytest.approx(0.4345, abs=1e-3)


def test_a_degraded_pass_names_its_reason_and_a_required_one_quarantines() -> None:
    def tests_history(status: Status, n: int) -> list[Observation]:
        return [Observation(status, "reward_hackable", T0 + timedelta(minutes=i), "sha256:a",
                            "spec", f"r{i}", i) for i in range(n)]

    degraded = assess_kind(ProbeKind.TESTS, tests_history(Status.PASS, 20))
    assert (degraded.state, degraded.reason) == (EnvState.DEGRADED, "reward_hackable")
    env = assess_env("e", [ProbeKind.TESTS],
                     [(ProbeKind.TESTS, o) for o in tests_history(Status.PASS, 3)])
    assert (env.state, env.reason) == (EnvState.DEGRADED, "tests: reward_hackable")
    required = assess_kind(ProbeKind.TESTS, tests_history(Status.FAIL, 2))
    assert (required.state, required.reason) == (EnvState.BROKEN, "reward_hackable")
