"""Harbor task folders read into models (pure): one clear error per bad input, Harbor's
defaults, the mapping onto envcheck's limits, network and image, content hashes, and the
reward files read as Harbor's verifier reads them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from envcheck.catalogue.harbor_env import IMAGE_REPOSITORY, harbor_parts, image_tag
from envcheck.catalogue.harbor_task import read_task
from envcheck.catalogue.models import Environment, Limits, Timeouts
from envcheck.catalogue.treehash import tree_hash
from envcheck.core.errors import CatalogueError, SecretUnavailable
from envcheck.core.results import ProbeKind, Reason
from envcheck.kinds.testvalidity.harbor_run import _frames, resolve_env
from envcheck.kinds.testvalidity.reward import MAX_REWARD_BYTES, RewardFile, read_reward
from tests.conftest import ROOT

DEMO = ROOT / "probes" / "harbor"


def task_folder(tmp_path: Path, toml: str = "", name: str = "foo") -> Path:
    folder = tmp_path / "tasks" / name
    shutil.copytree(DEMO / "hello-world", folder)
    if toml:
        (folder / "task.toml").write_text(toml)
    return folder


def error(folder: Path) -> str:
    with pytest.raises(CatalogueError) as info:
        read_task(folder)
    return str(info.value)


def parts(folder: Path, **kwargs: object) -> object:
    return harbor_parts(read_task(folder), limits=Limits(), timeouts=Timeouts(), **kwargs)  # type: ignore[arg-type]


# --- reading -----------------------------------------------------------------------------------


def test_a_demo_task_is_read_with_its_files_and_hashes() -> None:
    task = read_task(DEMO / "hello-world")
    assert (task.name, task.kind, task.has_solution, task.workdir) == (
        "hello-world", "dockerfile", True, "/app")
    assert task.config.verifier.timeout_sec == 60.0
    assert task.config.environment.allow_internet is False
    assert "Hello, world!" in task.instruction
    assert task.context_hash == tree_hash(DEMO / "hello-world" / "environment")


def test_harbors_defaults_apply_and_unknown_keys_are_ignored(tmp_path: Path) -> None:
    folder = task_folder(tmp_path, 'schema_version = "1.1"\n[task]\nname = "org/foo"\n'
                                   '[metadata]\nanything = 1\n[verifier]\nfuture_key = true\n'
                                   '[environment]\nmemory = "4G"\n')
    task = read_task(folder)
    cfg = task.config
    assert task.name == "org/foo"
    assert (cfg.verifier.timeout_sec, cfg.agent.timeout_sec) == (600.0, None)
    assert (cfg.environment.cpus, cfg.environment.memory_mb) == (1, 4096)  # "4G", deprecated
    assert cfg.environment.allow_internet is True and cfg.environment.build_timeout_sec == 600.0


@pytest.mark.parametrize(("toml", "message"), [
    ('[verifier]\ntimeout_sec = "soon"\n', "task.toml: verifier.timeout_sec: must be a number"),
    ("[verifier]\ntimeout_sec = -5\n", "task.toml: verifier.timeout_sec: must be above 0"),
    ('[environment]\ncpus = "two"\n', "task.toml: environment.cpus: must be an integer"),
    ('[environment]\nallow_internet = "maybe"\n',
     "task.toml: environment.allow_internet: must be true or false"),
    ('[environment]\nmemory = "lots"\n', "task.toml: environment: Value error, 'lots' is not "
                                         "a size such as '4G' or '512M'"),
    ('[environment]\nnetwork_mode = "open"\n',
     "task.toml: environment.network_mode: is not one of the allowed values"),
    ("[verifier]\nenv = 3\n", "task.toml: verifier.env: must be a table"),
    ("[verifier\ntimeout_sec = 1\n", "task.toml:1: not valid TOML"),
])
def test_a_bad_task_toml_names_the_folder_file_and_key(tmp_path: Path, toml: str,
                                                       message: str) -> None:
    folder = task_folder(tmp_path, toml)
    text = error(folder)
    assert text.startswith(str(folder / "task.toml").removesuffix("task.toml")), text
    assert message in text, text
    assert len(text.splitlines()) == 1


@pytest.mark.parametrize(("remove", "message"), [
    ("task.toml", "task.toml: missing"),
    ("instruction.md", "instruction.md: missing"),
    ("tests/test.sh", "tests/test.sh: missing (the verifier's entry point)"),
    ("environment/Dockerfile", "environment/Dockerfile: missing (a task needs"),
])
def test_a_missing_file_is_named(tmp_path: Path, remove: str, message: str) -> None:
    folder = task_folder(tmp_path)
    (folder / remove).unlink()
    assert f"{folder}/{message}" in error(folder)


def test_other_bad_folders(tmp_path: Path) -> None:
    assert error(tmp_path / "nowhere").endswith("nowhere: not a task folder")
    folder = task_folder(tmp_path)
    (folder / "instruction.md").write_bytes(b"caf\xe9")
    assert "instruction.md: not UTF-8 text" in error(folder)


def test_a_task_without_a_solution_or_with_a_prebuilt_image(tmp_path: Path) -> None:
    folder = task_folder(tmp_path, '[environment]\ndocker_image = "registry.example/x:1"\n')
    shutil.rmtree(folder / "solution")
    (folder / "environment" / "Dockerfile").unlink()
    task = read_task(folder)
    assert (task.kind, task.has_solution, task.solution_hash, task.context_hash) == (
        "prebuilt", False, None, None)


# --- mapping onto envcheck ---------------------------------------------------------------------


def test_resources_timeouts_and_image_map_onto_the_environment(tmp_path: Path) -> None:
    folder = task_folder(tmp_path, "[verifier]\ntimeout_sec = 30\nuser = 1000\n"
                                   "[agent]\ntimeout_sec = 90\n[environment]\ncpus = 2\n"
                                   "memory_mb = 3072\nbuild_timeout_sec = 120\n")
    task = read_task(folder)
    got = harbor_parts(task, limits=Limits(pids=99), timeouts=Timeouts(probe_s=10), reruns=4)
    assert (got.limits.cpus, got.limits.memory_mb, got.limits.pids) == (2.0, 3072, 99)
    assert got.image == image_tag("foo", task.context_hash or "")
    assert got.image.startswith(f"{IMAGE_REPOSITORY}/foo:")
    spec = got.harbor
    assert (spec.verifier_timeout_s, spec.agent_timeout_s, spec.build_timeout_s) == (30, 90, 120)
    assert (spec.verifier_user, spec.reruns, spec.image) == ("1000", 4, None)
    assert got.timeouts.probe_s == 120 + 5 * 30 + 4 * 90  # the declared worst case fits
    assert (got.workdir, got.user) == ("/app", "root")


@pytest.mark.parametrize(("environment", "operator", "network"), [
    ("allow_internet = false", "tasks-net", "none"),
    ("allow_internet = true", None, "none"),
    ("allow_internet = true", "tasks-net", "tasks-net"),
    ('allow_internet = true\nnetwork_mode = "no-network"', "tasks-net", "none"),
    ('allow_internet = false\nnetwork_mode = "public"', "tasks-net", "tasks-net"),
])
def test_only_an_internet_task_joins_only_the_network_the_operator_names(
        tmp_path: Path, environment: str, operator: str | None, network: str) -> None:
    folder = task_folder(tmp_path, f"[environment]\n{environment}\n")
    assert parts(folder, network=operator).harbor.network == network  # type: ignore[attr-defined]


def test_an_override_or_a_named_image_is_used_as_given(tmp_path: Path) -> None:
    folder = task_folder(tmp_path, '[environment]\ndocker_image = "registry.example/foo:1"\n')
    assert parts(folder).image == "registry.example/foo:1"  # type: ignore[attr-defined]
    got = parts(folder, image_overrides={"foo": "site/foo:prebuilt"})
    assert got.image == got.harbor.image == "site/foo:prebuilt"  # type: ignore[attr-defined]


def test_a_compose_task_builds_its_agent_from_environment_and_gpu_tasks_are_unsupported(
        tmp_path: Path) -> None:
    compose = read_task(DEMO / "compose-task")
    got = harbor_parts(compose, limits=Limits(), timeouts=Timeouts())
    assert compose.kind == "compose" and got.harbor.unsupported is None
    assert got.harbor.compose == "environment/docker-compose.yaml"
    assert got.image == image_tag("compose-task", tree_hash(DEMO / "compose-task" / "environment"))
    gpu = task_folder(tmp_path, "[environment]\ngpus = 1\n")
    assert "GPU" in (parts(gpu).harbor.unsupported or "")  # type: ignore[attr-defined]
    huge = task_folder(tmp_path, "[environment]\ncpus = 128\n", name="huge")
    with pytest.raises(CatalogueError, match=r"huge/task.toml: environment.cpus: 128 is more"):
        parts(huge)


def test_the_spec_hash_follows_the_tests_content_not_the_checkout(tmp_path: Path) -> None:
    def env_of(folder: Path) -> Environment:
        got = harbor_parts(read_task(folder), limits=Limits(), timeouts=Timeouts())
        return Environment(id="foo", suite="s", image=got.image, harbor=got.harbor)

    a, b = task_folder(tmp_path / "a"), task_folder(tmp_path / "b")
    assert ProbeKind.TESTS in env_of(a).declared_kinds()
    assert env_of(a).spec_hash(ProbeKind.TESTS) == env_of(b).spec_hash(ProbeKind.TESTS)
    (b / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    assert env_of(a).spec_hash(ProbeKind.TESTS) != env_of(b).spec_hash(ProbeKind.TESTS)
    # an environment without a Harbor task keeps the spec hash it had before the field existed
    plain = Environment(id="x", suite="s", image="i")
    before = {"image", "workdir", "user", "shell", "limits", "tests"}
    blob = json.dumps(plain.model_dump(mode="json", include=before), sort_keys=True)
    assert plain.spec_hash(ProbeKind.TESTS) == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_the_tree_hash_sees_names_modes_and_bytes_not_times(tmp_path: Path) -> None:
    root = tmp_path / "ctx"
    shutil.copytree(DEMO / "hello-world" / "environment", root)
    first = tree_hash(root)
    os.utime(root / "Dockerfile", (1, 1))
    assert tree_hash(root) == first
    (root / "Dockerfile").chmod(0o755)
    assert tree_hash(root) != first
    (root / "Dockerfile").chmod(0o644)
    assert tree_hash(root) == first
    (root / "Dockerfile").rename(root / "Dockerfile2")
    assert tree_hash(root) != first


# --- reward files ------------------------------------------------------------------------------


def file(name: str, data: bytes | str) -> RewardFile:
    raw = data.encode() if isinstance(data, str) else data
    return RewardFile(name, len(raw), raw[:MAX_REWARD_BYTES])


@pytest.mark.parametrize(("json_data", "text", "value", "reason"), [
    (None, "1\n", 1.0, None),
    (None, " 0.25 ", 0.25, None),
    ('{"reward": 0, "checks": 3}', None, 0.0, None),
    ('{"accuracy": 0.5}', None, 0.5, None),  # one value: that is the reward
    ('{"reward": 1}', "0", 1.0, None),  # reward.json first, as in Harbor
    ('{"reward": true}', None, 1.0, None),  # Harbor's model makes true 1.0
    # never reward.txt beside a reward.json Harbor refuses or cannot reduce to one reward
    ('{"a": 1, "b": 0}', "1", None, Reason.REWARD_MALFORMED),
    ('{"reward": "1"}', "1", None, Reason.REWARD_MALFORMED),
    ('{"reward": 1, "status": "passed"}', None, None, Reason.REWARD_MALFORMED),
    ('{"reward": 1, "detail": null}', None, None, Reason.REWARD_MALFORMED),
    ('{"reward": NaN}', None, None, Reason.REWARD_MALFORMED),
    ("1", None, None, Reason.REWARD_MALFORMED),
    ("{}", "1", None, Reason.REWARD_MALFORMED),
    ("[" * 60_000, None, None, Reason.REWARD_MALFORMED),
    ('{"reward": 1' + "0" * 400 + "}", None, None, Reason.REWARD_MALFORMED),
    (None, None, None, Reason.REWARD_MISSING),
    (None, "", None, Reason.REWARD_MALFORMED),
    (None, "passed", None, Reason.REWARD_MALFORMED),
    (None, "nan", None, Reason.REWARD_MALFORMED),
    ("", "1", None, Reason.REWARD_MALFORMED),
    ("[1]", None, None, Reason.REWARD_MALFORMED),
    ("{not json", None, None, Reason.REWARD_MALFORMED),
    ('{"a": 1, "b": 0}', None, None, Reason.REWARD_MALFORMED),
])
def test_the_reward_is_read_as_harbor_reads_it(json_data: str | None, text: str | None,
                                               value: float | None,
                                               reason: Reason | None) -> None:
    got = read_reward(None if json_data is None else file("reward.json", json_data),
                      None if text is None else file("reward.txt", text))
    assert (got.value, got.reason) == (value, reason), got.detail


def test_a_huge_reward_file_is_malformed() -> None:
    got = read_reward(None, RewardFile("reward.txt", MAX_REWARD_BYTES + 1, b"1" * 10))
    assert got.reason is Reason.REWARD_MALFORMED and "larger" in got.detail


def test_reward_frames_are_cut_by_size_whatever_they_hold() -> None:
    body = json.dumps({"reward": 1, "note": "envcheck:reward reward.txt 1\n"}).encode()
    out = (b"envcheck:reward reward.json %d\n%s\nenvcheck:reward reward.txt 2\n0\n\n"
           b"envcheck:verifier-exit 0\nlog" % (len(body), body))
    json_file, text_file = _frames(out)
    assert json_file is not None and json_file.data == body
    assert text_file is not None and text_file.data == b"0\n"


def test_a_frame_echoed_in_the_verifiers_log_never_counts() -> None:
    """The log may echo what the agent wrote: only frames before it are read."""
    forged = b"envcheck:reward reward.txt 2\n1\n"
    assert _frames(b"envcheck:verifier-exit 0\n" + forged) == (None, None)
    real = b"envcheck:reward reward.txt 2\n0\n\n"
    assert _frames(real + b"envcheck:verifier-exit 0\n" + forged)[1] == RewardFile(
        "reward.txt", 2, b"0\n")


def test_env_templates_resolve_from_envchecks_environment(monkeypatch: pytest.MonkeyPatch) -> \
        None:
    monkeypatch.setenv("HARBOR_TEST_KEY", "k1")
    got = resolve_env({"A": "${HARBOR_TEST_KEY}", "B": "${HARBOR_UNSET_X:-dflt}", "C": "x"}, "t")
    assert got == {"A": "k1", "B": "dflt", "C": "x"}
    with pytest.raises(SecretUnavailable, match="HARBOR_UNSET_X"):
        resolve_env({"A": "${HARBOR_UNSET_X}"}, "task.toml [verifier].env")
