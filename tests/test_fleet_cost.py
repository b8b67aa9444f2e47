"""The fleet-cost simulation (``bench/fleet_cost.py``), run small: what must hold whatever the
machine. Reuse starts far fewer containers than today; every digest change is detected
within one terminal interval (and its jitter) plus the queue's wait; every changed digest
gets a full tests probe at once; and the shortcut that makes the full size affordable (a
reused result is not re-assessed) changes no assessment. With the registry (``watch``): an
unchanged tag costs looks and no pull, a moved tag is seen by a look within its interval,
pulled once and validated after its pull."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from envcheck.core.depth import Depth
from envcheck.core.results import ProbeKind, Status
from envcheck.core.states import Observation
from envcheck.health.sprt import assess_kind

# The benches import each other as scripts do, from their folder; it leaves sys.path again at
# once, or its ``ray.py`` would stand in for the ray package in every later test module.
BENCH = str(Path(__file__).resolve().parent.parent / "bench")
sys.path.insert(0, BENCH)
try:
    from fleet_cost import report
    from fleetsim import (
        DAY,
        REUSE,
        T0,
        TAIL,
        TERMINAL,
        TESTS,
        TODAY,
        Simulation,
        environments,
        make_fleet,
    )
    from fleetwatch import IMAGE, WATCH, PullModel, WatchSimulation
finally:
    sys.path.remove(BENCH)

ENVS, DAYS = 50, 3
Runs = dict[str, tuple[Simulation, dict[str, Any]]]


@pytest.fixture(scope="module")
def runs() -> Runs:
    envs = environments(ENVS)
    out = {}
    for policy in (TODAY, REUSE):
        # digests every 3 days on average: enough changes in 3 days to hold each to account
        sim = Simulation(make_fleet(envs, DAYS, 3 * DAY, seed=7), DAYS, policy, workers=8,
                         seed=8)
        out[policy.name] = (sim, report(sim, sim.run(), DAYS, 1))
    return out


@pytest.fixture(scope="module")
def watched() -> tuple[Simulation, dict[str, Any]]:
    sim = WatchSimulation(make_fleet(environments(ENVS, "watch"), DAYS, 3 * DAY, seed=7), DAYS,
                          WATCH, workers=8, seed=8, pulls=PullModel(slots=2))
    return sim, report(sim, sim.run(), DAYS, 1)


def test_a_moved_tag_is_seen_by_a_look_pulled_once_and_validated_after_its_pull(
        watched: tuple[Simulation, dict[str, Any]]) -> None:
    sim, figures = watched
    assert isinstance(sim, WatchSimulation)
    # unchanged tags: looks, no pull and no byte; every pull in the warm-up or of a move
    assert figures["pulls_unchanged_per_env_day"] == 0
    assert figures["gb_unchanged_per_env_day"] == 0
    assert figures["pulls_warmup"] == ENVS
    assert 200 < figures["heads_per_env_day"] < 350  # one per 5 min look, and a few more
    schedules = sim.fleet[0].env.schedules
    wait = schedules.jitter_s + sim.tally.max_lag_s[IMAGE] + 1.0
    moved = seen = 0
    for s in sim.fleet:
        for before, d in zip(s.digests, s.digests[1:], strict=False):
            held = before.quarantined_at is not None and before.quarantined_at < d.start
            bound = (schedules.interval(IMAGE, held) or 0) + wait
            if d.start > DAYS * DAY - bound or d.end - d.start <= bound:
                continue
            seen += 1
            assert d.detected_at is not None and d.detected_at - d.start <= bound, d
            if d.validated_at is not None:
                moved += 1
                # pulled after the move, before the full probes that needed it ended
                assert d.pulled_at is not None and d.start < d.pulled_at <= d.validated_at
    assert seen > 20 and moved > 20
    assert sum(sim.watch.pulls_moved) <= sum(len(s.digests) - 1 for s in sim.fleet)


def test_reuse_starts_far_fewer_containers(runs: Runs) -> None:
    today, reuse = runs["today"][1], runs["reuse"][1]
    assert today["read_only_starts_per_env_day"] > 200  # ~312 at the default schedules
    assert reuse["read_only_starts_per_env_day"] < today["read_only_starts_per_env_day"] / 10
    assert reuse["identity_checks_per_env_day"] > 200  # the terminal's checks, no container
    assert today["identity_checks_per_env_day"] == 0


def test_every_change_detected_within_a_terminal_interval_and_the_wait(
        runs: Runs) -> None:
    for sim, _ in runs.values():
        schedules = sim.fleet[0].env.schedules
        wait = schedules.jitter_s + sim.tally.max_lag_s[TERMINAL] + 1.0  # + a full probe
        changes = 0
        for s in sim.fleet:
            for before, d in zip(s.digests, s.digests[1:], strict=False):
                # the interval at the rate the quarantine sets: the digest before decided it
                held = before.quarantined_at is not None and before.quarantined_at < d.start
                bound = (schedules.interval(TERMINAL, held) or 0) + wait
                if d.start > DAYS * DAY - bound or d.end - d.start <= bound:
                    continue  # no probe could see it in time
                changes += 1
                assert d.detected_at is not None
                assert d.detected_at - d.start <= bound, (sim.policy.name, d)
        assert changes > 20


def test_every_changed_digest_gets_a_full_tests_probe_at_once(
        runs: Runs) -> None:
    sim, figures = runs["reuse"]
    settle = 3 * 3600.0  # detection, the queue, a tests probe's runs (at most 18 min)
    changes = [d for s in sim.fleet for d in s.digests[1:]
               if d.start < DAYS * DAY - settle and d.end - d.start > settle]
    assert changes
    for d in changes:
        assert TESTS in d.full, d
        assert d.validated_at is not None and d.validated_at - d.start < settle
    assert sim.tally.tests_full_on_new >= len(changes)
    today = runs["today"][1]
    assert figures["validate_min"]["median"] < today["validate_min"]["median"]


def test_a_reused_result_changes_no_assessment() -> None:
    """Why the simulation re-assesses on results that hold runs only."""
    def obs(minutes: float, depth: Depth, runs: int = 1) -> Observation:
        return Observation(Status.PASS, "ok", T0 + timedelta(minutes=minutes), "sha256:a",
                           "spec", "r", None, runs, 0, depth)

    full = [obs(60 * i, Depth.FULL) for i in range(20)]
    with_reused = sorted([*full, *(obs(60 * i + 5, Depth.REUSED, 0) for i in range(20))],
                         key=lambda o: o.started_at)
    for kind in (ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES):
        alone, mixed = assess_kind(kind, full), assess_kind(kind, with_reused)
        assert (alone.state, alone.identity, alone.full_at, alone.clean_runs,
                alone.clean_since, alone.llr) == (mixed.state, mixed.identity, mixed.full_at,
                                                  mixed.clean_runs, mixed.clean_since,
                                                  mixed.llr)


def test_the_tail_of_a_clean_history_advises_as_the_whole() -> None:
    """Why the simulation keeps the last TAIL terminal and dependencies results only."""
    whole = [Observation(Status.PASS, "ok", T0 + timedelta(minutes=20 * i), "sha256:a", "spec",
                         "r", None, 1, 0, Depth.FULL) for i in range(TAIL * 5)]
    alone, tail = assess_kind(TERMINAL, whole), assess_kind(TERMINAL, whole[-TAIL:])
    assert (alone.state, alone.identity, alone.full_at, alone.llr) == (
        tail.state, tail.identity, tail.full_at, tail.llr)
