"""Rollout evidence in the health model, without a store: the sequential test on the hourly
counters (``health.rollouts``), its combination with the probes (``health.combined``), the
depth it advises, and the queue's urgent work. Pure: counter rows and observations are
fakes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import AdaptiveDepth
from envcheck.core.depth import Depth
from envcheck.core.results import ProbeKind, Status
from envcheck.core.states import EnvState, Observation
from envcheck.health.combined import with_rollouts
from envcheck.health.depth import advise
from envcheck.health.quarantine import decide
from envcheck.health.rollouts import (
    ALWAYS_SOLVED,
    CLUSTER_ONLY,
    HERE_TOO,
    NEVER_SOLVED,
    HourCounts,
    RolloutHealth,
    RolloutPolicy,
    assess_rollouts,
    fleet_rate,
)
from envcheck.health.sprt import HealthPolicy, KindHealth, assess_env
from envcheck.schedule.budget import NORMAL, QUARANTINED, URGENT, worth
from envcheck.schedule.workqueue import WorkQueue

T0 = datetime(2026, 5, 1, tzinfo=UTC)
POLICY = RolloutPolicy()
NOW = T0 + timedelta(days=30)


def hour_rows(i: int, ok: int, failed: int = 0, *, outcome: str = "sandbox_lost",
              digest: str = "sha256:a", start: datetime = T0) -> list[HourCounts]:
    """Hour ``i``'s rows: ``ok`` passes and ``failed`` failures of ``outcome``."""
    hour = start + timedelta(hours=i)
    rows = [HourCounts.of(hour, "ok", ok, digest)] if ok else []
    return rows + ([HourCounts.of(hour, outcome, failed, digest)] if failed else [])


def rewards(hour: datetime, outcome: str, values: list[float]) -> HourCounts:
    return HourCounts.of(hour, outcome, len(values), "sha256:a", values)


def judge(rows: list[HourCounts], **kw: object) -> RolloutHealth:
    kw.setdefault("fleet", None)
    kw.setdefault("now", NOW)
    found = assess_rollouts(rows, kw.pop("policy", POLICY), **kw)  # type: ignore[arg-type]
    assert found is not None
    return found


def rollouts_to_flag(hours: list[list[HourCounts]], policy: RolloutPolicy = POLICY) -> int | None:
    """How many rollouts were judged when the test first flagged, hour by hour."""
    seen: list[HourCounts] = []
    for rows in hours:
        seen += rows
        if judge(seen, policy=policy).flagged:
            return sum(r.count for r in seen)
    return None


def expected_rollouts(p: float, start: float, policy: RolloutPolicy = POLICY) -> float:
    """Wald's expected number of rollouts to reach the upper bound from ``start`` at failure
    rate ``p`` (the drift per rollout into the distance; the lower bound only slows it)."""
    test = policy.test(None)
    assert test is not None
    drift = p * test.fail_step + (1 - p) * test.pass_step
    return (test.upper - start) / drift


def test_the_defaults() -> None:
    test = POLICY.test(None)
    assert test is not None and (test.p0, test.p1) == (0.02, 0.08)
    assert test.upper == pytest.approx(6.898, abs=1e-3)
    assert test.lower == pytest.approx(-4.604, abs=1e-3)
    assert (POLICY.min_rollouts, POLICY.window_h, POLICY.quarantine) == (30, 24.0, False)
    with pytest.raises(ValueError):
        RolloutPolicy(p0=0.1, p1=0.05)
    with pytest.raises(ValueError):
        RolloutPolicy(fleet_factor=1.0)


def test_a_10pct_failure_rate_is_flagged_within_the_tests_expected_bound() -> None:
    """Seeded trials of 10 rollouts an hour failing 10% of the time: flagged in every trial,
    after about as many rollouts as Wald's approximation expects, from a fresh start and
    after a long clean history (whose bound keeps it from masking the failures)."""
    fresh = expected_rollouts(0.10, 0.0)
    after_clean = expected_rollouts(0.10, POLICY.test(None).lower)  # type: ignore[union-attr]
    assert 80 < fresh < 90 and after_clean > fresh
    rng = random.Random(27)
    for expected, clean_hours in ((fresh, 0), (after_clean, 200)):
        needed = []
        for _ in range(60):
            hours = [hour_rows(i, 100) for i in range(clean_hours)]
            for i in range(clean_hours, clean_hours + 200):
                failed = sum(rng.random() < 0.10 for _ in range(10))
                hours.append(hour_rows(i, 10 - failed, failed))
            found = rollouts_to_flag(hours)
            assert found is not None, "a 10% failure rate always flags"
            needed.append(found - clean_hours * 100)
        needed.sort()
        median = needed[len(needed) // 2]
        assert expected / 2 < median < 2 * expected, (expected, needed)
        assert needed[-1] < 5 * expected, (expected, needed)


def test_no_flag_at_the_fleets_own_rate() -> None:
    """A cluster whose sandboxes fail 5% of the time everywhere: an environment at that
    rate is not flagged beside it (p0 rises to the fleet's rate), though by the policy's
    own 2% it would be; at three times the fleet's rate it is."""
    rng = random.Random(5)
    failed = [sum(rng.random() < 0.05 for _ in range(500)) for _ in range(24)]
    at_fleet = [r for i, f in enumerate(failed) for r in hour_rows(i, 500 - f, f)]
    beside = judge(at_fleet, fleet=0.05)
    assert not beside.flagged and beside.state is EnvState.HEALTHY
    assert (beside.p0, beside.p1) == (pytest.approx(0.05), pytest.approx(0.15))
    assert judge(at_fleet).flagged, "above the policy's own p0: flagged without a fleet"
    well_above = [r for i in range(24) for r in hour_rows(i, 425, 75)]
    assert judge(well_above, fleet=0.05).flagged
    assert judge(well_above, fleet=0.6).flagged is False, "nothing is well above 60%"


def test_the_fleets_rate_leaves_the_environment_out() -> None:
    own = hour_rows(0, 50, 50)
    totals = [(T0, "ok", 1050), (T0, "sandbox_lost", 60), (T0, "agent_timeout", 500)]
    assert fleet_rate(totals, own, minimum=30) == pytest.approx(10 / 1010)
    assert fleet_rate(totals, own, minimum=2000) is None


def test_trainer_outcomes_count_as_neither_failure_nor_pass() -> None:
    clean = [r for i in range(6) for r in hour_rows(i, 40, 4)]
    timeouts = clean + [HourCounts.of(T0 + timedelta(hours=i), "agent_timeout", 500,
                                      "sha256:a") for i in range(6)]
    a, b = judge(clean), judge(timeouts)
    assert (a.flagged, a.env_failures, a.passes, a.llr) == (b.flagged, b.env_failures,
                                                            b.passes, b.llr)
    assert b.rollouts == a.rollouts + 3000 and b.by_outcome["agent_timeout"] == 3000
    only = judge([HourCounts.of(T0, "agent_timeout", 1000)])
    assert (only.flagged, only.env_failures, only.failure_rate) == (False, 0, None)
    assert only.state is EnvState.UNKNOWN


def test_too_few_rollouts_flag_nothing() -> None:
    few = judge(hour_rows(0, 0, POLICY.min_rollouts - 1))
    assert not few.flagged and few.state is EnvState.UNKNOWN
    assert judge(hour_rows(0, 0, POLICY.min_rollouts)).flagged


def test_a_new_digest_starts_fresh() -> None:
    old = [r for i in range(5) for r in hour_rows(i, 50, 50, digest="sha256:old")]
    flagged = judge(old)
    assert flagged.flagged and flagged.image_digest == "sha256:old"
    new = [r for i in range(5, 8) for r in hour_rows(i, 60, 0, digest="sha256:new")]
    fresh = judge(old + new, previous=flagged)
    assert not fresh.flagged and fresh.image_digest == "sha256:new"
    assert (fresh.rollouts, fresh.env_failures) == (180, 0)
    assert fresh.window_start == T0 + timedelta(hours=5)
    # failing again on the new digest: a flag of its own, not the old one's start
    again = judge(old + new + hour_rows(8, 0, 40, digest="sha256:new"), previous=flagged)
    assert again.flagged and again.flagged_at != flagged.flagged_at


def test_release_needs_the_lower_bound_and_a_flag_keeps_its_start() -> None:
    failing = hour_rows(0, 60, 20)  # flagged in its first hour: the fresh test starts at 0
    first = judge(failing)
    assert first.flagged and first.flagged_at == T0 + timedelta(minutes=59)
    assert first.first_failure_at == T0
    # 73 clean rollouts take the fresh test from 0 to the lower bound (-4.604 / -0.0632);
    # a flag the failures went on pushing up (to the upper bound) would need 182
    still = judge(failing + [r for i in range(3, 10) for r in hour_rows(i, 10)],
                  previous=first)
    assert still.flagged and still.flagged_at == first.flagged_at
    released = judge(failing + [r for i in range(3, 11) for r in hour_rows(i, 10)],
                     previous=still)
    assert not released.flagged and released.flagged_at is None
    assert released.state is EnvState.HEALTHY


def test_each_settled_hour_is_taken_once_however_many_looks_read_it() -> None:
    """Looks every hour over a sliding 24-hour window, each going on from the last, walk
    the test as one walk over every hour would: no hour twice, none forgotten when it leaves
    the window; a late batch for a settled hour is counted but not tested again."""
    rng = random.Random(3)
    hours = [hour_rows(i, 20 - f, f) for i, f in
             enumerate(int(rng.random() < 0.1) for _ in range(60))]
    previous = None
    for i in range(60):
        window = [r for h in hours[max(0, i - 23):i + 1] for r in h]
        previous = judge(window, now=T0 + timedelta(hours=i + 1), previous=previous)
    assert previous is not None and previous.walk is not None
    everything = judge([r for h in hours for r in h], now=T0 + timedelta(hours=61))
    assert everything.walk is not None
    # the looks' walk settled all but the last hour (it ends within the settling hour)
    assert previous.walk.through == T0 + timedelta(hours=58)
    assert previous.llr == pytest.approx(everything.llr)
    late = hour_rows(50, 0, 30)  # 30 failures of a settled hour, sent late
    window = [r for h in hours[37:] for r in h] + late
    again = judge(window, now=T0 + timedelta(hours=61), previous=previous)
    assert again.env_failures == previous.env_failures + 30
    assert not again.flagged and again.walk is not None
    assert again.walk.llr == pytest.approx(everything.walk.llr)


def test_a_flag_is_quarantine_when_the_setting_says_so() -> None:
    rows = hour_rows(0, 30, 30)
    assert judge(rows).state is EnvState.DEGRADED
    assert judge(rows, policy=RolloutPolicy(quarantine=True)).state is EnvState.FLAKY


def test_notes_never_solved_and_always_solved() -> None:
    zeros = [rewards(T0, "ok", [0.0] * 100)]
    assert judge(zeros, oracle_passes=True).notes == (NEVER_SOLVED,)
    assert judge(zeros, oracle_passes=False).notes == (), "the oracle must pass"
    ones = judge([rewards(T0, "ok", [1.0] * 60), rewards(T0, "agent_timeout", [1.0] * 40)])
    assert ones.notes == (ALWAYS_SOLVED,) and ones.notes_since == {ALWAYS_SOLVED: NOW}
    assert ones.reward is not None and (ones.reward.n, ones.reward.mean) == (100, 1.0)
    assert judge([rewards(T0, "ok", [1.0] * 99)]).notes == (), "too few rewards"
    mixed = judge([rewards(T0, "ok", [1.0] * 99 + [0.5])])
    assert mixed.notes == () and mixed.reward is not None
    assert mixed.reward.one_share == pytest.approx(0.99)
    # a failed rollout's 0 is the failure's: it neither makes nor breaks a note
    lost = [rewards(T0, "ok", [1.0] * 100), rewards(T0, "sandbox_lost", [0.0] * 3)]
    assert judge(lost).notes == (ALWAYS_SOLVED,)
    later = judge(lost, previous=judge(lost, now=T0), now=NOW)
    assert later.notes_since == {ALWAYS_SOLVED: T0}, "a note keeps its first time"


def test_the_stored_document_has_the_agreed_keys_and_reads_back() -> None:
    found = judge([*hour_rows(0, 60, 20), rewards(T0, "ok", [1.0, 0.0])], fleet=0.01)
    doc = found.to_json()
    assert {"state", "flagged", "reason", "detail", "image_digest", "rollouts",
            "env_failures", "failure_rate", "fleet_rate", "llr", "flagged_at",
            "first_failure_at", "window_start", "notes", "confirmed", "by_outcome",
            "reward"} <= doc.keys()
    assert set(doc["reward"]) == {"n", "mean", "std", "zero_share", "one_share"}
    assert (doc["state"], doc["flagged"], doc["reason"]) == ("degraded", True,
                                                             "rollout_failures")
    assert doc["failure_rate"] == pytest.approx(20 / 82, abs=1e-6)
    assert "sandbox_lost 20" in doc["detail"] and "the fleet 1.0%" in doc["detail"]
    assert RolloutHealth.from_json(doc).to_json() == doc


# --- combined with the probes -----------------------------------------------------------

KINDS = [ProbeKind.TERMINAL, ProbeKind.TESTS]
FLAGGED_AT = T0 + timedelta(hours=10)


def probes(*results: tuple[ProbeKind, str, datetime], first: int = 0
           ) -> list[tuple[ProbeKind, Observation]]:
    """Probe results, in runs ``r<first>``, ``r<first + 1>``..."""
    return [(kind, Observation(Status(status), "ok" if status == "pass" else "tool_missing",
                               at, "sha256:a", "spec", f"r{i}", i))
            for i, (kind, status, at) in enumerate(results, start=first)]


def flagged(policy: RolloutPolicy = POLICY) -> RolloutHealth:
    found = judge(hour_rows(0, 30, 30), policy=policy)
    return RolloutHealth(**{**{f: getattr(found, f) for f in found.__slots__},  # type: ignore[attr-defined]
                            "flagged_at": FLAGGED_AT})


BEFORE = T0 + timedelta(hours=9)
AFTER = T0 + timedelta(hours=11)


def test_a_flag_degrades_a_healthy_environment_at_once() -> None:
    history = probes((ProbeKind.TERMINAL, "pass", BEFORE), (ProbeKind.TESTS, "pass", BEFORE))
    health = assess_env("e", KINDS, history)
    assert health.state is EnvState.HEALTHY
    combined, evidence = with_rollouts(health, flagged(), history)
    assert (combined.state, combined.reason) == (EnvState.DEGRADED,
                                                 "rollouts: rollout_failures")
    assert evidence is not None and evidence.confirmed is None
    entry, transition = decide(None, EnvState.HEALTHY, combined, AFTER)
    assert entry is None and transition is not None
    assert transition.reason == "healthy -> degraded: rollouts: rollout_failures"


def test_passing_probes_after_the_flag_say_it_fails_on_the_cluster_only() -> None:
    one = probes((ProbeKind.TERMINAL, "pass", BEFORE), (ProbeKind.TESTS, "pass", BEFORE),
                 (ProbeKind.TERMINAL, "pass", AFTER))
    combined, evidence = with_rollouts(assess_env("e", KINDS, one), flagged(), one)
    assert evidence is not None and evidence.confirmed is None, "the tests kind has not yet"
    both = one + probes((ProbeKind.TESTS, "pass", AFTER), first=3)
    combined, evidence = with_rollouts(assess_env("e", KINDS, both), flagged(), both)
    assert evidence is not None and evidence.confirmed == CLUSTER_ONLY
    assert combined.state is EnvState.DEGRADED
    assert combined.reason == ("rollouts: rollout_failures "
                               "(fails on the cluster, passes here)")
    # results of an incident's cycle confirm nothing
    _, held = with_rollouts(assess_env("e", KINDS, both), flagged(), both,
                            incidents=frozenset({"r3"}))
    assert held is not None and held.confirmed is None


def test_probe_failures_dominate_and_confirm_the_flag() -> None:
    broken = probes((ProbeKind.TERMINAL, "fail", AFTER), (ProbeKind.TERMINAL, "fail", AFTER),
                    (ProbeKind.TESTS, "pass", AFTER))
    health = assess_env("e", KINDS, broken)
    assert health.state is EnvState.BROKEN
    combined, evidence = with_rollouts(health, flagged(), broken)
    assert combined.state is EnvState.BROKEN and evidence is not None
    assert evidence.confirmed == HERE_TOO
    assert combined.reason == "terminal: tool_missing (rollout failures confirmed here too)"
    # one failure since the flag is enough to confirm it, the state the probes' worst
    once = probes((ProbeKind.TERMINAL, "pass", BEFORE), (ProbeKind.TERMINAL, "fail", AFTER),
                  (ProbeKind.TESTS, "pass", AFTER))
    combined, evidence = with_rollouts(assess_env("e", KINDS, once), flagged(), once)
    assert evidence is not None and evidence.confirmed == HERE_TOO
    assert combined.state is EnvState.DEGRADED and combined.reason.startswith("terminal: ")


def test_quarantine_on_rollouts_alone_is_a_setting() -> None:
    history = probes((ProbeKind.TERMINAL, "pass", BEFORE), (ProbeKind.TESTS, "pass", BEFORE))
    combined, _ = with_rollouts(assess_env("e", KINDS, history),
                                flagged(RolloutPolicy(quarantine=True)), history)
    assert combined.state is EnvState.FLAKY
    entry, _ = decide(None, EnvState.HEALTHY, combined, AFTER)
    assert entry is not None and entry.reason == "flaky: rollouts: rollout_failures"


def test_unflagged_evidence_moves_nothing() -> None:
    history = probes((ProbeKind.TERMINAL, "pass", BEFORE), (ProbeKind.TESTS, "pass", BEFORE))
    health = assess_env("e", KINDS, history)
    clean = judge(hour_rows(0, 100))
    combined, evidence = with_rollouts(health, clean, history)
    assert combined == health and evidence is not None and not evidence.flagged
    assert with_rollouts(health, None, history) == (health, None)


# --- depth and urgency ------------------------------------------------------------------

def test_the_tests_probe_validates_in_full_while_flagged() -> None:
    settings = AdaptiveDepth(light_after_runs=9, light_after_s=3600.0)
    long_clean = KindHealth(ProbeKind.TESTS, EnvState.HEALTHY, ("sha256:a", "spec"),
                            HealthPolicy().lower, 90, 0, "ok", clean_runs=90,
                            clean_since=T0, full_at=NOW - timedelta(days=1))
    assert advise(settings, long_clean, quarantined=False, now=NOW).depth is Depth.LIGHT
    advice = advise(settings, long_clean, quarantined=False, now=NOW, rollouts=flagged())
    assert advice.depth is Depth.FULL and advice.why.startswith("rollout failures: ")
    solved = judge([rewards(NOW - timedelta(hours=2), "ok", [1.0] * 100)],
                   now=NOW - timedelta(hours=2))
    advice = advise(settings, long_clean, quarantined=False, now=NOW, rollouts=solved)
    assert advice.depth is Depth.FULL and advice.why.startswith("always solved")
    done = KindHealth(**{**{f: getattr(long_clean, f) for f in long_clean.__slots__},  # type: ignore[attr-defined]
                         "full_at": NOW - timedelta(hours=1)})
    assert advise(settings, done, quarantined=False, now=NOW, rollouts=solved).depth \
        is Depth.LIGHT, "once a full validation followed the note, light again"


def test_urgent_work_goes_first_and_queued_work_is_promoted_in_place() -> None:
    assert worth(new=True, stale=True, suspect=True, quarantined=True, urgent=True) == URGENT
    assert worth(new=True, stale=False, suspect=False, quarantined=False) > URGENT
    envs = {e: Environment(id=e, image=f"img-{e}", suite="s") for e in "abcd"}
    queue = WorkQueue(per_image=1)
    for i, env_id in enumerate("abc"):
        assert queue.put(NORMAL, float(i), env_id, ProbeKind.TERMINAL)
    assert queue.put(QUARANTINED, 0.0, "d", ProbeKind.TERMINAL)
    assert queue.promote(("d", ProbeKind.TERMINAL), URGENT)
    assert not queue.promote(("a", ProbeKind.TESTS), URGENT), "not queued"
    taken = queue.take(envs.get)
    assert taken is not None and taken[0].key == ("d", ProbeKind.TERMINAL)
    assert not queue.promote(("d", ProbeKind.TERMINAL), URGENT), "running: not queued"
    # waiting for its image, or for the budget: promoted all the same
    assert queue.put(NORMAL, 9.0, "d", ProbeKind.TESTS)
    assert queue.take(envs.get, lambda w, e: e.id != "a") is not None  # b runs, a deferred
    assert queue.take(envs.get, lambda w, e: e.id != "a") is not None  # c runs
    assert queue.take(envs.get) is None, "d's tests wait for its image, a for the budget"
    assert queue.promote(("d", ProbeKind.TESTS), URGENT)
    assert queue.promote(("a", ProbeKind.TERMINAL), URGENT)
    assert queue.put(NORMAL, 0.0, "e", ProbeKind.TERMINAL)  # routine work, due first
    envs["e"] = Environment(id="e", image="img-e", suite="s")
    queue.done(*taken)  # d's image is free
    order = [queue.take(envs.get) for _ in range(3)]
    assert [t[0].key for t in order if t is not None] == [
        ("a", ProbeKind.TERMINAL), ("d", ProbeKind.TESTS), ("e", ProbeKind.TERMINAL)]
