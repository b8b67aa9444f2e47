"""The pre-commit hook (``.pre-commit-hooks.yaml``) as users run it: the real ``pre-commit``, on a
temporary git repository whose config names this repository and a commit of it, installs the
hook (``language: python``: a virtualenv, ``pip install`` of this repository and its
dependencies from the package index, no other network) and runs ``envcheck validate
--discover`` offline on the repository's catalogue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.gitrepo import GitRepo

pytestmark = pytest.mark.slow  # the first run installs envcheck into the hook's virtualenv

SUITES = """\
version: 1
suites:
  swe:
    description: declared here, joined by the dataset in datasets.yaml
    defaults: { workdir: /testbed, user: agent }
"""
DATASETS = """\
version: 1
datasets:
  - id: swe
    format: swebench
    path: ../data/swe.jsonl
    suite: swe
    image_field: image_name
    command: pytest -rA {test_files}
    report: pytest
"""
BAD = """\
version: 1
suites:
  s:
    description: an environment with a key envcheck does not know
    environments:
      - id: a
        image: img
        colour: red
"""
WORKFLOW = "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n"


def snapshot_of_this_repository(into: Path) -> str:
    """A clone of this repository holding its working tree as it is, committed (as
    ``pre-commit try-repo`` does, new files included): the commit the hook is installed from."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c",
           "commit.gpgsign=false"]
    subprocess.run([*git, "clone", "-q", str(ROOT), str(into)], check=True, timeout=120)
    tree = [*git, f"--git-dir={into / '.git'}", f"--work-tree={ROOT}"]
    subprocess.run([*tree, "add", "-A"], check=True, timeout=120)
    subprocess.run([*tree, "commit", "-q", "--allow-empty", "-m", "snapshot"], check=True,
                   timeout=60)
    return subprocess.run([*git, "-C", str(into), "rev-parse", "HEAD"], check=True,
                          timeout=60, capture_output=True, text=True).stdout.strip()


def pre_commit(repo: GitRepo, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(PRE_COMMIT_HOME=str(home), GIT_CONFIG_GLOBAL="/dev/null", NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files",
                           "--color", "never"], cwd=repo.root, env=env, capture_output=True,
                          text=True, timeout=900, check=False)


def test_the_hook_validates_the_whole_catalogue_and_fails_a_bad_file_with_line_and_key(
        tmp_path: Path) -> None:
    rev = snapshot_of_this_repository(tmp_path / "envcheck")
    records = (ROOT / "probes" / "datasets" / "swe-demo.jsonl").read_text().splitlines()[:2]
    repo = GitRepo(tmp_path / "dataset")
    config = {"repos": [{"repo": str(tmp_path / "envcheck"), "rev": rev,
                         "hooks": [{"id": "envcheck-validate"}]}]}
    repo.commit({".pre-commit-config.yaml": yaml.safe_dump(config),
                 "catalogue/suites.yaml": SUITES, "catalogue/datasets.yaml": DATASETS,
                 "data/swe.jsonl": "\n".join(records) + "\n",
                 ".github/workflows/ci.yml": WORKFLOW})
    # the file alone refers to a suite it does not declare: why the hook takes no file names
    alone = subprocess.run([sys.executable, "-m", "envcheck.cli.app", "validate",
                            "catalogue/datasets.yaml"], cwd=repo.root, capture_output=True,
                           text=True, timeout=60, check=False)
    assert alone.returncode == 2 and "unknown suite 'swe'" in alone.stderr

    home = tmp_path / "pre-commit-home"
    repo.commit({"catalogue/bad.yaml": BAD})
    failed = pre_commit(repo, home)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "envcheck validate" in failed.stdout and "Failed" in failed.stdout
    assert "catalogue/bad.yaml:8: suites.s.environments[0].colour: unknown key" in failed.stdout

    repo.git("rm", "-q", "catalogue/bad.yaml")
    passed = pre_commit(repo, home)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "envcheck validate" in passed.stdout and "Passed" in passed.stdout
