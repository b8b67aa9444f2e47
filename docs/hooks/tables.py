"""Markdown pieces the reference generators share: table cells, tables, a JSON Schema type."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["cell", "code", "prose", "schema_type", "table"]


def prose(text: object) -> str:
    """Plain text (a docstring, a help string) as Markdown that shows it as written: no
    ``<word>`` read as HTML, no ``*`` as emphasis."""
    return (str(text).replace("\\", "\\\\").replace("*", r"\*").replace("<", "&lt;")
            .replace(">", "&gt;"))


def cell(text: object) -> str:
    """``text`` as one table cell: on one line, shown as written, its pipes escaped."""
    return prose(" ".join(str(text).split())).replace("|", r"\|")


def code(text: object) -> str:
    """``text`` as inline code in a table cell (a backtick inside takes a longer fence)."""
    raw = " ".join(str(text).split())
    fence = "``" if "`" in raw else "`"
    pad = " " if raw.startswith("`") or raw.endswith("`") else ""
    return f"{fence}{pad}{raw}{pad}{fence}".replace("|", r"\|")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; the cells are taken as written (pass them through :func:`cell`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def schema_type(schema: dict[str, Any]) -> str:
    """A JSON Schema's type as a reader says it: ``string``, ``integer or null``,
    ``list of string``, ``Problem``, ``one of: a, b``."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return "one of: " + ", ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return f"{schema['const']!r}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(schema_type(s) for s in schema[key]))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return schema_type(schema["allOf"][0])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"list of {schema_type(items)}" if isinstance(items, dict) else "list"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"mapping of {schema_type(extra)}"
        return "object"
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    return str(kind) if kind else "any"
