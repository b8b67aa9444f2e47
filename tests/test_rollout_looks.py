"""The daemon's looks at the rollouts on a real store of each backend: counters written by
the ingest path, judged beside the fleet, states and incidents written through the feed's
one rule (no engine: the probes' results are recorded as a probe would); the scheduler's
urgent work (a fake check); the daemon's options for the rollouts."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.rollouts import Outcome, Rollout
from envcheck.executors.local import LocalExecutor
from envcheck.feed.allowlist import allowlist
from envcheck.feed.assess import LookOutcome, StoreAssessment, evaluate, stored_rollouts
from envcheck.feed.rollouts import STORM_KIND, RolloutLooks
from envcheck.health.rollouts import ALWAYS_SOLVED, RolloutPolicy
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store, open_store
from envcheck.store.retention import Retention
from envcheck.store.rollout_counts import hour_of
from tests.conftest import DEMO, envcheck_cmd
from tests.polling import wait_for
from tests.test_budget import two_suites
from tests.test_scheduler import FakeChecks, NoRuntime, fake  # noqa: F401

SEQ = itertools.count()


class Clock:
    """The wall clock, moved on by hand (the store stamps batches with the real one)."""

    def __init__(self) -> None:
        self.ahead = timedelta()

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        raise AssertionError("a look never sleeps")

    def now(self) -> datetime:
        return datetime.now(UTC) + self.ahead


@pytest.fixture
def store(store_url: str, demo_catalogue: Catalogue) -> Iterator[Store]:
    with open_store(store_url) as opened:
        opened.sync_suites(demo_catalogue.suites)
        opened.sync_environments(demo_catalogue.environments)
        yield opened


@pytest.fixture
def envs(demo_catalogue: Catalogue) -> dict[str, Environment]:
    return {env.id: env for env in demo_catalogue.environments}


def report(store: Store, env_id: str, ok: int, failed: int = 0, *,
           outcome: Outcome = Outcome.SANDBOX_LOST, at: datetime | None = None,
           reward: float | None = None) -> None:
    """A trainer's batch: ``ok`` clean rollouts and ``failed`` of ``outcome``."""
    at = at or datetime.now(UTC) - timedelta(minutes=1)
    batch = [Rollout(env_id, at, "run-1", next(SEQ), Outcome.OK, "sha256:x", reward)
             for _ in range(ok)]
    batch += [Rollout(env_id, at, "run-1", next(SEQ), outcome, "sha256:x")
              for _ in range(failed)]
    store.record_rollouts(batch)


def probed(store: Store, env: Environment, at: datetime) -> None:
    """Every declared kind of ``env`` passes, started at ``at``."""
    run_id = store.start_run("test", [])
    for kind in env.declared_kinds():
        store.record(run_id, ProbeResult(env.id, kind, Status.PASS, Reason.OK, "ok", 0.5,
                                         "sha256:x", env.spec_hash(kind), at))
    store.finish_run(run_id)


HEALTHY = "demo-healthy"
CLEAN = ["demo-shell-missing", "demo-tool-missing", "demo-workdir-readonly",
         "demo-user-missing", "demo-slow-shell"]


def test_one_environment_failing_beside_a_clean_fleet_is_flagged_and_escalated(
        store: Store, envs: dict[str, Environment]) -> None:
    probed(store, envs[HEALTHY], datetime.now(UTC) - timedelta(hours=1))
    evaluate(store, [envs[HEALTHY]])
    assert store.env_state(HEALTHY).state == "healthy"  # type: ignore[union-attr]
    for env_id in CLEAN:
        report(store, env_id, 200, 1)
    report(store, HEALTHY, 170, 20, outcome=Outcome.SANDBOX_LOST)
    report(store, HEALTHY, 0, 10, outcome=Outcome.VERIFIER_ERROR)
    looks = RolloutLooks(store, RolloutPolicy())
    first = looks.look(envs)
    assert first.flagged == (HEALTHY,) and first.incident is None
    assert first.judged == 6
    row = store.env_state(HEALTHY)
    assert row is not None and (row.state, row.reason) == ("degraded",
                                                           "rollouts: rollout_failures")
    doc = row.rollouts
    assert doc is not None and doc["flagged"] and doc["confirmed"] is None
    assert doc["by_outcome"] == {"ok": 170, "sandbox_lost": 20, "verifier_error": 10}
    assert doc["fleet_rate"] == pytest.approx(5 / 1005, abs=1e-6)
    assert [t.env_id for t in first.transitions if t.new_state == "degraded"] == [HEALTHY]
    for env_id in CLEAN:
        other = stored_rollouts(store.env_state(env_id))
        assert other is not None and not other.flagged and other.rollouts == 201
    # nothing new: no escalation again, the flag stands
    again = looks.look(envs)
    assert again.flagged == () and again.transitions == ()
    assert store.env_state(HEALTHY).reason == "rollouts: rollout_failures"  # type: ignore[union-attr]
    # the full probe passes: the window's assessment says where it fails
    probed(store, envs[HEALTHY], datetime.now(UTC))
    evaluate(store, [envs[HEALTHY]])
    row = store.env_state(HEALTHY)
    assert row is not None and row.state == "degraded"
    assert row.reason == "rollouts: rollout_failures (fails on the cluster, passes here)"
    assert row.rollouts is not None and row.rollouts["confirmed"] == "cluster_only"


def test_many_environments_failing_at_once_are_an_incident_and_nothing_moves(
        store: Store, envs: dict[str, Environment]) -> None:
    assessment = StoreAssessment(store, looks=RolloutLooks(store, RolloutPolicy()))
    evaluate(store, list(envs.values()))  # every state written once: unknown
    storm_at = datetime.now(UTC) - timedelta(hours=2)
    report(store, CLEAN[0], 200, at=storm_at)
    for env_id in [HEALTHY, *CLEAN[1:]]:
        report(store, env_id, 150, 50, outcome=Outcome.SANDBOX_START_FAILED, at=storm_at)
    before = {row.env_id: (row.state, row.reason) for row in store.env_states()}
    outcome = assessment.rollouts(envs)
    assert outcome is not None and outcome.incident is not None
    assert outcome.incident[:3] == (STORM_KIND, 5, 6)
    assert outcome.flagged == () and outcome.transitions == ()
    assert {row.env_id: (row.state, row.reason) for row in store.env_states()} == before
    assert not any((found := stored_rollouts(row)) is not None and found.flagged
                   for row in store.env_states())
    [incident] = store.incidents()
    assert incident.kind == STORM_KIND and incident.held_back == 1200
    assert {f["env_id"] for f in incident.held_back_failures} == {HEALTHY, *CLEAN[1:]}
    assert store.held_rollout_hours() == {hour_of(storm_at)}
    # later hours are judged as usual: one environment failing on its own is flagged
    report(store, CLEAN[2], 100, 40)
    later = assessment.rollouts(envs)
    assert later is not None and later.incident is None and later.flagged == (CLEAN[2],)
    doc = stored_rollouts(store.env_state(CLEAN[2]))
    assert doc is not None and doc.rollouts == 140, "the held hour is not counted"
    # pruned with the hour rows of its hour
    pruned = store.prune(Retention(hourly_days=1), now=storm_at + timedelta(days=3))
    assert pruned.rollout_held_deleted == 1 and store.held_rollout_hours() == set()


def test_quarantine_on_rollouts_is_a_setting(store: Store,
                                             envs: dict[str, Environment]) -> None:
    for env_id in CLEAN:
        report(store, env_id, 100)
    report(store, HEALTHY, 85, 15, outcome=Outcome.VERIFIER_TIMEOUT)
    outcome = RolloutLooks(store, RolloutPolicy(quarantine=True)).look(envs)
    assert outcome.flagged == (HEALTHY,)
    row = store.env_state(HEALTHY)
    assert row is not None and (row.state, row.quarantined) == ("flaky", True)
    assert row.q_reason == "flaky: rollouts: rollout_failures"
    excluded = allowlist(store, "demo").excluded
    assert HEALTHY in excluded


def test_a_flag_ages_out_of_the_window_when_the_trainer_stops(
        store: Store, envs: dict[str, Environment]) -> None:
    clock = Clock()
    looks = RolloutLooks(store, RolloutPolicy(quarantine=True), clock=clock)
    probed(store, envs[HEALTHY], datetime.now(UTC) - timedelta(hours=1))
    report(store, HEALTHY, 50, 50)
    assert looks.look(envs).flagged == (HEALTHY,)
    assert store.env_state(HEALTHY).quarantined  # type: ignore[union-attr]
    clock.ahead = timedelta(hours=25)  # quarantined: the trainer sent nothing since
    released: LookOutcome = looks.look(envs)
    assert [t.env_id for t in released.transitions] == [HEALTHY]
    row = store.env_state(HEALTHY)
    assert row is not None and not row.quarantined and row.rollouts is None
    assert row.state == "healthy", "released: the probes passed, the failures aged out"


def test_a_late_batch_and_always_solved(store: Store, envs: dict[str, Environment]) -> None:
    looks = RolloutLooks(store, RolloutPolicy(notes_after=50))
    assert looks.look(envs) == LookOutcome()
    # rollouts of 90 minutes ago, sent only now: judged at the next look all the same
    report(store, CLEAN[0], 60, reward=1.0, at=datetime.now(UTC) - timedelta(minutes=90))
    outcome = looks.look(envs)
    assert outcome.always_solved == (CLEAN[0],) and outcome.flagged == ()
    doc = stored_rollouts(store.env_state(CLEAN[0]))
    assert doc is not None and doc.notes == (ALWAYS_SOLVED,)
    assert looks.look(envs).always_solved == (), "noted once"
    assert store.env_state(CLEAN[0]).state == "unknown"  # type: ignore[union-attr]
    assert ProbeKind.TESTS in envs[CLEAN[0]].declared_kinds()


# --- the daemon's options ----------------------------------------------------------------------


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--rollout-p0", "0.2", "--rollout-p1", "0.1"], {}, "need 0 < p0 < p1 < 1"),
    ([], {"ENVCHECK_ROLLOUT_FLEET_FACTOR": "1"}, "need fleet_factor above 1"),
    (["--rollout-min", "0"], {}, "need min_rollouts of at least 1"),
    ([], {"ENVCHECK_ROLLOUT_WINDOW": "0"}, "need window_h above 0"),
])
def test_bad_rollout_rates_stop_the_daemon_before_it_starts(
        tmp_path: Path, args: list[str], env: dict[str, str], words: str) -> None:
    run = subprocess.run([*envcheck_cmd(), "daemon", str(DEMO), *args],
                         capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "ENVCHECK_DATA_DIR": str(tmp_path),
                              "COLUMNS": "200", **env})
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"--rollout-*: {words}" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "envcheck.db").exists(), "nothing started"


# --- the scheduler's urgent work ----------------------------------------------------------------


def test_urgent_work_jumps_the_queue_and_a_running_probe_runs_again(
        tmp_path: Path, store_url: str, fake: FakeChecks) -> None:  # noqa: F811
    """What the rollouts ask for runs next: queued work promoted in place, and work running
    when it is asked for once more after it (its result began before the question)."""
    catalogue = two_suites(tmp_path / "c.yaml")
    terminal = ProbeKind.TERMINAL
    with open_store(store_url) as opened:
        scheduler = ProbeScheduler(catalogue, LocalExecutor(NoRuntime()), opened,
                                   concurrency=1, window_s=3600.0,
                                   assessment=StoreAssessment(opened, tmp_path / "exports"))
        try:
            scheduler.start()
            fake.hold("p1")
            assert scheduler.enqueue_now("p1", terminal)
            wait_for(lambda: fake.order() == ["p1"], timeout_s=15.0, what="p1 running",
                     interval_s=0.01)
            assert scheduler.enqueue_now("r1", terminal) and scheduler.enqueue_now("p2", terminal)
            assert not scheduler.enqueue_now("p2", terminal), "queued already"
            assert scheduler.enqueue_now("p2", terminal, urgent=True), "promoted"
            assert scheduler.enqueue_now("p1", terminal, urgent=True), "again after it ends"
            assert not scheduler.enqueue_now("nope", terminal, urgent=True)
            fake.release_all()
            wait_for(lambda: len(fake.finished) == 4, timeout_s=15.0, what="all four",
                     interval_s=0.01)
            assert fake.order() == ["p1", "p2", "p1", "r1"]
        finally:
            fake.release_all()
            scheduler.stop(10)
