"""Which files of a patch are code under test: not the tests themselves, not documentation
(mutating or leaving those out measures nothing about a verifier)."""

from __future__ import annotations

import posixpath

__all__ = ["is_doc_path", "is_test_path"]

_DOC_EXTS = (".md", ".rst", ".txt", ".adoc")
_DOC_NAMES = ("changes", "changelog", "history", "news", "authors", "contributors")


def is_test_path(path: str) -> bool:
    """A test file, by the conventions pytest and unittest projects follow."""
    *folders, name = path.split("/")
    return (any(f in ("test", "tests", "testing") for f in folders)
            or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py")


def is_doc_path(path: str) -> bool:
    """Documentation, a changelog, or anything under a top-level ``doc`` / ``docs`` (a
    Sphinx ``conf.py`` included)."""
    name = posixpath.basename(path).lower()
    top = path.split("/", maxsplit=1)[0].lower()
    return name.endswith(_DOC_EXTS) or name.startswith(_DOC_NAMES) or top in ("doc", "docs")
