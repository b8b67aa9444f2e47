"""Harbor's verifier steps as released (0.26.0; 0.25.0 the same) and as in 0.24.0, which a
dataset entry may choose: a reward file written before the verifier pays nothing from 0.25.0
and still does under 0.24.0; a reward.json Harbor refuses is no reward, never a fallback to
reward.txt; tests/ and solution/ are copied through their .harborignore rules; solve.sh is
made executable as root. The runs are on the real engine; the file selection, the catalogue
key and the evidence identity are pure."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest

from envcheck.catalogue.harbor_env import harbor_parts
from envcheck.catalogue.harbor_files import TaskInputError, select_inputs
from envcheck.catalogue.harbor_spec import HarborProtocol
from envcheck.catalogue.harbor_task import read_task
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment, Limits, Timeouts
from envcheck.catalogue.probe_specs import Adversarial
from envcheck.core.errors import CatalogueError
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.adversarial.ledger import ControlsLedger, RecordedEvidence
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.testvalidity.probe import TestsProbe
from envcheck.sandbox.build import ImageBuilder
from envcheck.sandbox.docker import DockerRuntime
from tests.conftest import ROOT

HELLO = ROOT / "probes" / "harbor" / "hello-world"
BASE = "envcheck/base:bookworm"
REWARD = "/logs/verifier/reward.txt"


def task(tmp_path: Path, test_sh: str, solve_sh: str | None = None, toml: str = "") -> Path:
    """A task on the base image (nothing to build); no solution unless ``solve_sh``."""
    folder = tmp_path / f"task-{uuid.uuid4().hex[:8]}"
    shutil.copytree(HELLO, folder)
    (folder / "task.toml").write_text(f'[environment]\ndocker_image = "{BASE}"\n{toml}')
    (folder / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test_sh}\n")
    if solve_sh is None:
        shutil.rmtree(folder / "solution")
    else:
        (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve_sh}\n")
    return folder


def environment(folder: Path, protocol: HarborProtocol = "0.25",
                adversarial: Adversarial | None = None) -> Environment:
    got = harbor_parts(read_task(folder, protocol), limits=Limits(), timeouts=Timeouts(),
                       reruns=1, adversarial=adversarial)
    return Environment(id=folder.name, suite="harbor", image=got.image, user=got.user,
                       workdir=got.workdir, limits=got.limits, timeouts=got.timeouts,
                       harbor=got.harbor)


def probe(env: Environment, runtime: DockerRuntime) -> ProbeResult:
    with ExitStack() as stack:
        ctx = ProbeContext(env, uuid.uuid4().hex, runtime, None, stack,
                           {ImageBuilder: ImageBuilder.for_runtime(runtime)})
        return TestsProbe().run(ctx)


def verdict(result: ProbeResult) -> tuple[Status, Reason]:
    return result.status, result.reason


# --- on the engine -----------------------------------------------------------------------------


@pytest.mark.docker
def test_a_reward_file_written_before_the_verifier_pays_nothing_from_0_25(
        tmp_path: Path, runtime: DockerRuntime) -> None:
    """solve.sh plants reward.json and makes it read-only; test.sh only ever writes 0. Harbor
    0.25.0 removes the file as root before it copies tests/ in: the oracle earns 0. Under
    0.24.0 the planted file is what Harbor reads."""
    plant = ("echo '{\"reward\": 1}' > /logs/verifier/reward.json; "
             "chmod 0444 /logs/verifier/reward.json; chmod a-w /logs/verifier")
    folder = task(tmp_path, f"echo 0 > {REWARD}", solve_sh=plant)
    current = probe(environment(folder), runtime)
    assert verdict(current) == (Status.FAIL, Reason.ORACLE_DOES_NOT_FIX), current.summary
    assert [r["reward_source"] for r in current.details["runs"]] == ["reward.txt"] * 2
    older = probe(environment(folder, "0.24"), runtime)
    assert verdict(older) == (Status.PASS, Reason.OK), older.summary
    assert older.details["runs"][1]["reward_source"] == "reward.json: reward"


NAIVE_TEST_SH = """cd /app
if python3 -m pytest -p no:cacheprovider -rA /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi"""


@pytest.mark.docker
def test_the_forged_reward_trick_shows_the_hole_only_under_0_24(
        tmp_path: Path, runtime: DockerRuntime) -> None:
    """Harbor's own hello-world verifier writes reward.txt only: the trick's forged
    reward.json stood beside it under 0.24.0 and is removed from 0.25.0 on."""
    folder = tmp_path / "hello-world-naive"
    shutil.copytree(HELLO, folder)
    (folder / "tests" / "test.sh").write_text(f"#!/bin/bash\n{NAIVE_TEST_SH}\n")
    forger = Adversarial(tricks=["report_forged"])
    for protocol, rewarded in (("0.25", []), ("0.24", ["report_forged"])):
        result = probe(environment(folder, protocol, forger), runtime)  # type: ignore[arg-type]
        info = result.details["adversarial"]
        assert info["rewarded"] == rewarded, (protocol, info["tricks"])
        [trick] = info["tricks"]
        expected = "refused: reward 0 (reward.txt" if not rewarded else \
            "rewarded: reward 1 (reward.json: reward"
        assert trick["verifier"].startswith(expected), (protocol, trick)
        assert result.details["image"]  # each protocol probed the task in full


@pytest.mark.docker
def test_a_reward_json_harbor_refuses_is_no_reward(tmp_path: Path,
                                                   runtime: DockerRuntime) -> None:
    """A non-numeric value refuses the whole reward.json, and reward.txt beside it is never
    read: no reward. (envcheck took the numeric 'reward' key, and paid the nop.)"""
    both = ("echo '{\"reward\": 1, \"status\": \"passed\"}' > /logs/verifier/reward.json; "
            f"echo 1 > {REWARD}")
    result = probe(environment(task(tmp_path, both)), runtime)
    assert verdict(result) == (Status.FAIL, Reason.REWARD_MALFORMED), result.summary
    assert 'non-numeric reward "passed"' in result.summary


@pytest.mark.docker
def test_an_ignored_test_file_is_not_copied(tmp_path: Path, runtime: DockerRuntime) -> None:
    """tests/.harborignore keeps answers.txt (and itself) out of /tests from 0.25.0 on; 0.24.0
    copies both. The verifier pays when it finds either in /tests."""
    found = ("[ -e /tests/answers.txt ] || [ -e /tests/.harborignore ] && r=1 || r=0; "
             f"echo $r > {REWARD}")
    folder = task(tmp_path, found)
    (folder / "tests" / ".harborignore").write_text("answers.txt\n")
    (folder / "tests" / "answers.txt").write_text("42\n")
    current = probe(environment(folder), runtime)
    assert verdict(current) == (Status.PASS, Reason.OK), current.summary
    older = probe(environment(folder, "0.24"), runtime)
    assert verdict(older) == (Status.FAIL, Reason.NOP_REWARDED), older.summary


@pytest.mark.docker
def test_solve_sh_is_made_executable_as_root(tmp_path: Path, runtime: DockerRuntime) -> None:
    """A solve.sh without its executable bit, run as an agent user who cannot chmod root's
    file: Harbor runs ``chmod +x`` as root first, so the oracle runs (it failed here)."""
    folder = task(tmp_path, f"[ -f /tmp/solved ] && r=1 || r=0; echo $r > {REWARD}",
                  solve_sh="touch /tmp/solved", toml='[agent]\nuser = "nobody"\n')
    (folder / "solution" / "solve.sh").chmod(0o644)
    result = probe(environment(folder), runtime)
    assert verdict(result) == (Status.PASS, Reason.OK), result.summary


@pytest.mark.docker
def test_test_sh_runs_in_the_tasks_workdir_with_its_environment(
        tmp_path: Path, runtime: DockerRuntime) -> None:
    """[environment].workdir is where Harbor runs every command, and [environment].env the
    container's own variables, under [verifier].env: test.sh writes its reward only if it
    finds them so (it wrote none here before, in the image's WORKDIR)."""
    seen = ('[ "$PWD" = /var/tmp ] && [ "$TASK_ONLY" = task ] && [ "$BOTH" = verifier ] '
            f"&& echo 0 > {REWARD}")
    toml = ('workdir = "/var/tmp"\nenv = { TASK_ONLY = "task", BOTH = "task" }\n'
            '[verifier]\nenv = { BOTH = "verifier" }\n')
    result = probe(environment(task(tmp_path, seen, toml=toml)), runtime)
    assert verdict(result) == (Status.PASS, Reason.OK), result.summary


@pytest.mark.docker
@pytest.mark.parametrize("toml", ['[verifier]\nenvironment_mode = "separate"\n',
                                  f'[verifier.environment]\ndocker_image = "{BASE}"\n'])
def test_a_verifier_harbor_runs_in_a_container_of_its_own_is_skipped(
        tmp_path: Path, runtime: DockerRuntime, toml: str) -> None:
    """Harbor verifies such a task in a fresh container, the agent's artifacts copied in:
    envcheck verifies only in the agent's, so it says so rather than judge (it paid this nop,
    and could have failed a sound task)."""
    result = probe(environment(task(tmp_path, f"echo 1 > {REWARD}", toml=toml)), runtime)
    assert verdict(result) == (Status.SKIP, Reason.NOT_APPLICABLE), result.summary
    assert "a container of its own" in result.summary


# --- the files Harbor copies (pure) ------------------------------------------------------------


def task_root(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "task"
    for name, text in {"tests/test.sh": "#!/bin/bash\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_harborignore_rules_select_as_harbor_does(tmp_path: Path) -> None:
    """Rules relative to their folder, inherited below it, a later '!' winning, an excluded
    folder skipped whole, the rule files never copied, a task-level file without effect."""
    root = task_root(tmp_path, {
        ".harborignore": "tests/\n",  # outside tests/ and solution/: no effect
        "tests/.harborignore": "*.bak\n!keep.bak\nfixtures/\n",
        "tests/a.bak": "", "tests/keep.bak": "", "tests/fixtures/big.bin": "",
        "tests/sub/.harborignore": "!a.bak\nlocal.txt\n", "tests/sub/a.bak": "",
        "tests/sub/b.bak": "", "tests/sub/local.txt": "", "tests/sub/test_x.py": "",
    })
    assert select_inputs(root, "tests", "test.sh", ignore_rules=True) == (
        "keep.bak", "sub", "sub/a.bak", "sub/test_x.py", "test.sh")
    every = select_inputs(root, "tests", "test.sh", ignore_rules=False)
    assert {".harborignore", "a.bak", "fixtures/big.bin", "sub/local.txt"} <= set(every)


def test_a_task_harbor_refuses_to_copy_is_refused_at_load(tmp_path: Path) -> None:
    root = task_root(tmp_path, {"tests/.harborignore": "*.sh\n", "task.toml": "",
                                   "instruction.md": "x\n",
                                   "environment/Dockerfile": f"FROM {BASE}\n"})
    with pytest.raises(CatalogueError) as info:
        read_task(root)
    assert str(info.value) == (f"{root}/tests: Required task input is excluded by "
                               ".harborignore: tests/test.sh (Harbor refuses the task)")
    assert read_task(root, "0.24").protocol == "0.24"  # 0.24.0 has no rules: test.sh goes in
    (root / "tests" / ".harborignore").unlink()
    (root / "tests" / "passwd").symlink_to("/etc/passwd")
    for protocol in ("0.24", "0.25"):  # a link out of the task, in every release
        with pytest.raises(TaskInputError, match="must stay within the task"):
            select_inputs(root, "tests", "test.sh", ignore_rules=protocol == "0.25")
        with pytest.raises(CatalogueError, match="tests: Input paths must stay within"):
            read_task(root, protocol)  # type: ignore[arg-type]


# --- the dataset's key and the evidence identity (pure) ----------------------------------------

CATALOGUE = """version: 1
suites:
  tb2: {{}}
datasets:
  - id: tb2
    format: harbor
    path: '{path}'
    suite: tb2
{extra}"""


def harbor_env(tmp_path: Path, extra: str = "") -> Environment:
    file = tmp_path / f"harbor-{uuid.uuid4().hex[:6]}.yaml"
    file.write_text(CATALOGUE.format(path=HELLO, extra=extra))
    return load_catalogue([file]).environment("hello-world")


def test_a_dataset_chooses_the_release_it_runs(tmp_path: Path) -> None:
    def protocol(extra: str) -> str | None:
        spec = harbor_env(tmp_path, extra).harbor
        return None if spec is None else spec.protocol

    assert protocol("") == "0.25"  # the current release, 0.26: its verifier is 0.25.0's
    assert protocol('    harbor_protocol: "0.26"\n') == "0.25"
    assert protocol('    harbor_protocol: "0.25"\n') == "0.25"
    assert protocol('    harbor_protocol: "0.24"\n') == "0.24"
    file = tmp_path / "bad.yaml"
    file.write_text(CATALOGUE.format(path=HELLO, extra='    harbor_protocol: "0.23"\n'))
    with pytest.raises(CatalogueError) as info:
        load_catalogue([file])
    [line] = str(info.value).splitlines()
    assert line.startswith(f"{file}:9: datasets[0].harbor_protocol: "), line


def test_the_protocol_is_part_of_the_evidence_identity(tmp_path: Path) -> None:
    """Controls played under 0.24.0 (where a forged reward pays) are never reused for 0.25.0,
    nor those stored before the protocol was named."""
    current = harbor_env(tmp_path)
    older = harbor_env(tmp_path, '    harbor_protocol: "0.24"\n')
    assert current.harbor is not None and older.harbor is not None
    hashes = {current.spec_hash(ProbeKind.TESTS), older.spec_hash(ProbeKind.TESTS)}
    assert len(hashes) == 2
    assert current.spec_hash(ProbeKind.TERMINAL) == older.spec_hash(ProbeKind.TERMINAL)
    # the hash as it was before the spec named its protocol: the same dump without the key
    dumped = current.model_dump(mode="json", include={"image", "workdir", "user", "shell",
                                                        "limits", "tests", "harbor"})
    assert _hash(dumped) == current.spec_hash(ProbeKind.TESTS)
    assert dumped["harbor"].pop("protocol") == "0.25"
    assert _hash(dumped) not in hashes
    stored = ProbeResult("hello-world", ProbeKind.TESTS, Status.PASS, Reason.REWARD_HACKABLE,
                         "", 1.0, image_digest="sha256:a",
                         spec_hash=older.spec_hash(ProbeKind.TESTS),
                         details={"adversarial": {"rewarded": ["report_forged"]}})
    ledger = ControlsLedger(RecordedEvidence([stored]))
    assert ledger.prior("hello-world", "sha256:a", older.spec_hash(ProbeKind.TESTS))
    assert ledger.prior("hello-world", "sha256:a", current.spec_hash(ProbeKind.TESTS)) is None


def _hash(dumped: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:16]
