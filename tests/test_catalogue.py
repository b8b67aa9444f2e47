"""The catalogue loader: models, defaults, durations, spec hashes and file:line error reports.

Pure tests (no Docker). Every malformed catalogue is written to ``tmp_path`` with
``textwrap.dedent`` and a leading backslash, so line 1 is the first line shown.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from envcheck.catalogue.keypaths import format_path
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment, Limits, Schedules, Timeouts
from envcheck.catalogue.probe_specs import TestSpec
from envcheck.catalogue.sourcelimits import SourceLimits
from envcheck.catalogue.yamlsrc import load_yaml
from envcheck.core.errors import CatalogueError, CatalogueIssue
from envcheck.core.results import ProbeKind

DEMO = Path(__file__).resolve().parent.parent / "probes" / "demo.yaml"


# --- helpers ----------------------------------------------------------------------------


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(directory: Path, text: str, name: str = "cat.yaml") -> Catalogue:
    return load_catalogue([write(directory, name, text)])


def issues(*paths: Path | str) -> list[CatalogueIssue]:
    with pytest.raises(CatalogueError) as info:
        load_catalogue(list(paths))
    assert info.value.issues, "CatalogueError without issues"
    return info.value.issues


def issues_in(directory: Path, text: str, name: str = "cat.yaml") -> list[CatalogueIssue]:
    return issues(write(directory, name, text))


def only(found: list[CatalogueIssue]) -> CatalogueIssue:
    assert len(found) == 1, "\n".join(str(i) for i in found)
    return found[0]


def env_of(directory: Path, text: str, env_id: str = "a") -> Environment:
    return load(directory, text).environment(env_id)


# --- the demo catalogue -----------------------------------------------------------------


def test_demo_catalogue_loads() -> None:
    cat = load_catalogue([DEMO])
    assert cat.files == (str(DEMO),)
    assert [s.id for s in cat.suites] == ["demo"]
    suite = cat.suite("demo")
    assert suite.file == str(DEMO)
    assert suite.allow_degraded is False
    assert len(cat.environments) == 9
    assert suite.environment_ids == tuple(e.id for e in cat.environments)
    assert cat.data_sources == ()
    for env in cat.environments:
        assert env.suite == "demo"
        assert env.image.startswith("envcheck-demo/")
        assert env.user == "agent"
        assert env.tools == ["git", "python3", "tmux"]
        assert env.limits == Limits(memory_mb=512, cpus=1.0, pids=256)
        assert env.timeouts == Timeouts(start_s=15, shell_s=2, exec_s=30)
        assert env.schedules.terminal == 300.0
        assert env.schedules.dependencies == 3600.0
        assert env.schedules.tests == 21600.0
        assert env.schedules.datasource == Schedules().datasource
    healthy = cat.environment("demo-healthy")
    assert healthy.image == "envcheck-demo/healthy:latest"


def test_lookups_raise_key_error_for_unknown_ids() -> None:
    cat = load_catalogue([DEMO])
    with pytest.raises(KeyError):
        cat.environment("nope")
    with pytest.raises(KeyError):
        cat.suite("nope")
    with pytest.raises(KeyError):
        cat.data_source("nope")


def test_demo_as_string_path_and_directory(tmp_path: Path) -> None:
    by_str = load_catalogue([str(DEMO)])
    by_dir = load_catalogue([DEMO.parent])
    demo = [env for env in by_dir.environments if env.suite == "demo"]
    assert by_str.environments == tuple(demo)
    assert len(by_dir.files) == len(list(DEMO.parent.glob("*.yaml")))


# --- suite defaults ---------------------------------------------------------------------

SUITE_WITH_DEFAULTS = """\
    version: 1
    suites:
      s:
        defaults:
          workdir: /srv
          user: agent
          tools: [git, python3]
          limits: {pids: 100, cpus: 2}
          timeouts: {exec_s: 10s, probe_s: 2m}
          schedules: {terminal: 1m, tests: 2h}
          data_sources: [weather]
          labels: {team: rl}
          tests: {command: pytest, reruns: 5}
        environments:
          - id: plain
            image: img/plain
          - id: a
            image: img/a
            user: root
            limits: {memory_mb: 2048}
            timeouts: {exec_s: 1m}
            schedules: {terminal: null}
            tools: [bash]
            data_sources: []
            labels: {tier: gold}
            tests: {command: pytest -x, fail_to_pass: [t1]}
    data_sources:
      - id: weather
        url: https://example.org/weather
    """


def test_suite_defaults_fill_unset_fields(tmp_path: Path) -> None:
    plain = load(tmp_path, SUITE_WITH_DEFAULTS).environment("plain")
    assert plain.workdir == "/srv"
    assert plain.user == "agent"
    assert plain.shell == "/bin/bash"  # neither sets it: the model default
    assert plain.tools == ["git", "python3"]
    assert plain.limits == Limits(pids=100, cpus=2.0)
    assert plain.timeouts == Timeouts(exec_s=10, probe_s=120)
    assert plain.schedules == Schedules(terminal=60, tests=7200)
    assert plain.data_sources == ["weather"]
    assert plain.labels == {"team": "rl"}
    assert plain.tests == TestSpec(command="pytest", reruns=5)


def test_environment_fields_win_over_defaults(tmp_path: Path) -> None:
    env = load(tmp_path, SUITE_WITH_DEFAULTS).environment("a")
    assert env.user == "root"
    assert env.workdir == "/srv"


def test_nested_blocks_merge_key_by_key(tmp_path: Path) -> None:
    env = load(tmp_path, SUITE_WITH_DEFAULTS).environment("a")
    # env sets limits.memory_mb only, the suite sets pids and cpus: all apply
    assert env.limits.memory_mb == 2048
    assert env.limits.pids == 100
    assert env.limits.cpus == 2.0
    assert env.limits.tmpfs_mb == Limits().tmpfs_mb
    assert env.timeouts.exec_s == 60.0  # env's
    assert env.timeouts.probe_s == 120.0  # suite's
    assert env.timeouts.start_s == Timeouts().start_s  # model default
    assert env.schedules.terminal is None  # null turns a kind off, overriding the suite
    assert env.schedules.tests == 7200.0  # suite's
    assert env.schedules.dependencies == Schedules().dependencies
    # the test spec is a nested block too: the suite's reruns survive the env's command
    assert env.tests == TestSpec(command="pytest -x", fail_to_pass=["t1"], reruns=5)


def test_lists_and_mappings_are_replaced_whole(tmp_path: Path) -> None:
    env = load(tmp_path, SUITE_WITH_DEFAULTS).environment("a")
    assert env.tools == ["bash"]
    assert env.data_sources == []  # an empty list clears the suite's list
    assert env.labels == {"tier": "gold"}


def test_environment_without_defaults_gets_model_defaults(tmp_path: Path) -> None:
    env = env_of(tmp_path, """\
        version: 1
        suites:
          s:
            environments:
              - {id: a, image: img}
        """)
    assert env.workdir == "/workspace"
    assert env.user == "root"
    assert env.limits == Limits()
    assert env.timeouts == Timeouts()
    assert env.schedules == Schedules()
    assert env.tests is None
    assert env.dependencies is None


def test_defaults_set_to_model_default_still_override(tmp_path: Path) -> None:
    env = env_of(tmp_path, """\
        version: 1
        suites:
          s:
            defaults: {limits: {memory_mb: 4096}}
            environments:
              - id: a
                image: img
                limits: {memory_mb: 1024}
        """)
    assert env.limits.memory_mb == 1024


def test_suite_fields(tmp_path: Path) -> None:
    cat = load(tmp_path, """\
        version: 1
        suites:
          one:
            description: first
            allow_degraded: true
            environments: [{id: a, image: img}, {id: b, image: img}]
          two: {}
        """)
    assert [s.id for s in cat.suites] == ["one", "two"]
    one = cat.suite("one")
    assert (one.description, one.allow_degraded, one.environment_ids) == ("first", True,
                                                                          ("a", "b"))
    assert cat.suite("two").environment_ids == ()


def test_data_sources_load(tmp_path: Path) -> None:
    cat = load(tmp_path, """\
        version: 1
        data_sources:
          - id: weather
            url: https://example.org/api
            method: POST
            schema: {type: object}
            freshness: {field: data.updated, max_age_s: 1h}
            read_timeout_s: 2s
        """)
    source = cat.data_source("weather")
    assert source.method == "POST"
    assert source.json_schema == {"type": "object"}
    assert source.freshness is not None
    assert source.freshness.max_age_s == 3600.0
    assert source.read_timeout_s == 2.0


# --- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "seconds"), [
    ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1d", 86400.0), ("250ms", 0.25),
    ("1.5h", 5400.0), (" 5 m ", 300.0), ("90", 90.0), (45, 45.0), (2.5, 2.5),
])
def test_durations_parse(raw: Any, seconds: float) -> None:
    assert Timeouts(exec_s=raw).exec_s == seconds


@pytest.mark.parametrize("raw", [
    "5x", "m", "-5s", "", "1h30m", "1e3", "soon", 0, "0s", -1, True, float("inf"),
    float("nan"), None, [5],
])
def test_bad_durations_are_rejected(raw: Any) -> None:
    with pytest.raises(ValidationError):
        Timeouts(exec_s=raw)


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["s", "m", "h", "d"]))
def test_duration_units_property(n: int, unit: str) -> None:
    factor = {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert Timeouts(exec_s=f"{n}{unit}").exec_s == n * factor


def test_durations_in_yaml_and_their_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            defaults:
              timeouts:
                start_s: 5x
                shell_s: 0s
                exec_s: .inf
                probe_s: yes
              schedules: {terminal: 1h}
            environments: []
        """)
    found = issues(path)
    assert [(i.line, i.key) for i in found] == [
        (6, "suites.s.defaults.timeouts.start_s"),
        (7, "suites.s.defaults.timeouts.shell_s"),
        (8, "suites.s.defaults.timeouts.exec_s"),
        (9, "suites.s.defaults.timeouts.probe_s"),
    ]
    assert found[0].message == "not a duration: '5x' (use e.g. 30s, 5m, 1h)"
    assert found[1].message == "must be greater than 0, got '0s'"
    assert "finite" in found[2].message
    assert found[3].message == "not a duration: true (use e.g. 30s, 5m, 1h)"


# --- frozen models ----------------------------------------------------------------------


def test_models_are_frozen() -> None:
    cat = load_catalogue([DEMO])
    env = cat.environments[0]
    with pytest.raises(ValidationError, match="frozen"):
        env.image = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        env.limits.memory_mb = 1  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        cat.suites[0].id = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        cat.environments = ()  # type: ignore[misc]
    assert isinstance(cat.environments, tuple)
    assert isinstance(cat.suites, tuple)


def test_environments_of_one_shape_share_their_set_of_field_names() -> None:
    """A fleet's environments hold one set of field names per shape, not one each; a copy
    with updates gets its own, and the others' stay as they were."""
    envs = load_catalogue([DEMO]).environments
    shared = envs[0].model_fields_set
    assert all(e.model_fields_set is shared for e in envs)
    assert shared == set(Environment.model_fields) - {"harbor"}
    other = Environment(id="x", image="img", suite="s")
    assert other.model_fields_set == {"id", "image", "suite"}
    copied = envs[0].model_copy(update={"image": "other"})
    assert copied.image == "other" and copied.model_fields_set is not shared
    assert envs[1].model_fields_set is shared and envs[1].image != "other"


def test_models_forbid_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Limits(swap_mb=1)  # type: ignore[call-arg]


# --- spec hashes ------------------------------------------------------------------------

HASH_BASE: dict[str, Any] = {
    "id": "a",
    "image": "img/a:1",
    "suite": "s",
    "tools": ["git"],
    "tests": {"command": "pytest", "fail_to_pass": ["t1"]},
    "dependencies": {"python": {"numpy": ">=1.26", "pandas": "*"}},
    "data_sources": ["weather"],
}


def hashes(**changes: Any) -> dict[ProbeKind, str]:
    env = Environment.model_validate({**HASH_BASE, **changes})
    return {kind: env.spec_hash(kind) for kind in ProbeKind}


def test_spec_hash_is_stable_and_short() -> None:
    first, second = hashes(), hashes()
    assert first == second
    for value in first.values():
        assert len(value) == 16
        int(value, 16)
    # different probe kinds hash different things
    assert len({first[ProbeKind.TERMINAL], first[ProbeKind.DEPENDENCIES],
                first[ProbeKind.TESTS], first[ProbeKind.DATASOURCE]}) == 4


def test_spec_hash_is_stable_across_loads(tmp_path: Path) -> None:
    one = load_catalogue([DEMO]).environment("demo-healthy")
    two = load_catalogue([DEMO]).environment("demo-healthy")
    assert one is not two
    assert all(one.spec_hash(k) == two.spec_hash(k) for k in ProbeKind)


def test_spec_hash_ignores_mapping_key_order() -> None:
    reordered = {"python": {"pandas": "*", "numpy": ">=1.26"}}
    assert hashes(dependencies=reordered) == hashes()


@pytest.mark.parametrize(("change", "changed_kinds"), [
    ({"tests": {"command": "pytest -x", "fail_to_pass": ["t1"]}}, {ProbeKind.TESTS}),
    ({"tests": None}, {ProbeKind.TESTS}),
    ({"tools": ["git", "make"]}, {ProbeKind.TERMINAL}),
    ({"timeouts": {"shell_s": 1}}, {ProbeKind.TERMINAL}),
    ({"dependencies": {"python": {"numpy": ">=2"}}}, {ProbeKind.DEPENDENCIES}),
    ({"data_sources": ["other"]}, {ProbeKind.DATASOURCE}),
    ({"image": "img/a:2"},
     {ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS, ProbeKind.IMAGE}),
    ({"user": "agent"}, {ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS}),
    ({"limits": {"memory_mb": 4096}},
     {ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS}),
    ({"schedules": {"terminal": 60}}, set()),
    ({"labels": {"team": "rl"}}, set()),
    ({"suite": "other", "id": "b"}, set()),
])
def test_spec_hash_changes_only_for_the_kinds_that_check_the_change(
    change: dict[str, Any], changed_kinds: set[ProbeKind]
) -> None:
    before, after = hashes(), hashes(**change)
    assert {k for k in ProbeKind if before[k] != after[k]} == changed_kinds


# --- loading files and directories ------------------------------------------------------


def env_file(directory: Path, name: str, suite: str, *env_ids: str) -> Path:
    envs = "".join(f"      - {{id: {e}, image: img/{e}}}\n" for e in env_ids)
    return write(directory, name, f"version: 1\nsuites:\n  {suite}:\n    environments:\n{envs}")


def test_directory_loads_yaml_and_yml_sorted(tmp_path: Path) -> None:
    env_file(tmp_path, "b.yaml", "sb", "b")
    env_file(tmp_path, "a.yml", "sa", "a")
    env_file(tmp_path, "c.yaml", "sc", "c")
    (tmp_path / "notes.txt").write_text("not: [yaml", encoding="utf-8")
    (tmp_path / "README.md").write_text("# hi", encoding="utf-8")
    (tmp_path / "sub").mkdir()  # a sub-directory is not recursed into
    env_file(tmp_path / "sub", "d.yaml", "sd", "d")
    cat = load_catalogue([tmp_path])
    assert cat.files == tuple(str(tmp_path / n) for n in ("a.yml", "b.yaml", "c.yaml"))
    assert [s.id for s in cat.suites] == ["sa", "sb", "sc"]
    assert [e.id for e in cat.environments] == ["a", "b", "c"]
    assert cat.suite("sb").file == str(tmp_path / "b.yaml")


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    path = env_file(tmp_path, "a.yaml", "s", "a")
    cat = load_catalogue([tmp_path, path, str(path)])
    assert cat.files == (str(path),)
    assert [e.id for e in cat.environments] == ["a"]


def test_several_paths_combine(tmp_path: Path) -> None:
    one = env_file(tmp_path, "one.yaml", "s1", "a")
    two = env_file(tmp_path, "two.yaml", "s2", "b")
    cat = load_catalogue([two, one])
    assert cat.files == (str(two), str(one))
    assert [e.id for e in cat.environments] == ["b", "a"]


def test_empty_directory_is_an_issue(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    issue = only(issues(tmp_path))
    assert issue == CatalogueIssue(str(tmp_path), None, "",
                                   "no *.yaml or *.yml files in this directory")


def test_missing_file_is_an_issue(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    issue = only(issues(missing))
    assert issue == CatalogueIssue(str(missing), None, "", "no such file or directory")
    assert str(issue) == f"{missing}: no such file or directory"


def test_missing_file_does_not_hide_other_files_problems(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "version: 2\n")
    found = issues(tmp_path / "nope.yaml", bad)
    assert [(i.file, i.line) for i in found] == [(str(tmp_path / "nope.yaml"), None),
                                                 (str(bad), 1)]


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"version: 1\n# caf\xe9\n")
    issue = only(issues(path))
    assert (issue.file, issue.line, issue.key) == (str(path), None, "")
    assert issue.message.startswith("cannot read")


# --- malformed catalogues: exact file, line and key -------------------------------------


def test_unclosed_bracket(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            defaults:
              tools: [git, python3
            environments: []
        """)
    issue = only(issues(path))
    # PyYAML notices at the next key (line 6); the message points back at the bracket.
    assert (issue.file, issue.line, issue.key) == (str(path), 6, "")
    assert issue.message.startswith("invalid YAML: expected ',' or ']'")
    assert "flow sequence at line 5" in issue.message


@pytest.mark.parametrize(("text", "line"), [
    ("version: 1\nsuites:\n\t  s: {}\n", 3),  # a tab in the indentation
    ("version: 1\nsuites: {s: {description: 'open\n", 3),  # unclosed quote: end of file
    ("version: 1\n---\nversion: 1\n", 2),  # two documents
    ("version: 1\nsuites:\n  s: {}\n bad\n", 4),  # wrong indentation
    ("version: 1\nx: !!python/name:os.system ''\n", 2),  # unsafe tag
    ("version: 1\nx: \x07\n", 2),  # a control character
])
def test_invalid_yaml_has_the_error_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "cat.yaml"
    path.write_text(text, encoding="utf-8")
    issue = only(issues(path))
    assert (issue.file, issue.line, issue.key) == (str(path), line, "")
    assert issue.message.startswith("invalid YAML: ")


def test_unknown_key_at_environment_level(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                colour: red
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 7, "suites.s.environments[0].colour",
                                   "unknown key")


def test_unknown_key_suggests_the_close_one(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                wrkdir: /x
        """)
    issue = only(issues(path))
    assert (issue.line, issue.key) == (7, "suites.s.environments[0].wrkdir")
    assert issue.message == "unknown key (did you mean 'workdir'?)"


def test_unknown_key_in_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            defaults:
              user: agent
              image: img
            environments: []
        """)
    issue = only(issues(path))
    # an image is per environment: defaults may not set it
    assert issue == CatalogueIssue(str(path), 6, "suites.s.defaults.image", "unknown key")


def test_unknown_key_in_a_nested_block(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            defaults:
              limits:
                memory_mb: 512
                swap: 0
            environments:
              - id: a
                image: img
                timeouts: {exec_s: 5, idle_s: 9}
        """)
    found = issues(path)
    assert [(i.line, i.key, i.message) for i in found] == [
        (7, "suites.s.defaults.limits.swap", "unknown key"),
        (11, "suites.s.environments[0].timeouts.idle_s", "unknown key"),
    ]


def test_unknown_top_level_key_and_suite_key(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suite:
          s: {}
        suites:
          s:
            enviroments: []
        """)
    found = issues(path)
    assert [(i.line, i.key, i.message) for i in found] == [
        (2, "suite", "unknown key (did you mean 'suites'?)"),
        (6, "suites.s.enviroments", "unknown key (did you mean 'environments'?)"),
    ]


def test_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                limits:
                  memory_mb: lots
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 8, "suites.s.environments[0].limits.memory_mb",
                                   "expected an integer, got 'lots'")


@pytest.mark.parametrize(("yaml_line", "key", "message"), [
    ("limits: 512", "limits", "expected a mapping, got 512"),
    ("limits:", "limits", "expected a mapping, got null"),
    ("tools: git", "tools", "expected a list, got 'git'"),
    ("user: 5", "user", "expected a string, got 5 (quote it in the YAML)"),
    ("labels: {team: 1.5}", "labels.team", "expected a string, got 1.5 (quote it in the YAML)"),
    ("workdir: workspace", "workdir",
     "expected an absolute path (starting with /), got 'workspace'"),
    ("limits: {cpus: 0}", "limits.cpus", "must be greater than 0, got 0"),
    ("limits: {pids: 2.5}", "limits.pids", "expected a whole number, got 2.5"),
    ("tests: {command: pytest, shuffle: maybe}", "tests.shuffle",
     "expected true or false, got 'maybe'"),
    ("tests: {reruns: 3}", "tests.command", "required key is missing"),
    ("id: Bad_Id", "id",
     "invalid id 'Bad_Id': use up to 63 lowercase letters, digits, '.', '_' or '-', "
     "starting with a letter or digit"),
])
def test_wrong_values_have_clear_messages(
    tmp_path: Path, yaml_line: str, key: str, message: str
) -> None:
    id_line = "" if yaml_line.startswith("id:") else "id: a"
    path = write(tmp_path, "cat.yaml", f"""\
        version: 1
        suites:
          s:
            environments:
              - image: img
                {yaml_line}
                {id_line}
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 6, f"suites.s.environments[0].{key}", message)


def test_data_source_values(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        data_sources:
          - id: d
            url: ftp://example.org
            method: PUT
            json_schema: {}
        """)
    found = issues(path)
    assert [(i.line, i.key, i.message) for i in found] == [
        (4, "data_sources[0].url", "expected an http:// or https:// URL, got 'ftp://example.org'"),
        (5, "data_sources[0].method", "expected one of 'GET', 'POST' or 'HEAD', got 'PUT'"),
        # the file uses the documented key `schema`, not the Python field name
        (6, "data_sources[0].json_schema", "unknown key (did you mean 'schema'?)"),
    ]


def test_invalid_suite_id(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          ok: {}
          Not OK: {}
        """)
    issue = only(issues(path))
    assert (issue.line, issue.key) == (4, "suites.Not OK")
    assert issue.message.startswith("invalid id 'Not OK': ")


def test_duplicate_environment_id_in_one_file(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s1:
            environments:
              - id: a
                image: img
          s2:
            environments:
              - id: b
                image: img
              - id: a
                image: img
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 11, "suites.s2.environments[1].id",
                                   f"duplicate environment id 'a' (first in {path}:5)")


def test_duplicate_environment_id_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s: {environments: [{id: a, image: x}, {id: a, image: y}]}
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 3, "suites.s.environments[1].id",
                                   f"duplicate environment id 'a' (first in {path}:3)")


def test_duplicate_environment_id_across_files(tmp_path: Path) -> None:
    one = env_file(tmp_path, "one.yaml", "s1", "x", "a")
    two = env_file(tmp_path, "two.yaml", "s2", "a")
    issue = only(issues(tmp_path))
    assert issue == CatalogueIssue(str(two), 5, "suites.s2.environments[0].id",
                                   f"duplicate environment id 'a' (first in {one}:6)")


def test_duplicate_suite_and_data_source_ids_across_files(tmp_path: Path) -> None:
    text = """\
        version: 1
        suites:
          s: {}
        data_sources:
          - {id: d, url: "https://example.org"}
        """
    one = write(tmp_path, "one.yaml", text)
    two = write(tmp_path, "two.yaml", text)
    found = issues(one, two)
    assert found == [
        CatalogueIssue(str(two), 3, "suites.s", f"duplicate suite id 's' (first in {one}:3)"),
        CatalogueIssue(str(two), 5, "data_sources[0].id",
                       f"duplicate data source id 'd' (first in {one}:5)"),
    ]


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: one
                user: me
                image: two
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 8, "suites.s.environments[0].image",
                                   "duplicate key (first at line 6)")


def test_duplicate_yaml_key_does_not_hide_other_problems(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        version: 1
        suites:
          s:
            environments:
              - {id: a, image: img, colour: red}
        """)
    found = issues(path)
    assert [(i.line, i.key, i.message) for i in found] == [
        (2, "version", "duplicate key (first at line 1)"),
        (6, "suites.s.environments[0].colour", "unknown key"),
    ]


def test_yaml_keys_are_kept_as_written(tmp_path: Path) -> None:
    # PyYAML reads `on` as True and `1` as 1, and True == 1 in Python: no false duplicate.
    env = env_of(tmp_path, """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                labels: {1: one, on: two, "yes": three}
        """)
    assert env.labels == {"1": "one", "on": "two", "yes": "three"}


def test_quoted_and_plain_keys_are_the_same_key(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        "version": 1
        """)
    issue = only(issues(path))
    assert (issue.line, issue.key, issue.message) == (2, "version",
                                                      "duplicate key (first at line 1)")


def test_missing_image(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: ok
                image: img
              - id: a
                user: me
        """)
    issue = only(issues(path))
    # a missing key is reported at the mapping that lacks it
    assert issue == CatalogueIssue(str(path), 7, "suites.s.environments[1].image",
                                   "required key is missing")


def test_missing_version(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        # a catalogue without its version key

        suites: {}
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 3, "version", "required key is missing "
                                   "(a catalogue starts with 'version: 1')")


@pytest.mark.parametrize(("value", "shown"), [("2", "2"), ("'1'", "'1'"), ("1.5", "1.5"),
                                              ("null", "null")])
def test_unsupported_version(tmp_path: Path, value: str, shown: str) -> None:
    path = write(tmp_path, "cat.yaml", f"""\
        # comment
        version: {value}
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 2, "version", f"unsupported catalogue version "
                                   f"{shown} (this envcheck reads version 1)")


def test_unknown_data_source_reference(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - id: a
                image: img
                data_sources: [weather, stocks]
        data_sources:
          - id: weather
            url: https://example.org
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 7, "suites.s.environments[0].data_sources[1]",
                                   "unknown data source 'stocks'")


def test_unknown_data_source_in_defaults_is_reported_once(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            defaults:
              data_sources:
                - stocks
            environments:
              - {id: a, image: img}
              - {id: b, image: img}
              - {id: c, image: img, data_sources: []}
        """)
    issue = only(issues(path))
    assert issue == CatalogueIssue(str(path), 6, "suites.s.defaults.data_sources[0]",
                                   "unknown data source 'stocks'")


def test_data_source_defined_in_another_file(tmp_path: Path) -> None:
    write(tmp_path, "a-envs.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - {id: a, image: img, data_sources: [weather]}
        """)
    write(tmp_path, "b-sources.yaml", """\
        version: 1
        data_sources:
          - {id: weather, url: "https://example.org"}
        """)
    cat = load_catalogue([tmp_path])
    assert cat.environment("a").data_sources == ["weather"]
    assert cat.data_source("weather").url == "https://example.org"


def test_broken_sources_file_does_not_cascade_into_unknown_references(tmp_path: Path) -> None:
    write(tmp_path, "a-envs.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - {id: a, image: img, data_sources: [weather]}
        """)
    sources = write(tmp_path, "b-sources.yaml", """\
        version: 1
        data_sources:
          - id: weather
            url: https://example.org
            samples: many
        """)
    issue = only(issues(tmp_path))
    assert (issue.file, issue.line, issue.key) == (str(sources), 5, "data_sources[0].samples")


@pytest.mark.parametrize(("text", "line", "message"), [
    ("- version: 1\n", 1, "a catalogue file must be a mapping with 'version: 1', got a list"),
    ("# just text\nhello\n", 2,
     "a catalogue file must be a mapping with 'version: 1', got 'hello'"),
    ("# only a comment\n", None, "the file is empty (a catalogue starts with 'version: 1')"),
    ("", None, "the file is empty (a catalogue starts with 'version: 1')"),
])
def test_non_mapping_document(
    tmp_path: Path, text: str, line: int | None, message: str
) -> None:
    path = tmp_path / "cat.yaml"
    path.write_text(text, encoding="utf-8")
    assert only(issues(path)) == CatalogueIssue(str(path), line, "", message)


def test_several_problems_in_one_file_are_all_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            defaults:
              limits: {memory_mb: lots}
              shel: /bin/sh
            environments:
              - id: a
                image: img
                data_sources: [nope]
              - id: b
              - id: a
                image: img
        data_sources:
          - id: d
            url: https://example.org
            samples: 0
        """)
    found = issues(path)
    assert [(i.file, i.line, i.key) for i in found] == [
        (str(path), 5, "suites.s.defaults.limits.memory_mb"),
        (str(path), 6, "suites.s.defaults.shel"),
        (str(path), 10, "suites.s.environments[0].data_sources[0]"),
        (str(path), 11, "suites.s.environments[1].image"),
        (str(path), 12, "suites.s.environments[2].id"),
        (str(path), 17, "data_sources[0].samples"),
    ]
    assert found[1].message == "unknown key (did you mean 'shell'?)"
    assert found[2].message == "unknown data source 'nope'"
    assert found[4].message == f"duplicate environment id 'a' (first in {path}:8)"


def test_problems_in_several_files_are_all_reported(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "version: 3\n")
    write(tmp_path, "b.yaml", "version: 1\nsuites: {s: {colour: red}}\n")
    write(tmp_path, "c.yaml", "version: [1\n")
    found = issues(tmp_path)
    assert [(Path(i.file).name, i.line, i.key) for i in found] == [
        ("a.yaml", 1, "version"), ("b.yaml", 2, "suites.s.colour"), ("c.yaml", 2, ""),
    ]


def test_catalogue_error_lists_every_issue(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", "version: 2\ncolour: red\n")
    with pytest.raises(ValueError, match="unknown key") as info:
        load_catalogue([path])
    assert str(info.value).splitlines() == [
        f"{path}:1: version: unsupported catalogue version 2 (this envcheck reads version 1)",
        f"{path}:2: colour: unknown key",
    ]


# --- YAML features and hostile input ----------------------------------------------------


def test_anchors_and_merge_keys(tmp_path: Path) -> None:
    cat = load(tmp_path, """\
        version: 1
        suites:
          s:
            environments:
              - &base
                id: a
                image: img
                user: agent
                limits: {pids: 99}
              - <<: *base
                id: b
                user: root
        """)
    a, b = cat.environment("a"), cat.environment("b")
    assert (b.image, b.user, b.limits.pids) == ("img", "root", 99)
    assert a.user == "agent"


def test_merged_keys_point_at_their_source_line(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s:
            environments:
              - &base
                id: a
                image: img
                limits: {pids: 1}
              - <<: *base
                id: b
        """)
    found = issues(path)
    assert [(i.line, i.key) for i in found] == [
        (8, "suites.s.environments[0].limits.pids"),
        (8, "suites.s.environments[1].limits.pids"),
    ]


def test_recursive_alias_is_an_issue_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites:
          s: &loop
            description: [*loop]
        """)
    found = issues(path)
    assert (found[0].line, found[0].key) == (4, "suites.s.description[0]")
    assert "alias" in found[0].message


def test_load_yaml_records_lines() -> None:
    doc = load_yaml("f.yaml", textwrap.dedent("""\
        a:
          b: [1, 2]
          c:
            - x: 1
            -
              y: 2
        """))
    assert doc.issues == []
    assert doc.data == {"a": {"b": [1, 2], "c": [{"x": 1}, {"y": 2}]}}
    assert doc.lines[("a",)] == 1
    assert doc.lines[("a", "b")] == 2
    assert doc.lines[("a", "c", 0, "x")] == 4
    assert doc.lines[("a", "c", 1, "y")] == 6
    assert doc.line_of(("a", "c", 1, "y", "deeper")) == 6
    assert format_path(("a", "c", 1, "y")) == "a.c[1].y"


def test_tags_on_collections_are_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "cat.yaml", """\
        version: 1
        suites: !!python/object:os.system
          s: {}
        """)
    issue = only(issues(path))
    assert (issue.line, issue.key) == (2, "suites")
    assert issue.message == "unsupported YAML tag 'tag:yaml.org,2002:python/object:os.system'"


def test_complex_keys_are_rejected() -> None:
    doc = load_yaml("f.yaml", "a: 1\n? [x, y]\n: 2\n")
    assert [(i.line, i.message) for i in doc.issues] == [
        (2, "a key must be a plain string, not a list or mapping"),
    ]


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["version", "suites", "s", "environments", "id",
                                       "image", "limits", "defaults", "data_sources", "x"]),
                      children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["version", "suites", "data_sources", "x"]), yaml_values))
def test_any_document_loads_or_gives_located_issues(tmp_path: Path, data: Any) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    try:
        load_catalogue([path])
    except CatalogueError as exc:
        for issue in exc.issues:
            assert issue.file == str(path)
            assert issue.message


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"# \n\t,?<")), max_size=40))
def test_load_yaml_never_raises(text: str) -> None:
    doc = load_yaml("f.yaml", text)
    for issue in doc.issues:
        assert issue.line is None or 1 <= issue.line <= text.count("\n") + 2


def test_issues_come_in_file_order(tmp_path: Path) -> None:
    first = write(tmp_path, "first.yaml", "version: 1\ncolour: red\n")
    unreadable = tmp_path / "second.yaml"
    unreadable.write_bytes(b"\xff\xfe")
    third = write(tmp_path, "third.yaml", "version: 9\n")
    found = issues(tmp_path / "missing.yaml", tmp_path)
    assert [(Path(i.file).name, i.line) for i in found] == [
        ("missing.yaml", None), (first.name, 2), (unreadable.name, None), (third.name, 1),
    ]


def test_alias_bombs_are_cut_off() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    doc = load_yaml("f.yaml", "\n".join(lines) + "\n", SourceLimits(max_nodes=10_000))
    assert [i.message for i in doc.issues] == [
        "aliases expand the document to more than 10000 nodes (an alias bomb?)"
    ]


def test_inline_merge_reports_its_own_problems() -> None:
    doc = load_yaml("f.yaml", "a:\n  <<: {x: 1, x: 2}\n  y: 3\n")
    assert doc.data == {"a": {"y": 3, "x": 1}}
    assert [(i.line, i.key, i.message) for i in doc.issues] == [
        (2, "a.x", "duplicate key (first at line 2)"),
    ]
