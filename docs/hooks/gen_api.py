"""The HTTP API's reference, from the OpenAPI document the app itself serves at
``/openapi.json`` (:func:`envcheck.api.app.create_app`), built over a scratch store: no server
runs, and the routes never touch the store while the document is made."""

from __future__ import annotations

from typing import Any

from docs.hooks.gen_schema import linked
from docs.hooks.tables import cell, code, prose, schema_type, table

__all__ = ["api_reference", "openapi"]


def openapi(store: Any) -> dict[str, Any]:
    from envcheck.api.app import create_app

    spec: dict[str, Any] = create_app(store).openapi()
    return spec


def _media(content: dict[str, Any]) -> str:
    parts = []
    for media, body in content.items():
        schema = body.get("schema", {})
        parts.append(f"{schema_type(schema)} ({media})" if schema else media)
    return "; ".join(parts)


def _operation(method: str, path: str, op: dict[str, Any], names: set[str]) -> str:
    out = [f"### `{method.upper()} {path}`\n"]
    if op.get("summary"):
        out.append(prose(op["summary"]) + ".\n")
    if op.get("description"):
        out.append(prose(op["description"]) + "\n")
    params = op.get("parameters", [])
    if params:
        rows = []
        for p in params:
            schema = p.get("schema", {})
            default = f" (default: {schema['default']})" if "default" in schema else ""
            where = p["in"] + (", required" if p.get("required") else "")
            rows.append([code(p["name"]), cell(where), cell(schema_type(schema)),
                         cell(p.get("description", "") + default)])
        out.append(table(["parameter", "in", "type", "what it is"], rows))
    body = op.get("requestBody")
    if body:
        media: dict[str, Any] = next(iter(body.get("content", {}).values()), {})
        schema = media.get("schema", {})
        name = schema_type(schema)
        if name.startswith("list of object"):  # an inline item schema: name its fields
            name = "a JSON array of records (below)"
            out.append(f"Body: {name}; {', '.join(body.get('content', {}))}.\n")
            out.append(_properties(schema.get("items", {}), names))
        else:
            out.append(f"Body: {linked(cell(_media(body.get('content', {}))), names)}.\n")
    rows = [[code(status), cell(r.get("description", "")),
             linked(cell(_media(r.get("content", {}))), names)]
            for status, r in sorted(op.get("responses", {}).items())]
    out.append(table(["status", "when", "body"], rows))
    return "\n".join(out)


def _properties(schema: dict[str, Any], names: set[str]) -> str:
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        default = f" (default: {prop['default']})" if "default" in prop else ""
        rows.append([code(name), linked(cell(schema_type(prop)), names),
                     "yes" if name in required else "",
                     cell(prop.get("description", "") + default)])
    if not rows:
        return cell(schema_type(schema)) + "\n"
    return table(["field", "type", "required", "what it holds"], rows)


def api_reference(spec: dict[str, Any]) -> str:
    """The generated part of the page: every operation, then every schema."""
    names = set(spec.get("components", {}).get("schemas", {}))  # linked wherever named
    out = [f"{prose(spec['info'].get('description', ''))} OpenAPI "
           f"{spec['openapi']}; the same document is served at `/openapi.json`, "
           "and `/docs` shows it interactively.\n", "## Operations\n"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            out.append(_operation(method, path, op, names))
    out.append("## Schemas\n")
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        out.append(f"### {name}\n")
        if schema.get("description"):
            out.append(prose(schema["description"]) + "\n")
        out.append(_properties(schema, names))
    return "\n".join(out)
