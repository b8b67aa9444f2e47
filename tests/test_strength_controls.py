"""The wrong-fix controls on the real engine: the demo tasks of probes/demo-strength.yaml
through ``envcheck check`` (a weak test that asserts only the result's type: weak_verifier,
naming its survivors, each confirmed by what the function returned; a strong one: every
mutant killed); a required score that fails; reuse per image digest and spec through the
store; controls that could not be played, or that the time budget cut short, said so
(strength_not_measurable) and never reused."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment, Timeouts
from envcheck.catalogue.probe_specs import Oracle, Strength
from envcheck.core.results import ProbeKind, Reason, Status
from envcheck.executors.cycle import new_run_id
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.strength.controls import with_strength_controls
from envcheck.kinds.strength.play import POST_IMAGE_MAX, mutable_files, post_images
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT, envcheck_cmd, probed_in_turn

pytestmark = pytest.mark.docker

DEMO = ROOT / "probes" / "demo-strength.yaml"
WEAK, STRONG = "envcheck-demo__pyutils-6-weak", "envcheck-demo__pyutils-6-strong"
PASSED = Verdict(Status.PASS, Reason.OK, "2 runs agree", {})


@pytest.fixture(scope="module")
def demo() -> Catalogue:
    return load_catalogue([DEMO])


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both demo tasks through ``envcheck check --json`` (its own store), by id."""
    env = {k: v for k, v in os.environ.items() if k != "ENVCHECK_DATABASE_URL"}
    env["ENVCHECK_DATA_DIR"] = str(tmp_path_factory.mktemp("strength") / "data")
    done = subprocess.run([*envcheck_cmd(), "check", str(DEMO), "-p", "tests", "--json"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return {line["env"]: line for line in lines if line.get("probe") == "tests"}


def with_strength(env: Environment, **changes: Any) -> Environment:
    assert env.tests is not None and env.tests.strength is not None
    plan = env.tests.strength.model_copy(update=changes)
    return env.model_copy(update={"tests": env.tests.model_copy(update={"strength": plan})})


def test_a_test_that_asserts_only_the_type_is_a_weak_verifier(
        checked: dict[str, dict[str, Any]]) -> None:
    result = checked[WEAK]
    assert (result["status"], result["reason"]) == ("pass", "weak_verifier"), result["summary"]
    info = result["details"]["strength"]
    assert info["played"] is True and info["require"] is False
    assert info["counts"]["survived"] >= 6 and info["score"] < 0.8
    assert info["counts"]["incompetent"] == 0 and info["counts"]["timeout"] == 0
    assert info["generated"]["mutants"] == len(info["mutants"]) == 10
    survivors = info["survivors"]
    assert len(survivors) == info["counts"]["confirmed"] >= 6
    for survivor in survivors:  # each with its operator, place, diff, and what told it apart
        assert survivor["file"] == "textkit/wrap.py" and survivor["operator"]
        assert survivor["diff"].startswith("diff --git a/textkit/wrap.py b/textkit/wrap.py")
        assert survivor["detail"] == "every fail-to-pass and pass-to-pass test passed"
        assert survivor["class"] == "confirmed"
        assert survivor["class_why"].startswith(
            "`textkit/wrap.py:word_count` returned ") and survivor["class_why"].endswith(
            " in tests/test_wrap.py::test_word_count where under the gold patch it returned 2")
    named = survivors[0]["description"]
    assert named in result["summary"] and "weak verifier: " in result["summary"]
    # the killed ones: only what breaks the type (return None) or the run
    killed = [m for m in info["mutants"] if m["outcome"] == "killed"]
    assert killed and all(m["detail"].startswith("fail-to-pass test failed: tests/test_wrap.py"
                                                 "::test_word_count") for m in killed)
    per_op = info["per_operator"]
    assert sum(row["confirmed"] + row["not_distinguished"] for row in per_op.values()) == \
        info["counts"]["survived"]
    assert sum(row["generated"] for row in per_op.values()) >= 10
    # the trials, the gold patch recorded twice, each survivor once
    assert info["runs"] >= 1 + 10 + 2 + info["counts"]["survived"]


def test_a_strong_test_kills_every_mutant(checked: dict[str, dict[str, Any]]) -> None:
    result = checked[STRONG]
    assert (result["status"], result["reason"]) == ("pass", "ok"), result["summary"]
    info = result["details"]["strength"]
    assert info["score"] == 1.0 and info["survivors"] == info["survivors_apart"] == []
    assert info["counts"]["killed"] == 10 and info["counts"]["incompetent"] == 0
    assert "wrong-fix controls: 10 generated: 10 of 10 mutant(s) told apart from the fix " \
        "killed (score 1.00)" in result["summary"]
    # the same seed (digest and spec hash) and the same sample as the weak task's gold patch
    # would give under its own spec: the sample is the spec's, not the run's
    assert info["generated"]["seed"].endswith(result["spec_hash"])


def test_required_strength_fails_and_controls_run_once_per_image_and_spec(
        tmp_path: Path, demo: Catalogue, runtime: DockerRuntime) -> None:
    env = with_strength(demo.environment(WEAK), mutants=4, require=True)
    first, second = probed_in_turn(demo, runtime, tmp_path / "store.db", env, env)
    assert (first.status, first.reason) == (Status.FAIL, Reason.WEAK_VERIFIER), first.summary
    info, again = first.details["strength"], second.details["strength"]
    assert "reused" not in info and info["runs"] > 4
    assert again["reused"] == {"from": first.started_at.isoformat()}
    assert (second.status, second.reason) == (Status.FAIL, Reason.WEAK_VERIFIER)
    assert again["survivors"] == info["survivors"] and again["score"] == info["score"]
    assert again["runs"] == 0 and "seconds" not in again  # the mutants' runs not paid again


def alone(env: Environment, runtime: DockerRuntime) -> Verdict:
    """The wrong-fix controls of ``env`` after a pass of its own controls, nothing else."""
    with ExitStack() as stack:
        ctx = ProbeContext(env, new_run_id(), runtime, None, stack)
        return with_strength_controls(ctx, PASSED)


def test_controls_that_cannot_be_played_say_why_and_give_no_score(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    env = demo.environment(STRONG)
    assert env.tests is not None and env.tests.oracle is not None
    # a gold patch the image's repository does not take: its files cannot be read back
    wrong = env.tests.oracle.patch
    assert wrong is not None
    broken = env.model_copy(update={"tests": env.tests.model_copy(update={
        "oracle": Oracle(patch=wrong.replace("textkit/wrap.py", "textkit/nowhere.py"))})})
    verdict = alone(broken, runtime)
    info = verdict.details["strength"]
    assert info["played"] is False and info["score"] is None
    assert info["why"].startswith("the gold patch did not apply in a fresh container")
    assert verdict.summary.startswith("strength not measurable: wrong-fix controls not played: "
                                      "the gold patch did not apply")
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
    assert verdict.evidence and "apply the gold patch" in verdict.evidence[0].command
    # an oracle that is a script: its outputs are changed instead (wrong-output controls,
    # tests/test_strength_wrong_outputs.py); one that fixes nothing shows no output to change
    script = env.model_copy(update={"tests": env.tests.model_copy(update={
        "oracle": Oracle(script="true\n")})})
    info = alone(script, runtime).details["strength"]
    assert info["played"] is False and info["generated"]["of"] == "outputs"
    assert info["why"].startswith("the oracle's run that read its files back did not pass")


def new_file(path: str, size: int) -> tuple[str, str]:
    """A unified diff creating ``path``, a Python file of ``size`` bytes, and its text."""
    line = "VALUE_%07d = 1\n"
    text = "".join(line % i for i in range(size // len(line % 0)))
    added = "".join(f"+{row}\n" for row in text.splitlines())
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{text.count(chr(10))} @@\n{added}"), text


def test_post_images_are_read_whole_up_to_the_cap_and_past_it_skipped_with_why(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    env = demo.environment(STRONG)
    assert env.tests is not None
    # past half the cap (what a CappedOutput's head holds of its limit), below it; past it
    middle, text = new_file("textkit/middle.py", POST_IMAGE_MAX * 3 // 4)
    past, _ = new_file("textkit/past.py", POST_IMAGE_MAX + 4096)
    gold = middle + past
    spec = env.tests.model_copy(update={"oracle": Oracle(patch=gold)})
    files = mutable_files(gold)
    assert files == ["textkit/middle.py", "textkit/past.py"]
    with ExitStack() as stack:
        images = post_images(ProbeContext(env, new_run_id(), runtime, None, stack), spec, files)
    assert images.why is None
    assert list(images.texts) == ["textkit/middle.py"]
    assert len(images.texts["textkit/middle.py"]) == len(text) > POST_IMAGE_MAX // 2
    assert images.texts["textkit/middle.py"] == text
    assert [(s.file, s.why) for s in images.skipped] == [
        ("textkit/past.py", f"larger than {POST_IMAGE_MAX} bytes after the gold patch: not "
                            "read whole")]


def test_mutants_the_time_budget_leaves_out_are_listed_and_make_no_verdict(
        demo: Catalogue, runtime: DockerRuntime) -> None:
    env = with_strength(demo.environment(WEAK), mutants=3)
    rushed = env.model_copy(update={"timeouts": Timeouts(probe_s=0.001)})
    verdict = alone(rushed, runtime)
    info = verdict.details["strength"]
    assert info["partial"] is True and len(info["unplayed"]) == 3 and info["mutants"] == []
    assert info["score"] is None and "not_measurable" in info
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.STRENGTH_NOT_MEASURABLE)
    assert "3 not played: probe_s reached" in verdict.summary


def test_a_strength_block_is_off_unless_declared_and_keeps_old_spec_hashes(
        demo: Catalogue) -> None:
    env = demo.environment(STRONG)
    assert env.tests is not None
    spec = env.tests.model_copy(update={"strength": None})
    bare = env.model_copy(update={"tests": spec})
    assert bare.strength() is None and "strength" not in spec.model_dump()
    assert bare.spec_hash(ProbeKind.TESTS) != env.spec_hash(ProbeKind.TESTS)
    assert env.strength() == Strength(mutants=10)
