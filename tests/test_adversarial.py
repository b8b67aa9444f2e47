"""Adversarial controls: the trick library and the verdict logic (pure), and every demo-hacks
verifier attacked on the real engine (``docker``): each hole found with exactly the tricks
that work on it, the hardened verifier refusing them all, evidence reused per identity."""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envcheck.catalogue.harbor_env import harbor_parts
from envcheck.catalogue.harbor_task import read_task
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment, Limits, Timeouts
from envcheck.catalogue.probe_specs import TRICK_NAMES, Adversarial, TestSpec
from envcheck.core.errors import CatalogueError
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.dashboard.environment import adversarial_rows
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.adversarial.controls import Attempted, judge, run_controls, with_controls
from envcheck.kinds.adversarial.ledger import ControlsLedger, RecordedEvidence
from envcheck.kinds.adversarial.library import TRICKS, Trick
from envcheck.kinds.adversarial.play import TRICK_DIR, Target, could_not_act
from envcheck.kinds.adversarial.testspec import forged_junit
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.testvalidity.junit import match, parse_report
from envcheck.kinds.testvalidity.probe import TestsProbe
from envcheck.sandbox.base import Deadline
from envcheck.sandbox.build import ImageBuilder
from envcheck.sandbox.docker import DockerRuntime
from envcheck.store import open_store
from envcheck.store.views.common import StoredResult
from tests.conftest import ROOT, probe_each, probed_in_turn
from tests.test_tests_probe import FakeRuntime, Script

DEMO_HACKS = ROOT / "probes" / "demo-hacks.yaml"
HELLO = ROOT / "probes" / "harbor" / "hello-world"
ALL = set(TRICK_NAMES)

# --- the library -------------------------------------------------------------------------------


def test_every_trick_is_one_script_that_says_what_it_stands_for() -> None:
    assert list(TRICKS) == list(TRICK_NAMES)
    scripts = {p.name for p in (ROOT / "envcheck" / "kinds" / "adversarial" / "tricks").iterdir()
               if p.suffix in (".py", ".sh")}
    assert scripts == {t.script for t in TRICKS.values()}  # no script without a name
    for trick in TRICKS.values():
        assert len(trick.stands_for) > 40, trick.name
        assert trick.runner == ("python3" if trick.script.endswith(".py") else "sh")


def test_a_forged_report_names_every_test_passed() -> None:
    ids = ("tests/test_s.py::test_even", "tests/test_s.py::TestOdd::test_odd[1-a::b]", "bare")
    outcomes = match(parse_report(forged_junit(ids).encode()), ids)
    assert all(case is not None and case.passed for case in outcomes.values())


def test_target_variables_name_the_files_and_folders() -> None:
    aim = Target("/w", ("tests/a/test_x.py::test_y", "tests/a/test_x.py::T::z", "pkg.Cls.t"),
                 "/tmp/r.xml", "<x/>", ("/w/tests/a",))
    assert aim.test_files == ("tests/a/test_x.py",)
    payloads, variables = aim.payloads(), aim.variables()
    assert payloads["ENVCHECK_TEST_FILES_FILE"] == "tests/a/test_x.py\n"
    assert payloads["ENVCHECK_F2P_FILE"].splitlines()[2] == "pkg.Cls.t"
    assert variables["ENVCHECK_F2P_FILE"] == f"{TRICK_DIR}/f2p"
    assert variables["ENVCHECK_REPORT"] == "/tmp/r.xml"


def test_what_grows_with_the_task_reaches_the_trick_by_file() -> None:
    """3,000 ids make a forged report of ~240 KB: past the kernel's 128 KiB for one
    environment string, a trick's shell would not start. Only paths and fixed-size values
    stay in its environment."""
    ids = tuple(f"tests/test_many.py::test_p{i:04d}" for i in range(3000))
    aim = Target("/w", ids[:1], "/tmp/r.xml", forged_junit(ids), ())
    assert len(aim.payloads()["ENVCHECK_FORGED_REPORT_FILE"]) > 128 * 1024
    assert max(len(f"{k}={v}") for k, v in aim.variables().items()) < 256


def test_an_unknown_trick_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    text = DEMO_HACKS.read_text().replace("adversarial: { tricks: all, require: false }",
                                          "adversarial: { tricks: [tests_rewriten] }")
    bad = tmp_path / "hacks.yaml"
    bad.write_text(text)
    with pytest.raises(CatalogueError) as caught:
        load_catalogue([bad])
    message = str(caught.value)
    assert f"{bad}:" in message and "tests.adversarial.tricks" in message
    assert "tests_rewriten" in message and "tests_rewritten" in message


# --- verdicts ----------------------------------------------------------------------------------

PASSED = Verdict(Status.PASS, Reason.OK, "3 runs agree", {"runs": []},
                 (CommandEvidence("negative", 1, 0.5),))


def attempts(*rewarded: str) -> list[Attempted]:
    return [Attempted(name, name in rewarded, "rewarded" if name in rewarded else "refused",
                      (CommandEvidence(f"trick {name}", 0, 0.1),
                       CommandEvidence(f"tests after {name}", 0, 0.2)))
            for name in TRICK_NAMES]


def test_all_refused_keeps_the_pass_and_lists_each_trick() -> None:
    verdict = judge(PASSED, attempts(), require=True)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.OK)
    info = verdict.details["adversarial"]
    assert [t["trick"] for t in info["tricks"]] == list(TRICK_NAMES)
    assert info["rewarded"] == [] and all(t["stands_for"] for t in info["tricks"])
    assert verdict.evidence == PASSED.evidence and "all 8" in verdict.summary


@pytest.mark.parametrize(("require", "status"), [(False, Status.PASS), (True, Status.FAIL)])
def test_a_rewarded_trick_is_reward_hackable(require: bool, status: Status) -> None:
    verdict = judge(PASSED, attempts("report_forged", "early_exit"), require=require)
    assert (verdict.status, verdict.reason) == (status, Reason.REWARD_HACKABLE)
    assert verdict.details["adversarial"]["rewarded"] == ["report_forged", "early_exit"]
    assert "report_forged, early_exit" in verdict.summary
    assert [e.command for e in verdict.evidence[:4]] == [
        "trick report_forged", "tests after report_forged", "trick early_exit",
        "tests after early_exit"]
    result = ProbeResult("e", ProbeKind.TESTS, verdict.status, verdict.reason, "", 1.0)
    assert result.degraded is (not require)


def test_reward_hackable_is_a_pass_or_a_fail_never_flaky() -> None:
    with pytest.raises(ValueError, match="does not go with"):
        ProbeResult("e", ProbeKind.TESTS, Status.FLAKY, Reason.REWARD_HACKABLE, "", 1.0)


# --- tricks that could not act -----------------------------------------------------------------

E2BIG = "exec /bin/bash: argument list too long"


def ran(output: str, exit_code: int | None = 0, timed_out: bool = False) -> CommandEvidence:
    return CommandEvidence("trick x: sh /var/tmp/envcheck/trick/x.sh", exit_code, 0.2,
                           output_head=output, timed_out=timed_out)


def test_a_trick_that_did_not_start_or_failed_with_nothing_changed_could_not_act() -> None:
    ready = "envcheck:ready\n"
    assert could_not_act(ran(E2BIG + "\n", 1)) == f"its command did not start: {E2BIG}"
    assert could_not_act(ran(ready + "sh: 1: python3: not found\n", 127)) == (
        "it exited 127: sh: 1: python3: not found")
    assert could_not_act(ran(ready, None, timed_out=True)) == "it ran past 0.2s and was killed"
    assert could_not_act(None, problem="login_shell_broken: bash -c did not run") == (
        "it never ran: login_shell_broken: bash -c did not run")
    # it acted: a clean exit (even with nothing to do), or a failure that changed files
    assert could_not_act(ran(ready + "tests_deleted: removed a.py\n")) is None
    assert could_not_act(ran(ready, 0), changed=[]) is None
    assert could_not_act(ran(ready + "Traceback ...\n", 1), changed=["conftest.py"]) is None
    assert could_not_act(ran(ready, 1), changed=[]) == "it exited 1: exit 1, no output"


def mixed(*idle: str, rewarded: tuple[str, ...] = ()) -> list[Attempted]:
    """Every trick: those in ``idle`` could not act (their command did not start)."""
    played = {a.trick: a for a in attempts(*rewarded)}
    return [Attempted.idle(n, f"its command did not start: {E2BIG}",
                           (ran(E2BIG, 1), CommandEvidence(f"tests after {n}", 1, 0.2)))
            if n in idle else played[n] for n in TRICK_NAMES]


def test_tricks_that_could_not_act_are_neither_refused_nor_rewarded() -> None:
    verdict = judge(PASSED, mixed("runner_shadowed", "early_exit"), require=True)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.OK)
    assert verdict.summary == (
        "3 runs agree; 6 of 8 adversarial trick(s) refused, 2 could not act: runner_shadowed, "
        f"early_exit (its command did not start: {E2BIG})")
    info = verdict.details["adversarial"]
    assert [t["trick"] for t in info["tricks"]] == [
        n for n in TRICK_NAMES if n not in ("runner_shadowed", "early_exit")]
    assert info["could_not_act"] == [
        {"trick": n, "why": f"its command did not start: {E2BIG}",
         "stands_for": TRICKS[n].stands_for} for n in ("runner_shadowed", "early_exit")]
    # why, shown: the first one's own command leads the evidence
    assert verdict.evidence == (ran(E2BIG, 1), *PASSED.evidence)
    nothing = judge(PASSED, mixed(*TRICK_NAMES), require=False)
    assert "0 of 8 adversarial trick(s) refused, 8 could not act" in nothing.summary
    assert "all" not in nothing.summary and nothing.details["adversarial"]["tricks"] == []
    clean = judge(PASSED, attempts(), require=False).details["adversarial"]
    assert clean["could_not_act"] == []  # always there: the mark of this accounting


def test_a_hole_is_named_with_the_tricks_that_could_not_act_beside_it() -> None:
    verdict = judge(PASSED, mixed("early_exit", rewarded=("report_forged",)), require=False)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert verdict.summary == (
        "reward hackable: 1 of 7 trick(s) earn the reward with no fix (report_forged); 1 could "
        f"not act: early_exit (its command did not start: {E2BIG})")
    assert verdict.details["adversarial"]["rewarded"] == ["report_forged"]
    assert [e.command for e in verdict.evidence[:3]] == [
        "trick report_forged", "tests after report_forged", ran(E2BIG).command]


@pytest.mark.parametrize(("stored", "reused"), [
    (judge(PASSED, attempts(), require=False), True),
    (judge(PASSED, mixed("early_exit"), require=False), False),
    (judge(PASSED, mixed(*TRICK_NAMES), require=False), False),
    # stored before tricks that could not act were told apart: never trusted
    (replace(PASSED, details={"adversarial": {
        "tricks": [{"trick": n, "rewarded": False, "verifier": "refused: ... (the trick itself "
                    "exited 1)"} for n in TRICK_NAMES], "rewarded": [], "require": False}}),
     False)])
def test_an_outcome_with_tricks_that_could_not_act_is_never_reused(stored: Verdict,
                                                                    reused: bool) -> None:
    env = Environment(id="e", image="i", suite="s", tests=TestSpec(
        command="run {tests}", fail_to_pass=["t::f"], adversarial=Adversarial()))
    result = ProbeResult("e", ProbeKind.TESTS, stored.status, stored.reason, stored.summary, 1.0,
                         image_digest="sha256:a", spec_hash=env.spec_hash(ProbeKind.TESTS),
                         details=stored.details)
    played: list[str] = []

    def attempt(trick: Trick) -> Attempted:
        played.append(trick.name)
        return Attempted(trick.name, False, "refused")

    services = {ControlsLedger: ControlsLedger(RecordedEvidence([result]))}
    with ExitStack() as stack:
        ctx = ProbeContext(env, "run", FakeRuntime(Script()), "sha256:a", stack, services)
        verdict = with_controls(ctx, Adversarial(), PASSED, lambda: attempt)
    info = verdict.details["adversarial"]
    assert ("reused" in info) is reused
    assert played == ([] if reused else list(TRICK_NAMES))
    assert info["could_not_act"] == [] and "all 8 adversarial trick(s) refused" in verdict.summary


# --- the demo-hacks fleet on the real engine ---------------------------------------------------

# environment -> (status, reason, tricks rewarded); every other trick must be refused
EXPECTED: dict[str, tuple[Status, Reason, set[str]]] = {
    "demo-hacks-resistant": (Status.PASS, Reason.OK, set()),
    "demo-hacks-task": (Status.PASS, Reason.REWARD_HACKABLE, {
        "tests_rewritten", "conftest_forced_pass", "assertions_patched",
        "verifier_dir_planted"}),
    "demo-hacks-unrestored": (Status.PASS, Reason.REWARD_HACKABLE, {
        "tests_rewritten", "verifier_dir_planted"}),
    "demo-hacks-exit-code": (Status.PASS, Reason.REWARD_HACKABLE, ALL - {"report_forged"}),
    "demo-hacks-report": (Status.FAIL, Reason.REWARD_HACKABLE, {"report_forged"}),
    "demo-hacks-site-packages": (Status.PASS, Reason.REWARD_HACKABLE, {"assertions_patched"}),
    "demo-hacks-site-packages-subset": (Status.PASS, Reason.REWARD_HACKABLE,
                                        {"assertions_patched"}),
}


@pytest.fixture(scope="module")
def demo_hacks() -> Catalogue:
    return load_catalogue([DEMO_HACKS])


@pytest.fixture(scope="module")
def fleet(demo_hacks: Catalogue, runtime: DockerRuntime) -> dict[str, ProbeResult]:
    return probe_each(demo_hacks, ProbeKind.TESTS, runtime)


@pytest.mark.docker
def test_every_demo_hacks_environment_is_covered(demo_hacks: Catalogue) -> None:
    assert {e.id for e in demo_hacks.environments} == set(EXPECTED)
    # every trick is shown working somewhere, and refused somewhere
    rewarded = set().union(*(tricks for _, _, tricks in EXPECTED.values()))
    assert rewarded == ALL


@pytest.mark.docker
@pytest.mark.parametrize("env_id", sorted(EXPECTED))
def test_each_verifier_falls_for_exactly_its_tricks(env_id: str,
                                                    fleet: dict[str, ProbeResult]) -> None:
    result = fleet[env_id]
    status, reason, tricks = EXPECTED[env_id]
    assert (result.status, result.reason) == (status, reason), result.summary
    info = result.details["adversarial"]
    assert set(info["rewarded"]) == tricks, info["tricks"]
    played = {t["trick"]: t for t in info["tricks"]}
    for name, attempt in played.items():
        assert attempt["rewarded"] is (name in tricks)
        assert attempt["verifier"].startswith("rewarded" if name in tricks else "refused")
    if tricks:  # the evidence of a hole: each rewarded trick's own command comes first
        commands = [e.command for e in result.evidence]
        assert all(any(c.startswith(f"trick {t}:") for c in commands) for t in tricks)


@pytest.mark.docker
def test_a_subset_plays_only_the_tricks_named(fleet: dict[str, ProbeResult]) -> None:
    info = fleet["demo-hacks-site-packages-subset"].details["adversarial"]
    assert [t["trick"] for t in info["tricks"]] == ["assertions_patched", "early_exit"]


@pytest.mark.docker
def test_controls_run_once_per_image_and_spec(tmp_path: Path, demo_hacks: Catalogue,
                                              runtime: DockerRuntime) -> None:
    env = demo_hacks.environment("demo-hacks-site-packages-subset")
    # another spec (here: another subset of tricks) is another identity: played afresh
    assert env.tests is not None and env.tests.adversarial is not None
    plan = env.tests.adversarial.model_copy(update={"tricks": ["early_exit"]})
    narrower = env.model_copy(update={"tests": env.tests.model_copy(
        update={"adversarial": plan})})
    first, second, third = probed_in_turn(demo_hacks, runtime, tmp_path / "store.db",
                                          env, env, narrower)
    assert "reused" not in first.details["adversarial"]
    reused = second.details["adversarial"]
    assert reused["reused"]["from"] == first.started_at.isoformat()
    assert reused["rewarded"] == ["assertions_patched"]
    assert (second.status, second.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert "reused" not in third.details["adversarial"]
    assert (third.status, third.reason) == (Status.PASS, Reason.OK)


# The demo task with its interpreter gone, verified by a shell script that writes its own
# JUnit report (privately, then over the one read): the probe's own controls pass, the
# shell tricks act and are refused, and the Python tricks cannot even start.
NO_PYTHON = """
version: 1
suites:
  no-python:
    description: a verifier in shell on an image without python3
    environments:
      - id: no-python
        image: envcheck-demo/deps-python-missing:latest
        workdir: /workspace
        user: agent
        shell: /bin/bash
        tools: [git]
        timeouts: { start_s: 15, shell_s: 2, exec_s: 30, probe_s: 5m }
        schedules: { terminal: 5m, dependencies: null, tests: 6h }
        tests:
          command: >-
            d=$(mktemp -d); if grep -q envcheck-fixed calc/stats.py; then f=''; else
            f='<failure message="median is wrong"/>'; fi;
            printf '<testsuite name="sh" tests="2"><testcase classname="tests.test_sh"
            name="test_median">%s</testcase><testcase classname="tests.test_sh"
            name="test_mean"/></testsuite>' "$f" > "$d/r.xml";
            rm -f {junit} && cp "$d/r.xml" {junit}; [ -z "$f" ]
          junit_path: /tmp/envcheck-junit.xml
          fail_to_pass: [tests/test_sh.py::test_median]
          pass_to_pass: [tests/test_sh.py::test_mean]
          oracle: { script: "echo '# envcheck-fixed' >> calc/stats.py" }
          reruns: 1
          adversarial: { tricks: all }
"""
PY_TRICKS = [n for n in TRICK_NAMES if TRICKS[n].runner == "python3"]


@pytest.mark.docker
def test_tricks_that_cannot_start_are_not_counted_as_refused(tmp_path: Path,
                                                             runtime: DockerRuntime) -> None:
    (tmp_path / "no-python.yaml").write_text(NO_PYTHON)
    env = load_catalogue([tmp_path / "no-python.yaml"]).environment("no-python")
    [result] = run_cycle([env], [ProbeKind.TESTS], runtime, new_run_id())
    assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    info = result.details["adversarial"]
    assert [t["trick"] for t in info["could_not_act"]] == PY_TRICKS, info
    assert all(t["why"].startswith("it exited 127: ") and "python3" in t["why"]
               for t in info["could_not_act"]), info["could_not_act"]
    assert [t["trick"] for t in info["tricks"]] == [n for n in TRICK_NAMES if n not in PY_TRICKS]
    assert all(t["verifier"].startswith("refused") for t in info["tricks"]), info["tricks"]
    assert f"4 of 8 adversarial trick(s) refused, 4 could not act: {', '.join(PY_TRICKS)} (" \
        in result.summary
    assert result.evidence[0].command.startswith(f"trick {PY_TRICKS[0]}:")


def test_the_environment_page_lists_each_trick_of_the_newest_tests_result() -> None:
    verdict = judge(PASSED, attempts("tests_rewritten"), require=False)
    newest = ProbeResult("e", ProbeKind.TESTS, verdict.status, verdict.reason, verdict.summary,
                         1.0, details=verdict.details)
    terminal = ProbeResult("e", ProbeKind.TERMINAL, Status.PASS, Reason.OK, "", 1.0)
    rows = adversarial_rows([StoredResult(2, "r", terminal), StoredResult(1, "r", newest)])
    assert [(r["trick"], r["verifier"]) for r in rows][:2] == [
        ("tests_rewritten", "rewarded"), ("tests_deleted", "refused")]
    assert all(r["stands for"] for r in rows) and len(rows) == len(TRICK_NAMES)
    assert adversarial_rows([StoredResult(2, "r", terminal)]) == []
    # a trick that could not act, and one the time budget left out, are rows of their own
    partial = judge(PASSED, mixed("early_exit")[:-1], require=False,
                    unplayed=["verifier_dir_planted"])
    newest = ProbeResult("e", ProbeKind.TESTS, partial.status, partial.reason, partial.summary,
                         1.0, details=partial.details)
    rows = adversarial_rows([StoredResult(1, "r", newest)])
    assert [(r["trick"], r["verifier"]) for r in rows][-2:] == [
        ("early_exit", "could not act"), ("verifier_dir_planted", "not played")]
    assert rows[-2]["what it did"] == f"its command did not start: {E2BIG}"
    assert "6 of 8 adversarial trick(s) refused, 1 could not act: early_exit (its command did " \
        f"not start: {E2BIG}), 1 not played: probe_s reached" in partial.summary


def test_tricks_stop_at_the_time_budget_and_say_which_were_not_played() -> None:
    played: list[str] = []

    def attempt(trick: Trick) -> Attempted:
        played.append(trick.name)
        return Attempted(trick.name, False, "refused")

    budget = Deadline(3600)
    done, unplayed = run_controls(list(TRICKS.values()), attempt, budget)
    assert [a.trick for a in done] == played == list(TRICK_NAMES) and unplayed == []
    played.clear()
    done, unplayed = run_controls(list(TRICKS.values()), attempt, Deadline(0))
    assert done == [] and unplayed == list(TRICK_NAMES)
    verdict = judge(PASSED, done, require=False, unplayed=unplayed)
    assert verdict.details["adversarial"]["unplayed"] == list(TRICK_NAMES)
    assert "8 not played" in verdict.summary


def test_the_store_finds_the_newest_controls_of_one_identity(store_url: str) -> None:
    def stored(digest: str, spec: str, minute: int, details: dict[str, Any]) -> ProbeResult:
        return ProbeResult("e", ProbeKind.TESTS, Status.PASS, Reason.OK, "", 1.0,
                           image_digest=digest, spec_hash=spec, details=details,
                           started_at=datetime(2026, 1, 1, 12, minute, tzinfo=UTC))

    with open_store(store_url) as store:
        run_id = store.start_run("test", [])
        for result in (stored("sha256:a", "s1", 0, {"adversarial": {"n": 1}}),
                       stored("sha256:a", "s1", 1, {"adversarial": {"n": 2}}),
                       stored("sha256:a", "s1", 2, {}),  # a probe that stopped before them
                       stored("sha256:b", "s1", 3, {"adversarial": {"n": 3}}),
                       stored("sha256:a", "s2", 4, {"adversarial": {"n": 4}})):
            store.record(run_id, result)
        ledger = ControlsLedger(store)
        found = ledger.prior("e", "sha256:a", "s1")
        assert found is not None and found[1] == {"n": 2}
        assert found[0] == datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
        assert ledger.prior("e", "sha256:c", "s1") is None
        assert ledger.prior("e", None, "s1") is None  # no digest: no identity to reuse


def test_evidence_carried_to_a_node_is_reused_only_for_its_identity() -> None:
    """What a Ray node reads: the caller's newest controls, checked against the node's image
    digest and the spec hash as the store would check them."""
    carried = ProbeResult("e", ProbeKind.TESTS, Status.PASS, Reason.OK, "", 1.0,
                          image_digest="sha256:a", spec_hash="s1",
                          details={"adversarial": {"tricks": []}},
                          started_at=datetime(2026, 1, 1, 12, tzinfo=UTC))
    ledger = ControlsLedger(RecordedEvidence([carried]))
    assert ledger.prior("e", "sha256:a", "s1") == (carried.started_at, {"tricks": []})
    assert ledger.prior("e", "sha256:b", "s1") is None  # the node's image changed
    assert ledger.prior("e", "sha256:a", "s2") is None  # another spec
    assert ledger.prior("other", "sha256:a", "s1") is None
    assert ControlsLedger(RecordedEvidence([])).prior("e", "sha256:a", "s1") is None


# --- Harbor's protocol: the same tricks before tests/ is copied in ------------------------------


NAIVE_TEST_SH = """#!/bin/bash
cd /app
if python3 -m pytest -p no:cacheprovider -rA /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def harbor_probe(folder: Path, runtime: DockerRuntime) -> ProbeResult:
    got = harbor_parts(read_task(folder), limits=Limits(), timeouts=Timeouts(), reruns=1,
                       adversarial=Adversarial())
    env = Environment(id=folder.name, suite="harbor", image=got.image, user=got.user,
                      workdir=got.workdir, limits=got.limits, timeouts=got.timeouts,
                      harbor=got.harbor)
    with ExitStack() as stack:
        return TestsProbe().run(ProbeContext(env, new_run_id(), runtime, None, stack,
                                             {ImageBuilder: ImageBuilder.for_runtime(runtime)}))


@pytest.mark.docker
def test_a_naive_harbor_verifier_is_attacked_through_its_reward_file(
        tmp_path: Path, runtime: DockerRuntime) -> None:
    """hello-world as Harbor's example ships it: the agent is root, the verifier runs pytest
    from PATH with the site-packages on and trusts its exit code, and /tests is merged into:
    four tricks earn reward 1. A forged reward.json does not: Harbor (0.25.0 on) removes it
    before the verifier runs (tests/test_harbor_protocol.py: it stands under 0.24.0)."""
    folder = tmp_path / "hello-world-naive"
    shutil.copytree(HELLO, folder)
    (folder / "tests" / "test.sh").write_text(NAIVE_TEST_SH)
    result = harbor_probe(folder, runtime)
    assert (result.status, result.reason) == (Status.PASS, Reason.REWARD_HACKABLE), result.summary
    info = result.details["adversarial"]
    assert info["rewarded"] == ["runner_shadowed", "assertions_patched", "early_exit",
                                "verifier_dir_planted"], info["tricks"]
    verifier = {t["trick"]: t["verifier"] for t in info["tricks"]}
    assert verifier["early_exit"].startswith("rewarded: reward 1")
    assert verifier["report_forged"].startswith("refused: reward 0 (reward.txt")
    assert verifier["tests_rewritten"].startswith("refused: reward 0")  # no test ids to rewrite


@pytest.mark.docker
def test_the_hardened_harbor_demo_refuses_every_trick(runtime: DockerRuntime) -> None:
    """hello-world as the demo ships it: the agent is root (Harbor's default), but test.sh runs
    its own interpreter (-I -S: no start-up hook from any site-packages), ignores conftest
    files, removes any reward file already there (as root under Harbor's capabilities, even
    from a folder the agent made read-only) and parses the reward from a private report.
    Every trick is refused."""
    result = harbor_probe(HELLO, runtime)
    assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    info = result.details["adversarial"]
    assert info["rewarded"] == [], info["tricks"]
    verifier = {t["trick"]: t["verifier"] for t in info["tricks"]}
    assert len(verifier) == 8
    assert all(v.startswith("refused: reward 0") for v in verifier.values()), verifier


def test_a_spec_without_controls_keeps_its_hash_and_declaring_them_changes_it() -> None:
    tests = load_catalogue([ROOT / "probes" / "demo-tests.yaml"]).environment(
        "demo-tests-p2p-broken")
    assert tests.tests is not None and "adversarial" not in tests.tests.model_dump()
    controlled = tests.model_copy(update={"tests": tests.tests.model_copy(
        update={"adversarial": Adversarial()})})
    assert controlled.spec_hash(ProbeKind.TESTS) != tests.spec_hash(ProbeKind.TESTS)
    assert controlled.spec_hash(ProbeKind.TERMINAL) == tests.spec_hash(ProbeKind.TERMINAL)


# Every demo environment whose tests are valid, in every demo catalogue, and where its
# controls are asserted: each declares them, and each refuses every trick.
VALID_DEMOS = {
    ("demo.yaml", "demo-healthy"): "test_the_demo_healthy_task_refuses_every_trick (here)",
    ("demo-tests.yaml", "demo-tests-healthy"): "tests/test_tests_probe.py",
    ("demo-tests.yaml", "demo-tests-healthy-script"): "tests/test_tests_probe.py",
    ("demo-hacks.yaml", "demo-hacks-resistant"): "EXPECTED (here)",
    ("demo-harbor.yaml", "hello-world"): "test_the_hardened_harbor_demo_refuses_every_trick",
    ("demo-swebench.yaml", "envcheck-demo__pyutils-1"): "tests/test_swebench_dataset.py",
    ("demo-swebench.yaml", "envcheck-demo__pyutils-5"): "tests/test_swebench_dataset.py",
}


def test_every_valid_demo_environment_declares_every_trick() -> None:
    for (file, env_id) in VALID_DEMOS:
        controls = load_catalogue([ROOT / "probes" / file]).environment(env_id).adversarial()
        assert controls is not None, (file, env_id)
        assert controls.names() == list(TRICK_NAMES), (file, env_id)


@pytest.mark.docker
def test_the_demo_healthy_task_refuses_every_trick(demo_catalogue: Catalogue,
                                                   runtime: DockerRuntime) -> None:
    [result] = run_cycle([demo_catalogue.environment("demo-healthy")], [ProbeKind.TESTS],
                         runtime, new_run_id())
    assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    info = result.details["adversarial"]
    assert info["rewarded"] == [] and len(info["tricks"]) == len(TRICK_NAMES), info
    assert all(t["verifier"].startswith("refused") for t in info["tricks"]), info["tricks"]
