"""A catalogue's environments taken while the file is read (``catalogue/handover.py``), and a
large file's text held compressed (``catalogue/sourcetext.py``): the same models and the
same file:line:key messages as the file read whole.

Pure tests (no Docker): real YAML files in ``tmp_path``, the real reader and models.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

import pytest

import envcheck.catalogue.sourcefile as sourcefile_mod
import envcheck.catalogue.sourcetext as sourcetext_mod
import envcheck.catalogue.yamlsrc as yamlsrc_mod
from envcheck.catalogue.handover import BATCH, Handover, Taken
from envcheck.catalogue.loader import _options, load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.catalogue.sharing import Sharing
from envcheck.catalogue.sourcefile import read_source
from envcheck.catalogue.sourcelimits import SourceLimits
from envcheck.catalogue.sourcetext import SourceText
from envcheck.catalogue.yamlsrc import load_yaml
from envcheck.core.errors import CatalogueError


def fleet(n: int, *, bad_at: int | None = None) -> str:
    envs = []
    for i in range(n):
        envs += [f"      - id: env-{i:05d}", f"        image: 'img:{i % 3}'"]
        if i % 3 == 1:
            envs += ["        data_sources: [api]"]
        if i == bad_at:
            envs += ["        colour: red"]
    return "\n".join(["version: 1", "suites:", "  s:", "    defaults:", "      user: agent",
                      "    environments:", *envs,
                      "data_sources:", "  - { id: api, url: 'https://example.test/v1' }", ""])


def loaded(path: Path) -> Catalogue | list[tuple[str, int | None, str, str]]:
    try:
        return load_catalogue([path])
    except CatalogueError as exc:
        return [(i.file, i.line, i.key, i.message) for i in exc.issues]


def as_read_whole(path: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> Catalogue | list[tuple[str, int | None, str, str]]:
    """The load with nothing handed over while reading (the reader's hook off)."""
    real = yamlsrc_mod.read_values

    def without_take(*args: Any, take: Any = None, **kwargs: Any) -> Any:
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(yamlsrc_mod, "read_values", without_take)
        return loaded(path)


def test_environments_are_taken_while_the_file_is_read(tmp_path: Path) -> None:
    n = 2 * BATCH + 5
    handover = Handover(_options("f.yaml"), Sharing())
    doc = load_yaml("f.yaml", fleet(n), take=handover)
    items = doc.data["suites"]["s"]["environments"]
    # before the last flush: every batch read but the last is taken, its raw values gone
    assert [type(x) for x in items] == [Taken] * (2 * BATCH) + [dict] * 5
    assert handover.taken == 2 * BATCH
    handover.flush()
    assert all(type(x) is Taken for x in items) and handover.taken == n
    first, second = items[0], items[1]
    assert isinstance(first.value, Environment) and first.value.user == "agent"
    assert (first.get("id"), "data_sources" in first, first.get("data_sources")) == (
        "env-00000", False, None)
    assert ("data_sources" in second, second.get("data_sources")) == (True, ["api"])


def test_a_fleet_loads_alike_taken_or_read_whole(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(fleet(BATCH + 10), encoding="utf-8")
    bad.write_text(fleet(BATCH + 10, bad_at=BATCH + 3).replace("id: env-00007", "id: Env_7"),
                   encoding="utf-8")
    catalogue = loaded(good)
    assert isinstance(catalogue, Catalogue) and len(catalogue.environments) == BATCH + 10
    assert catalogue == as_read_whole(good, monkeypatch)
    issues = loaded(bad)
    assert issues == as_read_whole(bad, monkeypatch)
    assert [key for _, _, key, _ in issues] == [  # type: ignore[misc]
        "suites.s.environments[7].id", f"suites.s.environments[{BATCH + 3}].colour"]


@pytest.mark.parametrize("text", [
    # defaults after the environments: entries taken, resolved once the file is validated
    """\
    version: 1
    suites:
      s:
        environments:
          - {id: a, image: x, limits: {cpus: 2}}
          - {id: b, image: x, data_sources: [api]}
        defaults: {user: agent, limits: {memory_mb: 512}}
    data_sources: [{id: api, url: 'https://example.test'}]
    """,
    # defaults merged in, an item aliased, an anchor inside an item
    """\
    version: 1
    base: &base {defaults: {user: agent}}
    suites:
      s:
        <<: *base
        environments:
          - &a {id: a, image: x, tools: &t [git]}
          - {id: b, image: y, tools: *t}
      t:
        environments:
          - *a
    """,
    # a conflict between the defaults and an entry: reported from its raw value
    """\
    version: 1
    suites:
      s:
        defaults: {tests: {command: run {tests}, fail_to_pass: [t1]}}
        environments:
          - {id: a, image: x}
          - {id: b, image: x, tests: {fail_to_pass: []}}
    """,
])
def test_what_is_taken_loads_as_read_whole(text: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cat.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    assert loaded(path) == as_read_whole(path, monkeypatch)


def test_a_text_held_compressed_reads_back_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sourcetext_mod, "_PIECE", 7)  # pieces end inside characters
    monkeypatch.setattr(sourcetext_mod, "_FEED", 3)
    text = "version: 1  # é, ∑ and 🙂 span pieces\n" * 40
    data = text.encode()
    packed = SourceText(data[i:i + 5] for i in range(0, len(data), 5))
    pieces = list(packed.pieces())
    assert len(pieces) > 40 and all(pieces)
    assert "".join(pieces) == packed.text() == text
    with pytest.raises(UnicodeDecodeError):
        SourceText([data, b"\xff\n"])
    with io.BytesIO(data + b"\xff\n") as file:  # not UTF-8: back where it was, for the caller
        assert SourceText.read(file, len(data) + 2) is None and file.tell() == 0
    with io.BytesIO(data) as file:
        read = SourceText.read(file, 100)
        assert read is not None and (read[0].text(), read[1]) == (data[:100].decode(), 100)


def test_a_large_file_loads_alike_held_compressed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad, binary = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "bin.yaml"
    good.write_text(fleet(50), encoding="utf-8")
    bad.write_text(fleet(50, bad_at=40), encoding="utf-8")
    binary.write_bytes(fleet(5).encode() + b"# \xff\n")
    expected = [loaded(p) for p in (good, bad, binary)]
    monkeypatch.setattr(sourcefile_mod, "PACK_ABOVE", 0)
    assert isinstance(read_source(good, SourceLimits())[0], SourceText)
    assert [loaded(p) for p in (good, bad, binary)] == expected
    line = fleet(5).count("\n") + 1
    assert expected[2] == [(str(binary), None, "", "cannot read: not UTF-8 text (byte 0xFF "
                                                   f"on line {line})")]
    assert isinstance(expected[1], list) and expected[1][0][2:] == (
        "suites.s.environments[40].colour", "unknown key")

