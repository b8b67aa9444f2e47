"""The documentation documents what the code does: the site (mkdocs.yml, docs/) builds strictly
with its reference generated from the code, every reason code has its meaning and what to do,
every catalogue example loads, and the README is the short front page with the two commands."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from docs.hooks import gen_small
from docs.hooks.gen_schema import catalogue_schema
from docs.hooks.reference import MARKER, PARTS, ReferenceError, expand
from envcheck.catalogue.loader import load_catalogue
from envcheck.core.results import REASON_DOCS, Reason, Status
from envcheck.core.rollouts import OUTCOME_DOCS, Outcome
from tests.conftest import ROOT
from tests.docs_pages import DOCS, blocks, page, pages

README = (ROOT / "README.md").read_text(encoding="utf-8")


# --- what the pages say -----------------------------------------------------------------------


def test_every_reason_code_is_documented_with_what_to_do() -> None:
    assert set(REASON_DOCS) == set(Reason)
    assert "<!-- reference: reasons -->" in page("reference/reason-codes.md")
    rendered = expand("<!-- reference: reasons -->")
    for reason, doc in REASON_DOCS.items():
        row = re.search(rf"^\| `{reason}` \| {re.escape(doc)} \| (.+) \|$", rendered, re.M)
        assert row and row.group(1).strip(), reason


def test_guidance_for_every_reason_and_no_other(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    guidance = yaml.safe_load(gen_small.GUIDANCE.read_text(encoding="utf-8"))
    assert set(guidance) == {str(r) for r in Reason}
    for broken in ({k: v for k, v in guidance.items() if k != "tool_missing"},
                   {**guidance, "no_such_reason": "nothing"}):
        path = tmp_path / "reasons.yaml"
        path.write_text(yaml.safe_dump(broken), encoding="utf-8")
        monkeypatch.setattr(gen_small, "GUIDANCE", path)
        with pytest.raises(gen_small.MissingGuidance, match=r"tool_missing|no_such_reason"):
            gen_small.reason_rows()


def test_every_rollout_outcome_is_documented() -> None:
    assert set(OUTCOME_DOCS) == set(Outcome)
    text = page("how-to/rollouts.md")
    for outcome, doc in OUTCOME_DOCS.items():
        assert f"| `{outcome}` | {doc} |" in text, outcome


def test_every_status_is_documented() -> None:
    text = page("reference/reason-codes.md")
    for status in Status:
        assert f"| `{status}` |" in text, status


def test_an_unknown_reference_part_is_refused() -> None:
    assert set(MARKER.findall("\n".join(pages().values()))) == set(PARTS)
    with pytest.raises(ReferenceError, match="no-such-part"):
        expand("# x\n\n<!-- reference: no-such-part -->\n")


# --- the README: the front page ---------------------------------------------------------------


def test_first_screen_has_the_two_commands() -> None:
    first_screen = "\n".join(README.splitlines()[:25])
    assert "scripts/run.sh" in first_screen
    assert "scripts/test.sh" in first_screen
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/test.sh" in ci


def test_the_readme_is_a_front_page_linking_into_the_site() -> None:
    assert len(README.splitlines()) <= 200
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), f"README links {link}, which does not exist"
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]

    def leaves(items: list[Any]) -> list[str]:
        found = []
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                found += leaves(value) if isinstance(value, list) else [value]
        return found

    site_pages = {f"docs/{name}" for name in leaves(nav) if name != "index.md"}
    assert site_pages <= set(links), f"pages the README does not link: {site_pages - set(links)}"


# --- catalogue examples ---------------------------------------------------------------------


def catalogue_examples() -> list[Any]:
    """Every ```yaml block of the site that is a whole catalogue file (``version: 1``)."""
    found = []
    for name, text in pages().items():
        for i, block in enumerate(blocks(text, "yaml")):
            if re.search(r"^version: 1\s*$", block, re.M):
                found.append(pytest.param(block, id=f"{name}#{i}"))
    return found


def materialise(example: str, folder: Path) -> str:
    """The files the example names, made in ``folder``: its datasets' from the demo's
    (instance records for a SWE-bench-style entry, a Harbor task folder for a Harbor entry), and
    its registries' secret files, which move into ``folder``; the example as it then reads."""
    doc = yaml.safe_load(example)
    for i, registry in enumerate(doc.get("registries", [])):
        secret = (registry.get("password") or {}).get("file")
        if secret:
            made = folder / f"secret-{i}"
            made.write_text("hunter2\n", encoding="utf-8")
            example = example.replace(f"file: {secret}", f"file: {made}")
    for entry in doc.get("datasets", []):
        target = folder / entry["path"]
        if entry["format"] == "swebench":
            records = ROOT / "probes" / "datasets" / "swe-demo.jsonl"
            if target.suffix in (".jsonl", ".json", ".parquet"):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(records, target)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(records, target / records.name)
        else:
            shutil.copytree(ROOT / "probes" / "harbor" / "hello-world",
                            target / "hello-world", dirs_exist_ok=True)
    return example


def test_the_site_has_catalogue_examples() -> None:
    pages_with = {p.id.split("#")[0] for p in catalogue_examples()}  # type: ignore[union-attr]
    assert {"how-to/catalogue.md", "how-to/swebench.md", "how-to/harbor.md"} <= pages_with


@pytest.mark.parametrize("example", catalogue_examples())
def test_every_catalogue_example_validates(example: str, tmp_path: Path) -> None:
    jsonschema.Draft202012Validator(catalogue_schema()).validate(yaml.safe_load(example))
    path = tmp_path / "catalogue.yaml"
    path.write_text(materialise(example, tmp_path), encoding="utf-8")
    catalogue = load_catalogue([path])
    assert catalogue.environments


# --- the site ---------------------------------------------------------------------------------


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # as the test command runs it: no PYTHONPATH, the hook finds the checkout on its own
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NO_MKDOCS_2_WARNING"] = "1"
    mkdocs = Path(sys.executable).parent / "mkdocs"  # not -m: that puts the cwd on sys.path
    return subprocess.run([str(mkdocs), "build", "--strict",
                           "-f", str(config), "--site-dir", str(site)],
                          cwd=config.parent, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def text_of(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def test_the_site_builds_strictly_with_its_reference_generated(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = build(ROOT / "mkdocs.yml", site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not re.search(r"https?://fonts\.", (site / "index.html").read_text()), "web fonts"

    from docs.hooks.gen_cli import commands

    cli = text_of(site, "reference/cli")
    for path, command, _ in commands():
        assert " ".join(path) in cli
        for param in command.params:
            assert all(opt in cli for opt in param.opts if opt.startswith("-")), param.opts
    api = text_of(site, "reference/http-api")
    openapi = json.loads((site / "reference" / "openapi.json").read_text())
    assert openapi["paths"], "no routes"
    for path in openapi["paths"]:
        assert path in api
    schema = json.loads((site / "reference" / "catalogue.schema.json").read_text())
    assert schema == catalogue_schema()
    shown = text_of(site, "reference/catalogue-schema")
    for name in schema["$defs"]:
        assert f'id="{name.lower()}"' in shown, name
    alerts = yaml.safe_load((ROOT / "alerts.yaml").read_text())
    rules = text_of(site, "reference/alerts")
    for group in alerts["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] in rules
    metrics = text_of(site, "reference/metrics")
    for name in re.findall(r"\b(envcheck_[a-z_]+)\b", (ROOT / "alerts.yaml").read_text()):
        assert name.removesuffix("_total") in metrics, name
    assert "envcheck_probe_results_total" in metrics and "envcheck_up" in metrics
    architecture = text_of(site, "explanation/architecture")
    assert "on one page" in architecture  # ARCHITECTURE.md, included


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build refuses a page whose link leads nowhere: an anchor no page has."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    shutil.copytree(DOCS, copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("mkdocs.yml", "ARCHITECTURE.md", "alerts.yaml"):
        shutil.copy(ROOT / name, copy / name)
    for name in ("envcheck", "probes"):
        (copy / name).symlink_to(ROOT / name)
    assert build(copy / "mkdocs.yml", tmp_path / "good").returncode == 0
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[why](explanation/health.md#no-such-anchor)\n")
    proc = build(copy / "mkdocs.yml", tmp_path / "bad")
    assert proc.returncode != 0
    assert "no-such-anchor" in proc.stdout + proc.stderr
