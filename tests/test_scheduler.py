"""The probe scheduler: bounds, dedupe, priorities, probing rates, windows and reloads.

Pure scheduling logic runs against a fake check (``check_environment`` replaced: it records
who ran when, blocks on demand and reports the status it is told); the sandbox bounds are
measured on the real engine, where containers are what they bound.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pytest
from sqlalchemy import update

import envcheck.executors.local as executors_mod
import envcheck.schedule.jobs as jobs_mod
from envcheck.catalogue.fields import MIN_SCHEDULE_ENV
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import ResultSink, Services
from envcheck.executors.local import LocalExecutor
from envcheck.feed.assess import StoreAssessment, set_quarantine_by_id
from envcheck.kinds import Verdict, load_probe
from envcheck.sandbox.base import Sandbox, SandboxRuntime, SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_TAG
from envcheck.schedule.assessment import WindowOutcome
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store, open_store
from envcheck.store.core_tables import ENVS
from tests.conftest import SESSION_TAG
from tests.polling import wait_for

T = ProbeKind.TERMINAL
FAIL = Verdict(Status.FAIL, Reason.TOOL_MISSING, "fake: a tool is missing")
PASS = Verdict(Status.PASS, Reason.OK, "fake: ok")


@pytest.fixture(autouse=True)
def fast_schedules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Schedules of 1 s, below the production floor (catalogue.MIN_SCHEDULE_S)."""
    monkeypatch.setenv(MIN_SCHEDULE_ENV, "1s")


def write_catalogue(path: Path, envs: dict[str, str], *, schedules: str = "terminal: null",
                    overrides: dict[str, str] | None = None) -> Catalogue:
    """envs: id -> image; overrides: id -> the environment's own ``schedules`` mapping."""
    lines = []
    for env_id, image in envs.items():
        extra = f", schedules: {{ {overrides[env_id]} }}" if overrides and env_id in overrides \
            else ""
        lines.append(f"      - {{ id: {env_id}, image: '{image}'{extra} }}")
    path.write_text(f"""version: 1
suites:
  s:
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ dependencies: null, tests: null, datasource: null, {schedules} }}
    environments:
{chr(10).join(lines)}
""", encoding="utf-8")
    return load_catalogue([path])


@dataclass(frozen=True)
class Started:
    env_id: str
    kind: ProbeKind
    at: float  # monotonic


class FakeChecks:
    """Stands in for ``check_environment``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[Started] = []
        self.finished: list[str] = []
        self.holds: dict[str, threading.Event] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.running: Counter[str] = Counter()  # image -> now
        self.max_running = 0
        self.max_per_image: Counter[str] = Counter()

    def hold(self, env_id: str) -> threading.Event:
        return self.holds.setdefault(env_id, threading.Event())

    def release_all(self) -> None:
        for event in self.holds.values():
            event.set()

    def starts(self, env_id: str) -> list[float]:
        with self.lock:
            return [s.at for s in self.started if s.env_id == env_id]

    def order(self) -> list[str]:
        with self.lock:
            return [s.env_id for s in self.started]

    def __call__(self, env: Environment, kinds: Sequence[ProbeKind], runtime: SandboxRuntime,
                 run_id: str, sink: ResultSink | None = None,
                 services: Services | None = None) -> list[ProbeResult]:
        with self.lock:
            self.started.extend(Started(env.id, k, time.monotonic()) for k in kinds)
            self.running[env.image] += 1
            self.max_running = max(self.max_running, sum(self.running.values()))
            self.max_per_image[env.image] = max(self.max_per_image[env.image],
                                                self.running[env.image])
        try:
            hold = self.holds.get(env.id)
            if hold is not None:
                assert hold.wait(30), f"{env.id} was held for too long"
            verdict = self.verdicts.get(env.id, PASS)
            results = [load_probe(k).result(env, verdict, 0.01, "sha256:fake") for k in kinds]
            for r in results:
                if sink is not None:
                    sink(r)
            return results
        finally:
            with self.lock:
                self.running[env.image] -= 1
                self.finished.append(env.id)


class NoRuntime:
    """The fake check never touches the runtime."""

    def ping(self) -> None:
        raise AssertionError("unused")

    def image_digest(self, image: str) -> str:
        raise AssertionError("unused")

    def sandbox(self, spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        raise AssertionError("unused")

    def reap(self) -> int:
        raise AssertionError("unused")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("ENVCHECK_EXPORT_DIR", str(tmp_path / "exports"))
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as s:
        yield s


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeChecks]:
    checks = FakeChecks()
    monkeypatch.setattr(executors_mod, "check_environment", checks)
    yield checks
    checks.release_all()


Make = Callable[..., ProbeScheduler]


@pytest.fixture
def make(store: Store, fake: FakeChecks) -> Iterator[Make]:
    made: list[ProbeScheduler] = []

    def build(catalogue: Catalogue, **kwargs: Any) -> ProbeScheduler:
        kwargs.setdefault("window_s", 3600.0)
        kwargs.setdefault("assessment", StoreAssessment(store))
        s = ProbeScheduler(catalogue, LocalExecutor(NoRuntime()), store, **kwargs)
        made.append(s)
        return s

    yield build
    fake.release_all()
    for s in made:
        s.stop(10)


def seed(store: Store, catalogue: Catalogue, env_id: str, ago_s: float,
         verdict: Verdict = PASS) -> ProbeResult:
    store.sync_suites(catalogue.suites)
    store.sync_environments(catalogue.environments)
    env = catalogue.environment(env_id)
    result = load_probe(T).result(env, verdict, 0.01, "sha256:fake")
    result = replace(result, started_at=datetime.now(UTC) - timedelta(seconds=ago_s))
    run_id = store.start_run("seed", [])
    store.record(run_id, result)
    store.finish_run(run_id)
    return result


def job_of(s: ProbeScheduler, env_id: str) -> Any:
    [job] = [j for j in s.jobs() if j.id == f"{env_id}:{T}"]
    return job


def on_grid(delta: timedelta, interval_s: float) -> bool:
    """``delta`` between two scheduled runs of a job is a positive whole number of intervals."""
    return delta > timedelta(0) and delta % timedelta(seconds=interval_s) == timedelta(0)


# --- the queue ---------------------------------------------------------------------------


def test_a_busy_image_does_not_hold_up_other_images(tmp_path: Path, fake: FakeChecks,
                                                    make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"a1": "img-a", "a2": "img-a", "b1": "img-b"})
    s = make(cat, concurrency=2, per_image=1)
    fake.hold("a1")
    s.start()
    for env_id in ("a1", "a2", "b1"):
        assert s.enqueue_now(env_id, T)
    # a2 waits for a1's image; the free worker runs b1 meanwhile instead of waiting with a2
    wait_for(lambda: "b1" in fake.finished,
             timeout_s=15.0, what="b1 to finish while a1 runs", interval_s=0.01)
    assert fake.order() == ["a1", "b1"]
    assert s.stats.queued == 1
    fake.hold("a1").set()
    wait_for(lambda: "a2" in fake.finished, timeout_s=15.0, what="a2 to run", interval_s=0.01)
    assert fake.max_per_image["img-a"] == 1
    assert s.stats.queued == 0
    assert s.stats.running == 0


class Recorded:
    """Stands in for ``check_environment``: records each probe's start and end, in order,
    and holds a probe (environment, kind) until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, ProbeKind]] = []  # (start|end, env, kind)
        self.holds: dict[tuple[str, ProbeKind], threading.Event] = {}

    def hold(self, env_id: str, kind: ProbeKind) -> threading.Event:
        return self.holds.setdefault((env_id, kind), threading.Event())

    def seen(self, event: str, env_id: str, kind: ProbeKind) -> int:
        with self.lock:
            return self.events.count((event, env_id, kind))

    def wait(self, event: str, env_id: str, kind: ProbeKind, count: int = 1) -> None:
        wait_for(lambda: self.seen(event, env_id, kind) == count, timeout_s=15.0,
                 what=f"{env_id}'s {kind} probe to {event} ({count})", interval_s=0.01)

    def __call__(self, env: Environment, kinds: Sequence[ProbeKind], runtime: SandboxRuntime,
                 run_id: str, sink: ResultSink | None = None,
                 services: Services | None = None) -> list[ProbeResult]:
        [kind] = kinds
        with self.lock:
            self.events.append(("start", env.id, kind))
        hold = self.holds.get((env.id, kind))
        if hold is not None:
            assert hold.wait(30), f"{env.id} {kind} was held for too long"
        results = [load_probe(kind).result(env, PASS, 0.01, "sha256:fake")]
        with self.lock:
            self.events.append(("end", env.id, kind))
        return results


def test_a_tests_probe_with_controls_runs_alone_in_its_environment(
        tmp_path: Path, make: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    """It waits for the environment's other probes, and they wait for it; other
    environments (same image) run meanwhile. Asserted on the recorded starts and ends."""
    tests = ProbeKind.TESTS
    path = tmp_path / "c.yaml"
    path.write_text("""version: 1
suites:
  s:
    defaults:
      workdir: /workspace
      user: agent
      schedules: { terminal: null, dependencies: null, tests: null, datasource: null }
      tests:
        command: run {tests}
        fail_to_pass: [tests/t.py::test_a]
        adversarial: { tricks: [report_forged] }
    environments:
      - { id: hacked, image: img-a }
      - { id: other, image: img-a }
""", encoding="utf-8")
    checks = Recorded()
    monkeypatch.setattr(executors_mod, "check_environment", checks)
    s = make(load_catalogue([path]), concurrency=3, per_image=3)
    try:
        checks.hold("hacked", T)
        checks.hold("hacked", tests)
        s.start()
        assert s.enqueue_now("hacked", T)
        checks.wait("start", "hacked", T)
        assert s.enqueue_now("hacked", tests)  # waits: the terminal probe runs
        assert s.enqueue_now("other", tests)  # another environment: not held up
        checks.wait("end", "other", tests)
        assert checks.seen("start", "hacked", tests) == 0
        checks.hold("hacked", T).set()
        checks.wait("start", "hacked", tests)
        checks.holds.pop(("hacked", T))
        assert s.enqueue_now("hacked", T)  # waits now: the tests probe runs alone
        assert s.enqueue_now("other", T)
        checks.wait("end", "other", T)
        assert checks.seen("start", "hacked", T) == 1
        checks.hold("hacked", tests).set()
        checks.wait("end", "hacked", T, 2)
    finally:
        for event in checks.holds.values():
            event.set()
    hacked = [(e, k) for e, env_id, k in checks.events if env_id == "hacked"]
    assert hacked == [("start", T), ("end", T), ("start", tests), ("end", tests),
                      ("start", T), ("end", T)]


def test_dedupe_queued_or_running_is_not_queued_again(tmp_path: Path, fake: FakeChecks,
                                                      make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"a": "img-a", "b": "img-a"})
    s = make(cat, concurrency=1)
    fake.hold("a")
    s.start()
    assert s.enqueue_now("a", T)
    wait_for(lambda: fake.order() == ["a"], timeout_s=15.0, what="a to run", interval_s=0.01)
    assert not s.enqueue_now("a", T), "running: not queued again"
    assert s.enqueue_now("b", T)
    assert not s.enqueue_now("b", T), "queued: not queued again"
    assert not s.enqueue_now("nope", T), "unknown environment"
    assert s.stats.queued == 1
    fake.hold("a").set()
    wait_for(lambda: len(fake.finished) == 2,
             timeout_s=15.0, what="both to finish", interval_s=0.01)
    assert fake.order() == ["a", "b"]
    assert s.enqueue_now("a", T), "done: may be queued again"
    wait_for(lambda: len(fake.finished) == 3, timeout_s=15.0, what="a again", interval_s=0.01)


def test_priority_under_backlog(tmp_path: Path, store: Store, fake: FakeChecks,
                                make: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stale (never probed, or no result for two intervals) before suspect before normal
    before quarantined; first come, first served among equals."""
    monkeypatch.setattr(jobs_mod, "RESTART_SPREAD_S", 0.5)
    envs = {e: f"img-{e}" for e in ("blocker", "stale", "overdue", "suspect", "normal", "quar")}
    cat = write_catalogue(tmp_path / "c.yaml", envs,
                          overrides={"overdue": "terminal: 1h, jitter_s: 0"})
    for env_id in ("suspect", "normal", "quar"):
        seed(store, cat, env_id, ago_s=10)
    seed(store, cat, "overdue", ago_s=3 * 3600)  # due at start; its job queues it
    store.apply("suspect", "s", {"state": "degraded"}, None)
    store.apply("normal", "s", {"state": "healthy"}, None)
    assert set_quarantine_by_id(store, "quar", add=True, actor="test", reason="test")
    s = make(cat, concurrency=1)
    fake.hold("blocker")
    assert s.enqueue_now("blocker", T)  # queued before the workers start: runs first
    s.start()
    wait_for(lambda: fake.order() == ["blocker"],
             timeout_s=15.0, what="the blocker to run", interval_s=0.01)
    for env_id in ("quar", "normal", "suspect", "stale"):
        assert s.enqueue_now(env_id, T)
    wait_for(lambda: s.stats.queued == 5,
             timeout_s=10, what="the overdue job to queue", interval_s=0.01)
    fake.hold("blocker").set()
    wait_for(lambda: len(fake.finished) == 6,
             timeout_s=15.0, what="the backlog to drain", interval_s=0.01)
    order = fake.order()
    assert set(order[1:3]) == {"stale", "overdue"}, order
    assert order[3:] == ["suspect", "normal", "quar"], order


def test_jitter_spreads_the_fleet(tmp_path: Path, store: Store, make: Make) -> None:
    ids = [f"e{i:02d}" for i in range(30)]
    cat = write_catalogue(tmp_path / "c.yaml", {**dict.fromkeys(ids, "img"), "exact": "img"},
                          schedules="terminal: 60s, jitter_s: 10",
                          overrides={"exact": "terminal: 60s, jitter_s: 0"})
    last = {env_id: seed(store, cat, env_id, ago_s=30).started_at
            for env_id in [*ids, "exact"]}
    s = make(cat)
    s.start()
    offsets = []
    for env_id in ids:
        job = job_of(s, env_id)
        assert job.trigger.jitter == 10
        assert job.trigger.interval_length == 60
        offset = (job.next_run_time - last[env_id]).total_seconds()
        assert 60 <= offset <= 70, offset
        offsets.append(offset)
    assert max(offsets) - min(offsets) > 2, "a fleet seeded at once must not fire at once"
    exact = job_of(s, "exact")
    assert exact.trigger.jitter is None
    assert abs((exact.next_run_time - last["exact"]).total_seconds() - 60) < 0.01
    # every later run is jittered too
    prev = datetime.now(UTC)
    fires = [(job_of(s, ids[0]).trigger.get_next_fire_time(prev, prev) - prev).total_seconds()
             for _ in range(50)]
    assert all(60 <= f <= 70 for f in fires)
    assert max(fires) - min(fires) > 2


def test_quarantined_probed_at_the_reduced_rate(tmp_path: Path, store: Store,
                                                fake: FakeChecks, make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"bad": "img"},
                          schedules="terminal: 1s, jitter_s: 0, quarantined_factor: 2.5")
    fake.verdicts["bad"] = FAIL
    s = make(cat)
    s.start()
    assert job_of(s, "bad").trigger.interval_length == 1.0
    # Scheduled times, not observed ones: they sit on the job's grid however late it fires.
    due = job_of(s, "bad").next_run_time
    wait_for(lambda: len(fake.finished) >= 2, timeout_s=15.0, what="two failures", interval_s=0.01)
    assert on_grid(job_of(s, "bad").next_run_time - due, 1.0)
    [seen] = store.latest_results(["bad"])
    outcome = s.close_window()
    assert outcome is not None
    [transition] = outcome.transitions
    assert (transition.env_id, transition.new_state, transition.quarantined) == (
        "bad", "broken", True)
    assert job_of(s, "bad").trigger.interval_length == 2.5
    assert job_of(s, "bad").trigger.jitter is None
    assert s.intervals() == {("bad", T): 2.5}
    due = job_of(s, "bad").next_run_time
    assert due - seen.started_at >= timedelta(seconds=2.5), "rescheduled from the last result"
    before = len(fake.starts("bad"))
    wait_for(lambda: len(fake.starts("bad")) >= before + 2
             and job_of(s, "bad").next_run_time > due,
             timeout_s=30, what="two probes at the new rate", interval_s=0.01)
    assert on_grid(job_of(s, "bad").next_run_time - due, 2.5)


def test_a_manual_quarantine_changes_the_rate_at_the_next_window(
        tmp_path: Path, store: Store, make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"e": "img"},
                          schedules="terminal: 1h, jitter_s: 0, quarantined_factor: 4")
    last = seed(store, cat, "e", ago_s=60).started_at
    s = make(cat)
    s.start()
    assert job_of(s, "e").trigger.interval_length == 3600
    # e.g. `envcheck quarantine add` from another process: no result, only a transition
    assert set_quarantine_by_id(store, "e", add=True, actor="test", reason="suspicious")
    assert s.close_window() is None  # nothing to assess, but the rate follows
    job = job_of(s, "e")
    assert job.trigger.interval_length == 4 * 3600
    assert job.next_run_time == last + timedelta(hours=4)
    assert set_quarantine_by_id(store, "e", add=False, actor="test", reason="fixed")
    assert s.close_window() is None
    assert job_of(s, "e").trigger.interval_length == 3600
    assert [r.trigger for r in store.runs()] == ["seed"], "an empty window leaves no run"


def test_window_assesses_its_results(tmp_path: Path, store: Store, fake: FakeChecks,
                                     make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"x": "img-x", "y": "img-y"})
    fake.verdicts["x"] = FAIL
    cycles: list[str] = []
    s = make(cat, on_cycle=lambda: cycles.append("assessed"))
    s.start()
    assert s.close_window() is None, "nothing happened: no run, no assessment"
    assert store.runs() == []

    def probe(env_id: str) -> None:
        n = len(fake.finished)
        assert s.enqueue_now(env_id, T)
        wait_for(lambda: len(fake.finished) > n,
                 timeout_s=15.0, what=f"{env_id} to finish", interval_s=0.01)

    for env_id in ("x", "y", "x"):
        probe(env_id)
    outcome = s.close_window()
    assert outcome is not None and outcome.incident is None
    assert cycles == ["assessed"]
    moved = {t.env_id: (t.new_state, t.quarantined) for t in outcome.transitions}
    assert moved == {"x": ("broken", True), "y": ("healthy", False)}
    [run] = store.runs()
    assert (run.trigger, run.state) == ("daemon", "finished")
    assert sorted(r.env_id for r in store.results_for_run(run.id)) == ["x", "x", "y"]
    assert {r.env_id: r.quarantined for r in store.env_states()} == {"x": True, "y": False}


def test_an_incident_window_moves_nothing(tmp_path: Path, store: Store, fake: FakeChecks,
                                          make: Make) -> None:
    ids = ["p1", "p2", "p3", "p4"]
    cat = write_catalogue(tmp_path / "c.yaml", {e: f"img-{e}" for e in ids})
    s = make(cat, concurrency=2)
    s.start()

    def probe_all() -> None:
        n = len(fake.finished)
        for env_id in ids:
            s.enqueue_now(env_id, T)
        wait_for(lambda: len(fake.finished) == n + 4,
                 timeout_s=15.0, what="all four", interval_s=0.01)

    probe_all()
    first = s.close_window()
    assert first is not None and {t.new_state for t in first.transitions} == {"healthy"}
    generation = store.generation()
    for env_id in ids:  # everything that passed fails at once: the infrastructure, not them
        fake.verdicts[env_id] = FAIL
    probe_all()
    outcome = s.close_window()
    assert outcome is not None
    assert outcome.incident is not None and outcome.incident[0] == "failure_storm"
    assert outcome.transitions == []
    assert store.generation() == generation
    assert {r.state for r in store.env_states()} == {"healthy"}
    [incident] = store.incidents()
    assert incident.kind == "failure_storm"


class SlowStore(Store):
    """A store whose writes of one environment's results wait for a signal."""

    def __init__(self, store: Store, env_id: str) -> None:
        super().__init__(store.engine)
        self.env_id = env_id
        self.writing = threading.Event()
        self.go = threading.Event()

    def record(self, run_id: str, result: ProbeResult) -> int:
        if result.env_id == self.env_id:
            self.writing.set()
            assert self.go.wait(30)
        return super().record(run_id, result)


def test_a_window_closes_only_after_results_being_written(tmp_path: Path, store: Store,
                                                          fake: FakeChecks) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"w": "img"})
    slow = SlowStore(store, "w")
    s = ProbeScheduler(cat, LocalExecutor(NoRuntime()), slow, window_s=3600,
                       assessment=StoreAssessment(slow))
    s.start()
    try:
        s.enqueue_now("w", T)
        assert slow.writing.wait(10)
        closed: list[WindowOutcome | None] = []
        closer = threading.Thread(target=lambda: closed.append(s.close_window()))
        closer.start()
        closer.join(0.3)
        assert closer.is_alive(), "the window must wait for the result being written"
        slow.go.set()
        closer.join(10)
        [outcome] = closed
        assert outcome is not None
        assert [(t.env_id, t.new_state) for t in outcome.transitions] == [("w", "healthy")]
        [run] = store.runs()
        assert run.state == "finished"
        assert [r.env_id for r in store.results_for_run(run.id)] == ["w"]
    finally:
        slow.go.set()
        s.stop(10)


def test_stop_drops_the_queue_and_lets_work_in_flight_finish(
        tmp_path: Path, store: Store, fake: FakeChecks, make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"a1": "img", "a2": "img"})
    s = make(cat, concurrency=1)
    fake.hold("a1")
    s.start()
    s.enqueue_now("a1", T)
    s.enqueue_now("a2", T)
    wait_for(lambda: fake.order() == ["a1"], timeout_s=15.0, what="a1 to run", interval_s=0.01)
    stopper = threading.Thread(target=s.stop, args=(30,))
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive(), "stop waits for the probe in flight"
    assert not s.enqueue_now("a1", T), "nothing is queued while stopping"
    fake.hold("a1").set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert fake.order() == ["a1"], "queued work was dropped"
    assert s.stats.queued == 0
    [run] = store.runs()
    assert run.state == "finished"
    assert [r.env_id for r in store.results_for_run(run.id)] == ["a1"]


def test_work_outliving_the_grace_period_records_into_a_run_left_running(
        tmp_path: Path, store: Store, fake: FakeChecks, make: Make) -> None:
    cat = write_catalogue(tmp_path / "c.yaml", {"a": "img"})
    s = make(cat, concurrency=1)
    fake.hold("a")
    s.start()
    s.enqueue_now("a", T)
    wait_for(lambda: fake.order() == ["a"], timeout_s=15.0, what="a to run", interval_s=0.01)
    stopper = threading.Thread(target=s.stop, kwargs={"grace_s": 0.3})
    stopper.start()
    stopper.join(60)  # a hang guard: the grace period ends it, not the probe
    assert not stopper.is_alive(), "stop waits out its grace period, not the probe"
    assert fake.finished == [] and not fake.hold("a").is_set(), "a is still held"
    fake.hold("a").set()
    wait_for(lambda: fake.finished == ["a"], timeout_s=15.0, what="a to finish", interval_s=0.01)
    wait_for(lambda: len(store.latest_results(["a"])) == 1,
             timeout_s=15.0, what="its result", interval_s=0.01)
    runs = {run.id: run.state for run in store.runs()}
    [late] = [run_id for run_id in runs if store.results_for_run(run_id)]
    assert runs[late] == "running", "the next start marks it interrupted and assesses it"


def test_reload_swaps_jobs(tmp_path: Path, store: Store, fake: FakeChecks,
                           make: Make) -> None:
    schedules = "terminal: 1h, jitter_s: 0"
    old = write_catalogue(tmp_path / "old.yaml",
                          {"keep": "img-k", "gone": "img-g", "gone2": "img-g2"},
                          schedules=schedules)
    for env_id in ("keep", "gone", "gone2"):
        seed(store, old, env_id, ago_s=60)
    s = make(old, concurrency=1)
    fake.hold("gone")
    s.start()
    keep_next = job_of(s, "keep").next_run_time
    s.enqueue_now("gone", T)
    wait_for(lambda: fake.order() == ["gone"], timeout_s=15.0, what="gone to run", interval_s=0.01)
    s.enqueue_now("gone2", T)
    new = write_catalogue(tmp_path / "new.yaml", {"keep": "img-k", "added": "img-a"},
                          schedules=schedules)
    s.reload(new)
    assert {j.id for j in s.jobs()} == {f"keep:{T}", f"added:{T}"}
    assert s.intervals() == {("keep", T): 3600, ("added", T): 3600}
    assert job_of(s, "keep").next_run_time == keep_next, "an unchanged job keeps its timing"
    assert job_of(s, "added").next_run_time <= datetime.now(UTC) + timedelta(seconds=5)
    assert {e.id for e in store.environments()} >= {"keep", "added"}
    fake.hold("gone").set()  # in-flight work of a removed environment finishes and counts
    wait_for(lambda: "added" in fake.finished,
             timeout_s=10, what="the added environment to be probed", interval_s=0.01)
    assert "gone2" not in fake.order(), "queued work of a removed environment is dropped"
    assert [r.env_id for r in store.latest_results(["gone"])] == ["gone"]
    changed = write_catalogue(tmp_path / "changed.yaml", {"keep": "img-k", "added": "img-a"},
                              schedules="terminal: 2h, jitter_s: 0")
    s.reload(changed)
    assert job_of(s, "keep").trigger.interval_length == 7200
    assert s.intervals() == {("keep", T): 7200, ("added", T): 7200}


def test_reload_touches_only_what_changed(tmp_path: Path, store: Store, make: Make) -> None:
    def catalogue(envs: str) -> Catalogue:
        path = tmp_path / "c.yaml"
        path.write_text(textwrap.dedent("""\
            version: 1
            suites:
              s:
                defaults:
                  schedules: { terminal: 1h, dependencies: 2h, tests: null, datasource: null,
                               jitter_s: 0 }
                environments:
            """) + textwrap.indent(textwrap.dedent(envs), "      "), encoding="utf-8")
        return load_catalogue([path])

    old = catalogue("""\
        - { id: same, image: img-s }
        - { id: new-image, image: img-1 }
        - { id: new-kind, image: img-k }
        - { id: gone, image: img-g }
        """)
    for env_id in ("same", "new-image", "new-kind", "gone"):
        seed(store, old, env_id, ago_s=60)
    s = make(old)
    s.start()
    before = {j.id: j.next_run_time for j in s.jobs()}
    assert set(before) == {f"{e}:{T}" for e in ("same", "new-image", "new-kind", "gone")}
    # a row the scheduler synced before is not written again while its definition holds
    with store.engine.begin() as conn:
        conn.execute(update(ENVS).where(ENVS.c.id == "same").values(spec={"synced": "before"}))
    synced = {row.id: row for row in store.environments()}

    s.reload(catalogue("""\
        - { id: same, image: img-s }
        - { id: new-image, image: img-2 }
        - { id: new-kind, image: img-k, dependencies: { python: { pytest: '*' } } }
        - { id: added, image: img-a }
        """))
    jobs = {j.id: j.next_run_time for j in s.jobs()}
    deps = ProbeKind.DEPENDENCIES
    assert set(jobs) == {f"same:{T}", f"new-image:{T}", f"new-kind:{T}", f"new-kind:{deps}",
                         f"added:{T}"}
    for job_id in (f"same:{T}", f"new-image:{T}", f"new-kind:{T}"):
        assert jobs[job_id] == before[job_id], f"{job_id}: the same schedule keeps its timing"
    assert s.intervals()[("new-kind", deps)] == 7200
    rows = {row.id: row for row in store.environments()}
    assert rows["same"].spec == {"synced": "before"}
    assert rows["same"].last_seen > synced["same"].last_seen, "still in the catalogue"
    assert rows["new-image"].image == "img-2" and rows["new-image"].spec["image"] == "img-2"
    assert rows["new-kind"].spec["dependencies"]["python"] == {"pytest": "*"}
    assert rows["added"].first_seen == rows["added"].last_seen
    assert rows["gone"].last_seen == synced["gone"].last_seen, "dropped from the catalogue"
    assert s.catalogue.environment("new-image").image == "img-2"


# --- on the real engine ----------------------------------------------------------------------


class CountingRuntime:
    """The real runtime, counting the sandboxes open at once (in all, and per image).

    With ``hold_first``, the first that many sandboxes stay open until all of them are open
    together (an explicit rendezvous, not a race against the clock): a scheduler that uses
    its bound gets there on any machine, one that does not breaks the barrier.
    """

    def __init__(self, inner: DockerRuntime, hold_first: int = 0) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._held = threading.Barrier(hold_first) if hold_first else None
        self.rendezvous_failed = False
        self.now: Counter[str] = Counter()
        self.max_total = 0
        self.max_per_image: Counter[str] = Counter()
        self.opened = 0

    def ping(self) -> None:
        self._inner.ping()

    def image_digest(self, image: str) -> str:
        return self._inner.image_digest(image)

    def reap(self) -> int:
        return self._inner.reap()

    def sandbox(self, spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        from contextlib import contextmanager

        @contextmanager
        def counted() -> Iterator[Sandbox]:
            with self._inner.sandbox(spec) as box:
                with self._lock:
                    self.opened += 1
                    self.now[spec.image] += 1
                    self.max_total = max(self.max_total, sum(self.now.values()))
                    self.max_per_image[spec.image] = max(self.max_per_image[spec.image],
                                                         self.now[spec.image])
                    hold = self._held is not None and self.opened <= self._held.parties
                if hold:
                    assert self._held is not None
                    try:
                        self._held.wait(timeout=60)
                    except threading.BrokenBarrierError:
                        self.rendezvous_failed = True
                try:
                    yield box
                finally:
                    with self._lock:
                        self.now[spec.image] -= 1

        return counted()


class EngineSampler:
    """What the engine says: envcheck containers of this session, by image, every 20 ms."""

    def __init__(self) -> None:
        self.max_total = 0
        self.max_per_image: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._client = docker.from_env(timeout=10)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            found = self._client.api.containers(
                all=True, filters={"label": f"{LABEL_TAG}={SESSION_TAG}"})
            per_image = Counter(str(c["Image"]) for c in found)
            self.max_total = max(self.max_total, len(found))
            for image, n in per_image.items():
                self.max_per_image[image] = max(self.max_per_image[image], n)
            self.samples += 1
            self._stop.wait(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()


@pytest.mark.docker
@pytest.mark.parametrize(("concurrency", "per_image", "images"), [
    (3, None, ["healthy", "tool-missing", "workdir-readonly"]),
    (3, 1, ["healthy", "tool-missing"]),
])
def test_sandbox_bounds_on_the_engine(tmp_path: Path, store: Store, runtime: DockerRuntime,
                                      concurrency: int, per_image: int | None,
                                      images: list[str]) -> None:
    envs = {f"{image}-{i}": f"envcheck-demo/{image}:latest" for image in images
            for i in range(4)}
    cat = write_catalogue(tmp_path / "c.yaml", envs)
    bound = min(concurrency, len(images) * (per_image or concurrency))
    counting = CountingRuntime(runtime, hold_first=bound)
    s = ProbeScheduler(cat, LocalExecutor(counting), store, concurrency=concurrency,
                       assessment=StoreAssessment(store),
                       per_image=per_image, window_s=3600)
    sampler = EngineSampler()
    s.start()
    try:
        for env_id in envs:
            assert s.enqueue_now(env_id, T)
        wait_for(lambda: s.stats.completed == len(envs),
                 timeout_s=120, what="every probe", interval_s=0.01)
    finally:
        s.stop(60)
        sampler.close()
    assert counting.opened == len(envs)
    assert not counting.rendezvous_failed, "the bound is used: that many sandboxes at once"
    assert counting.max_total == bound, "the bound holds and is used"
    assert sampler.samples > 10
    assert 1 <= sampler.max_total <= bound
    if per_image is not None:
        assert max(counting.max_per_image.values()) == per_image
        assert max(sampler.max_per_image.values()) <= per_image
    assert runtime.containers(SESSION_TAG) == []
    statuses = {r.env_id.rsplit("-", 1)[0]: str(r.status) for r in store.latest_results()}
    assert statuses["healthy"] == "pass"
    assert statuses["tool-missing"] == "fail"
