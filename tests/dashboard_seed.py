"""A small fleet with two days of realistic history, for the dashboard's tests.

Written through envcheck's own functions: catalogue models, ``Store.record`` of ProbeResults
whose evidence and details have the shapes the real probes give (the tests probe's runs and
flaky tests; the data-source probe's reports come from the real ``DataSourceChecker`` sampling
HTTP servers on 127.0.0.1 and ``combine``), ``envcheck.feed.assess.evaluate`` after every cycle, an
infrastructure incident, and a quarantine by hand. A training run's rollouts of the last
twelve hours (``Store.record_rollouts``) and their evidence as the health model writes it
(``env_state.rollouts``): :data:`ROLLOUT_FLAGGED` fails on the cluster more and more,
:data:`ROLLOUT_SOLVED` scores 1 every time.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
import zlib
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import update

from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.models import Environment, Suite
from envcheck.catalogue.probe_specs import (
    TRICK_NAMES,
    Adversarial,
    DependencySpec,
    Strength,
    TestSpec,
)
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.core.rollouts import Outcome, Rollout
from envcheck.feed.assess import evaluate, set_quarantine_by_id
from envcheck.kinds.adversarial.controls import Attempted
from envcheck.kinds.datasource.probe import DataSourceChecker, combine
from envcheck.kinds.strength.report import details as strength_details
from envcheck.kinds.strength.verdict import Outcome as Control
from envcheck.kinds.strength.verdict import Played, StrengthOutcome, Survivor
from envcheck.store import Store, open_store
from envcheck.store.tables.runs import CheckRun
from tests.http_server import MisbehavingServer, fail, ok

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
CYCLES = 36  # hourly
INCIDENT_CYCLE = 20
DRIFT_FROM = 30  # the weather API renames a field from this cycle on
F2P = ("tests/test_fix.py::test_bug_fixed",)
P2P = ("tests/test_api.py::test_list", "tests/test_api.py::test_get",
       "tests/test_cache.py::test_mean_cache_warm", "tests/test_registry.py::test_starts_empty")
FLAKY_TEST = "tests/test_cache.py::test_mean_cache_warm"
ORDER_TEST = "tests/test_registry.py::test_starts_empty"
WEATHER = {"city": "Paris", "temp": 21.5, "tags": ["a"]}
DRIFTED = {"city": "Paris", "temperature": 21.5, "tags": ["a"]}
PRICES = {"sku": "A1", "price": 9.5}

# env id -> (suite, profile)
FLEET: dict[str, tuple[str, str]] = {
    **{f"swe-healthy-{i}": ("swe-train", "healthy") for i in range(1, 7)},
    "swe-flaky-tests": ("swe-train", "flaky-tests"),
    "swe-order-dependent": ("swe-train", "order-dependent"),
    "swe-noop-reward": ("swe-train", "noop"),
    "swe-rebuilt": ("swe-train", "rebuilt"),
    "swe-manual": ("swe-train", "healthy"),
    "swe-weather": ("swe-train", "weather"),
    **{f"term-ok-{i}": ("terminal-eval", "healthy") for i in range(1, 5)},
    "term-slow-shell": ("terminal-eval", "degraded"),
    "term-tool-missing": ("terminal-eval", "broken"),
    "term-prices": ("terminal-eval", "prices"),
    "term-engine-down": ("terminal-eval", "infra"),
    "term-unchecked": ("terminal-eval", "unchecked"),
}
SUITES = {"swe-train": ("SWE tasks for RL training", False),
          "terminal-eval": ("terminal tasks for evaluation", True)}
ROLLOUT_HOURS = 12  # the cycles' last hours
ROLLOUT_FLAGGED = "term-slow-shell"  # degraded already: flagging it moves no count
ROLLOUT_SOLVED = "swe-healthy-3"


def environments() -> list[Environment]:
    out = []
    for env_id, (suite, profile) in FLEET.items():
        spec: dict[str, Any] = {"id": env_id, "suite": suite, "image": f"fleet/{env_id}:1",
                                "tools": ["git", "python3"]}
        if suite == "swe-train" and profile != "weather":
            controls = Adversarial() if profile == "healthy" else None
            spec["tests"] = TestSpec(command="pytest -q {tests}", fail_to_pass=list(F2P),
                                     pass_to_pass=list(P2P), adversarial=controls)
        if env_id == "swe-healthy-1":
            spec["dependencies"] = DependencySpec(python={"requests": ">=2"})
        if profile == "weather":
            spec["data_sources"] = ["weather-api"]
        if profile == "prices":
            spec["data_sources"] = ["prices-api"]
        out.append(Environment(**spec))
    return out


def suites(envs: list[Environment]) -> list[Suite]:
    return [Suite(id=s, description=d, allow_degraded=a, file=f"probes/{s}.yaml",
                  environment_ids=tuple(e.id for e in envs if e.suite == s))
            for s, (d, a) in SUITES.items()]


def digest(env_id: str, cycle: int) -> str:
    version = "v2" if env_id == "swe-rebuilt" and cycle >= 18 else "v1"
    return "sha256:" + f"{env_id}-{version}".encode().hex().ljust(64, "0")[:64]


# --- results shaped like the real probes' ------------------------------------------------------


def terminal(env: Environment, cycle: int, profile: str, at: datetime) -> ProbeResult:
    script = "bash -l -c 'command -v git python3; test -w /workspace; echo envcheck:ready'"
    status, reason, summary = Status.PASS, Reason.OK, "login and interactive shells work"
    exit_code, head = 0, "/usr/bin/git\n/usr/bin/python3\nenvcheck:ready\n"
    if profile == "broken" or (profile == "rebuilt" and cycle < 18 and cycle >= 10):
        status, reason, exit_code = Status.FAIL, Reason.TOOL_MISSING, 1
        summary = "tool(s) missing on PATH: git"
        head = "python3: /usr/bin/python3\ngit: not found\n"
    elif profile == "degraded" and cycle == CYCLES - 1:
        status, reason = Status.FAIL, Reason.SHELL_SLOW
        summary = "login shell took 4.2 s (limit 2 s)"
    elif profile == "infra":
        return ProbeResult(env.id, ProbeKind.TERMINAL, Status.ERROR, Reason.ENGINE_UNREACHABLE,
                           "the Docker engine did not answer: connection refused", 0.01,
                           None, env.spec_hash(ProbeKind.TERMINAL), at)
    if cycle == INCIDENT_CYCLE and profile == "healthy":
        status, reason, exit_code = Status.FAIL, Reason.CONTAINER_START_FAILED, 125
        summary, head = "the container exited at once: no space left on device", ""
    evidence = (CommandEvidence(script, exit_code, 0.11, output_head=head,
                                output_bytes=len(head)),
                CommandEvidence("bash -i (pty): echo $((6*7))", 0, 0.35,
                                output_head="$ echo $((6*7))\r\n42\r\n", output_bytes=24))
    return ProbeResult(env.id, ProbeKind.TERMINAL, status, reason, summary,
                       0.9 + random.Random(cycle).random() / 5, digest(env.id, cycle),
                       env.spec_hash(ProbeKind.TERMINAL), at, evidence)


def _run(label: str, phase: str, not_passed: list[str], seed: int | None = None,
         problem: str | None = None) -> dict[str, Any]:
    return {"label": label, "phase": phase, "seed": seed,
            "exit_code": 1 if not_passed else 0, "problem": problem,
            "not_passed": not_passed, "start_s": 0.31, "duration_s": 0.74}


def tests(env: Environment, cycle: int, profile: str, at: datetime) -> ProbeResult:
    """Details as ``envcheck.kinds.testvalidity.probe`` writes them: runs, flaky tests, problems."""
    rng = random.Random(zlib.crc32(f"{env.id}/{cycle}".encode()))  # the same every run
    runs = [_run("negative control", "negative", list(F2P))]
    flaky: dict[str, dict[str, Any]] = {}
    problems: list[dict[str, Any]] = []
    status, reason = Status.PASS, Reason.OK
    summary = "9 runs agree: fail-to-pass tests fail without the oracle and pass after it"
    if profile == "noop":
        runs = [_run("negative control", "negative", [])]
        problems = [{"reason": "f2p_passes_before_oracle", "detail": "fail-to-pass test(s) pass "
                     f"without the oracle: {F2P[0]}", "tests": list(F2P)}]
        status, reason = Status.FAIL, Reason.F2P_PASSES_BEFORE_ORACLE
        summary = problems[0]["detail"]
    else:
        bad = (profile == "flaky-tests" and cycle % 3 == 0) or \
              (profile == "order-dependent" and cycle % 4 == 1)
        for i in range(8):
            label = f"positive run {i + 1}/8" + (" (shuffled)" if i else "")
            failed = []
            if bad and profile == "flaky-tests" and rng.random() < 0.35:
                failed = [FLAKY_TEST]
            if bad and profile == "order-dependent" and i % 2 == 1:
                failed = [ORDER_TEST]
            runs.append(_run(label, "positive", failed, rng.getrandbits(32) if i else None))
        if bad and profile == "flaky-tests" and not any(r["not_passed"] for r in runs[1:]):
            runs[3]["not_passed"], runs[3]["exit_code"] = [FLAKY_TEST], 1
        if bad and profile == "order-dependent":
            for k in range(1, 5):
                runs.append(_run(f"confirm failing positive run 2/8 (shuffled) ({k}/4)",
                                 "positive", [ORDER_TEST], runs[2]["seed"]))
                runs.append(_run(f"confirm passing positive run 1/8 ({k}/4)", "positive", []))
        names = [t for t in P2P if any(t in r["not_passed"] for r in runs)]
        for t in names:
            passed = sum(t not in r["not_passed"] for r in runs)
            flaky[t] = {"kind": "order" if profile == "order-dependent" else "random",
                        "passed": passed, "runs": len(runs)}
        if flaky:
            status = Status.FLAKY
            reason = Reason.ORDER_DEPENDENT if profile == "order-dependent" else \
                Reason.NONDETERMINISTIC
            shown = ", ".join(f"{t} ({v['passed']}/{v['runs']} passed)" for t, v in flaky.items())
            how = "only in some test orders" if profile == "order-dependent" else "at random"
            summary = f"{len(flaky)} test(s) fail {how}: {shown}"
    details: dict[str, Any] = {"flaky_tests": sorted(flaky)}
    if flaky:
        details["flaky"] = flaky
    details.update(problems=problems, runs=runs, container_start_s=round(0.31 * len(runs), 3),
                   reruns=8, shuffle=True, oracle=True)
    if env.adversarial() is not None and status is Status.PASS:  # every trick refused
        refused = f"refused: fail-to-pass test(s) did not pass (exit 1): {F2P[0]}"
        details["adversarial"] = {"tricks": [Attempted(n, False, refused).to_json()
                                             for n in TRICK_NAMES],
                                  "rewarded": [], "require": False, "could_not_act": []}
        details["strength"] = STRENGTH
    pytest_out = "".join(f"{t} {'FAILED' if t in runs[-1]['not_passed'] else 'PASSED'}\n"
                         for t in (*F2P, *P2P))
    evidence = (
        CommandEvidence("cd /workspace && pytest -q -p no:cacheprovider --junitxml="
                        "/tmp/envcheck-junit.xml " + " ".join((*F2P, *P2P)), 1, 0.74,
                        output_head="============ test session starts ============\n"
                        + pytest_out[:200], output_tail="1 failed, 4 passed in 0.41s\n",
                        output_bytes=4200, truncated=True),
        CommandEvidence("sh /var/tmp/envcheck/oracle.sh", 0, 0.05, output_head="patched 1 file\n",
                        output_bytes=15))
    return ProbeResult(env.id, ProbeKind.TESTS, status, reason, summary, 6.5 + rng.random(),
                       digest(env.id, cycle), env.spec_hash(ProbeKind.TESTS), at, evidence,
                       details)


def dependencies(env: Environment, cycle: int, at: datetime) -> ProbeResult:
    evidence = (CommandEvidence("python3 -m pip list --format=json", 0, 0.42,
                                output_head='[{"name": "requests", "version": "2.32.3"}]',
                                output_bytes=44),)
    return ProbeResult(env.id, ProbeKind.DEPENDENCIES, Status.PASS, Reason.OK,
                       "1 declared package satisfied, imports work", 1.1, digest(env.id, cycle),
                       env.spec_hash(ProbeKind.DEPENDENCIES), at, evidence,
                       {"packages": {"requests": "2.32.3"}})


class _FastClock:
    """The seeded cycle's time for shapes; sleeps (retry backoff) are skipped."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self.at = T0

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def sleep(self, seconds: float) -> None:
        self.skipped += seconds

    def now(self) -> datetime:
        return self.at


def _strength() -> dict[str, Any]:
    """The wrong-fix controls' details as a probe writes them: two mutants killed, one
    confirmed survivor, one not distinguished from the fix, one incompetent."""
    def mutant(op: str, outcome: Control, survivor: Survivor | None = None) -> Played:
        why = {Survivor.CONFIRMED: "`pkg/mod.py:f` returned 1 in test_f where under the gold "
                                   "patch it returned 2",
               Survivor.NOT_DISTINGUISHED: "the same behaviour as the gold patch in 4 recorded "
                                           "call(s) of 1 changed function(s)"}
        return Played(f"{op} at line 3", outcome, "", "pkg/mod.py", 3, op, "--- a\n+++ b\n",
                      survivor=survivor, why=why.get(survivor, "") if survivor else "")
    outcome = StrengthOutcome([
        mutant("comparison_flip", Control.KILLED), mutant("early_return", Control.KILLED),
        mutant("branch_removed", Control.SURVIVED, Survivor.CONFIRMED),
        mutant("argument_dropped", Control.SURVIVED, Survivor.NOT_DISTINGUISHED),
        mutant("call_unwrapped", Control.INCOMPETENT)])
    outcome.generated = {"mutants": 5, "tried": {"comparison_flip": 2, "early_return": 1,
                                                 "branch_removed": 1, "argument_dropped": 1,
                                                 "call_unwrapped": 1},
                         "rejected": {"comparison_flip: same as another mutant": 1}}
    return strength_details(outcome, Strength(min_competent=2))


STRENGTH = _strength()


@dataclass
class Seeded:
    envs: list[Environment]
    failing: dict[str, list[int]] = field(default_factory=dict)  # env -> failing result ids
    runs: list[str] = field(default_factory=list)


def seed(store: Store) -> Seeded:
    envs = environments()
    store.sync_suites(suites(envs))
    store.sync_environments(envs)
    out = Seeded(envs)
    with MisbehavingServer() as api:
        sources = {
            "weather-api": DataSource(id="weather-api", url=api.url("/weather"), samples=2,
                                      retries=0, latency_budget_ms=250.0,
                                      connect_timeout_s=1.0, read_timeout_s=2.0),
            "prices-api": DataSource(id="prices-api", url=api.url("/prices"), samples=4,
                                     retries=0, latency_budget_ms=500.0,
                                     connect_timeout_s=1.0, read_timeout_s=2.0),
        }
        clock = _FastClock()
        checker = DataSourceChecker(sources.values(), store, clock=clock,
                                    rng=random.Random(3), shape_write_interval_s=0.0)
        for cycle in range(CYCLES):
            at = clock.at = T0 + timedelta(hours=cycle)
            api.route("/weather", default=ok(DRIFTED if cycle >= DRIFT_FROM else WEATHER))
            prices = [fail(503)] * (2 if cycle % 5 in (1, 3) else 0)
            api.route("/prices", *prices, default=ok(PRICES))
            run_id = store.start_run("daemon", ["probes/fleet.yaml"])
            out.runs.append(run_id)
            with store.engine.begin() as conn:  # the run as the daemon would have started it
                conn.execute(update(CheckRun).where(CheckRun.id == run_id)  # type: ignore[arg-type]
                             .values(started_at=at))
            reports = {}
            for i, env in enumerate(envs):
                profile = FLEET[env.id][1]
                if profile == "unchecked":
                    continue
                when = at + timedelta(seconds=10 * i)
                found = [terminal(env, cycle, profile, when)]
                if env.dependencies is not None:
                    found.append(dependencies(env, cycle, when + timedelta(seconds=2)))
                if env.tests is not None and profile != "infra":
                    found.append(tests(env, cycle, profile, when + timedelta(seconds=3)))
                for source_id in env.data_sources:
                    if source_id not in reports:
                        reports[source_id] = checker.report(run_id, sources[source_id])
                    verdict = combine([reports[source_id]])
                    found.append(ProbeResult(
                        env.id, ProbeKind.DATASOURCE, verdict.status, verdict.reason,
                        verdict.summary, 0.2, digest(env.id, cycle),
                        env.spec_hash(ProbeKind.DATASOURCE), when + timedelta(seconds=5),
                        verdict.evidence, verdict.details))
                for result in found:
                    result_id = store.record(run_id, result)
                    if result.status in (Status.FAIL, Status.FLAKY):
                        out.failing.setdefault(env.id, []).append(result_id)
            if cycle == INCIDENT_CYCLE:
                store.record_incident(run_id, "failure_storm", 13, 16,
                                      "13 of 16 probes that passed before failed at once")
            store.finish_run(run_id)
            evaluate(store, envs, now=at + timedelta(minutes=10))
    set_quarantine_by_id(store, "swe-manual", add=True, actor="alice",
                         reason="reward hacking reported in run 4711",
                         now=T0 + timedelta(hours=CYCLES, minutes=5))
    rollouts(store)
    return out


def rollout_outcomes(env_id: str, hour: int) -> dict[Outcome, int]:
    """What the training run saw of ``env_id`` in the hour ``hour`` of the rollouts (0 the
    oldest): 40 rollouts, the flagged one losing more and more sandboxes."""
    if env_id == ROLLOUT_SOLVED:
        return {Outcome.OK: 40}
    failing = 1 if hour < ROLLOUT_HOURS // 2 else 2 + hour
    return {Outcome.OK: 38 - failing, Outcome.SANDBOX_LOST: failing - failing // 3,
            Outcome.VERIFIER_TIMEOUT: failing // 3, Outcome.AGENT_TIMEOUT: 2}


def rollouts(store: Store) -> None:
    """The rollouts of :data:`ROLLOUT_FLAGGED` and :data:`ROLLOUT_SOLVED` and their evidence."""
    first = T0 + timedelta(hours=CYCLES - ROLLOUT_HOURS)
    seq = 0
    rewards: list[float] = []  # the flagged one's
    for hour in range(ROLLOUT_HOURS):
        batch = []
        for env_id in (ROLLOUT_FLAGGED, ROLLOUT_SOLVED):
            for outcome, n in rollout_outcomes(env_id, hour).items():
                for i in range(n):
                    reward = (1.0 if env_id == ROLLOUT_SOLVED else (1.0, 0.0, 0.5)[i % 3]) \
                        if outcome is Outcome.OK else None
                    batch.append(Rollout(env_id, first + timedelta(hours=hour, minutes=i),
                                         "run-4711", seq, outcome, digest(env_id, CYCLES - 1),
                                         reward))
                    seq += 1
                    if env_id == ROLLOUT_FLAGGED and reward is not None:
                        rewards.append(reward)
        store.record_rollouts(batch)
    flagged_at = first + timedelta(hours=ROLLOUT_HOURS // 2 + 1)
    seen: Counter[str] = Counter()
    for hour in range(ROLLOUT_HOURS):
        seen.update({str(o): n for o, n in rollout_outcomes(ROLLOUT_FLAGGED, hour).items() if n})
    judged = sum(seen.values()) - seen["agent_timeout"]
    failed = judged - seen["ok"]
    store.apply(ROLLOUT_FLAGGED, "terminal-eval", {"rollouts": {
        "state": "degraded", "flagged": True, "reason": "rollout_failures",
        "detail": f"{failed} of {judged} rollouts failed on the environment against the "
                  "fleet's 0.3%", "image_digest": digest(ROLLOUT_FLAGGED, CYCLES - 1),
        "rollouts": judged, "env_failures": failed, "failure_rate": failed / judged,
        "fleet_rate": 0.003, "llr": 3.4, "flagged_at": flagged_at.isoformat(),
        "first_failure_at": first.isoformat(), "window_start": first.isoformat(), "notes": [],
        "confirmed": "cluster_only", "by_outcome": dict(seen),
        "reward": {"n": len(rewards), "mean": statistics.fmean(rewards),
                   "std": statistics.pstdev(rewards),
                   "zero_share": rewards.count(0.0) / len(rewards),
                   "one_share": rewards.count(1.0) / len(rewards)}}}, None)
    store.apply(ROLLOUT_SOLVED, "swe-train", {"rollouts": {
        "state": "healthy", "flagged": False, "reason": "ok", "detail": "",
        "image_digest": digest(ROLLOUT_SOLVED, CYCLES - 1), "rollouts": 480,
        "env_failures": 0, "failure_rate": 0.0, "fleet_rate": 0.003, "llr": -2.9,
        "flagged_at": None, "first_failure_at": None, "window_start": first.isoformat(),
        "notes": ["always_solved"], "confirmed": None, "by_outcome": {"ok": 480},
        "reward": {"n": 480, "mean": 1.0, "std": 0.0, "zero_share": 0.0, "one_share": 1.0}}},
        None)


_BUILT: dict[Path, Seeded] = {}


def sqlite_template(path: Path) -> Seeded:
    """Seed the SQLite file ``path`` once per test session (it is copied for each test)."""
    if path not in _BUILT:
        with open_store(f"sqlite:///{path}") as store:
            _BUILT[path] = seed(store)
        with closing(sqlite3.connect(path)) as conn:  # everything in the main file
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return _BUILT[path]


def copy_sqlite(source: Path, target: Path) -> str:
    """A private copy of a seeded store; returns its URL."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
    return f"sqlite:///{target}"
