"""The documentation site's pages (``docs/``) as the tests read them: a page, one section of
it, its fenced code blocks. Tests that run or check what the documentation shows read it
here, so that a page moved or a heading renamed fails with its name."""

from __future__ import annotations

import re

from tests.conftest import ROOT

__all__ = ["DOCS", "blocks", "page", "pages", "section"]

DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def page(name: str) -> str:
    """The Markdown source of ``docs/NAME`` (``how-to/deploy.md``)."""
    return (DOCS / name).read_text(encoding="utf-8")


def pages() -> dict[str, str]:
    """Every page of the site, by its path under ``docs/`` (the hooks' folder is code)."""
    return {p.relative_to(DOCS).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(DOCS.rglob("*.md")) if "hooks" not in p.relative_to(DOCS).parts}


def section(text: str, heading: str) -> str:
    """From the heading line ``heading`` (``## The service unit``) up to the next heading of
    its level or above, code blocks' ``#`` comments not counted."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    start = lines.index(heading)
    fenced, end = False, len(lines)
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced
        marks = len(lines[i]) - len(lines[i].lstrip("#"))
        if not fenced and 0 < marks <= level and lines[i][marks:marks + 1] == " ":
            end = i
            break
    return "\n".join(lines[start:end]) + "\n"


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``text`` in ``language`` (```bash, ```yaml), in order."""
    return [body for lang, body in _FENCE.findall(text) if lang == language]
