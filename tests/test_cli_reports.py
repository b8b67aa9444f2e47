"""``envcheck check``'s CI reports on a real check of the demo's images: the JUnit file read back
by a JUnit parser, GitHub workflow annotations at the catalogue line or the task's task.toml,
the Markdown job summary, and the exit codes they leave as they were."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from junitparser import Attr, Error, Failure, IntAttr, JUnitXml, Skipped, TestCase

from tests.conftest import ROOT, envcheck_cmd

pytestmark = pytest.mark.docker

DEMO = Path("probes/demo.yaml")
HARBOR = Path("probes/demo-harbor.yaml")


def check(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), "check", *map(str, args)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def ci_env(cli_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The CLI's environment with GitHub's variables only as the test sets them."""
    env = {k: v for k, v in cli_env.items() if not k.startswith("GITHUB_")}
    return {**env, **extra}


def line_of(catalogue: Path, text: str) -> int:
    return next(i for i, line in enumerate((ROOT / catalogue).read_text().splitlines(), 1)
                if text in line)


def cases(report: Path) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(environment, kind) -> (outcome, type, message) of every test case, as a JUnit parser
    reads them; the suites' counts checked against their cases on the way."""
    found = {}
    xml = JUnitXml.fromfile(str(report))
    for suite in xml:
        outcomes = []
        for case in suite:
            [result] = case.result or [None]
            outcome = {Failure: "failure", Error: "error", Skipped: "skipped",
                       type(None): "passed"}[type(result)]
            outcomes.append(outcome)
            found[(case.classname, case.name)] = (
                outcome, getattr(result, "type", "") or "", getattr(result, "message", "") or "")
        assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (
            len(outcomes), outcomes.count("failure"), outcomes.count("error"),
            outcomes.count("skipped")), suite.name
    return found


class LocatedCase(TestCase):
    """A test case with the source attributes envcheck writes (as pytest's xunit1 does)."""

    file = Attr()
    line = IntAttr()


def located(report: Path) -> list[LocatedCase]:
    return [LocatedCase.fromelem(c) for s in JUnitXml.fromfile(str(report)) for c in s]


OUTCOME = {"pass": "passed", "fail": "failure", "flaky": "failure", "error": "error",
           "skip": "skipped"}


def test_junit_annotations_and_summary_match_the_results(cli_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    proc = check(ci_env(cli_env), DEMO, HARBOR, "-e", "demo-healthy", "-e", "demo-tool-missing",
                 "-e", "demo-image-missing", "-e", "no-reward", "-p", "terminal",
                 "-p", "datasource", "--json", "--junit", junit, "--summary", summary,
                 "--annotations")
    assert proc.returncode == 1, proc.stderr  # a failure outranks envcheck's errors: as ever
    results = [json.loads(line) for line in proc.stdout.splitlines()]  # stdout: JSON only
    assert {r["status"] for r in results} == {"pass", "fail", "error", "skip"}

    read = cases(junit)
    assert read.keys() == {(r["env"], r["probe"]) for r in results}
    for r in results:
        outcome, kind, message = read[(r["env"], r["probe"])]
        assert outcome == OUTCOME[r["status"]], r
        if outcome in ("failure", "error"):
            assert (kind, message) == (r["reason"], f"{r['reason']}: {r['summary']}")
    xml = JUnitXml.fromfile(str(junit))
    assert [s.name for s in xml] == ["demo", "harbor-demo"]
    assert xml.tests == len(results)
    [missing] = [c for c in located(junit)
                 if (c.classname, c.name) == ("demo-tool-missing", "terminal")]
    line = line_of(DEMO, "id: demo-tool-missing")
    assert (missing.file, missing.line) == (str(DEMO), line)

    # --json: the annotations go to stderr, the environment's at its catalogue line
    annotations = [ln for ln in proc.stderr.splitlines() if ln.startswith("::")]
    assert (f"::error file={DEMO},line={line},title=demo-tool-missing terminal%3A fail "
            "tool_missing::not on PATH: git") in annotations
    assert ("::error title=envcheck could not check demo-image-missing terminal%3A "
            "image_missing::image 'envcheck-demo/never-built:latest' is not on this host"
            ) in annotations
    assert len(annotations) == sum(r["status"] in ("fail", "error") for r in results)

    text = summary.read_text()
    assert (f"| demo-tool-missing | terminal | **fail** | `tool_missing` | not on PATH: git | "
            f"{DEMO}:{line} |") in text
    assert f"**{len(results)} result(s)**" in text


def test_a_harbor_task_is_annotated_at_its_task_toml(cli_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    """Under GitHub Actions: annotations on by default, the summary appended to the step's."""
    step_summary = tmp_path / "step-summary.md"
    step_summary.write_text("## an earlier step\n")
    junit = tmp_path / "junit.xml"
    env = ci_env(cli_env, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(step_summary),
                 GITHUB_WORKSPACE=str(ROOT))
    proc = check(env, HARBOR, "-e", "no-reward", "-e", "build-fails", "-p", "tests",
                 "--junit", junit)
    assert proc.returncode == 1, proc.stderr
    annotations = [ln for ln in proc.stdout.splitlines() if ln.startswith("::")]
    assert [a.split("::")[1] for a in annotations] == [
        "error file=probes/harbor/no-reward/task.toml,title=no-reward tests%3A fail "
        "reward_missing",
        "error file=probes/harbor/build-fails/task.toml,title=build-fails tests%3A fail "
        "image_build_failed"]
    read = cases(junit)
    assert {k: v[:2] for k, v in read.items()} == {
        ("no-reward", "tests"): ("failure", "reward_missing"),
        ("build-fails", "tests"): ("failure", "image_build_failed")}
    assert [(c.classname, c.file, c.line) for c in located(junit)] == [
        ("no-reward", "probes/harbor/no-reward/task.toml", None),
        ("build-fails", "probes/harbor/build-fails/task.toml", None)]
    text = step_summary.read_text()
    assert text.startswith("## an earlier step\n## envcheck check\n")
    assert "probes/harbor/no-reward/task.toml" in text


def test_catalogue_problems_are_annotated_and_write_no_report(cli_env: dict[str, str],
                                                              tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nsuites:\n  s:\n    environments:\n      - id: a\n"
                   "        image: img\n        colour: red\n")
    junit = tmp_path / "junit.xml"
    proc = check(ci_env(cli_env, GITHUB_WORKSPACE=str(tmp_path)), bad, "--junit", junit,
                 "--annotations")
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == [
        "::error file=bad.yaml,line=7,title=envcheck%3A catalogue::"
        "suites.s.environments[0].colour: unknown key"]
    assert not junit.exists()


def test_annotations_are_escaped_and_capped_at_what_github_shows() -> None:
    """Pure: a summary's newline, '%', ':' and ',' escaped as workflow commands need; past 10
    errors, one notice counts the rest; the summary's cells keep their table."""
    from envcheck.catalogue.origins import Origin
    from envcheck.cli.reports.github import ANNOTATIONS_MAX, markdown_summary, result_annotations
    from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status

    results = [ProbeResult(f"e{i}", ProbeKind.TERMINAL, Status.FAIL, Reason.TOOL_MISSING,
                           "not on PATH: a|b\n100%", 0.1) for i in range(ANNOTATIONS_MAX + 2)]
    lines = result_annotations(results, lambda env_id: Origin("c, d.yaml", 3))
    assert lines[0] == ("::error file=c%2C d.yaml,line=3,title=e0 terminal%3A fail "
                        "tool_missing::not on PATH: a|b%0A100%25")
    assert len(lines) == ANNOTATIONS_MAX + 1
    assert lines[-1].startswith("::notice title=envcheck::2 more result(s) not annotated")
    summary = markdown_summary(results[:1], lambda env_id: None)
    assert "| e0 | terminal | **fail** | `tool_missing` | not on PATH: a\\|b 100% |  |" in summary
