"""The two ways a catalogue is read agree: values straight from the parser's events (the
fast path, ``yamlvalues``), and the node tree with the line of every key (``yamlsrc``), which
the fast path leaves to whatever must be reported. Same values, same lines, same models, same
file:line:key messages.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envcheck.catalogue.loader as loader_mod
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.catalogue.sourcelimits import SourceLimits
from envcheck.catalogue.yamlsrc import SourceDoc, load_yaml
from envcheck.catalogue.yamlvalues import FAST_PARSER, read_values
from envcheck.core.errors import CatalogueError, CatalogueIssue

PROBES = Path(__file__).resolve().parent.parent / "probes"
DEMOS = sorted(PROBES.glob("demo*.yaml"))
LIMITS = SourceLimits()


def with_lines(file: str, text: str, limits: SourceLimits | None = None,
               **_: Any) -> SourceDoc:
    """The line-tracking reader alone (which hands nothing over: ``take`` is not used)."""
    return load_yaml(file, text, limits, lines=True)


def fast_only(text: str, parser: type[yaml.SafeLoader] = FAST_PARSER) -> Any:
    values = read_values(text, LIMITS.max_nodes, LIMITS.max_depth, parser=parser)
    assert values is not None, "the fast path gave up"
    return values[0]


def loaded(paths: list[Path], read: Callable[..., SourceDoc] | None = None,
           monkeypatch: pytest.MonkeyPatch | None = None) -> Catalogue | list[CatalogueIssue]:
    """The catalogue (or its issues), each file read by ``read`` if given."""
    if read is not None and monkeypatch is not None:
        monkeypatch.setattr(loader_mod, "load_yaml", read)
    try:
        return load_catalogue(paths)
    except CatalogueError as exc:
        return exc.issues


def models(catalogue: Catalogue | list[CatalogueIssue]) -> list[tuple[Any, ...]]:
    """Every model of a catalogue with the fields it was given: equal means equal."""
    assert isinstance(catalogue, Catalogue), catalogue
    return [(type(m).__name__, m, sorted(m.model_fields_set))
            for m in (*catalogue.suites, *catalogue.environments, *catalogue.data_sources)]


def fleet(n: int, bad_at: int | None = None) -> str:
    """A generated catalogue of ``n`` environments of every kind; ``bad_at``: that one has an
    unknown key."""
    envs = []
    for i in range(n):
        env = [f"      - id: env-{i:04d}", f"        image: 'demo/img:{i % 7}'"]
        if i % 4 == 1:
            env += ["        dependencies:", "          python: { pytest: '>=7' }"]
        elif i % 4 == 2:
            env += ["        tests:", "          command: pytest {tests}",
                    f"          fail_to_pass: [t.py::bug_{i}]", "          pass_to_pass:",
                    "            - t.py::ok_1", "            - t.py::ok_2"]
        elif i % 4 == 3:
            env += ["        data_sources: [api]"]
        if i == bad_at:
            env += ["        colour: red"]
        envs += env
    return "\n".join([
        "version: 1", "suites:", "  s:", "    defaults:", "      user: agent",
        "      limits: { memory_mb: 512 }", "    environments:", *envs,
        "data_sources:", "  - { id: api, url: 'https://example.test/v1' }", ""])


# --- values and lines ---------------------------------------------------------------------


@pytest.mark.parametrize("path", DEMOS, ids=lambda p: p.name)
def test_demo_catalogues_read_alike_both_ways(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    slow = with_lines(str(path), text)
    assert slow.issues == []
    assert fast_only(text) == slow.data
    assert fast_only(text, yaml.SafeLoader) == slow.data, "the pure-Python parser's events"
    fast = load_yaml(str(path), text)
    assert (fast.data, fast.issues, fast.parsed) == (slow.data, [], True)
    assert fast.lines == slow.lines, "lines read when asked for are the same lines"


def test_anchors_aliases_and_merges_read_alike() -> None:
    text = textwrap.dedent("""\
        base: &base {user: agent, tools: [git, tmux]}
        list: &l [1, two, 3.5, null, true, 2001-02-03]
        a:
          <<: *base
          user: root
        b:
          <<: [*base, {shell: /bin/sh, user: nobody}]
          again: *l
        quoted: {'<<': 1, "1": one, on: yes}
        """)
    slow = with_lines("f.yaml", text)
    fast = load_yaml("f.yaml", text)
    assert slow.issues == []
    assert fast.data == slow.data
    assert fast.data["a"] == {"user": "root", "tools": ["git", "tmux"]}
    assert list(fast.data["b"]) == ["again", "user", "tools", "shell"]
    assert fast.data["quoted"] == {"<<": 1, "1": "one", "on": True}
    assert fast.lines == slow.lines, "aliases: the lines come from the node tree"


def test_an_error_in_a_fast_read_fleet_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    text = fleet(400, bad_at=333)
    path.write_text(text, encoding="utf-8")
    assert read_values(text, LIMITS.max_nodes, LIMITS.max_depth) is not None
    [issue] = loaded([path])  # type: ignore[misc]
    line = text.splitlines().index("        colour: red") + 1
    assert (issue.file, issue.line, issue.key, issue.message) == (
        str(path), line, "suites.s.environments[333].colour", "unknown key")


def test_a_duplicate_id_points_at_the_first_file_read_without_lines(tmp_path: Path) -> None:
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    one.write_text(fleet(50), encoding="utf-8")
    two.write_text(textwrap.dedent("""\
        version: 1
        suites:
          t:
            environments:
              - { id: env-0042, image: x }
        """), encoding="utf-8")
    first = one.read_text().splitlines().index("      - id: env-0042") + 1
    assert [str(i) for i in loaded([one, two])] == [  # type: ignore[union-attr]
        f"{two}:5: suites.t.environments[0].id: duplicate environment id 'env-0042' "
        f"(first in {one}:{first})"]


def test_a_dataset_task_named_like_a_catalogue_environment(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text(
        '{"instance_id": "env-0003", "image": "x", "FAIL_TO_PASS": "[]", '
        '"PASS_TO_PASS": "[]"}\n', encoding="utf-8")
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet(5) + textwrap.dedent("""\
        datasets:
          - { id: tasks, format: swebench, path: tasks.jsonl, suite: s, image_field: image,
              command: 'pytest {tests}' }
        """), encoding="utf-8")
    first = path.read_text().splitlines().index("      - id: env-0003") + 1
    assert [str(i) for i in loaded([path])] == [  # type: ignore[union-attr]
        f"{tmp_path / 'tasks.jsonl'}:1: instance_id: duplicate environment id 'env-0003' "
        f"(first in {path}:{first})"]


@pytest.mark.parametrize(("text", "expected"), [
    ("a: 1\nb: 2\na: 3\n", (3, "a", "duplicate key (first at line 1)")),
    ("a: !!python/name:os.system x\n", (1, "", "invalid YAML: could not determine a "
                                              "constructor for the tag "
                                              "'tag:yaml.org,2002:python/name:os.system'")),
    ("a: 2001-02-30\n", (1, "a", "cannot read '2001-02-30': day is out of range for month")),
    ("a: [*nowhere]\n", (1, "", "invalid YAML: found undefined alias 'nowhere'")),
    ("a: 1\n---\nb: 2\n", (2, "", "invalid YAML: but found another document (expected a "
                                  "single document in the stream at line 1)")),
])
def test_what_the_fast_path_gives_up_on_is_reported_with_its_line(
        text: str, expected: tuple[int, str, str]) -> None:
    assert read_values(text, LIMITS.max_nodes, LIMITS.max_depth) is None
    doc = load_yaml("f.yaml", text)
    assert doc.issues == with_lines("f.yaml", text).issues
    assert [(i.line, i.key, i.message) for i in doc.issues] == [expected]


def test_limits_hold_on_the_fast_path() -> None:
    deep = "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 12)) + "  " * 12 + "x\n"
    limits = SourceLimits(max_depth=10)
    assert read_values(deep, limits.max_nodes, limits.max_depth) is None
    assert load_yaml("f.yaml", deep, limits).issues == with_lines("f.yaml", deep, limits).issues
    assert "nested deeper than 10 levels" in load_yaml("f.yaml", deep, limits).issues[0].message
    assert read_values(deep, limits.max_nodes, 64) is not None
    many = "[" + ", ".join(["x"] * 50) + "]\n"
    assert read_values(many, 50, 64) is None, "51 nodes"
    assert read_values(many, 51, 64) == (["x"] * 50,)


# --- models -------------------------------------------------------------------------------


def test_demo_catalogues_load_into_equal_models_both_ways(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for paths in [[p] for p in DEMOS] + [DEMOS]:
        fast = loaded(paths)
        slow = loaded(paths, with_lines, monkeypatch)
        monkeypatch.undo()
        assert models(fast) == models(slow), paths


def test_a_generated_fleet_loads_into_equal_models_and_issues_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(fleet(200), encoding="utf-8")
    text = fleet(200, bad_at=150).replace("id: env-0007", "id: Env_7")
    bad.write_text(text, encoding="utf-8")
    fast_good, fast_bad = loaded([good]), loaded([bad])
    slow_good, slow_bad = (loaded([p], with_lines, monkeypatch) for p in (good, bad))
    assert models(fast_good) == models(slow_good)
    assert len(models(fast_good)) == 1 + 200 + 1  # the suite, its environments, the source
    assert fast_bad == slow_bad
    lines = text.splitlines()
    assert [(i.line, i.key) for i in fast_bad] == [  # type: ignore[union-attr]
        (lines.index("      - id: Env_7") + 1, "suites.s.environments[7].id"),
        (lines.index("        colour: red") + 1, "suites.s.environments[150].colour")]


# --- any document -------------------------------------------------------------------------

yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.dates(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_values, st.booleans())
def test_any_dumped_document_reads_alike(data: Any, flow: bool) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True)
    slow = with_lines("f.yaml", text)
    fast = load_yaml("f.yaml", text)
    assert slow.issues == []
    assert fast.data == slow.data
    assert fast.lines == slow.lines


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1:-[]{}&*!|>'\"# \n\t,?<")), max_size=40))
def test_any_text_reads_alike_or_is_left_to_the_line_tracking_reader(text: str) -> None:
    slow = with_lines("f.yaml", text)
    python = read_values(text, LIMITS.max_nodes, LIMITS.max_depth, parser=yaml.SafeLoader)
    if python is not None:  # the same parser: the same values, and nothing to report
        assert (python[0], slow.issues, slow.parsed) == (slow.data, [], True)
    fast = load_yaml("f.yaml", text)
    if not slow.issues:
        assert (fast.data, fast.issues, fast.parsed) == (slow.data, [], True)
        assert fast.lines == slow.lines
    elif not fast.issues:
        # libyaml reads a little more than PyYAML's own scanner (a tab after a value, a
        # block scalar's header): never a document PyYAML reads otherwise
        assert [i.message[:13] for i in slow.issues] == ["invalid YAML:"]
    else:
        assert (fast.data, fast.issues) == (slow.data, slow.issues)
