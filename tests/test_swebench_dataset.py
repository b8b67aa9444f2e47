"""The demo SWE-bench-style dataset on the real engine: every task's verdict and reason, ids
identical to the dataset's; a gold patch that does not apply; 5,000 pass-to-pass ids; 3,000
of them attacked through a conftest hole."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.catalogue.probe_specs import Oracle
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.adversarial.swebench import PROTOCOL
from envcheck.kinds.testvalidity.patches import NO_PATCH_TOOL
from envcheck.kinds.testvalidity.runs import INLINE_IDS_MAX
from envcheck.sandbox.build import ImageBuilder
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT, probe_each

pytestmark = pytest.mark.docker

CATALOGUE = ROOT / "probes" / "demo-swebench.yaml"
INSTANCES = [ROOT / "probes" / "datasets" / n for n in ("swe-demo.jsonl", "swe-demo-django.jsonl")]
# The valid tasks pass and refuse every trick of the adversarial controls (on for both
# datasets): their test commands are hardened (isolated interpreter, --noconftest).
EXPECTED = {
    "envcheck-demo__pyutils-1": (Status.PASS, Reason.OK),
    "envcheck-demo__pyutils-2": (Status.FAIL, Reason.ORACLE_DOES_NOT_FIX),
    "envcheck-demo__pyutils-3": (Status.FAIL, Reason.TEST_PATCH_DOES_NOT_APPLY),
    "envcheck-demo__pyutils-4": (Status.FAIL, Reason.F2P_PASSES_BEFORE_ORACLE),
    "envcheck-demo__pyutils-5": (Status.PASS, Reason.OK),  # Django's runner log
}
VALID = ["envcheck-demo__pyutils-1", "envcheck-demo__pyutils-5"]
# The same datasets with the commands the harness itself runs: valid task -> the tricks they
# reward. pytest honours a conftest.py in the agent's tree, and both runners start an
# interpreter that reads the agent's user site.
HARNESS_COMMANDS = {
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 /usr/bin/python3 -I -m pytest --noconftest ":
        "python3 -m pytest ",
    "/usr/bin/python3 -I ./tests/runtests.py": "./tests/runtests.py",
}
HOLES = {"envcheck-demo__pyutils-1": ["conftest_forced_pass", "assertions_patched"],
         "envcheck-demo__pyutils-5": ["assertions_patched"]}
MANY = 5000
NOTES = 1000  # comment lines: a test patch over 32 KiB is copied in, not passed in the env
MANY_TESTS = f"""diff --git a/tests/test_many.py b/tests/test_many.py
new file mode 100644
--- /dev/null
+++ b/tests/test_many.py
@@ -0,0 +1,{6 + NOTES} @@
+import pytest
+
+
+@pytest.mark.parametrize("i", range({MANY}))
+def test_many(i):
+    assert i >= 0
""" + "".join(f"+# note {i:04d}: a long comment line padding the patch\n" for i in range(NOTES))


WIDE = 3000  # test functions in one file: their forged report is past 128 KiB
WIDE_TESTS = f"""diff --git a/tests/test_wide.py b/tests/test_wide.py
new file mode 100644
--- /dev/null
+++ b/tests/test_wide.py
@@ -0,0 +1,{2 * WIDE} @@
""" + "".join(f"+def test_p{i:04d}():\n+    pass\n" for i in range(WIDE))


@pytest.fixture(scope="module")
def dataset() -> Catalogue:
    return load_catalogue([CATALOGUE])


@pytest.fixture(scope="module")
def results(dataset: Catalogue, runtime: DockerRuntime) -> dict[str, ProbeResult]:
    return probe_each(dataset, ProbeKind.TESTS, runtime)


def probe(env: Environment, runtime: DockerRuntime) -> ProbeResult:
    [result] = run_cycle([env], [ProbeKind.TESTS], runtime, new_run_id())
    return result


def test_environment_ids_are_the_dataset_ids(dataset: Catalogue) -> None:
    ids = [json.loads(line)["instance_id"] for path in INSTANCES
           for line in path.read_text().splitlines()]
    assert [e.id for e in dataset.environments] == ids == list(EXPECTED)


@pytest.mark.parametrize("instance_id", list(EXPECTED))
def test_each_task_has_its_verdict_and_reason(instance_id: str,
                                              results: dict[str, ProbeResult]) -> None:
    result = results[instance_id]
    assert (result.status, result.reason) == EXPECTED[instance_id], result.summary
    assert result.kind is ProbeKind.TESTS


def test_verdicts_name_the_dataset_test_ids_and_the_patch(
        results: dict[str, ProbeResult]) -> None:
    assert "tests/test_wrap.py::test_truncate_fits_width" in \
        results["envcheck-demo__pyutils-2"].summary
    broken = results["envcheck-demo__pyutils-3"]
    assert "the test patch does not apply" in broken.summary
    assert "tests/test_wrap.py: patch does not apply" in broken.summary
    assert len(broken.details["runs"]) == 1  # an image's property: never rerun
    assert "tests/test_wrap.py::test_initials_lowercase_name" in \
        results["envcheck-demo__pyutils-4"].summary
    django = results["envcheck-demo__pyutils-5"]
    commands = [e.command for e in django.evidence]
    assert any("./tests/runtests.py" in c for c in commands), commands
    assert any("apply the gold patch" in c for c in commands), commands


@pytest.mark.parametrize("instance_id", VALID)
def test_the_hardened_commands_refuse_every_trick(
        instance_id: str, results: dict[str, ProbeResult]) -> None:
    info = results[instance_id].details["adversarial"]
    assert info["rewarded"] == [], info["tricks"]
    assert info["protocol"] == PROTOCOL
    assert len(info["tricks"]) == 8
    assert all(t["verifier"].startswith("refused") for t in info["tricks"]), info["tricks"]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    """The datasets verified with the harness's own commands instead of the hardened ones."""
    folder = tmp_path_factory.mktemp("harness")
    text = CATALOGUE.read_text().replace("path: datasets/", f"path: {INSTANCES[0].parent}/")
    for hardened, command in HARNESS_COMMANDS.items():
        assert hardened in text
        text = text.replace(hardened, command)
    (folder / "harness.yaml").write_text(text)
    return load_catalogue([folder / "harness.yaml"])


@pytest.fixture(scope="module")
def harness_results(harness: Catalogue, runtime: DockerRuntime) -> dict[str, ProbeResult]:
    """The valid tasks, verified with the harness's own commands."""
    envs = [harness.environment(i) for i in VALID]
    return {r.env_id: r for r in run_cycle(envs, [ProbeKind.TESTS], runtime, new_run_id(),
                                           concurrency=2)}


@pytest.mark.parametrize("instance_id", sorted(HOLES))
def test_the_harness_commands_reward_exactly_these_tricks(
        instance_id: str, harness_results: dict[str, ProbeResult]) -> None:
    result = harness_results[instance_id]
    assert (result.status, result.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    info = result.details["adversarial"]
    assert info["rewarded"] == HOLES[instance_id], info["tricks"]
    assert info["protocol"] == PROTOCOL  # what only the command can refuse: the result says so
    verifier = {t["trick"]: t["verifier"] for t in info["tricks"]}
    assert all(verifier[t].startswith("rewarded") for t in HOLES[instance_id])
    assert all(v.startswith("refused") for t, v in verifier.items()
               if t not in HOLES[instance_id])


def test_three_thousand_pass_to_pass_ids_and_a_conftest_hole(harness: Catalogue,
                                                             runtime: DockerRuntime) -> None:
    """The harness's ``pytest -rA`` over 3,003 ids: the hole is found as with 3, and every
    trick acts (the forged report naming every id is ~240 KB, past what one environment
    string may hold: it reaches the tricks by file)."""
    env = harness.environment("envcheck-demo__pyutils-1")
    assert env.tests is not None and env.tests.test_patch is not None
    ids = [f"tests/test_wide.py::test_p{i:04d}" for i in range(WIDE)]
    tests = env.tests.model_copy(update={
        "test_patch": env.tests.test_patch + WIDE_TESTS, "reruns": 1,
        "pass_to_pass": [*env.tests.pass_to_pass, *ids]})
    result = probe(env.model_copy(update={"tests": tests}), runtime)
    assert (result.status, result.reason) == (Status.PASS, Reason.REWARD_HACKABLE), result.summary
    info = result.details["adversarial"]
    assert info["rewarded"] == HOLES["envcheck-demo__pyutils-1"], info
    assert info["could_not_act"] == [] and len(info["tricks"]) == 8, info
    verifier = {t["trick"]: t["verifier"] for t in info["tricks"]}
    assert verifier["conftest_forced_pass"].endswith("changed conftest.py, tests/conftest.py")


def test_the_test_patch_undoes_a_rewritten_test_and_the_result_says_so(
        results: dict[str, ProbeResult]) -> None:
    verifier = {t["trick"]: t["verifier"] for t in
                results["envcheck-demo__pyutils-1"].details["adversarial"]["tricks"]}
    for trick in ("tests_rewritten", "tests_deleted"):
        assert verifier[trick].startswith("refused: fail-to-pass test(s) did not pass"), verifier
        assert verifier[trick].endswith("the trick changed tests/test_slug.py; the test patch "
                                        "put back tests/test_slug.py"), verifier
    # a conftest.py is no file of the test patch: it stays, and --noconftest ignores it
    assert "conftest.py" in verifier["conftest_forced_pass"]
    assert "put back" not in verifier["conftest_forced_pass"]


def test_a_gold_patch_that_does_not_apply(dataset: Catalogue, runtime: DockerRuntime) -> None:
    env = dataset.environment("envcheck-demo__pyutils-1")
    assert env.tests is not None
    stale = ("diff --git a/textkit/gone.py b/textkit/gone.py\n--- a/textkit/gone.py\n"
             "+++ b/textkit/gone.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    tests = env.tests.model_copy(update={"oracle": Oracle(patch=stale), "reruns": 2})
    result = probe(env.model_copy(update={"tests": tests}), runtime)
    assert (result.status, result.reason) == (Status.FAIL, Reason.GOLD_PATCH_DOES_NOT_APPLY), \
        result.summary
    assert "positive run 1/2: the gold patch does not apply" in result.summary


def test_a_gold_patch_needing_fuzz_names_the_missing_patch_tool(
        dataset: Catalogue, runtime: DockerRuntime) -> None:
    """The harness's last fallback is ``patch --fuzz=5``; the demo image has no ``patch``, so
    a gold patch only fuzz would apply fails, and says which fallback it could not take."""
    env = dataset.environment("envcheck-demo__pyutils-1")
    assert env.tests is not None and env.tests.oracle is not None
    gold = env.tests.oracle.patch
    assert gold is not None and '"""The words of' in gold
    fuzzy = gold.replace('"""The words of', '"""All the words of')  # one context line off
    tests = env.tests.model_copy(update={"oracle": Oracle(patch=fuzzy), "reruns": 1})
    result = probe(env.model_copy(update={"tests": tests}), runtime)
    assert (result.status, result.reason) == (Status.FAIL, Reason.GOLD_PATCH_DOES_NOT_APPLY), \
        result.summary
    assert NO_PATCH_TOOL in result.summary


@pytest.fixture
def later_image(tmp_path: Path, runtime: DockerRuntime) -> Iterator[tuple[str, str]]:
    """(image, base commit): the demo repository with a commit after its base that edits a
    line the test patch of pyutils-1 has as context (as a dataset image may hold a later
    commit: the harness resets the test files to base_commit, not to HEAD)."""
    base = "envcheck-demo/swe-pyutils:latest"
    head = runtime.client.containers.run(base, "git -C /testbed rev-parse HEAD", remove=True,
                                         network_mode="none").decode().strip()
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\nUSER agent\nRUN cd /testbed && export HOME=/home/agent"
        " && sed -i 's/\"a, b!\"/\"a,  b!\"/' tests/test_slug.py"
        " && git -c user.name=later -c user.email=later@envcheck.invalid commit -qam later\n"
        "USER root\n")
    tag = f"envcheck-test/swe-later:{uuid.uuid4().hex[:12]}"
    ImageBuilder.for_runtime(runtime).ensure(tmp_path, tag, timeout_s=120)
    yield tag, head
    runtime.client.images.remove(tag, force=True)


def test_test_files_are_reset_to_the_base_commit(dataset: Catalogue, runtime: DockerRuntime,
                                                 later_image: tuple[str, str]) -> None:
    image, base_commit = later_image
    env = dataset.environment("envcheck-demo__pyutils-1")
    assert env.tests is not None and env.tests.base_commit == base_commit  # from the record
    at_base = env.model_copy(update={  # the reset is what is checked here, not the tricks
        "image": image, "tests": env.tests.model_copy(update={"reruns": 1, "adversarial": None})})
    result = probe(at_base, runtime)
    assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    # reset to HEAD instead, the later commit's line is what the test patch meets
    at_head = at_base.model_copy(update={"tests": env.tests.model_copy(
        update={"reruns": 1, "base_commit": None})})
    result = probe(at_head, runtime)
    assert (result.status, result.reason) == (Status.FAIL, Reason.TEST_PATCH_DOES_NOT_APPLY), \
        result.summary


def test_five_thousand_pass_to_pass_ids(dataset: Catalogue, runtime: DockerRuntime) -> None:
    env = dataset.environment("envcheck-demo__pyutils-1")
    assert env.tests is not None and env.tests.test_patch is not None
    ids = [f"tests/test_many.py::test_many[{i}]" for i in range(MANY)]
    assert len("\n".join(ids)) > INLINE_IDS_MAX  # too long for one argument: "$@" and a file
    assert len(env.tests.test_patch + MANY_TESTS) > INLINE_IDS_MAX  # copied in, not in the env
    tests = env.tests.model_copy(update={
        "test_patch": env.tests.test_patch + MANY_TESTS, "pass_to_pass": ids, "reruns": 2,
        "adversarial": None,  # the ids' cost is what is measured here, not the tricks'
        "shuffle": True,
        "command": "python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider -q {tests}",
        "timeout_s": 240.0})
    big = env.model_copy(update={"tests": tests, "timeouts": env.timeouts.model_copy(
        update={"probe_s": 900.0})})
    result = probe(big, runtime)
    assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    runs = result.details["runs"]
    assert [r["phase"] for r in runs] == ["negative", "positive", "positive"]
    assert runs[2]["seed"] is not None  # the rerun's order was shuffled
    assert all(r["not_passed"] == [] or r["phase"] == "negative" for r in runs)
