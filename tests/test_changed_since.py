"""``envcheck check --changed-since REF`` on real git repositories, and the documented workflow
for a dataset repository (docs/how-to/ci.md), its steps' commands run on a base commit and a
pull request's commit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from tests.conftest import ROOT, envcheck_cmd
from tests.docs_pages import blocks, page
from tests.gitrepo import GitRepo

pytestmark = pytest.mark.docker

CATALOGUE = """\
version: 1
suites:
  s:
    description: plain environments
    defaults:
      user: agent
      tools: [git]
    environments:
      - id: a
        image: envcheck-demo/healthy:latest
      - id: b
        image: envcheck-demo/healthy:latest
  t:
    description: another suite
    environments:
      - id: c
        image: envcheck-demo/healthy:latest
  swe:
    description: a SWE-bench-style dataset
    defaults: { workdir: /testbed, user: agent }
  h:
    description: Harbor tasks
datasets:
  - id: swe
    format: swebench
    path: ../data/swe.jsonl
    suite: swe
    image_field: image_name
    command: pytest -rA {test_files}
    report: pytest
  - id: tasks
    format: harbor
    path: ../tasks
    suite: h
    reruns: 1
"""
# The same catalogue written otherwise: keys reordered, flow style, comments.
REFORMATTED = CATALOGUE.replace(
    "    defaults:\n      user: agent\n      tools: [git]\n",
    "    defaults: { tools: [git], user: agent }   # the same defaults\n").replace(
    "      - id: c\n        image: envcheck-demo/healthy:latest\n",
    "      - image: envcheck-demo/healthy:latest\n        id: c\n")


def dataset_repo(root: Path) -> GitRepo:
    """A dataset repository: a catalogue, a two-record instance file, two Harbor tasks (copies
    of the demo's hello-world), committed on main."""
    repo = GitRepo(root)
    for name in ("t1", "t2"):
        shutil.copytree(ROOT / "probes" / "harbor" / "hello-world", root / "tasks" / name)
    records = (ROOT / "probes" / "datasets" / "swe-demo.jsonl").read_text().splitlines()[:2]
    repo.commit({"catalogue/main.yaml": CATALOGUE, "data/swe.jsonl": "\n".join(records) + "\n"})
    return repo


def cli_env_for(repo: GitRepo, cli_env: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in cli_env.items() if not k.startswith(("GITHUB_", "GIT_"))}
    return {**env, "GIT_CONFIG_GLOBAL": "/dev/null", **extra}


def changed_check(repo: GitRepo, env: dict[str, str], ref: str, *args: str
                  ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), "check", "catalogue/", "--changed-since", ref,
                           *args], cwd=repo.root, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def selection(stderr: str) -> list[str]:
    """The selection's lines: its heading, then one per environment."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("--changed-since"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return lines[start:end]


def test_the_selection_says_what_changed_and_why(cli_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    repo = dataset_repo(tmp_path / "repo")
    base = repo.git("rev-parse", "HEAD").stdout.strip()
    changed = (CATALOGUE.replace("tools: [git]", "tools: [git, python3]")  # a suite default
               .replace("command: pytest -rA", "command: pytest -x -rA")  # a dataset entry's
               .replace("id: c\n", "id: d\n"))  # one environment gone, one new
    repo.write({"catalogue/main.yaml": changed})
    with (repo.root / "tasks" / "t1" / "tests" / "test.sh").open("a") as f:
        f.write("# the verifier, edited\n")
    (repo.root / "tasks" / "t2" / "instruction.md").write_text("Reworded.\n")  # hashed by none
    repo.commit({})
    env = cli_env_for(repo, cli_env)
    junit = tmp_path / "junit.xml"
    proc = changed_check(repo, env, "HEAD~1", "-p", "datasource", "--json", "--junit", str(junit))
    assert proc.returncode == 0, proc.stderr
    assert selection(proc.stderr) == [
        f"--changed-since HEAD~1 ({base[:10]}): 7 of 7 environment(s) selected",
        "  changed  a: tools",
        "  changed  b: tools",
        "  added    d",
        "  changed  envcheck-demo__pyutils-1: tests.command",
        "  changed  envcheck-demo__pyutils-2: tests.command",
        "  changed  t1: harbor.tests_hash; task files tests/test.sh",
        "  changed  t2: task files instruction.md",
        "  removed  c (not checked)"]
    checked = {json.loads(line)["env"] for line in proc.stdout.splitlines()}
    assert checked == {"a", "b", "d", "envcheck-demo__pyutils-1", "envcheck-demo__pyutils-2",
                       "t1", "t2"}

    # -e narrows the selection; an uncommitted change counts (the working tree is "now")
    (repo.root / "tasks" / "t2" / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    proc = changed_check(repo, env, "HEAD", "-p", "datasource", "--json", "-e", "t2", "-e", "a")
    assert proc.returncode == 0, proc.stderr
    assert selection(proc.stderr)[1:] == [
        "  changed  t2: harbor.solution_hash; task files solution/solve.sh"]
    assert [json.loads(line)["env"] for line in proc.stdout.splitlines()] == ["t2"]


def test_a_reformatted_catalogue_selects_nothing_and_exits_0(cli_env: dict[str, str],
                                                             tmp_path: Path) -> None:
    repo = dataset_repo(tmp_path / "repo")
    repo.commit({"catalogue/main.yaml": REFORMATTED})
    junit = tmp_path / "junit.xml"
    proc = changed_check(repo, cli_env_for(repo, cli_env), "HEAD~1", "--junit", str(junit))
    assert proc.returncode == 0, proc.stderr
    [heading] = selection(proc.stderr)
    assert heading.endswith(": no environment changed, nothing to check")
    assert proc.stdout == ""
    assert JUnitXml.fromfile(str(junit)).tests == 0  # a CI step that reads it finds it


def test_a_catalogue_that_did_not_load_at_the_ref_selects_everything(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    repo = dataset_repo(tmp_path / "repo")
    repo.commit({"catalogue/main.yaml": CATALOGUE.replace("tools: [git]", "tools: git")})
    repo.commit({"catalogue/main.yaml": CATALOGUE})
    proc = changed_check(repo, cli_env_for(repo, cli_env), "HEAD~1", "-p", "datasource")
    assert proc.returncode == 0, proc.stderr
    lines = selection(proc.stderr)
    assert lines[0].endswith(": 7 of 7 environment(s) selected")
    assert lines[1] == ("  changed  a: the catalogue at the ref does not load (1 problem(s))")


def test_a_ref_git_does_not_know_is_bad_input(cli_env: dict[str, str], tmp_path: Path) -> None:
    repo = dataset_repo(tmp_path / "repo")
    proc = changed_check(repo, cli_env_for(repo, cli_env), "no-such-ref")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error --changed-since: git does not know 'no-such-ref' (a "
                                   "shallow clone? fetch the base first)")


def documented_workflow() -> dict[object, object]:
    """The workflow docs/how-to/ci.md shows for a dataset repository."""
    [block] = [b for b in blocks(page("how-to/ci.md"), "yaml")
               if b.startswith("# .github/workflows/envcheck.yaml\n")]
    workflow: dict[object, object] = yaml.safe_load(block)
    return workflow


def test_the_documented_workflow_checks_what_a_pull_request_changed(cli_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    origin = dataset_repo(tmp_path / "origin")
    pr = GitRepo.cloned(origin, tmp_path / "pr")
    pr.git("checkout", "-q", "-b", "change")
    catalogue = CATALOGUE.replace("      - id: b\n        image: envcheck-demo/healthy:latest\n",
                                  "      - id: b\n        image: envcheck-demo/healthy:latest\n"
                                  "        tools: [git, no-such-tool]\n")
    with (pr.root / "tasks" / "t1" / "tests" / "test.sh").open("a") as f:
        f.write("# the verifier, edited\n")
    pr.commit({"catalogue/main.yaml": catalogue}, "a pull request")

    workflow = documented_workflow()
    assert workflow[True] == {"pull_request": None}  # type: ignore[index]  # YAML 1.1: on
    [job] = workflow["jobs"].values()  # type: ignore[attr-defined]
    assert job["steps"][0] == {"uses": "actions/checkout@v4", "with": {"fetch-depth": 0}}
    summary, workspace = tmp_path / "step-summary.md", pr.root
    env = cli_env_for(pr, cli_env, GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(workspace),
                      GITHUB_STEP_SUMMARY=str(summary), GITHUB_BASE_REF="main",
                      PATH=f"{Path(envcheck_cmd()[0]).parent}:{os.environ['PATH']}")
    ran = {}
    for step in job["steps"]:
        if "run" not in step or step["name"] == "Install envcheck":  # the test's own venv
            continue
        command = step["run"].replace("${{ github.base_ref }}", "main")
        assert "${{" not in command, command
        ran[step["name"]] = subprocess.run(["bash", "-e", "-c", command], cwd=pr.root, env=env,
                                           capture_output=True, text=True, timeout=600,
                                           check=False)
    validate, check = ran["Validate the catalogue"], ran["Check what the pull request changed"]
    assert validate.returncode == 0, validate.stderr
    assert check.returncode == 1, check.stderr  # the pull request broke b: the job fails
    assert selection(check.stderr)[1:] == ["  changed  b: tools",
                                           "  changed  t1: harbor.tests_hash; task files "
                                           "tests/test.sh"]
    line = catalogue.splitlines().index("      - id: b") + 1
    assert (f"::error file=catalogue/main.yaml,line={line},title=b terminal%3A fail "
            "tool_missing::not on PATH: no-such-tool") in check.stdout.splitlines()
    report = JUnitXml.fromfile(str(pr.root / "envcheck.xml"))
    assert {(c.classname, c.name) for s in report for c in s} == {
        (env_id, kind) for env_id in ("b", "t1")
        for kind in ("terminal", "dependencies", "tests", "datasource", "image")}
    assert (report.tests, report.failures, report.errors) == (10, 1, 0)
    text = summary.read_text()
    assert "--changed-since origin/main" in text and "changed  b: tools" in text
    assert "| b | terminal | **fail** | `tool_missing` |" in text
