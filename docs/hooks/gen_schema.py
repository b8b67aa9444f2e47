"""The catalogue's reference, from its JSON Schema (what ``envcheck schema`` prints): every
key of a catalogue file, with its type, default and description, one table per block."""

from __future__ import annotations

import json
import re
from typing import Any

from docs.hooks.tables import cell, code, schema_type, table

__all__ = ["catalogue_schema", "linked", "schema_reference"]


def catalogue_schema() -> dict[str, Any]:
    """The document ``envcheck schema`` prints (the same function makes it)."""
    from envcheck.catalogue.document import CatalogueFile

    doc: dict[str, Any] = CatalogueFile.model_json_schema(by_alias=True)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "envcheck catalogue"
    return doc


def linked(text: str, names: set[str]) -> str:
    """``text`` with each of ``names`` (a schema's blocks) a link to its section."""
    if not names:
        return text
    pattern = r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b"
    return re.sub(pattern, lambda m: f"[{m.group(1)}](#{m.group(1).lower()})", text)


def _type(prop: dict[str, Any], names: set[str]) -> str:
    if "patternProperties" in prop:  # suites: a mapping of ids to suites
        [(_pattern, value)] = prop["patternProperties"].items()
        return linked(cell(f"mapping of id to {schema_type(value)}"), names)
    items = prop.get("items")
    if isinstance(items, dict) and "discriminator" in items:
        mapping = items["discriminator"]["mapping"]
        kinds = ", ".join(f"{schema_type({'$ref': ref})} ({key})" for key, ref in mapping.items())
        return linked(cell(f"list of {kinds}, by {items['discriminator']['propertyName']}"),
                       names)
    return linked(cell(schema_type(prop)), names)


def _block(schema: dict[str, Any], names: set[str]) -> str:
    required = set(schema.get("required", []))
    rows = []
    for key, prop in schema.get("properties", {}).items():
        default = json.dumps(prop["default"]) if "default" in prop else ""
        if len(default) > 60:  # a whole block's defaults: its own table gives each key's
            default = ""
        rows.append([code(key), _type(prop, names), "yes" if key in required else "",
                     code(default) if default else "",
                     cell(prop.get("description", "")).replace(r"\*", "*")])
    return table(["key", "type", "required", "default", "what it is"], rows)


def schema_reference(doc: dict[str, Any]) -> str:
    """The generated part of the page: the file's top level, then each block it refers to."""
    defs: dict[str, Any] = doc.get("$defs", {})
    names = set(defs)
    out = ["## A catalogue file\n", cell(doc.get("description", "")) + "\n", _block(doc, names)]
    for name, schema in sorted(defs.items()):
        out.append(f"## {name}\n")
        if schema.get("description"):
            out.append(" ".join(schema["description"].split()) + "\n")
        if schema.get("properties"):
            out.append(_block(schema, names))
        else:
            out.append(linked(cell(schema_type(schema)), names) + "\n")
    return "\n".join(out)
