"""envcheck's log parsers against the released SWE-bench harness's own (swebench 5.0.2).

The harness runs in its own virtualenv (.venv-swebench, made by scripts/test.sh) through
tests/swebench_harness.py; envcheck's parsers run here; both read the same files: real logs of
SWE-bench Lite instances (tests/swebench_logs/real: before and after the gold patch, and after
a hand-written wrong fix; tests/swebench_logs/README.md says how each was made) and crafted
ones (tests/swebench_logs/crafted). Every parser reads every log, and each id -> status map
must be the harness's; on the real logs each declared test must pass or not as the harness's
grading says, and the instance be resolved exactly when every declared test passes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envcheck.core.testlogs import (
    HARNESS_LOG_PARSERS,
    HARNESS_REPO_PARSERS,
    RELEASE,
    log_lines,
    named_parser,
    parser,
)
from envcheck.kinds.testvalidity.logs import read_log
from tests.conftest import ROOT

HARNESS_PYTHON = ROOT / ".venv-swebench" / "bin" / "python"
LOGS = ROOT / "tests" / "swebench_logs"
REAL = LOGS / "real"
INSTANCES: dict[str, dict[str, Any]] = json.loads((REAL / "instances.json").read_text())
# envcheck's names for the release's parsers (the harness registers each as parse_log_NAME)
NAMES = ["pytest", "pytest_v2", "pytest_options", "django", "sympy", "matplotlib", "seaborn"]
ALL_LOGS = sorted(p.relative_to(LOGS).as_posix() for p in LOGS.glob("*/*.log"))
VARIANTS = ("before", "gold", "wrong")


def _instance_parser(name: str) -> str:
    return HARNESS_REPO_PARSERS[INSTANCES[name]["repo"]]


@pytest.fixture(scope="module")
def harness() -> dict[str, Any]:
    """The harness's answer for every log read by every parser (one subprocess)."""
    if not HARNESS_PYTHON.exists():
        pytest.fail(f"{HARNESS_PYTHON} is missing: scripts/setup.sh installs the released "
                    "harness there (swebench==5.0.2)")
    items = []
    for log in ALL_LOGS:
        instance = Path(log).name.split(".")[0]
        for name in NAMES:
            item: dict[str, Any] = {"log": log, "path": str(LOGS / log), "parser": name}
            if log.startswith("real/") and name == _instance_parser(instance):
                item["fail_to_pass"] = INSTANCES[instance]["fail_to_pass"]
                item["pass_to_pass"] = INSTANCES[instance]["pass_to_pass"]
            items.append(item)
    run = subprocess.run([str(HARNESS_PYTHON), "-W", "error", str(ROOT / "tests" /
                                                                    "swebench_harness.py")],
                         input=json.dumps({"names": NAMES, "logs": items}),
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONUTF8": "1"})
    assert run.returncode == 0, run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    answer["by_log"] = {(i["log"], i["parser"]): a for i, a in zip(items, answer["logs"],
                                                                    strict=True)}
    return answer


def test_the_release_and_its_repository_map(harness: dict[str, Any]) -> None:
    assert RELEASE == f"swebench {harness['version']}" == "swebench 5.0.2"
    assert harness["repo_parsers"] == HARNESS_REPO_PARSERS


def test_the_release_s_parser_names_as_a_record_s_log_parser_names_them(
        harness: dict[str, Any]) -> None:
    # every Python parser of the release's registry, by the function it is (aliases included:
    # parse_log_pydicom is parse_log_pytest_options); none of its other languages' parsers
    assert harness["log_parsers"] == HARNESS_LOG_PARSERS
    assert len(HARNESS_LOG_PARSERS) == 20
    assert {named_parser(name) for name in harness["log_parsers"]} == set(NAMES)
    assert "parse_log_jest" in harness["other_parsers"]
    assert [name for name in harness["other_parsers"] if named_parser(name)] == []


def test_there_are_real_and_crafted_logs() -> None:
    assert {f"real/{i}.{v}.log" for i in INSTANCES for v in VARIANTS} <= set(ALL_LOGS)
    assert {_instance_parser(i) for i in INSTANCES} == {"sympy", "pytest", "pytest_v2",
                                                        "seaborn"}
    assert len([log for log in ALL_LOGS if log.startswith("crafted/")]) >= 9


@pytest.mark.parametrize("log", ALL_LOGS)
def test_every_parser_reads_the_log_as_the_harness_does(harness: dict[str, Any],
                                                        log: str) -> None:
    data = (LOGS / log).read_bytes()
    for name in NAMES:
        ours = dict(parser(name)(log_lines(data)))
        theirs = harness["by_log"][(log, name)]["map"]
        assert ours == theirs, (name, {k: (ours.get(k), theirs.get(k))
                                       for k in ours.keys() ^ theirs.keys()
                                       or {k for k in ours if ours[k] != theirs[k]}})


@pytest.mark.parametrize("instance", sorted(INSTANCES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_real_logs_grade_as_the_harness_grades(harness: dict[str, Any], instance: str,
                                               variant: str) -> None:
    spec = INSTANCES[instance]
    name = _instance_parser(instance)
    log = f"real/{instance}.{variant}.log"
    theirs = harness["by_log"][(log, name)]
    declared = spec["fail_to_pass"] + spec["pass_to_pass"]
    read = read_log((LOGS / log).read_bytes(), name, declared)
    ours = {t: c is not None and c.passed for t, c in read.outcomes.items()}
    assert ours == theirs["passed"]
    assert all(ours.values()) is theirs["resolved"]
    # the logs show what they were made to show
    assert theirs["resolved"] is (variant == "gold")
    assert any(ours[t] for t in spec["fail_to_pass"]) is (variant == "gold")
