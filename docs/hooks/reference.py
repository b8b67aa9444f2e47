"""The site's reference, generated from the code while MkDocs builds (``hooks:`` in mkdocs.yml),
so that it cannot drift from what envcheck does.

A page asks for a generated part with a line of its own, ``<!-- reference: NAME -->``; the
hook replaces the line with the part. A name it does not know, or a part that fails to
generate, fails the build. The documents the reference is made from are files of the site
beside its pages: ``reference/catalogue.schema.json`` (``envcheck schema``) and
``reference/openapi.json`` (the API's ``/openapi.json``).

The checkout the site is built from is the one documented: its root goes first on
``sys.path``, whatever envcheck the virtualenv holds.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)



def _this_checkout_first() -> None:
    """The checkout's root first on ``sys.path``: its ``envcheck`` and ``docs.hooks`` are the
    ones imported. (MkDocs puts ``sys.path`` back as it was once a hook module is loaded, so
    this runs again when the build starts.)"""
    if sys.path[:1] != [str(ROOT)]:
        sys.path.insert(0, str(ROOT))


_this_checkout_first()


class ReferenceError(Exception):
    """A page asks for a part the hook does not make, or a part could not be made."""


_stack = ExitStack()


@cache
def scratch_store() -> Any:
    """One SQLite store in a temporary folder for the build: the API's app is built over it
    (and never queried), the metrics' collector scrapes it."""
    from envcheck.store import open_store

    folder = _stack.enter_context(tempfile.TemporaryDirectory(prefix="envcheck-docs-"))
    return _stack.enter_context(open_store(f"sqlite:///{folder}/docs.db"))


@cache
def openapi_document() -> dict[str, Any]:
    from docs.hooks.gen_api import openapi

    return openapi(scratch_store())


@cache
def catalogue_schema_document() -> dict[str, Any]:
    from docs.hooks.gen_schema import catalogue_schema

    return catalogue_schema()


def _cli() -> str:
    from docs.hooks.gen_cli import cli_reference

    return cli_reference()


def _api() -> str:
    from docs.hooks.gen_api import api_reference

    return api_reference(openapi_document())


def _schema() -> str:
    from docs.hooks.gen_schema import schema_reference

    return schema_reference(catalogue_schema_document())


def _reasons() -> str:
    from docs.hooks.gen_small import reasons_reference

    return reasons_reference()


def _metrics() -> str:
    from docs.hooks.gen_metrics import metric_families, metrics_reference

    return metrics_reference(metric_families(scratch_store(), ROOT))


def _alerts() -> str:
    from docs.hooks.gen_small import alerts_reference

    return alerts_reference(ROOT)


PARTS: dict[str, Callable[[], str]] = {
    "cli": _cli, "http-api": _api, "catalogue-schema": _schema, "reasons": _reasons,
    "metrics": _metrics, "alerts": _alerts,
}


@cache
def part(name: str) -> str:
    """One generated part, made once per build."""
    if name not in PARTS:
        raise ReferenceError(f"<!-- reference: {name} -->: no such part; "
                             f"known: {', '.join(sorted(PARTS))}")
    return PARTS[name]().rstrip() + "\n"


def expand(markdown: str, where: str = "page") -> str:
    """``markdown`` with every marker replaced by its part."""
    try:
        return MARKER.sub(lambda m: part(m.group(1)), markdown)
    except ReferenceError:
        raise
    except Exception as exc:  # a part's own failure: name the page and the part
        raise ReferenceError(f"{where}: generating the reference failed: "
                             f"{type(exc).__name__}: {exc}") from exc


# --- MkDocs hooks ------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return expand(markdown, page.file.src_uri)
    except ReferenceError as exc:
        raise PluginError(str(exc)) from exc


def on_config(config: Any) -> Any:
    _this_checkout_first()
    return config


def on_pre_build(config: Any) -> None:
    """Every build (``mkdocs serve`` rebuilds) generates afresh."""
    _forget()


def on_files(files: Any, config: Any) -> Any:
    """The documents the reference is made from, as files of the site (pages link them)."""
    from mkdocs.structure.files import File

    for uri, doc in (("reference/catalogue.schema.json", catalogue_schema_document()),
                     ("reference/openapi.json", openapi_document())):
        files.append(File.generated(config, uri, content=json.dumps(doc, indent=2) + "\n"))
    return files


def on_post_build(config: Any) -> None:
    _forget()


def on_build_error(error: Exception) -> None:
    _forget()


def _forget() -> None:
    for made in (part, openapi_document, catalogue_schema_document, scratch_store):
        made.cache_clear()
    _stack.close()
