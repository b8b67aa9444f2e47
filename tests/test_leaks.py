"""The leak checks on the real engine: the demo tasks of probes/demo-leaks.yaml each with its
verdict and evidence (an image whose .git still holds the fix commit, a Harbor task that copies
its solution into its image, a catalogue spec whose oracle and pristine tests are readable,
clean twins of each); reuse per image digest and spec; checks that could not run said so."""

from __future__ import annotations

import json
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment, Timeouts
from envcheck.catalogue.probe_specs import LeakChecks
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import new_run_id
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.leaks.check import with_leak_checks
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT, envcheck_cmd, probe_each, probed_in_turn

pytestmark = pytest.mark.docker

DEMO = ROOT / "probes" / "demo-leaks.yaml"
EXPECTED = {
    "demo-leaks-task": (Status.PASS, Reason.SOLUTION_IN_IMAGE),
    "envcheck-demo__pyutils-1-clean": (Status.PASS, Reason.OK),
    "envcheck-demo__pyutils-1-leaked": (Status.PASS, Reason.SOLUTION_LEAKED),
    "solution-kept-out": (Status.PASS, Reason.OK),
    "solution-in-image": (Status.PASS, Reason.SOLUTION_IN_IMAGE),
}
LEAKED = "envcheck-demo__pyutils-1-leaked"
PASSED = Verdict(Status.PASS, Reason.OK, "2 runs agree", {})


@pytest.fixture(scope="module")
def demo() -> Catalogue:
    return load_catalogue([DEMO])


@pytest.fixture(scope="module")
def results(demo: Catalogue, runtime: DockerRuntime) -> dict[str, ProbeResult]:
    return probe_each(demo, ProbeKind.TESTS, runtime)


def leaks(result: ProbeResult) -> dict[str, object]:
    info = result.details["leaks"]
    assert isinstance(info, dict)
    return info


@pytest.mark.parametrize("env_id", list(EXPECTED))
def test_each_demo_task_has_its_verdict(env_id: str, results: dict[str, ProbeResult]) -> None:
    result = results[env_id]
    assert (result.status, result.reason) == EXPECTED[env_id], result.summary
    checked = leaks(result)["checked"]
    assert isinstance(checked, list) and checked
    assert all(c["played"] and not c["cut_short"] for c in checked), checked


def test_a_fix_commit_left_in_the_reflog_is_found_with_its_objects(
        results: dict[str, ProbeResult]) -> None:
    result = results[LEAKED]
    found = leaks(result)["found"]
    assert isinstance(found, list)
    assert [(f["reason"], f["check"]) for f in found] == [
        ("solution_leaked", "git"), ("solution_leaked", "git"), ("tests_in_image", "git")]
    commit, fix, test = found
    assert commit["what"].endswith("slug: lowercase, URLs want hello-world")
    assert commit["where"].startswith("after the base commit df72c21d515e")
    assert "reachable from a reflog only" in commit["where"]
    # the blob the gold patch's own index line names for its result: the hash is git's
    record = json.loads((ROOT / "probes" / "datasets" / "swe-demo-leaks.jsonl").read_text()
                        .splitlines()[1])
    assert "index e5c01a7..8fd2906 100644" in record["patch"]
    assert fix["what"] == "textkit/slug.py as the gold patch leaves it (blob 8fd29060f4dc)"
    assert fix["where"] == "a loose object in /testbed/.git"
    assert test["what"].startswith("tests/test_slug.py as the test patch leaves it")
    assert result.summary.startswith("the answer is in the image's git history: commit ")
    [git] = [e for e in result.evidence if e.command.startswith("leak check: the git")]
    assert git.exit_code == 0 and "envcheck:leaks:commit" in git.output_head


def test_the_clean_twin_is_clean_and_the_check_wrote_nothing_it_looks_for(
        results: dict[str, ProbeResult]) -> None:
    """The same task on the image without the fix commit: the files the patches leave were
    rebuilt and hashed in that container, and still are not in its object store."""
    result = results["envcheck-demo__pyutils-1-clean"]
    info = leaks(result)
    assert info["found"] == [] and "no answer leak found (2 check(s))" in result.summary
    git, files = info["checked"]
    assert "0 commit(s) after it" in git["summary"]
    assert "2 file(s) the patches leave, 0 in the object store" in git["summary"]
    assert "4 file(s) looked for by size and SHA-256" in files["summary"]
    assert "as agent: 0 found" in files["summary"]


def test_a_harbor_task_that_copies_its_solution_into_its_image(
        results: dict[str, ProbeResult]) -> None:
    result = results["solution-in-image"]
    assert leaks(result)["found"] == [{"reason": "solution_in_image", "check": "files",
                                       "what": "solution/solve.sh",
                                       "where": "/opt/reference/solve.sh"}]
    assert result.summary.startswith("the solution is readable in the image: solution/solve.sh "
                                     "(/opt/reference/solve.sh)")
    clean = leaks(results["solution-kept-out"])
    assert clean["found"] == []
    [files] = clean["checked"]
    assert "2 file(s) looked for" in files["summary"] and "as root: 0 found" in files["summary"]


def test_a_catalogue_oracle_and_pristine_tests_readable_by_the_agent(
        results: dict[str, ProbeResult]) -> None:
    found = leaks(results["demo-leaks-task"])["found"]
    assert isinstance(found, list)
    assert [(f["reason"], f["what"]) for f in found] == [
        ("solution_in_image", "the oracle (oracle.path): /opt/task/oracle.sh"),
        ("solution_in_image", "leaks.solution: /opt/task/fix.patch"),
        ("tests_in_image", "leaks.tests: /opt/task/pristine-tests/test_stats.py")]
    assert all(f["where"] == "readable by agent" for f in found)


def test_leak_checks_run_once_per_image_and_spec(tmp_path: Path, demo: Catalogue,
                                                 runtime: DockerRuntime) -> None:
    env = demo.environment(LEAKED)
    # required: another spec, played afresh, and a fail that quarantines
    assert env.tests is not None
    required = env.model_copy(update={"tests": env.tests.model_copy(
        update={"leaks": LeakChecks(require=True)})})
    first, second, third = probed_in_turn(demo, runtime, tmp_path / "store.db",
                                          env, env, required)
    assert "reused" not in leaks(first)
    assert leaks(second)["reused"] == {"from": first.started_at.isoformat()}
    assert leaks(second)["found"] == leaks(first)["found"]
    assert (second.status, second.reason) == (Status.PASS, Reason.SOLUTION_LEAKED)
    assert "reused" not in leaks(third)
    assert (third.status, third.reason) == (Status.FAIL, Reason.SOLUTION_LEAKED)


def checked_alone(env: Environment, runtime: DockerRuntime) -> Verdict:
    """The leak checks of ``env`` after a pass of its own controls, nothing else."""
    with ExitStack() as stack:
        ctx = ProbeContext(env, new_run_id(), runtime, None, stack)
        return with_leak_checks(ctx, PASSED)


def test_checks_that_cannot_run_say_why_and_never_read_as_clean(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    base = demo.environment("envcheck-demo__pyutils-1-clean")
    no_git = base.model_copy(update={"image": "envcheck-demo/tool-missing:latest",
                                     "workdir": "/workspace"})
    verdict = checked_alone(no_git, runtime)
    info = verdict.details["leaks"]
    assert info["unplayed"] == ["git"] and "partial" not in info
    assert info["checked"][0]["summary"] == "no git on the sandbox user's PATH"
    assert "not played: git: no git on the sandbox user's PATH" in verdict.summary
    assert info["checked"][1]["played"]  # the files check still looked for the patches
    no_repo = base.model_copy(update={"workdir": "/home/agent"})
    info = checked_alone(no_repo, runtime).details["leaks"]
    assert info["checked"][0] == {
        "check": "git", "played": False, "cut_short": False,
        "summary": "/home/agent is in no git repository the sandbox user can read"}


def test_checks_the_time_budget_leaves_out_are_a_partial_outcome(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    env = demo.environment("envcheck-demo__pyutils-1-clean")
    rushed = env.model_copy(update={"timeouts": Timeouts(probe_s=0.001)})
    verdict = checked_alone(rushed, runtime)
    info = verdict.details["leaks"]
    assert info["partial"] is True and info["unplayed"] == ["git", "files"]
    assert info["checked"] == [{"check": name, "played": False, "cut_short": True,
                                "summary": "not played: probe_s reached"}
                               for name in ("git", "files")]
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.OK)


def test_envcheck_check_gives_the_verdicts_and_reuses_them_from_its_store(
        cli_env: dict[str, str]) -> None:
    def check() -> dict[str, dict[str, object]]:
        proc = subprocess.run([*envcheck_cmd(), "check", str(DEMO), "--json", "-p", "tests",
                               "-e", LEAKED, "-e", "solution-in-image"], env=cli_env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr  # a degraded pass is a pass
        return {r["env"]: r for r in map(json.loads, proc.stdout.splitlines())}

    first, second = check(), check()
    for env_id in (LEAKED, "solution-in-image"):
        assert (first[env_id]["status"], first[env_id]["reason"]) == (
            "pass", EXPECTED[env_id][1].value)
        assert second[env_id]["reason"] == first[env_id]["reason"]
        was, now = first[env_id]["details"]["leaks"], second[env_id]["details"]["leaks"]
        assert "reused" not in was and now["found"] == was["found"]
        assert now["reused"] == {"from": first[env_id]["started_at"]}
