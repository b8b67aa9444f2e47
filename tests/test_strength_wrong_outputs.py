"""The wrong-output controls on the real engine: the Harbor demo tasks of
probes/demo-strength-outputs.yaml through ``envcheck check`` (a verifier that only checks the
output file exists: weak_verifier, naming its surviving outputs; one that checks the content:
every mutant refused); a required score that fails; reuse per image digest and spec through
the store; a catalogue spec whose oracle is a script; what the oracle wrote, found and
overwritten (mode and owner kept); controls that could not be played, or were cut short."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.catalogue.probe_specs import Oracle, Strength
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.collaborators import build_services
from envcheck.kinds.strength.controls import with_strength_controls
from envcheck.kinds.strength.model import Operator, OutputMutant
from envcheck.kinds.strength.written import READ_MAX, Owner, overwrite, read_written
from envcheck.kinds.testvalidity.harbor import prepare_image
from envcheck.sandbox.base import ENGINE_DEFAULT_CAPABILITIES, SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from envcheck.store import open_store
from tests.conftest import ROOT, envcheck_cmd

pytestmark = pytest.mark.docker

DEMO = ROOT / "probes" / "demo-strength-outputs.yaml"
WEAK, STRONG = "totals-exist-only", "totals-checked"
OUTPUT = "/app/totals.csv"
PASSED = Verdict(Status.PASS, Reason.OK, "the protocol's own controls passed", {})


@pytest.fixture(scope="module")
def demo() -> Catalogue:
    return load_catalogue([DEMO])


def check_json(data_dir: Path) -> dict[str, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "ENVCHECK_DATABASE_URL"}
    env["ENVCHECK_DATA_DIR"] = str(data_dir)
    done = subprocess.run([*envcheck_cmd(), "check", str(DEMO), "-p", "tests", "--json"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return {line["env"]: line for line in lines if line.get("probe") == "tests"}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]],
                                                               dict[str, dict[str, Any]]]:
    """Both demo tasks through ``envcheck check --json``, twice on one store, by id."""
    data = tmp_path_factory.mktemp("strength-outputs") / "data"
    return check_json(data), check_json(data)


def test_a_verifier_that_only_checks_the_file_exists_is_weak(
        checked: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]) -> None:
    result = checked[0][WEAK]
    assert (result["status"], result["reason"]) == ("pass", "weak_verifier"), result["summary"]
    info = result["details"]["strength"]
    assert info["played"] is True and info["require"] is False
    assert info["generated"]["outputs"] == [OUTPUT] and info["generated"]["of"] == "outputs"
    assert info["generated"]["mutants"] == len(info["mutants"]) == 6
    assert info["counts"]["survived"] == 6 and info["score"] == 0.0
    # each kind of wrong output was played, and each was paid for
    assert set(info["per_operator"]) == {"number_changed", "record_dropped", "truncated"}
    for survivor in info["survivors"]:
        assert survivor["file"] == OUTPUT and survivor["operator"]
        assert survivor["diff"].startswith("diff --git a/app/totals.csv b/app/totals.csv")
        assert survivor["detail"].startswith("rewarded: reward 1 (reward.txt")
    assert "weak verifier: 6 generated: 0 of 6 mutant(s) told apart from the oracle's output " \
        "killed" in result["summary"]
    # a wrong output differs from the oracle's by construction: every survivor is confirmed
    assert {s["class"] for s in info["survivors"]} == {"confirmed"}
    assert info["survivors_apart"] == []
    assert f"{OUTPUT}:" in result["summary"]
    assert info["runs"] == 1 + 6  # the oracle's run read its files back, then one per mutant
    assert any("/tests/test.sh" in e["command"] for e in result["evidence"])


def test_a_verifier_that_checks_the_content_refuses_every_wrong_output(
        checked: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]) -> None:
    result = checked[0][STRONG]
    assert (result["status"], result["reason"]) == ("pass", "ok"), result["summary"]
    info = result["details"]["strength"]
    assert info["score"] == 1.0 and info["survivors"] == []
    assert info["counts"]["killed"] == 6 and info["counts"]["incompetent"] == 0
    assert all(m["detail"].startswith("refused: reward 0") for m in info["mutants"])
    assert "wrong-output controls: 6 generated: 6 of 6 mutant(s) told apart from the oracle's " \
        "output killed (score 1.00)" in result["summary"]
    assert info["generated"]["seed"].endswith(result["spec_hash"])


def test_a_whole_outcome_is_reused_per_image_digest_and_spec(
        checked: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]) -> None:
    first, second = checked
    for name in (WEAK, STRONG):
        before, after = first[name]["details"]["strength"], second[name]["details"]["strength"]
        assert "reused" not in before and after["reused"]["from"]
        assert (second[name]["status"], second[name]["reason"]) == \
            (first[name]["status"], first[name]["reason"])
        assert after["mutants"] == before["mutants"] and after["runs"] == 0
        assert after["survivors"] == before["survivors"]  # with their diffs


def with_plan(env: Environment, **changes: Any) -> Environment:
    harbor = env.harbor
    assert harbor is not None and harbor.strength is not None
    plan = harbor.strength.model_copy(update=changes)
    return env.model_copy(update={"harbor": harbor.model_copy(update={"strength": plan})})


def cycle(demo: Catalogue, env: Environment, runtime: DockerRuntime,
          tmp_path: Path) -> ProbeResult:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        [result] = run_cycle([env], [ProbeKind.TESTS], runtime, store.start_run("test", []),
                             services=build_services(demo, store))
    return result


def test_a_required_score_fails_the_probe(demo: Catalogue, runtime: DockerRuntime,
                                          tmp_path: Path) -> None:
    env = with_plan(demo.environment(WEAK), mutants=3, require=True)
    result = cycle(demo, env, runtime, tmp_path)
    assert (result.status, result.reason) == (Status.FAIL, Reason.WEAK_VERIFIER), result.summary
    assert result.details["strength"]["counts"]["survived"] == 3


def test_mutants_the_time_budget_leaves_out_are_listed(demo: Catalogue, runtime: DockerRuntime,
                                                       tmp_path: Path) -> None:
    env = with_plan(demo.environment(WEAK), mutants=3)
    rushed = env.model_copy(update={"timeouts": env.timeouts.model_copy(
        update={"probe_s": 0.001})})
    with ExitStack() as stack:
        ctx = ProbeContext(rushed, new_run_id(), runtime, None, stack)
        verdict = with_strength_controls(ctx, PASSED)
    info = verdict.details["strength"]
    assert info["partial"] is True and len(info["unplayed"]) == 3 and info["mutants"] == []
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
    assert "3 not played: probe_s reached" in verdict.summary


def alone(env: Environment, runtime: DockerRuntime) -> Verdict:
    """The controls of ``env`` (its image built if need be) after a pass of its protocol."""
    with ExitStack() as stack:
        ctx = ProbeContext(env, new_run_id(), runtime, None, stack)
        prepare_image(ctx)
        return with_strength_controls(ctx, PASSED)


def test_a_task_whose_oracle_writes_nothing_to_change_says_why(
        demo: Catalogue, runtime: DockerRuntime, tmp_path: Path) -> None:
    env = demo.environment(STRONG)
    assert env.harbor is not None
    bare = env.model_copy(update={"harbor": env.harbor.model_copy(
        update={"solution_hash": None})})
    verdict = alone(bare, runtime)
    info = verdict.details["strength"]
    assert info["played"] is False and info["why"].startswith("no solution/solve.sh")
    assert "wrong-output controls not played: no solution/solve.sh" in verdict.summary
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
    # a solve.sh that writes only to /tmp (a tmpfs, never in the container's diff) and its
    # harness's logs: nothing it wrote can be changed
    folder = tmp_path / STRONG
    shutil.copytree(env.harbor.task_dir, folder)
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\necho 1 > /tmp/answer\n")
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    idle = env.model_copy(update={"harbor": env.harbor.model_copy(
        update={"task_dir": str(folder)})})
    info = alone(idle, runtime).details["strength"]
    assert info["played"] is False and info["runs"] == 1
    assert info["why"].startswith("the oracle changed no file the wrong-output controls could "
                                  "change (left out: ")
    assert info["generated"]["outputs"] == [] and info["generated"]["left_out"]


LEAKS = ROOT / "probes" / "demo-leaks.yaml"


def scripted(oracle: Oracle | None = None) -> Environment:
    """The hardened demo task, whose oracle script applies a fix to calc/stats.py."""
    env = load_catalogue([LEAKS]).environment("demo-leaks-task")
    assert env.tests is not None
    update: dict[str, Any] = {"leaks": None, "strength": Strength(mutants=6)}
    if oracle is not None:
        update["oracle"] = oracle
    return env.model_copy(update={"tests": env.tests.model_copy(update=update)})


def test_a_catalogue_script_oracle_has_its_written_sources_mutated(
        runtime: DockerRuntime) -> None:
    env = scripted()
    with ExitStack() as stack:
        verdict = with_strength_controls(ProbeContext(env, new_run_id(), runtime, None, stack),
                                         PASSED)
    info = verdict.details["strength"]
    assert info["played"] is True, info.get("why")
    assert info["generated"]["outputs"] == ["/workspace/calc/stats.py"]
    assert len(info["mutants"]) == 6 and info["counts"]["incompetent"] == 0
    operators = {m["operator"] for m in info["mutants"]}
    assert operators <= {str(op) for op in Operator} and "truncated" not in operators
    # the file was in the image: its mutants are on the lines the fix changed in median()
    # (19-22), never in mode() or mean() beside it, which the tests do not check
    assert {m["line"] for m in info["mutants"]} <= set(range(19, 23)), info["mutants"]
    killed = [m for m in info["mutants"] if m["outcome"] == "killed"]
    assert killed and all(m["detail"] == "fail-to-pass test failed: "
                          "tests/test_stats.py::test_median_even_length" for m in killed)
    assert info["counts"]["survived"] == 0 and info["score"] == 1.0
    assert info["counts"]["killed"] + info["counts"]["killed_p2p"] == 6
    # the oracle's run, the image's original read in a container of its own, the mutants'
    assert info["runs"] == 2 + sum(1 if m["outcome"] == "killed" else 2
                                   for m in info["mutants"])
    # an oracle script that fixes nothing: its run shows no output to tell wrong from
    idle = scripted(Oracle(script="true\n"))
    with ExitStack() as stack:
        info = with_strength_controls(ProbeContext(idle, new_run_id(), runtime, None, stack),
                                      PASSED).details["strength"]
    assert info["played"] is False and info["mutants"] == []
    assert info["why"] == ("the oracle's run that read its files back did not pass (tests/"
                           "test_stats.py::test_median_even_length failed): no wrong output "
                           "can be told from it")


def test_what_the_oracle_wrote_is_found_and_overwritten_keeping_mode_and_owner(
        runtime: DockerRuntime) -> None:
    setup = (
        "mkdir -p /app/out /app/__pycache__ /app/.git /opt/results && cd /app && "
        "printf 'a,b\\n1,2\\n' > out/table.csv && chown 1000:1000 out/table.csv && "
        "chmod 640 out/table.csv && echo '{\"n\": 3}' > /opt/results/r.json && "
        "echo x > __pycache__/m.cpython-311.pyc && echo x > .git/HEAD && echo x > run.log && "
        "echo x > /var/tmp/oracle.sh && ln -s out/table.csv link.csv && "
        f"head -c {READ_MAX + 10} /dev/zero | tr '\\0' a > big.txt && rm -f /etc/issue")
    spec = SandboxSpec("strength-written", "envcheck/base:bookworm", new_run_id(),
                       capabilities=ENGINE_DEFAULT_CAPABILITIES)  # Harbor's: chown works
    with runtime.sandbox(spec) as sandbox:
        made = sandbox.exec(["sh", "-c", setup], user="0", timeout_s=30)
        assert made.exit_code == 0, made.text
        found = read_written(sandbox, "/app", "0", 30)
        assert found.why is None
        assert sorted(found.files) == ["/app/out/table.csv", "/opt/results/r.json"]
        assert found.files["/app/out/table.csv"] == b"a,b\n1,2\n"
        assert found.owners["/app/out/table.csv"] == Owner(0o640, 1000, 1000)
        left = found.left_out
        assert left["too large"] == 1 and left["deleted"] >= 1
        assert left["a cache or hidden path"] >= 2 and left["compiled or a log"] == 1
        assert left["a system path"] >= 1 and left["not a regular file"] >= 1
        mutant = OutputMutant(Operator.RECORD_DROPPED, "/app/out/table.csv", 2, "dropped", "",
                              "a,b\n")
        assert overwrite(sandbox, mutant.file, mutant.content,
                         found.owners[mutant.file]) is None
        after = sandbox.exec(["stat", "-c", "%a %u %g %s", mutant.file], user="0",
                             timeout_s=30)
        assert after.text.split() == ["640", "1000", "1000", "4"]
        cat = sandbox.exec(["cat", mutant.file], user="0", timeout_s=30)
        assert cat.text == "a,b\n"
        refused = overwrite(sandbox, "/nowhere/x.csv", "x", Owner(0o644, 0, 0))
        assert refused is not None and refused.startswith("/nowhere/x.csv could not be written")
