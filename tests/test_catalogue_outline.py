"""A catalogue file validated as its outline, then environment by environment: the same errors
in the same order as the whole file validated at once, and aliased values never released;
equal values of the environments held once.

Pure tests (no Docker): real pydantic models, real YAML files in ``tmp_path``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from envcheck.catalogue.document import CatalogueFile
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.messages import describe_error
from envcheck.catalogue.models import EnvironmentEntry
from envcheck.catalogue.outline import at, in_file_order, split_environments
from envcheck.catalogue.sharing import Sharing
from envcheck.catalogue.yamlsrc import load_yaml
from envcheck.core.errors import CatalogueError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cat.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def whole(data: dict[str, Any]) -> list[ErrorDetails]:
    try:
        CatalogueFile.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        return exc.errors()
    return []


def split(data: dict[str, Any]) -> list[ErrorDetails]:
    outline, stream = split_environments(data, release=False)
    found: list[ErrorDetails] = []
    for suite_id, i, raw in stream:
        try:
            EnvironmentEntry.model_validate(raw, by_alias=True, by_name=False)
        except ValidationError as exc:
            found.extend(at(e, ("suites", suite_id, "environments", i)) for e in exc.errors())
    return in_file_order(whole(outline), found, data)


def said(err: ErrorDetails) -> tuple[Any, ...]:
    return err["loc"], err["type"], describe_error(err, CatalogueFile)


ENV = {"id": "a", "image": "x"}


@pytest.mark.parametrize("data", [
    {"version": 2, "colour": 1, "suites": {
        "BAD": {"environments": [{"id": "X"}, ENV, {"image": ""}], "foo": 1,
                "description": 3},
        "ok": {"defaults": {"limits": {"cpus": 0}}, "environments": [7, ENV], "bar": 2},
        "x": {"environments": "not a list", "allow_degraded": "no"},
        "y": "not a mapping",
        "z": {"environments": [{**ENV, "tools": "git"}]}},
     "data_sources": [{"id": "s"}], "datasets": [{"id": "d"}]},
    {"version": 1, "suites": [ENV]},
    {"suites": {"s": {"environments": [{**ENV, "limits": {"cpus": -1}, "zz": 1}]}}},
])
def test_errors_come_as_from_the_whole_file(data: dict[str, Any]) -> None:
    expected = whole(data)
    assert expected  # every case is invalid
    # The outline's errors hold the outline as their input, where the file's model has the
    # file: what is said of them is the same.
    assert [said(e) for e in split(data)] == [said(e) for e in expected]


def test_values_are_released_only_when_nothing_is_aliased() -> None:
    data = load_yaml("f.yaml", "version: 1\nsuites:\n  s:\n    environments: [{id: a}]\n").data
    outline, stream = split_environments(data, release=True)
    assert outline["suites"]["s"]["environments"] == []
    assert list(stream) == [("s", 0, {"id": "a"})]
    assert data["suites"]["s"]["environments"] == [None]  # handed out, not kept
    aliased = load_yaml("f.yaml", "a: &x [1]\nb: *x\n")
    plain = load_yaml("f.yaml", "a: [1]\nb: '*x'\n")
    assert (aliased.shared, plain.shared) == (True, False)


def test_an_environment_list_aliased_later_is_not_released(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        suites:
          one:
            environments: &envs
              - {id: a, image: x}
          two:
            environments:
              - {id: b, image: y, tools: *envs}
        """)
    with pytest.raises(CatalogueError) as caught:
        load_catalogue([path])
    assert [(i.line, i.key, i.message) for i in caught.value.issues] == [
        (8, "suites.two.environments[0].tools[0]", "expected a string, got a mapping")]


# --- equal values held once ---------------------------------------------------------------


def test_equal_values_of_a_load_are_held_once(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        suites:
          s:
            defaults: {labels: {team: a}}
            environments:
              - {id: a, image: x, tools: [git], limits: {cpus: 2.0}, labels: {k: v, j: w}}
              - {id: b, image: x, tools: [git], limits: {cpus: 2.0}, labels: {k: v, j: w}}
              - {id: c, image: x, tools: [git, tmux], limits: {cpus: 2}, labels: {j: w, k: v}}
              - {id: d, image: x, tools: [git], limits: {cpus: 2.0, pids: 256}}
        """)
    a, b, c, d = load_catalogue([path]).environments
    assert a.tools is b.tools and a.limits is b.limits and a.labels is b.labels
    assert c.tools is not a.tools
    assert c.labels == a.labels and c.labels is not a.labels  # another order: another dump
    assert c.limits is a.limits  # cpus: 2 reads as 2.0
    # equal but for what the file sets: pids set (to its default), not defaulted
    assert d.limits == a.limits and d.limits is not a.limits
    assert d.limits.model_fields_set == {"cpus", "pids"}
    assert d.labels == {"team": "a"}


def test_sharing_tells_apart_what_python_calls_equal() -> None:
    sharing = Sharing()
    values = [[1], [1.0], [True], [0.0], [-0.0], {"a": 1, "b": 2}, {"b": 2, "a": 1}]
    held = [sharing.value(v) for v in values]
    assert all(h is v for h, v in zip(held, values, strict=True))
    again = [sharing.value(v) for v in ([1], [1.0], [True], [0.0], [-0.0], {"a": 1, "b": 2})]
    assert all(h is v for h, v in zip(again, values, strict=False))
    assert [sharing.value(EnvironmentEntry(id="a", image="x")).limits for _ in range(2)] == [
        EnvironmentEntry(id="a", image="x").limits] * 2


def test_a_reload_keeps_the_environments_that_did_not_change(tmp_path: Path) -> None:
    text = """\
        version: 1
        suites:
          s:
            defaults: {{labels: {{team: a}}}}
            environments:
              - {{id: a, image: x, tools: [git]}}
              - {{id: b, image: {b_image}, tools: [git]}}
              {more}
        """
    path = write(tmp_path, text.format(b_image="x", more=""))
    before = load_catalogue([path])
    write(tmp_path, text.format(b_image="y", more="- {id: c, image: x, tools: [git]}"))
    after = load_catalogue([path], previous=before)
    assert after == load_catalogue([path])  # the same catalogue as a load of its own
    (a0, b0), (a1, b1, c1) = before.environments, after.environments
    assert a1 is a0  # unchanged: the object already held
    assert b1 is not b0 and b1.image == "y" and c1.id == "c"
