"""Evidence reuse, pure parts: the advice (``health.reuse``), what a reused result weighs
(``core.depth``, ``core.states``), the catalogue's ``reprove_every``, the host samples, and the
scheduler's ledger seeing a new image digest. The real engine: tests/test_reuse_engine.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.depth import DEPTH_KEY, Depth, DepthAdvice, RunCount
from envcheck.core.errors import CatalogueError
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.states import EnvState, Observation
from envcheck.feed.assess import evaluate
from envcheck.feed.reuse import HostSamples
from envcheck.health.reuse import advise_reuse
from envcheck.health.rollouts import RolloutHealth
from envcheck.health.sprt import KindHealth, assess_kind
from envcheck.kinds.reuse import ReuseAdvisor, depth_record
from envcheck.schedule.ledger import Ledger
from envcheck.store import open_store
from envcheck.store.feed import OBSERVATION_WINDOW

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
DAY = 86400.0
T = ProbeKind.TERMINAL


def health(state: EnvState = EnvState.HEALTHY, full_ago_s: float | None = 3600.0,
           digest: str | None = "sha256:a", spec: str = "s1") -> KindHealth:
    full_at = NOW - timedelta(seconds=full_ago_s) if full_ago_s is not None else None
    return KindHealth(T, state, (digest, spec), -2.9, 20, 0, "ok", full_at=full_at)


def test_healthy_recent_evidence_is_reused_for_its_identity_only() -> None:
    advice = advise_reuse(DAY, health(), now=NOW)
    assert advice.depth is Depth.REUSED and advice.proven
    assert (advice.image_digest, advice.spec_hash) == ("sha256:a", "s1")
    assert "1.0h ago" in advice.why
    assert advice.for_identity("sha256:a", "s1") is advice
    moved = advice.for_identity("sha256:b", "s1")
    assert moved.depth is Depth.FULL and moved.why.startswith("new image digest")
    assert not moved.proven  # nothing is proven of another image
    assert advice.for_identity(None, "s1").depth is Depth.FULL
    respec = advice.for_identity("sha256:a", "s2")
    assert respec.depth is Depth.FULL and respec.why.startswith("new spec")


@pytest.mark.parametrize(("every", "kind_health", "rollouts", "why"), [
    (None, health(), None, "full every time (reprove_every: null)"),
    (DAY, None, None, "no evidence yet"),
    (DAY, health(full_ago_s=DAY + 1), None, "re-proved every 1.0d"),
    (DAY, health(full_ago_s=None), None, "no full probe of this identity"),
    (DAY, health(EnvState.DEGRADED), None, "suspect: degraded"),
    (DAY, health(EnvState.BROKEN), None, "suspect: broken"),
    (DAY, health(digest=None), None, "no image digest"),
    (DAY, health(), RolloutHealth(EnvState.FLAKY, True, "sha256:a", 40, 12, 28, 0.02,
                                         3.5), "rollout failures: "),
])
def test_anything_but_recent_healthy_evidence_is_a_full_probe(
        every: float | None, kind_health: KindHealth | None, rollouts: RolloutHealth | None,
        why: str) -> None:
    advice = advise_reuse(every, kind_health, now=NOW, rollouts=rollouts)
    assert advice.depth is Depth.FULL
    assert advice.why.startswith(why), advice.why


def test_a_full_advice_says_whether_its_identity_was_proven() -> None:
    # a periodic re-proof of a healthy identity: a slow host there is the host's
    assert advise_reuse(DAY, health(full_ago_s=2 * DAY), now=NOW).proven
    assert not advise_reuse(DAY, health(EnvState.BROKEN), now=NOW).proven


def test_a_reused_result_holds_no_run_and_moves_nothing() -> None:
    reused = DepthAdvice(Depth.REUSED, "unchanged", "sha256:a", "s1", NOW, True)
    record = depth_record(reused, failing=False)
    assert record["runs"] == 0 and record["mode"] == "reused"
    count = RunCount.of(Status.PASS, {DEPTH_KEY: record})
    assert (count.runs, count.failed, count.depth) == (0, 0, Depth.REUSED)
    assert RunCount.stored(Status.PASS, 0, 0, "reused") == RunCount(0, 0, Depth.REUSED)
    full = RunCount.of(Status.FAIL, {DEPTH_KEY: depth_record(
        DepthAdvice(Depth.FULL, "new"), failing=True)})
    assert (full.runs, full.failed) == (1, 1)

    def obs(at: int, depth: Depth | None, status: Status = Status.PASS) -> Observation:
        runs = 0 if depth is Depth.REUSED else 1
        return Observation(status, "ok", NOW + timedelta(minutes=at), "sha256:a", "s1",
                           result_id=at, runs=runs, failed_runs=0, depth=depth)

    proofs = [obs(0, None), obs(1, Depth.FULL)]
    alone = assess_kind(T, proofs)
    with_reuse = assess_kind(T, [*proofs, *(obs(i, Depth.REUSED) for i in range(2, 50))])
    assert (with_reuse.passes, with_reuse.llr) == (alone.passes, alone.llr)
    assert with_reuse.full_at == alone.full_at == NOW + timedelta(minutes=1)
    assert with_reuse.state is EnvState.HEALTHY


class Ticks:
    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> datetime:
        return NOW

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_host_samples_take_one_full_terminal_probe_per_period() -> None:
    clock = Ticks()
    samples = HostSamples(600.0, clock)
    assert samples.take() is None  # the start's probes are full: they measured the host
    clock.t += 599.0
    assert samples.take() is None
    clock.t += 1.0
    assert samples.take() is not None and samples.take() is None
    clock.t += 400.0
    samples.measured()  # a full probe measured it anyway: the period starts again
    clock.t += 599.0
    assert samples.take() is None
    assert HostSamples(None, clock).take() is None
    assert samples.taken == 1


def test_a_failing_lookup_costs_a_container_never_evidence(demo_env: Environment) -> None:
    def broken(env: Environment, kind: ProbeKind) -> DepthAdvice | None:
        raise RuntimeError("store gone")

    assert ReuseAdvisor(broken).advice(demo_env, T, "sha256:a") is None


@pytest.fixture
def demo_env(tmp_path: Path) -> Environment:
    return catalogue_env(tmp_path, "")


def catalogue_env(tmp_path: Path, defaults: str, entry: str = "") -> Environment:
    path = tmp_path / "c.yaml"
    path.write_text(f"""version: 1
suites:
  s:
    defaults: {{ {defaults} }}
    environments:
      - {{ id: e, image: 'img:1'{entry} }}
""")
    [env] = load_catalogue([path]).environments
    return env


def test_reprove_every_defaults_to_a_day_merges_per_key_and_null_pins(tmp_path: Path) -> None:
    env = catalogue_env(tmp_path, "")
    assert env.reprove_every.every(ProbeKind.TERMINAL) == DAY
    assert env.reprove_every.every(ProbeKind.DEPENDENCIES) == DAY
    assert env.reprove_every.every(ProbeKind.TESTS) is None  # never reused
    pinned = catalogue_env(tmp_path, "reprove_every: { terminal: null }",
                           ", reprove_every: { dependencies: 2h }")
    assert pinned.reprove_every.every(ProbeKind.TERMINAL) is None  # the suite pins it
    assert pinned.reprove_every.every(ProbeKind.DEPENDENCIES) == 7200.0
    # how often evidence is re-proved is not what is checked: the spec keeps its hash
    assert pinned.spec_hash(T) == env.spec_hash(T)
    with pytest.raises(CatalogueError, match=r"reprove_every\.tests"):
        catalogue_env(tmp_path, "reprove_every: { tests: 1h }")


def result(env_id: str, kind: ProbeKind, digest: str | None, at_s: float) -> ProbeResult:
    return ProbeResult(env_id, kind, Status.PASS, Reason.OK, "ok", 0.1, digest, "s",
                       NOW + timedelta(seconds=at_s))


def test_the_ledger_sees_a_new_digest_and_marks_the_other_kinds_new(tmp_path: Path) -> None:
    env = catalogue_env(tmp_path, "", ", dependencies: { executables: { git: '^git' } }")
    ledger = Ledger({env.id: env})
    ledger.seed([(env.id, "terminal", "pass", NOW, "sha256:a")])
    before: dict = {}
    assert ledger.note(result(env.id, T, "sha256:a", 10), before) == []
    assert ledger.note(result(env.id, T, None, 20), before) == []  # an error: no identity
    # a probe that began before the newest result, finishing late, changes nothing
    assert ledger.note(result(env.id, ProbeKind.DEPENDENCIES, "sha256:z", 5), before) == []
    again = ledger.note(result(env.id, T, "sha256:b", 30), before)
    assert again == [(env.id, ProbeKind.DEPENDENCIES)]
    assert ledger.new == {(env.id, ProbeKind.DEPENDENCIES)}
    assert ledger.priority(env.id, ProbeKind.DEPENDENCIES, NOW.timestamp()) < \
        ledger.priority(env.id, T, NOW.timestamp())
    assert ledger.note(result(env.id, ProbeKind.DEPENDENCIES, "sha256:b", 40), before) == []
    assert not ledger.new


def test_a_full_probe_stays_the_evidence_however_many_identity_checks_follow(
        store_url: str, tmp_path: Path) -> None:
    """The health model reads a window of results per kind (400: 33 hours of identity checks
    at the default schedule); a full probe that slid out of it is still the newest full
    probe of its identity: its time stays in the stored state while the identity holds."""
    env = catalogue_env(tmp_path, "")
    with open_store(store_url) as store:
        store.sync_suites([])
        store.sync_environments([env])
        run_id = store.start_run("test", [])
        full = ProbeResult(env.id, T, Status.PASS, Reason.OK, "ok", 0.5, "sha256:a",
                           env.spec_hash(T), NOW)
        store.record(run_id, full)
        evaluate(store, [env])
        advice = DepthAdvice(Depth.REUSED, "unchanged", "sha256:a", env.spec_hash(T), NOW,
                             True)
        for i in range(1, OBSERVATION_WINDOW + 50):
            store.record(run_id, ProbeResult(
                env.id, T, Status.PASS, Reason.OK, "evidence reused", 0.01, "sha256:a",
                env.spec_hash(T), NOW + timedelta(minutes=5 * i),
                details={DEPTH_KEY: depth_record(advice, failing=False)}))
        evaluate(store, [env])
        row = store.env_state(env.id)
        assert row is not None
        kind = KindHealth.from_json("terminal", row.kinds["terminal"])
        assert kind.state is EnvState.HEALTHY and kind.full_at == NOW
        assert (kind.passes, kind.failures) == (0, 0)  # identity checks hold no run
        later = NOW + timedelta(hours=20)
        assert advise_reuse(DAY, kind, now=later).depth is Depth.REUSED
        # another digest behind the tag: nothing of the old full probe carries over
        rebuilt = NOW + timedelta(days=2)
        store.record(run_id, ProbeResult(env.id, T, Status.PASS, Reason.OK, "ok", 0.5,
                                         "sha256:b", env.spec_hash(T), rebuilt))
        evaluate(store, [env])
        row = store.env_state(env.id)
        assert row is not None
        moved = KindHealth.from_json("terminal", row.kinds["terminal"])
        assert moved.image_digest == "sha256:b" and moved.full_at == rebuilt
