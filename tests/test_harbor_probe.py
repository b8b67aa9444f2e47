"""Harbor task folders through the tests probe on the real engine: every demo task's verdict
and reason, the build cache, prebuilt images, the network a task may join, and envcheck's own
failures told apart from the task's."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import docker
import docker.errors
import pytest

from envcheck.catalogue.harbor_env import harbor_parts, image_tag
from envcheck.catalogue.harbor_task import read_task
from envcheck.catalogue.models import Environment, Limits, Timeouts
from envcheck.catalogue.treehash import tree_hash
from envcheck.core.errors import EngineUnreachable, ImageBuildFailed
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.testvalidity.probe import TestsProbe
from envcheck.sandbox.build import LABEL_BUILD_HASH, ImageBuilder
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT

DEMO = ROOT / "probes" / "harbor"
BASE = "envcheck/base:bookworm"
EXPECTED = {
    "hello-world": (Status.PASS, Reason.OK),
    "always-rewards": (Status.FAIL, Reason.NOP_REWARDED),
    "solution-no-fix": (Status.FAIL, Reason.ORACLE_DOES_NOT_FIX),
    "flaky-verifier": (Status.FLAKY, Reason.NONDETERMINISTIC),
    "build-fails": (Status.FAIL, Reason.IMAGE_BUILD_FAILED),
    "no-reward": (Status.FAIL, Reason.REWARD_MISSING),
    "compose-task": (Status.PASS, Reason.OK),
    "compose-sidecar-fails": (Status.FAIL, Reason.SERVICE_START_FAILED),
    "compose-never-healthy": (Status.FAIL, Reason.SERVICE_UNHEALTHY),
}
pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def builder(runtime: DockerRuntime) -> ImageBuilder:
    return ImageBuilder.for_runtime(runtime)


def environment(folder: Path, reruns: int = 3, **kwargs: object) -> Environment:
    got = harbor_parts(read_task(folder), limits=Limits(), timeouts=Timeouts(), reruns=reruns,
                       **kwargs)  # type: ignore[arg-type]
    return Environment(id=folder.name, suite="harbor", image=got.image, user=got.user,
                       workdir=got.workdir, limits=got.limits, timeouts=got.timeouts,
                       harbor=got.harbor)


def probe(env: Environment, runtime: DockerRuntime, builder: ImageBuilder) -> ProbeResult:
    with ExitStack() as stack:
        ctx = ProbeContext(env, uuid.uuid4().hex, runtime, None, stack, {ImageBuilder: builder})
        return TestsProbe().run(ctx)


def task(tmp_path: Path, test_sh: str, toml: str = "", solve_sh: str | None = None) -> Path:
    """A task on the base image (prebuilt: nothing to build) with the given scripts."""
    folder = tmp_path / f"task-{uuid.uuid4().hex[:8]}"
    shutil.copytree(DEMO / "hello-world", folder)
    (folder / "task.toml").write_text(f'[environment]\ndocker_image = "{BASE}"\n{toml}')
    (folder / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test_sh}\n")
    if solve_sh is not None:
        (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve_sh}\n")
    return folder


@pytest.fixture(scope="module")
def demo(runtime: DockerRuntime, builder: ImageBuilder) -> dict[str, ProbeResult]:
    found = {name: probe(environment(DEMO / name, reruns=2), runtime, builder)
             for name in EXPECTED if name != "flaky-verifier"}
    # 8 oracle runs of a verifier dropping half its rewards all agree with probability
    # 2 * (1/2)^8 = 0.8%; two more tries make a miss here a one-in-two-million event.
    flaky = environment(DEMO / "flaky-verifier", reruns=8)
    for _ in range(3):
        found["flaky-verifier"] = probe(flaky, runtime, builder)
        if found["flaky-verifier"].status is Status.FLAKY:
            break
    return found


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_demo_task_has_its_verdict(name: str, demo: dict[str, ProbeResult]) -> None:
    result = demo[name]
    assert (result.status, result.reason) == EXPECTED[name], result.summary
    assert result.kind is ProbeKind.TESTS and result.summary.startswith(name)
    if result.status is not Status.SKIP:
        assert result.evidence, "a verdict comes with its evidence"


def test_an_oracle_left_no_time_is_never_a_pass(runtime: DockerRuntime,
                                                builder: ImageBuilder) -> None:
    """``probe_s`` spent by the nop run: solve.sh never ran. Was a pass ("oracle: reward 1 in
    all 0 runs")."""
    env = environment(DEMO / "hello-world", reruns=2)
    short = env.model_copy(update={"timeouts": env.timeouts.model_copy(update={"probe_s": 0.01})})
    result = probe(short, runtime, builder)
    assert (result.status, result.reason) == (Status.FAIL, Reason.TIMEOUT), result.summary
    assert result.summary.endswith("reached after the nop run: the oracle was not played")
    assert [r["phase"] for r in result.details["runs"]] == ["nop"]


def test_the_demo_covers_every_harbor_reason() -> None:
    assert {d.name for d in DEMO.iterdir() if d.is_dir()} == set(EXPECTED)


def test_runs_and_rewards_are_in_the_details(demo: dict[str, ProbeResult]) -> None:
    runs = demo["hello-world"].details["runs"]
    assert [(r["phase"], r["reward"]) for r in runs] == [("nop", 0.0)] + [("oracle", 1.0)] * 2
    # reruns counts the oracle runs, the nop run named apart (as a dataset's tests say it)
    assert demo["hello-world"].summary == ("hello-world: negative control (nop): reward 0; "
                                           "oracle in all 2 runs: reward 1")
    assert demo["hello-world"].details["network"] == "none"
    flaky = [r["reward"] for r in demo["flaky-verifier"].details["runs"][1:]]
    assert {0.0, 1.0} == set(flaky)
    nop = demo["always-rewards"].details["runs"]
    assert nop[0]["reward_source"] == "reward.json: reward" and len(nop) == 1


def test_a_build_failure_carries_the_build_logs_tail(demo: dict[str, ProbeResult]) -> None:
    [evidence] = demo["build-fails"].evidence
    assert "/etc/hello-task.conf is missing" in evidence.output_tail
    assert "returned a non-zero code" in demo["build-fails"].summary


def test_an_unchanged_context_is_never_rebuilt(tmp_path: Path, runtime: DockerRuntime) -> None:
    context = tmp_path / "environment"
    shutil.copytree(DEMO / "hello-world" / "environment", context)
    builder = ImageBuilder(runtime.client, host=runtime.host)  # its own build count
    name = f"cache-{uuid.uuid4().hex[:8]}"
    tags = []
    try:
        first = builder.ensure(context, image_tag(name, tree_hash(context)), timeout_s=120)
        second = builder.ensure(context, image_tag(name, tree_hash(context)), timeout_s=120)
        tags.append(first.tag)
        assert (first.built, second.built, builder.builds) == (True, False, 1)
        assert second.image_id == first.image_id
        labels = runtime.client.images.get(first.tag).labels
        assert labels[LABEL_BUILD_HASH] == tree_hash(context)
        (context / "Dockerfile").write_text((context / "Dockerfile").read_text() + "ENV X=1\n")
        third = builder.ensure(context, image_tag(name, tree_hash(context)), timeout_s=120)
        tags.append(third.tag)
        assert (third.built, builder.builds) == (True, 2) and third.tag != first.tag
    finally:
        for tag in tags:
            runtime.client.images.remove(tag, force=True)


def test_a_prebuilt_image_and_an_override_are_used_as_given(
        runtime: DockerRuntime, builder: ImageBuilder, demo: dict[str, ProbeResult]) -> None:
    built = demo["hello-world"].details["image"]
    before = builder.builds
    env = environment(DEMO / "hello-world", reruns=1, image_overrides={"hello-world": built})
    result = probe(env, runtime, builder)
    assert (result.status, result.reason, builder.builds) == (Status.PASS, Reason.OK, before)
    missing = environment(DEMO / "hello-world", reruns=1,
                          image_overrides={"hello-world": "envcheck-harbor/absent:none"})
    result = probe(missing, runtime, builder)
    assert (result.status, result.reason) == (Status.ERROR, Reason.IMAGE_MISSING)


@pytest.mark.parametrize(("test_sh", "toml", "solve_sh", "expected"), [
    ("sleep 30", "[verifier]\ntimeout_sec = 1\n", None, (Status.FAIL, Reason.TIMEOUT)),
    ("echo passed > /logs/verifier/reward.txt", "", None,
     (Status.FAIL, Reason.REWARD_MALFORMED)),
    ("exit 0", "", None, (Status.FAIL, Reason.REWARD_MISSING)),
    ("echo 0 > /logs/verifier/reward.txt", '[verifier]\nuser = "ghost"\n', None,
     (Status.FAIL, Reason.USER_MISSING)),
    # a reward printed to the log (where an agent's text may be echoed) is not a reward file
    (r"printf 'envcheck:reward reward.txt 2\n1\n'", "", None,
     (Status.FAIL, Reason.REWARD_MISSING)),
    ('[ -f /tmp/fixed ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt', "",
     "exit 3", (Status.FAIL, Reason.ORACLE_FAILED)),
    ('[ -f /solution/solve.sh ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt', "",
     "echo solved", (Status.PASS, Reason.OK)),
])
def test_run_problems_have_their_own_reasons(
        tmp_path: Path, runtime: DockerRuntime, builder: ImageBuilder, test_sh: str, toml: str,
        solve_sh: str | None, expected: tuple[Status, Reason]) -> None:
    env = environment(task(tmp_path, test_sh, toml, solve_sh), reruns=1)
    result = probe(env, runtime, builder)
    assert (result.status, result.reason) == expected, result.summary


@pytest.fixture
def network(runtime: DockerRuntime) -> Iterator[str]:
    """An internal network (no route out): enough to see that a container joined it."""
    name = f"envcheck-harbor-{uuid.uuid4().hex[:8]}"
    created = runtime.client.networks.create(name, internal=True)
    try:
        yield name
    finally:
        created.remove()


def test_an_internet_task_joins_only_the_named_network(
        tmp_path: Path, runtime: DockerRuntime, builder: ImageBuilder, network: str) -> None:
    # The verifier rewards having a network interface: a nop scoring 1 proves the join.
    online = "[ -e /sys/class/net/eth0 ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt"
    folder = task(tmp_path, online, "allow_internet = true\n")
    shutil.rmtree(folder / "solution")
    joined = probe(environment(folder, reruns=1, network=network), runtime, builder)
    assert (joined.status, joined.reason) == (Status.FAIL, Reason.NOP_REWARDED)
    alone = probe(environment(folder, reruns=1), runtime, builder)
    assert (alone.status, alone.reason) == (Status.PASS, Reason.OK), alone.summary
    offline = task(tmp_path, online, "allow_internet = false\n")
    shutil.rmtree(offline / "solution")
    kept_out = probe(environment(offline, reruns=1, network=network), runtime, builder)
    assert (kept_out.status, kept_out.reason) == (Status.PASS, Reason.OK)


def test_the_tests_folder_merges_into_the_images_own(tmp_path: Path, runtime: DockerRuntime,
                                                     builder: ImageBuilder) -> None:
    """As ``docker cp tests/. main:/tests``: files of the image stay, same names are replaced."""
    folder = tmp_path / "merge"
    shutil.copytree(DEMO / "hello-world", folder)
    (folder / "environment" / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN mkdir /tests && echo image > /tests/extra.txt "
        "&& echo image > /tests/test_outputs.py\n")
    (folder / "tests" / "test.sh").write_text(
        "#!/bin/bash\n[ \"$(cat /tests/extra.txt)\" = image ] && grep -q Path "
        "/tests/test_outputs.py && r=0 || r=1; echo $r > /logs/verifier/reward.txt\n")
    shutil.rmtree(folder / "solution")
    env = environment(folder, reruns=1)
    try:
        result = probe(env, runtime, builder)
        assert (result.status, result.reason) == (Status.PASS, Reason.OK), result.summary
    finally:
        runtime.client.images.remove(env.image, force=True)


def test_a_build_past_its_timeout_is_stopped_and_fails(tmp_path: Path,
                                                        runtime: DockerRuntime) -> None:
    context = tmp_path / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo setting up && sleep 60\n")
    builder = ImageBuilder(runtime.client, host=runtime.host)  # its own build count
    tag = image_tag(f"slow-{uuid.uuid4().hex[:8]}", tree_hash(context))
    with pytest.raises(ImageBuildFailed, match="ran past 2s") as info:
        builder.ensure(context, tag, timeout_s=2)
    assert "setting up" in info.value.log_tail and builder.builds == 0
    with pytest.raises(docker.errors.ImageNotFound):
        runtime.client.images.get(tag)


def test_an_engine_that_does_not_answer_is_envchecks_error(tmp_path: Path,
                                                          runtime: DockerRuntime) -> None:
    url = f"unix://{tmp_path}/no-engine.sock"
    client = docker.DockerClient(base_url=url, version="1.41", timeout=5)
    try:
        builder = ImageBuilder(client, host=url)
        with pytest.raises(EngineUnreachable):
            builder.ensure(DEMO / "hello-world" / "environment", "envcheck-harbor/x:y",
                           timeout_s=5)
        # through the probe: envcheck's error, never the task's failure
        result = probe(environment(DEMO / "hello-world", reruns=1), runtime, builder)
        assert (result.status, result.reason) == (Status.ERROR, Reason.ENGINE_UNREACHABLE)
        assert builder.builds == 0
    finally:
        client.close()
