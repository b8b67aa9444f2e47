"""What a dataset's tasks are checked with, beyond their records' tests: the parser a record's
``log_parser`` names (as later SWE-bench exports carry it), and the controls (``strength:``,
``leaks:``, ``adversarial:``) a suite's ``defaults.tests`` sets for SWE-bench and Harbor
datasets alike, merged key by key with the dataset entry's. Pure loading: no engine."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import Adversarial, LeakChecks, Strength
from envcheck.core import testlogs
from envcheck.core.testlogs import RELEASE
from tests.conftest import ROOT
from tests.test_datasets import catalogue, issues, jsonl, record, texts

HELLO = ROOT / "probes" / "harbor" / "hello-world"


def reports(tmp_path: Path, records: list[dict[str, object]], extra: str = "") -> list[str]:
    jsonl(tmp_path / "data" / "tasks.jsonl", records)
    cat = load_catalogue([catalogue(tmp_path, extra=extra)])
    return [e.tests.report for e in cat.environments if e.tests]


# --- a record's log_parser ---------------------------------------------------------------------


def test_a_record_s_log_parser_chooses_its_parser_as_the_harness_maps_the_name(
        tmp_path: Path) -> None:
    found = reports(tmp_path, [
        # astropy's repository maps to pytest_v2: the record's own parser wins
        record("a-1", log_parser="parse_log_pydicom"),
        record("a-2", log_parser="parse_log_astroid"),
        record("a-3", log_parser="parse_log_scikit", repo="acme/widgets"),
        record("a-4", log_parser="parse_log_django"),
        record("a-5", log_parser="parse_log_sympy"),
        record("a-6", log_parser=None),  # none: the harness's parser for the repository
        record("a-7", log_parser=None, repo="acme/widgets"),  # neither: pytest
    ])
    assert found == ["pytest_options", "pytest", "pytest_v2", "django", "sympy", "pytest_v2",
                     "pytest"]


def test_the_entry_s_report_and_reports_come_before_the_record_s_log_parser(
        tmp_path: Path) -> None:
    records = [record("a-1", log_parser="parse_log_pydicom"),
               record("a-2", log_parser="parse_log_jest", repo="sympy/sympy")]
    # report: set applies to every record, even one whose log_parser envcheck does not have
    assert reports(tmp_path, records, "    report: junit\n") == ["junit", "junit"]
    assert reports(tmp_path, records, "    reports: { sympy/sympy: sympy }\n") == [
        "pytest_options", "sympy"]


def test_the_suite_s_report_is_the_default_of_records_naming_no_parser(tmp_path: Path) -> None:
    file = catalogue(tmp_path)
    file.write_text(file.read_text().replace(
        "      labels: { team: rl }\n", "      labels: { team: rl }\n"
                                       "      tests: { report: junit, reruns: 4 }\n"))
    jsonl(tmp_path / "data" / "tasks.jsonl", [
        record("a-1", repo="acme/widgets"), record("a-2", log_parser="parse_log_pylint"),
        record("a-3")])
    envs = load_catalogue([file]).environments
    assert [(e.tests.report, e.tests.reruns) for e in envs if e.tests] == [
        ("junit", 2), ("pytest_options", 2), ("pytest_v2", 2)]  # the entry's reruns: 2


def test_a_log_parser_envcheck_does_not_have_names_the_record(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "data" / "tasks.jsonl", [
        record("ok-1", log_parser="parse_log_pytest"),
        record("chartjs__Chart.js-9613", log_parser="parse_log_jest"),
        record("empty-1", log_parser=""),
        record("number-1", log_parser=3)])
    found = issues(catalogue(tmp_path))
    own = ", ".join(testlogs.parser_names())
    assert texts(found[:1]) == [
        f"{data}:2: log_parser: record 'chartjs__Chart.js-9613': 'parse_log_jest' is not a "
        f"parser envcheck has: it reads the {RELEASE} names of the harness's Python parsers "
        f"(parse_log_pytest, parse_log_django, parse_log_pydicom, ...; 20 in all) and its own "
        f"({own}); set the dataset's report: (or reports: per repository) to read this "
        "record's log another way"]
    assert [(i.line, i.key) for i in found] == [(2, "log_parser"), (3, "log_parser"),
                                                (4, "log_parser")]
    assert "record 'empty-1': '' is not a parser" in found[1].message
    assert found[2].message.startswith("expected a string, got 3")


def test_in_a_json_array_or_parquet_the_record_is_named_by_index(tmp_path: Path) -> None:
    import pyarrow as pa  # the test set-up installs the parquet extra: never skipped
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    rows = [record("a-1", log_parser="parse_log_pytest"),
            record("a-2", log_parser="parse_log_cargo")]
    (tmp_path / "data" / "tasks.json").write_text(json.dumps(rows))
    [issue] = issues(catalogue(tmp_path, path="data/tasks.json"))
    assert (issue.file, issue.line, issue.key) == (str(tmp_path / "data" / "tasks.json"), None,
                                                   "[1].log_parser")
    assert issue.message.startswith("record 'a-2': 'parse_log_cargo' is not a parser")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "tasks.parquet")
    [issue] = issues(catalogue(tmp_path, path="data/tasks.parquet"))
    assert (issue.key, issue.message.split(":")[0]) == ("[1].log_parser", "record 'a-2'")


@pytest.fixture
def jest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser registered under the harness's name of one envcheck does not have."""
    def parse(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
        yield from ()

    testlogs.parser_names()  # the entry points loaded first: the patch below is undone whole
    monkeypatch.setitem(testlogs._PARSERS, "parse_log_jest", parse)


@pytest.mark.usefixtures("jest")
def test_a_registered_parser_of_that_name_reads_such_records(tmp_path: Path) -> None:
    assert reports(tmp_path, [record("a-1", log_parser="parse_log_jest")]) == ["parse_log_jest"]


# --- suite defaults.tests: strength, leaks, adversarial ---------------------------------------

SUITE_TESTS = """\
      tests:
        strength: { min_score: 0.5, mutants: 4 }
        leaks: { solution: [/opt/answer] }
        adversarial: { tricks: [tests_deleted, early_exit] }
"""


def with_suite_tests(file: Path, tests: str = SUITE_TESTS) -> Path:
    text = file.read_text()
    anchor = next(line for line in text.splitlines(keepends=True) if line.endswith("defaults:\n")
                  or "    defaults: {" in line)
    if anchor.endswith("defaults:\n"):
        file.write_text(text.replace(anchor, anchor + tests, 1))
    else:  # HARBOR's flow mapping: the block form instead
        file.write_text(text.replace(anchor, "    defaults:\n" + tests, 1))
    return file


def controls(env: Environment) -> tuple[Adversarial | None, LeakChecks | None, Strength | None]:
    return env.adversarial(), env.leaks(), env.strength()


SUITE_CONTROLS = (Adversarial(tricks=["tests_deleted", "early_exit"]),
                  LeakChecks(solution=["/opt/answer"]), Strength(min_score=0.5, mutants=4))


def test_a_suite_s_controls_apply_to_every_task_of_a_swebench_dataset(tmp_path: Path) -> None:
    jsonl(tmp_path / "data" / "tasks.jsonl", [record("a-1"), record("a-2")])
    cat = load_catalogue([with_suite_tests(catalogue(tmp_path))])
    assert [controls(e) for e in cat.environments] == [SUITE_CONTROLS] * 2
    env = cat.environment("a-1")
    assert env.tests is not None and env.tests.reruns == 2  # the entry's keys stay


def test_a_harbor_dataset_s_tasks_get_the_suite_s_controls(tmp_path: Path) -> None:
    from tests.test_datasets import harbor_catalogue

    cat = load_catalogue([with_suite_tests(harbor_catalogue(tmp_path, HELLO))])
    [env] = cat.environments
    assert env.harbor is not None and env.tests is None
    assert controls(env) == SUITE_CONTROLS


@pytest.mark.parametrize("format_", ["swebench", "harbor"])
def test_the_entry_s_controls_merge_key_by_key_and_null_turns_one_off(
        tmp_path: Path, format_: str) -> None:
    from tests.test_datasets import harbor_catalogue

    entry = ("    strength: { require: true }\n    adversarial: { require: true }\n"
             "    leaks: null\n")
    if format_ == "swebench":
        jsonl(tmp_path / "data" / "tasks.jsonl", [record("a-1")])
        file = catalogue(tmp_path, extra=entry)
    else:
        file = harbor_catalogue(tmp_path, HELLO)
        file.write_text(file.read_text().replace(
            "format: harbor,", "format: harbor, strength: { require: true }, "
                               "adversarial: { require: true }, leaks: null,"))
    [env] = load_catalogue([with_suite_tests(file)]).environments
    assert controls(env) == (
        Adversarial(tricks=["tests_deleted", "early_exit"], require=True), None,
        Strength(min_score=0.5, mutants=4, require=True))


def test_without_the_suite_s_controls_a_dataset_s_own_stand_alone(tmp_path: Path) -> None:
    jsonl(tmp_path / "data" / "tasks.jsonl", [record("a-1")])
    [env] = load_catalogue([catalogue(tmp_path, extra="    leaks: {}\n")]).environments
    assert controls(env) == (None, LeakChecks(), None)


# --- suite defaults.tests without a command, for hand-written environments --------------------

ENVIRONMENTS = """version: 1
suites:
  s:
    defaults:
      tests:
        strength: { mutants: 4 }
        reruns: 3
    environments:
      - { id: no-tests, image: "img:1" }
      - id: with-tests
        image: "img:1"
        tests: { command: pytest, fail_to_pass: [t::a], strength: { require: true } }
"""


def test_a_suite_s_tests_without_a_command_fill_the_tests_environments_declare(
        tmp_path: Path) -> None:
    file = tmp_path / "cat.yaml"
    file.write_text(ENVIRONMENTS)
    cat = load_catalogue([file])
    assert cat.environment("no-tests").tests is None  # no command: no tests probe of its own
    tests = cat.environment("with-tests").tests
    assert tests is not None and type(tests).__name__ == "TestSpec"
    assert (tests.command, tests.reruns, tests.strength) == (
        "pytest", 3, Strength(mutants=4, require=True))
