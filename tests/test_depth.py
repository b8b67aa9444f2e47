"""Adaptive depth without an engine: the pure policy (``health.depth``), the health model's
runs-weighted counting, a light check that stands or escalates on a scripted sandbox, the
runs a result holds through the store, and the catalogue's depth settings."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import DEFAULT_RERUNS, AdaptiveDepth, TestSpec
from envcheck.core.depth import Depth, DepthAdvice, RunCount
from envcheck.core.errors import CatalogueError
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.states import EnvState, Observation
from envcheck.dashboard.environment import window_rates
from envcheck.feed.assess import evaluate
from envcheck.feed.depth import StoreDepth
from envcheck.health.depth import advise
from envcheck.health.sprt import HealthPolicy, KindHealth, assess_kind, wilson_interval
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.testvalidity.depth import DepthAdvisor
from envcheck.kinds.testvalidity.probe import CONFIRM, TestsProbe
from envcheck.metrics import StoreMetrics
from envcheck.store import open_store
from envcheck.store.tables.results import ResultLine
from tests.test_tests_probe import F2P, P2P, FakeRuntime, Script, healthy

T0 = datetime(2026, 3, 1, tzinfo=UTC)
KIND = ProbeKind.TESTS
DIGEST, SPEC = "sha256:a", "spec"
# Thresholds of their own, so the tests read in whole days; the defaults are asserted below.
SETTINGS = AdaptiveDepth(light_after_runs=36, light_after_s=86400.0)


def obs(status: str, at: datetime, runs: int = 9, failed: int | None = None,
        depth: Depth | None = Depth.FULL, digest: str = DIGEST, n: int = 0) -> Observation:
    return Observation(Status(status), "ok" if status == "pass" else "nondeterministic", at,
                       digest, SPEC, f"r{n}", n, runs, failed, depth)


def every_6h(seq: str, start: datetime = T0, **kw: Any) -> list[Observation]:
    """One tests probe every 6 h: ``p`` a full pass, ``l`` a light pass, ``k`` flaky."""
    out = []
    for i, c in enumerate(seq):
        at = start + timedelta(hours=6 * i)
        if c == "l":
            out.append(obs("pass", at, runs=2, depth=Depth.LIGHT, n=i, **kw))
        else:
            out.append(obs({"p": "pass", "k": "flaky", "f": "fail"}[c], at,
                           failed=None if c == "p" else 2, n=i, **kw))
    return out


def health_of(history: Sequence[Observation]) -> KindHealth:
    return assess_kind(KIND, history)


def advice(seq: str, now: datetime, quarantined: bool = False,
           settings: AdaptiveDepth | None = SETTINGS) -> DepthAdvice:
    return advise(settings, health_of(every_6h(seq)), quarantined=quarantined, now=now)


# --- the policy (pure) ---------------------------------------------------------------------


def test_the_defaults() -> None:
    # three full validations over 18 h before a light check, a full one every 14 days
    assert AdaptiveDepth() == AdaptiveDepth(light_after_runs=27, light_after_s=18 * 3600.0,
                                            full_every_s=14 * 86400.0)
    assert TestSpec(command="x").depth == "adaptive"


def test_no_evidence_or_a_fixed_depth_validates_in_full() -> None:
    assert advise(SETTINGS, None, quarantined=False, now=T0).depth is Depth.FULL
    assert advise(None, health_of(every_6h("p" * 40)), quarantined=False,
                  now=T0 + timedelta(days=10)).depth is Depth.FIXED


def test_a_new_identity_validates_in_full_for_a_day_and_36_runs() -> None:
    # 4 full probes: 36 runs, but they span 18 h only
    early = advice("pppp", T0 + timedelta(hours=19))
    assert early.depth is Depth.FULL and "clean for" in early.why
    # 5 full probes over 24 h: light
    settled = advice("ppppp", T0 + timedelta(hours=25))
    assert settled.depth is Depth.LIGHT, settled.why
    assert (settled.image_digest, settled.spec_hash) == (DIGEST, SPEC)
    # a long span is not enough without the runs
    few = advise(AdaptiveDepth(light_after_runs=100), health_of(every_6h("ppppp")),
                 quarantined=False, now=T0 + timedelta(days=2))
    assert few.depth is Depth.FULL and "45 of 100 clean runs" in few.why


def test_a_light_advice_holds_only_for_its_identity() -> None:
    light = advice("ppppp", T0 + timedelta(hours=25))
    assert light.for_identity(DIGEST, SPEC) is light
    moved = light.for_identity("sha256:b", SPEC)
    assert moved.depth is Depth.FULL and "new image digest" in moved.why
    assert light.for_identity(DIGEST, "other").depth is Depth.FULL
    assert light.for_identity(None, SPEC).depth is Depth.FULL


def test_light_checks_count_runs_but_a_full_validation_comes_every_14_days() -> None:
    seq = "ppppp" + "l" * (4 * 13)  # a day in full, then 13 days of light checks
    last = T0 + timedelta(hours=6 * (len(seq) - 1))
    assert advice(seq, last + timedelta(hours=6)).depth is Depth.LIGHT
    due = advice(seq, T0 + timedelta(days=15))
    assert due.depth is Depth.FULL and "periodic" in due.why
    assert advice(seq + "p", T0 + timedelta(days=15)).depth is Depth.LIGHT


@pytest.mark.parametrize(("seq", "quarantined", "words"), [
    ("ppppp", True, "quarantined"),
    ("pppppkk", False, "suspect: flaky"),
    ("pppppf", False, "suspect: degraded"),
    # the failure is outweighed by the SPRT, but the clean streak starts again after it
    ("pppppfppp", False, "27 of 36 clean runs"),
])
def test_anything_but_a_long_clean_streak_validates_in_full(seq: str, quarantined: bool,
                                                            words: str) -> None:
    got = advice(seq, T0 + timedelta(hours=6 * len(seq)), quarantined=quarantined)
    assert got.depth is Depth.FULL and words in got.why, got.why
    assert advice("ppppp", T0 + timedelta(days=2)).depth is Depth.LIGHT


def test_the_clean_streak_must_span_the_time_too() -> None:
    seq = "pppppfpp"  # clean again from 36 h on: 18 runs, 12 h at the next probe
    settings = AdaptiveDepth(light_after_runs=18, light_after_s=86400.0)
    got = advice(seq, T0 + timedelta(hours=48), settings=settings)
    assert got.depth is Depth.FULL and "clean for 12.0h of 1.0d" in got.why, got.why
    assert advice(seq, T0 + timedelta(hours=60), settings=settings).depth is Depth.LIGHT


def test_a_failure_not_yet_outweighed_validates_in_full() -> None:
    # healthy again (LLR below 0) but not back at the SPRT's lower bound
    history = [*every_6h("ppppp"), obs("fail", T0 + timedelta(days=2), runs=1, n=9),
               obs("pass", T0 + timedelta(days=2, hours=1), runs=9, n=10)]
    health = health_of(history)
    assert health.state is EnvState.HEALTHY and health.llr > HealthPolicy().lower
    got = advise(AdaptiveDepth(light_after_runs=1, light_after_s=1), health,
                 quarantined=False, now=T0 + timedelta(days=3))
    assert got.depth is Depth.FULL and "has not decided healthy" in got.why


# --- runs, not probes ----------------------------------------------------------------------


def test_a_probe_weighs_its_runs() -> None:
    policy = HealthPolicy()
    full = health_of([obs("pass", T0, runs=9)])
    assert (full.passes, full.failures, full.runs) == (9, 0, 9)
    assert full.llr == pytest.approx(9 * policy.pass_step)
    light = health_of([obs("pass", T0, runs=2, depth=Depth.LIGHT)])
    assert (light.runs, light.llr) == (2, pytest.approx(2 * policy.pass_step))
    assert light.full_at is None and full.full_at == T0
    single = health_of([obs("pass", T0, runs=1, depth=None)])  # another kind, or stored before
    assert single.runs == 1 and single.full_at == T0


def test_a_failing_result_is_one_failure_step_its_runs_counted() -> None:
    policy = HealthPolicy()
    got = health_of([obs("fail", T0, runs=9, failed=3)])
    assert (got.passes, got.failures) == (6, 3)
    assert got.llr == pytest.approx(policy.fail_step) and got.state is EnvState.DEGRADED
    assert got.wilson == wilson_interval(3, 9)


def test_recovery_counts_clean_results_not_runs() -> None:
    bad = every_6h("ff") + [obs("pass", T0 + timedelta(days=1, hours=i), runs=9, n=10 + i)
                            for i in range(14)]
    assert health_of(bad).state.bad  # 14 clean probes of 9 runs: not yet
    bad.append(obs("pass", T0 + timedelta(days=2), runs=9, n=30))
    assert health_of(bad).state is EnvState.HEALTHY


def test_run_counts_from_details_and_columns() -> None:
    said = {"depth": {"mode": "light", "runs": 2, "failed_runs": 0}}
    assert RunCount.of(Status.PASS, said) == RunCount(2, 0, Depth.LIGHT)
    assert RunCount.of(Status.FAIL, {}) == RunCount(1, 1)
    # a failing result holds a failed run whatever it says; never more than its runs
    assert RunCount.of(Status.FLAKY, {"depth": {"runs": 3, "failed_runs": 0}}).failed == 1
    assert RunCount.of(Status.FAIL, {"depth": {"runs": 3, "failed_runs": 7}}).failed == 3
    assert RunCount.stored(Status.PASS, None, None, None) == RunCount(1, 0)
    assert RunCount.stored(Status.PASS, 9, 0, "full") == RunCount(9, 0, Depth.FULL)


def test_window_rates_count_runs() -> None:
    def line(status: str, runs: int | None, failed: int | None) -> ResultLine:
        return ResultLine(id=1, run_id="r", env_id="e", kind="tests", status=status,
                          reason="ok", summary="", started_at=T0, duration_s=1.0,
                          spec_hash=SPEC, runs=runs, failed_runs=failed)
    rates = window_rates([line("pass", 9, 0), line("pass", 2, 0), line("flaky", 17, 3),
                          line("fail", None, None), line("error", 9, 9)])
    failed, runs, low, high = rates["tests"]
    assert (failed, runs) == (4, 29) and (low, high) == wilson_interval(4, 29)


# --- the probe: a light check stands, or escalates ------------------------------------------


def probe_with(script: Script, advice: DepthAdvice | None, digest: str = DIGEST,
                **tests: Any) -> ProbeResult:
    spec = {"command": "run {tests}", "fail_to_pass": F2P, "pass_to_pass": P2P,
            "oracle": {"path": "/opt/oracle.sh"}, **tests}
    env = Environment(id="e", image="i", suite="s", tests=TestSpec.model_validate(spec))
    services = {DepthAdvisor: DepthAdvisor(lambda e: advice)}
    with ExitStack() as stack:
        ctx = ProbeContext(env, "run", FakeRuntime(script), digest, stack, services)
        return TestsProbe().run(ctx)


def light_for(spec_hash: str) -> DepthAdvice:
    return DepthAdvice(Depth.LIGHT, "healthy for a long while", DIGEST, spec_hash)


def spec_hash(**tests: Any) -> str:
    spec = {"command": "run {tests}", "fail_to_pass": F2P, "pass_to_pass": P2P,
            "oracle": {"path": "/opt/oracle.sh"}, **tests}
    return Environment(id="e", image="i", suite="s",
                       tests=TestSpec.model_validate(spec)).spec_hash(KIND)


def test_a_light_check_runs_the_negative_control_and_one_shuffled_positive_run() -> None:
    script = Script()
    result = probe_with(script, light_for(spec_hash()))
    assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    assert [fixed for fixed, _ in script.runs] == [False, True]
    declared = tuple(F2P + P2P)
    assert script.runs[0][1] == declared and script.runs[1][1] != declared
    assert result.details["depth"] == {"mode": "light", "why": "healthy for a long while",
                                       "runs": 2, "failed_runs": 0}
    assert "(a light check)" in result.summary
    assert RunCount.of(result.status, result.details) == RunCount(2, 0, Depth.LIGHT)


def test_a_doubt_escalates_a_light_check_to_the_whole_protocol() -> None:
    def coin(fixed: bool, order: Sequence[str], n: int) -> dict[str, Any]:
        return {**healthy(fixed, order, n), P2P[1]: n != 1}  # fails in the light run only
    script = Script(behaviour=coin)
    result = probe_with(script, light_for(spec_hash()))
    assert (result.status, result.reason) == (Status.FLAKY, Reason.NONDETERMINISTIC)
    depth = result.details["depth"]
    assert depth["mode"] == "full" and depth["why"].startswith("escalated from a light check")
    assert P2P[1] in depth["why"]
    # every rerun, then the confirmation of the failing order (which passes: random); none
    # when a later rerun drew the light run's shuffled order again and passed (the same phase
    # and order gave both outcomes already)
    repeated = script.runs[1] in script.runs[2:1 + DEFAULT_RERUNS]
    assert len(script.runs) == 1 + DEFAULT_RERUNS + (not repeated) == depth["runs"]
    assert script.runs[2][1] == tuple(F2P + P2P)  # escalated: the declared order runs next
    assert depth["failed_runs"] == 1


def test_an_order_dependent_test_escalates_to_confirmation() -> None:
    victim, polluter = P2P[0], P2P[1]

    def ordered(fixed: bool, order: Sequence[str], n: int) -> dict[str, Any]:
        return {**healthy(fixed, order, n), victim: order.index(victim) < order.index(polluter)}
    script = Script(behaviour=ordered)
    result = probe_with(script, light_for(spec_hash()))
    if result.details["depth"]["mode"] == "light":  # the light run's shuffle kept the order
        assert result.status is Status.PASS
        return
    assert (result.status, result.reason) == (Status.FLAKY, Reason.ORDER_DEPENDENT)
    assert len(script.runs) == 1 + DEFAULT_RERUNS + 2 * CONFIRM


@pytest.mark.parametrize(("advice", "digest", "tests", "mode"), [
    (None, DIGEST, {}, "full"),  # no advice: the whole protocol
    ("light", "sha256:new", {}, "full"),  # a new digest since the evidence
    ("light", DIGEST, {"depth": "fixed"}, "fixed"),  # pinned by the catalogue
])
def test_the_whole_protocol_unless_a_light_check_fits(advice: str | None, digest: str,
                                                      tests: dict[str, Any], mode: str) -> None:
    script = Script()
    given = light_for(spec_hash(**tests)) if advice else None
    result = probe_with(script, given, digest, **tests)
    assert result.status is Status.PASS
    assert len(script.runs) == 1 + DEFAULT_RERUNS
    assert result.details["depth"]["mode"] == mode and result.details["depth"]["runs"] == 9


def test_an_advisor_that_fails_costs_depth_not_the_probe() -> None:
    def broken(env: Environment) -> DepthAdvice | None:
        raise RuntimeError("store gone")
    assert DepthAdvisor(broken).advice(Environment(id="e", image="i", suite="s")) is None


# --- through the store ---------------------------------------------------------------------


def result(status: Status, at: datetime, details: dict[str, Any], reason: Reason = Reason.OK,
           digest: str = DIGEST) -> ProbeResult:
    return ProbeResult(env_id="e", kind=KIND, status=status, reason=reason, summary="s",
                       duration_s=1.0, image_digest=digest, spec_hash=SPEC, started_at=at,
                       details=details)


def depth(mode: str, runs: int, failed: int = 0) -> dict[str, Any]:
    return {"depth": {"mode": mode, "why": "w", "runs": runs, "failed_runs": failed}}


def test_the_store_keeps_the_runs_and_the_advice_follows_them(store_url: str) -> None:
    env = Environment(id="e", image="i", suite="s", tests=TestSpec(command="x",
                                                                   fail_to_pass=["t"]))
    now = T0 + timedelta(days=2)
    with open_store(store_url) as store:
        store.sync_environments([env])
        run = store.start_run("cli", [])
        for i in range(5):
            store.record(run, result(Status.PASS, T0 + timedelta(hours=6 * i),
                                     depth("full", 9)))
        store.record(run, result(Status.PASS, T0 + timedelta(hours=30), depth("light", 2)))
        store.record(run, result(Status.PASS, T0 + timedelta(hours=31), {}))  # stored before
        got = store.observations("e")
        assert [(o.runs, o.failed_runs, o.depth) for _, o in got][:2] == [
            (1, 0, None), (2, 0, Depth.LIGHT)]
        evaluate(store, [env], now=now)
        state = store.env_state("e")
        assert state is not None and state.kinds["tests"]["passes"] == 45 + 2 + 1
        advised = StoreDepth(store, FixedClock(now)).advice(env)
        assert advised is not None and advised.depth is Depth.LIGHT, advised
        assert advised.image_digest == DIGEST
        fixed = env.model_copy(update={"tests": env.tests.model_copy(update={"depth": "fixed"})})
        assert StoreDepth(store, FixedClock(now)).advice(fixed) == DepthAdvice(
            Depth.FIXED, "fixed depth (tests.depth: fixed)")
        clock = FixedClock(now)
        for i, words in enumerate(("suspect: degraded", "quarantined")):
            store.record(run, result(Status.FLAKY, now + timedelta(hours=i),
                                     depth("full", 17, 3), Reason.NONDETERMINISTIC))
            evaluate(store, [env], now=now)
            after = StoreDepth(store, clock).advice(env)
            assert after is not None and after.depth is Depth.FULL and words in after.why


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        pass


# --- the catalogue -------------------------------------------------------------------------


@pytest.mark.parametrize(("tests", "where", "words"), [
    ("{command: x, depth: sometimes}", "tests.depth", "'adaptive' or 'fixed'"),
    ("{command: x, adaptive: {light_after_runs: 0}}", "tests.adaptive.light_after_runs",
     "greater than or equal to 1"),
    ("{command: x, adaptive: {full_every_s: soon}}", "tests.adaptive.full_every_s",
     "not a duration"),
    ("{command: x, adaptive: {light_every: 1d}}", "tests.adaptive.light_every", "unknown key"),
])
def test_bad_depth_settings_name_file_line_and_key(tmp_path: Path, tests: str, where: str,
                                                   words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"version: 1\nsuites:\n  s:\n    environments:\n      - id: a\n"
                    f"        image: i\n        tests: {tests}\n")
    with pytest.raises(CatalogueError) as caught:
        load_catalogue([path])
    text = str(caught.value)
    assert f"{path}:7" in text and where in text and words in text, text


def test_depth_settings_from_suite_defaults_and_outside_the_spec_hash(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: 1\nsuites:\n  s:\n    defaults:\n      tests: {command: x, "
                    "adaptive: {light_after_s: 2d, full_every_s: 7d}}\n    environments:\n"
                    "      - {id: a, image: i}\n      - {id: b, image: i, tests: {command: x, "
                    "depth: fixed}}\n")
    catalogue = load_catalogue([path])
    a, b = catalogue.environment("a"), catalogue.environment("b")
    assert a.tests is not None and b.tests is not None
    assert (a.tests.depth, a.tests.adaptive.light_after_s, a.tests.adaptive.full_every_s) == (
        "adaptive", 2 * 86400.0, 7 * 86400.0)
    assert b.tests.depth == "fixed"
    assert a.spec_hash(KIND) == a.model_copy(update={"tests": a.tests.model_copy(
        update={"depth": "fixed", "adaptive": AdaptiveDepth()})}).spec_hash(KIND)


def test_the_metrics_count_runs_by_depth(tmp_path: Path) -> None:
    env = Environment(id="e", image="i", suite="s", tests=TestSpec(command="x",
                                                                   fail_to_pass=["t"]))
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        store.sync_environments([env])
        metrics = StoreMetrics(store)  # counts what is stored from here on
        run = store.start_run("cli", [])
        store.record(run, result(Status.PASS, T0, depth("full", 9)))
        store.record(run, result(Status.PASS, T0 + timedelta(hours=6), depth("light", 2)))
        store.record(run, result(Status.PASS, T0 + timedelta(hours=12), depth("light", 2)))
        store.record(run, ProbeResult(env_id="e", kind=ProbeKind.TERMINAL, status=Status.PASS,
                                      reason=Reason.OK, summary="s", duration_s=1.0))
        got = {(s.labels["kind"], s.labels["depth"]): s.value
               for f in text_string_to_metric_families(metrics.render().decode())
               for s in f.samples if s.name == "envcheck_probe_runs_total"}
    assert got == {("tests", "full"): 9, ("tests", "light"): 4, ("terminal", ""): 1}
