"""Datasets as catalogue entries: SWE-bench-style instance files expand into environments at
load, and every bad record is named by file, line (JSONL) or index (JSON, Parquet), and field.
Pure loading: no engine (the demo dataset's verdicts: tests/test_swebench_dataset.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from envcheck.catalogue.datasets.base import decode_env_id, env_id
from envcheck.catalogue.datasets.records import PARQUET_EXTRA
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.core.errors import CatalogueError, CatalogueIssue
from tests.conftest import ROOT

F2P = ["tests/test_a.py::test_bug"]
P2P = ["tests/test_a.py::test_ok", "tests/test_b.py::test_x[a b]"]
PATCH = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
TEST_PATCH = ("diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n"
              "+++ b/tests/test_a.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n")

CATALOGUE = """version: 1
suites:
  swe:
    defaults:
      workdir: /testbed
      user: agent
      limits: {{ memory_mb: 512 }}
      labels: {{ team: rl }}
datasets:
  - id: swe-lite
    format: swebench
    path: {path}
    suite: swe
    image: {image}
    command: pytest -rA {{test_files}}
    timeouts: {{ exec_s: 45 }}
    reruns: 2
{extra}"""


def record(instance_id: str = "astropy__astropy-12907", **over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"repo": "astropy/astropy", "instance_id": instance_id,
                           "patch": PATCH, "test_patch": TEST_PATCH, "FAIL_TO_PASS": F2P,
                           "PASS_TO_PASS": P2P, "version": "4.3"}
    rec.update(over)
    return {k: v for k, v in rec.items() if v is not None}


def jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records), encoding="utf-8")
    return path


def catalogue(tmp_path: Path, path: str = "data/tasks.jsonl",
              image: str = "'sweb.eval.x86_64.{instance_id}:latest'", extra: str = "") -> Path:
    file = tmp_path / "cat.yaml"
    file.write_text(CATALOGUE.format(path=path, image=image, extra=extra), encoding="utf-8")
    return file


def issues(*paths: Path) -> list[CatalogueIssue]:
    with pytest.raises(CatalogueError) as info:
        load_catalogue(list(paths))
    return info.value.issues


def texts(found: list[CatalogueIssue]) -> list[str]:
    return [str(i) for i in found]


# --- expansion ---------------------------------------------------------------------------------


def test_each_record_is_an_environment_of_the_suite_with_its_defaults(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "data" / "tasks.jsonl", [
        record(), record("django__django-11099", repo="django/django",
                         FAIL_TO_PASS=json.dumps(F2P), PASS_TO_PASS=json.dumps(P2P))])
    cat = load_catalogue([catalogue(tmp_path)])
    assert [e.id for e in cat.environments] == ["astropy__astropy-12907", "django__django-11099"]
    assert cat.suite("swe").environment_ids == ("astropy__astropy-12907", "django__django-11099")
    assert cat.dataset_files == (str(data),)
    env = cat.environment("django__django-11099")
    assert env.image == "sweb.eval.x86_64.django__django-11099:latest"
    assert (env.suite, env.workdir, env.user, env.limits.memory_mb) == ("swe", "/testbed",
                                                                         "agent", 512)
    assert env.timeouts.exec_s == 45 and env.labels == {"team": "rl", "dataset": "swe-lite"}
    assert env.tests is not None
    assert env.tests.fail_to_pass == F2P and env.tests.pass_to_pass == P2P  # decoded strings
    assert env.tests.oracle is not None and env.tests.oracle.patch == PATCH
    # no report set: the harness's parser for the repository
    assert (env.tests.test_patch, env.tests.report, env.tests.reruns) == (TEST_PATCH, "django", 2)
    assert env.tests.command == "pytest -rA {test_files}"
    assert env.tests.shuffle is False  # the command takes test files, not the ids


def test_image_field_and_commands_and_reports_per_repository(tmp_path: Path) -> None:
    jsonl(tmp_path / "data" / "tasks.jsonl", [
        record(image_name="reg/a:1"), record("django__django-1", repo="django/django",
                                             image_name="reg/d:1")])
    file = catalogue(tmp_path, extra="    commands:\n      django/django: ./tests/runtests.py "
                                     "--verbosity 2 {test_modules}\n"
                                     "    reports: { django/django: django }\n")
    file.write_text(file.read_text().replace("    image: 'sweb.eval.x86_64.{instance_id}:latest'",
                                             "    image_field: image_name"))
    cat = load_catalogue([file])
    astropy, django = cat.environments
    assert (astropy.image, django.image) == ("reg/a:1", "reg/d:1")
    assert astropy.tests is not None and django.tests is not None
    assert (astropy.tests.report, django.tests.report) == ("pytest_v2", "django")
    assert django.tests.command.startswith("./tests/runtests.py")


@pytest.mark.parametrize(("extra", "reports"), [
    # unset: the released harness's parser for each repository, pytest for any other
    ("", ["pytest_v2", "sympy", "matplotlib", "seaborn", "pytest_options", "pytest"]),
    # set: the dataset's, except where reports names the repository
    ("    report: pytest\n    reports: { sympy/sympy: sympy }\n",
     ["pytest", "sympy", "pytest", "pytest", "pytest", "pytest"])])
def test_report_follows_the_harness_map_unless_set(tmp_path: Path, extra: str,
                                                   reports: list[str]) -> None:
    repos = ["astropy/astropy", "sympy/sympy", "matplotlib/matplotlib", "mwaskom/seaborn",
             "psf/requests", "acme/widgets"]
    jsonl(tmp_path / "data" / "tasks.jsonl", [record(f"t-{i}", repo=repo)
                                               for i, repo in enumerate(repos)])
    cat = load_catalogue([catalogue(tmp_path, extra=extra)])
    assert [e.tests.report for e in cat.environments if e.tests] == reports


def test_json_arrays_folders_and_globs(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.json").write_text(json.dumps([record("a__a-1"), record("a__a-2")]))
    jsonl(tmp_path / "data" / "b.jsonl", [record("b__b-1")])
    by_folder = load_catalogue([catalogue(tmp_path, path="data")])
    by_glob = load_catalogue([catalogue(tmp_path, path="'data/*.json*'")])
    for cat in (by_folder, by_glob):
        assert [e.id for e in cat.environments] == ["a__a-1", "a__a-2", "b__b-1"]


def test_reload_sees_added_and_removed_records(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "data" / "tasks.jsonl", [record("a__a-1"), record("a__a-2")])
    file = catalogue(tmp_path)
    assert [e.id for e in load_catalogue([file]).environments] == ["a__a-1", "a__a-2"]
    jsonl(data, [record("a__a-2"), record("a__a-3")])
    assert [e.id for e in load_catalogue([file]).environments] == ["a__a-2", "a__a-3"]


@pytest.mark.parametrize("dataset_id", [
    "astropy__astropy-12907", "Project-MONAI__MONAI-5686",
    "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc"])
def test_plain_dataset_ids_are_kept_as_they_are(dataset_id: str) -> None:
    assert env_id(dataset_id) == dataset_id


@pytest.mark.parametrize("dataset_id", ["owner/repo#12", "a b", "~x", "_lead", "é~%41", "-"])
def test_other_ids_are_escaped_reversibly(dataset_id: str) -> None:
    mapped = env_id(dataset_id)
    assert mapped != dataset_id and decode_env_id(mapped) == dataset_id
    assert all(c.isalnum() or c in "._-~" for c in mapped) and mapped[0] not in "._-"


def test_an_escaped_id_loads(tmp_path: Path) -> None:
    jsonl(tmp_path / "data" / "tasks.jsonl", [record("owner/repo#12", image_name="x")])
    file = catalogue(tmp_path, image="'img:{version}'")
    [env] = load_catalogue([file]).environments
    assert decode_env_id(env.id) == "owner/repo#12" and env.image == "img:4.3"


def test_the_demo_dataset_loads_with_ids_identical_to_the_dataset() -> None:
    cat: Catalogue = load_catalogue([ROOT / "probes" / "demo-swebench.yaml"])
    ids = [json.loads(line)["instance_id"] for name in ("swe-demo.jsonl", "swe-demo-django.jsonl")
           for line in (ROOT / "probes" / "datasets" / name).read_text().splitlines()]
    assert [e.id for e in cat.environments] == ids


# --- errors: file, line or index, field ------------------------------------------------------


def test_bad_records_name_file_line_and_field(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "data" / "tasks.jsonl", [
        record("ok__ok-1"),
        '{"instance_id": "bad-json", ',
        record("missing__f2p-1", FAIL_TO_PASS=None),
        record("wrong__type-1", PASS_TO_PASS=[1, 2]),
        record("bad__string-1", FAIL_TO_PASS='["tests/test_a.py::test_bug"'),
        "[1, 2]",
        record("dup__ids-1", FAIL_TO_PASS=["t::a", "t::a"]),
        record("ok__ok-1"),
    ])
    found = texts(issues(catalogue(tmp_path)))
    assert found == [
        f"{data}:2: not valid JSON: Expecting property name enclosed in double quotes "
        "(column 29)",
        f"{data}:3: FAIL_TO_PASS: required key is missing",
        f"{data}:4: PASS_TO_PASS[0]: expected a string, got 1 (quote it in the YAML)",
        f"{data}:4: PASS_TO_PASS[1]: expected a string, got 2 (quote it in the YAML)",
        f"{data}:5: FAIL_TO_PASS: expected a list of test ids, or a JSON-encoded one; this "
        "string is not valid JSON (Expecting ',' delimiter at column 29)",
        f"{data}:6: a record must be a JSON object, got list",
        f"{data}:7: FAIL_TO_PASS: lists t::a more than once",
        f"{data}:8: instance_id: duplicate environment id 'ok__ok-1' (first in {data}:1)",
    ]


def test_bad_records_in_a_json_array_are_named_by_index(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    data = tmp_path / "data" / "tasks.json"
    second = record("a__a-2")
    del second["instance_id"]
    data.write_text(json.dumps([record("a__a-1"), second]))
    [issue] = issues(catalogue(tmp_path, path="data/tasks.json"))
    assert str(issue) == f"{data}: [1].instance_id: required key is missing"


def test_entry_problems_point_at_the_catalogue(tmp_path: Path) -> None:
    file = catalogue(tmp_path, path="data/none.jsonl")
    [issue] = issues(file)
    assert issue.file == str(file) and issue.line == 12 and issue.key == "datasets[0].path"
    assert "no such file or directory" in issue.message
    file.write_text(file.read_text().replace("suite: swe", "suite: nope"))
    jsonl(tmp_path / "data" / "none.jsonl", [record()])
    [issue] = issues(file)
    assert (issue.key, issue.message) == ("datasets[0].suite", "unknown suite 'nope' (declare "
                                          "it under suites: in any catalogue file)")


@pytest.mark.parametrize(("extra", "words"), [
    ("    report: junitt\n", "unknown report 'junitt' (known: junit, django, matplotlib, pytest"),
    ("    image_field: name\n", "set exactly one of image (a template) or image_field"),
    ("    colour: red\n", "unknown key"),
])
def test_bad_entries_are_catalogue_errors(tmp_path: Path, extra: str, words: str) -> None:
    jsonl(tmp_path / "data" / "tasks.jsonl", [record()])
    found = issues(catalogue(tmp_path, extra=extra))
    assert any(words in i.message and i.key.startswith("datasets[0]") for i in found), \
        texts(found)


def test_a_template_field_the_record_lacks_is_named(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "data" / "tasks.jsonl", [record(version=None)])
    [issue] = issues(catalogue(tmp_path, image="'img:{version}'"))
    assert str(issue) == (f"{data}:1: version: the image template needs this field, as a "
                          "string (the record has none)")


def test_many_bad_records_are_capped(tmp_path: Path) -> None:
    jsonl(tmp_path / "data" / "tasks.jsonl", ["{"] * 120)
    found = issues(catalogue(tmp_path))
    assert len(found) == 51
    assert "70 more problem(s) in its records (the first 50 are listed)" in found[0].message


# --- Parquet -----------------------------------------------------------------------------------


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "data").mkdir()
    data = tmp_path / "data" / "tasks.parquet"
    data.write_bytes(b"PAR1")
    [issue] = issues(catalogue(tmp_path, path="data/tasks.parquet"))
    assert str(issue) == f"{data}: {PARQUET_EXTRA}"
    assert "envcheck[parquet]" in issue.message


def test_parquet_rows_load_with_lists_or_json_strings(tmp_path: Path) -> None:
    # the test set-up installs the parquet extra: a missing pyarrow fails here, never skips
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [record("a__a-1", FAIL_TO_PASS=json.dumps(F2P), PASS_TO_PASS=json.dumps(P2P)),
            record("a__a-2", FAIL_TO_PASS=json.dumps(F2P), PASS_TO_PASS="[1")]
    (tmp_path / "data").mkdir()
    data = tmp_path / "data" / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    [issue] = issues(catalogue(tmp_path, path="data/tasks.parquet"))
    assert str(issue).startswith(f"{data}: [1].PASS_TO_PASS: expected a list of test ids")


# --- Harbor task folders -------------------------------------------------------------------

HARBOR = """version: 1
suites:
  tb2:
    defaults: {{ limits: {{ pids: 128 }} }}
datasets:
  - {{ id: tb2, format: harbor, path: '{path}', suite: tb2, reruns: 2,
      images: {{ always-rewards: 'reg/prebuilt:1' }} }}
"""
HARBOR_DEMO = ROOT / "probes" / "harbor"


def harbor_catalogue(tmp_path: Path, path: Path | str) -> Path:
    file = tmp_path / "harbor.yaml"
    file.write_text(HARBOR.format(path=path), encoding="utf-8")
    return file


def test_harbor_task_folders_are_environments_of_the_suite(tmp_path: Path) -> None:
    cat = load_catalogue([harbor_catalogue(tmp_path, HARBOR_DEMO)])
    folders = sorted(p.name for p in HARBOR_DEMO.iterdir() if (p / "task.toml").is_file())
    assert [e.id for e in cat.environments] == folders
    assert cat.suite("tb2").environment_ids == tuple(folders)
    hello = cat.environment("hello-world")
    assert hello.harbor is not None and hello.harbor.reruns == 2
    assert hello.image.startswith("envcheck-harbor/hello-world:")
    assert hello.limits.pids == 128 and hello.labels == {"dataset": "tb2"}
    assert cat.environment("always-rewards").image == "reg/prebuilt:1"
    compose = cat.environment("compose-task").harbor
    assert compose is not None and compose.unsupported is None
    assert compose.compose == "environment/docker-compose.yaml"
    one = load_catalogue([harbor_catalogue(tmp_path, HARBOR_DEMO / "hello-world")])
    assert [e.id for e in one.environments] == ["hello-world"]


def test_a_bad_task_folder_is_named_by_its_file(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "broken").mkdir()
    (tasks / "broken" / "instruction.md").write_text("do it\n")
    [issue] = issues(harbor_catalogue(tmp_path, tasks))
    assert str(issue) == f"{tasks / 'broken' / 'task.toml'}: missing"


def test_an_unknown_format_is_named(tmp_path: Path) -> None:
    file = harbor_catalogue(tmp_path, HARBOR_DEMO)
    file.write_text(file.read_text().replace("format: harbor", "format: harbour"))
    [issue] = issues(file)
    assert (issue.key, issue.message) == ("datasets[0]", "unknown format 'harbour' (known: "
                                          "'swebench', 'harbor')")
