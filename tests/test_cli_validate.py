"""``envcheck validate`` and ``envcheck schema``, run as the real console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "probes" / "demo.yaml"


def _command() -> list[str]:
    beside = Path(sys.executable).with_name("envcheck")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("envcheck")
    return [found] if found else [sys.executable, "-m", "envcheck.cli.app"]


def envcheck(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="80")
    return subprocess.run([*_command(), *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env, check=False)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- validate ---------------------------------------------------------------------------


def test_valid_demo_exits_0() -> None:
    run = envcheck("validate", DEMO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ("ok: 1 suite(s), 9 environment(s), 0 data source(s) "
                                  "in 1 file(s)")
    assert run.stderr == ""


def test_valid_directory_exits_0() -> None:
    run = envcheck("validate", "probes", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    files = len(list((ROOT / "probes").glob("*.yaml")))
    assert f"in {files} file(s)" in run.stdout


def test_a_piped_summary_is_one_line_counting_what_it_names() -> None:
    """80 columns, piped: the line is not wrapped; dataset entries are counted apart from the
    instance files and task folders they read."""
    run = envcheck("validate", "probes", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    probes = ROOT / "probes"
    entries = sum(len(yaml.safe_load(f.read_text()).get("datasets") or [])
                  for f in probes.glob("*.yaml"))
    folders = len(list(probes.glob("harbor*/*/task.toml")))
    instance_files = len(list((probes / "datasets").glob("*.jsonl")))
    assert run.stdout.endswith(f"; {entries} dataset(s) from {instance_files} instance file(s) "
                               f"and {folders} task folder(s)\n")
    assert run.stdout.count("\n") == 1 and len(run.stdout) > 80


MALFORMED: dict[str, tuple[str, int, str, str]] = {
    # name: (catalogue, line, key path ("" for none), message)
    "bad-yaml": ("""\
        version: 1
        suites:
          s:
            defaults:
              tools: [git, python3
            environments: []
        """, 6, "", "invalid YAML: expected ',' or ']', but got ':'"),
    "unknown-key-env": ("""\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                colour: red
        """, 7, "suites.s.environments[0].colour", "unknown key"),
    "unknown-key-defaults": ("""\
        version: 1
        suites:
          s:
            defaults:
              wrkdir: /srv
        """, 5, "suites.s.defaults.wrkdir", "unknown key (did you mean 'workdir'?)"),
    "unknown-key-limits": ("""\
        version: 1
        suites:
          s:
            defaults:
              limits:
                memory_mb: 512
                swap_mb: 0
        """, 7, "suites.s.defaults.limits.swap_mb", "unknown key"),
    "wrong-type": ("""\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                limits: {memory_mb: lots}
        """, 7, "suites.s.environments[0].limits.memory_mb",
                   "expected an integer, got 'lots'"),
    "bad-duration": ("""\
        version: 1
        suites:
          s:
            defaults:
              timeouts:
                exec_s: 5 minutes
        """, 6, "suites.s.defaults.timeouts.exec_s", "not a duration: '5 minutes'"),
    "duplicate-env": ("""\
        version: 1
        suites:
          s:
            environments:
              - {id: a, image: img}
              - {id: a, image: img}
        """, 6, "suites.s.environments[1].id", "duplicate environment id 'a' (first in "),
    "duplicate-key": ("""\
        version: 1
        suites: {}
        suites: {}
        """, 3, "suites", "duplicate key (first at line 2)"),
    "missing-image": ("""\
        version: 1
        suites:
          s:
            environments:
              - id: a
        """, 5, "suites.s.environments[0].image", "required key is missing"),
    "missing-version": ("""\
        # no version

        suites: {}
        """, 3, "version", "required key is missing"),
    "unsupported-version": ("""\
        version: 7
        """, 1, "version", "unsupported catalogue version 7"),
    "unknown-data-source": ("""\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                data_sources: [weather]
        """, 7, "suites.s.environments[0].data_sources[0]", "unknown data source 'weather'"),
    "not-a-mapping": ("""\
        - version: 1
        """, 1, "", "a catalogue file must be a mapping"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_catalogue_exits_2_with_file_line_and_key(tmp_path: Path, name: str) -> None:
    text, line, key, message = MALFORMED[name]
    path = write(tmp_path, f"{name}.yaml", text)
    run = envcheck("validate", path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    where = f"{path}:{line}: {key}: " if key else f"{path}:{line}: "
    matching = [entry for entry in lines if where in entry]
    assert len(matching) == 1, run.stderr
    assert matching[0].split(where, 1)[1].startswith(message), run.stderr
    assert lines[-1] == "1 problem(s) in the catalogue"


def test_missing_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    run = envcheck("validate", missing)
    assert run.returncode == 2
    assert f"{missing}: no such file or directory" in run.stderr


def test_every_problem_gets_its_own_line(tmp_path: Path) -> None:
    # A long path must not make rich wrap an issue over two lines.
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 4)
    deep.mkdir(parents=True)
    one = write(deep, "one.yaml", """\
        version: 1
        suites:
          s:
            defaults: {limits: {memory_mb: lots}, shel: /bin/sh}
            environments:
              - {id: a, image: img}
        """)
    two = write(deep, "two.yaml", """\
        version: 1
        suites:
          t:
            environments:
              - {id: a, image: img}
        """)
    run = envcheck("validate", one, two)
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"error {one}:4: suites.s.defaults.limits.memory_mb: expected an integer, got 'lots'",
        f"error {one}:4: suites.s.defaults.shel: unknown key (did you mean 'shell'?)",
        f"error {two}:5: suites.t.environments[0].id: duplicate environment id 'a' "
        f"(first in {one}:6)",
        "3 problem(s) in the catalogue",
    ]


def test_square_brackets_in_issues_are_printed_verbatim(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                labels: {team: rl}
                "[bold]": x
        """)
    run = envcheck("validate", path)
    assert run.returncode == 2
    assert f"{path}:8: suites.s.environments[0].[bold]: unknown key" in run.stderr


def test_validate_needs_a_path() -> None:
    run = envcheck("validate")
    assert run.returncode == 2
    assert "Missing argument" in run.stderr


# --- schema -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    run = envcheck("schema")
    assert run.returncode == 0, run.stderr
    schema = json.loads(run.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def errors(validator: Draft202012Validator, doc: Any) -> list[str]:
    return [error.message for error in validator.iter_errors(doc)]


def test_schema_accepts_the_demo(validator: Draft202012Validator) -> None:
    doc = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    assert errors(validator, doc) == []


FULL = """\
version: 1
suites:
  s:
    description: every block set once
    allow_degraded: true
    defaults:
      workdir: /srv
      tools: [git]
      limits: {memory_mb: 256, pids: 64}
      timeouts: {exec_s: 90s, probe_s: 10m}
      schedules: {terminal: 1h, tests: null, jitter_s: 5}
      data_sources: [weather]
    environments:
      - id: a
        image: img/a
        dependencies:
          python: {numpy: ">=1.26"}
          executables: {git: "2\\\\.", make: null}
          imports: [numpy]
        tests:
          command: pytest
          fail_to_pass: [t1]
          oracle: {script: "git apply fix.patch"}
          timeout_s: 5m
data_sources:
  - id: weather
    url: https://example.org/api
    schema: {type: object}
    auth: {env: WEATHER_TOKEN}
    freshness: {field: updated, max_age_s: 1d}
    schedule: 2m
"""


def test_schema_accepts_what_the_loader_accepts(
    validator: Draft202012Validator, tmp_path: Path
) -> None:
    path = write(tmp_path, "full.yaml", FULL)
    assert envcheck("validate", path).returncode == 0
    assert errors(validator, yaml.safe_load(FULL)) == []


@pytest.mark.parametrize(("where", "change"), [
    ("top level", lambda d: d.update(colour="red")),
    ("suite", lambda d: d["suites"]["s"].update(colour="red")),
    ("defaults", lambda d: d["suites"]["s"]["defaults"].update(image="img")),
    ("limits", lambda d: d["suites"]["s"]["defaults"]["limits"].update(swap_mb=0)),
    ("environment", lambda d: d["suites"]["s"]["environments"][0].update(colour="red")),
    ("data source field name", lambda d: d["data_sources"][0].update(json_schema={})),
])
def test_schema_rejects_unknown_keys(
    validator: Draft202012Validator, where: str, change: Any
) -> None:
    doc = yaml.safe_load(FULL)
    change(doc)
    found = errors(validator, doc)
    assert len(found) == 1, found
    assert "Additional properties are not allowed" in found[0]


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda d: d.pop("version"), "'version' is a required property"),
    (lambda d: d.update(version=2), "1 was expected"),
    (lambda d: d["suites"].update({"Bad Id": {}}), "does not match any of the regexes"),
    (lambda d: d["suites"]["s"]["environments"][0].pop("image"), "'image' is a required"),
    (lambda d: d["suites"]["s"]["defaults"]["timeouts"].update(exec_s="soon"), "soon"),
    (lambda d: d["suites"]["s"]["defaults"]["limits"].update(memory_mb="lots"), "lots"),
])
def test_schema_rejects_what_the_loader_rejects(
    validator: Draft202012Validator, change: Any, fragment: str
) -> None:
    doc = yaml.safe_load(FULL)
    change(doc)
    found = errors(validator, doc)
    assert found, "the schema accepted it"
    assert any(fragment in message for message in found), found
