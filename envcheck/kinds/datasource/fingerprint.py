"""The structural fingerprint of a JSON document: its keys and value types, never its values.

A shape is a plain JSON value, so it can be stored and compared anywhere::

    "string" | "number" | "boolean" | "null"           a scalar
    {"object": {key: shape, ...}}                      an object
    {"array": shape | None}                            a list, summarised by its elements'
                                                       merged shape (None: empty)
    {"anyOf": [shape, ...]}                            elements of different shapes

The fingerprint is a hash of the shape; any difference makes a new one. *Drift* is judged
by :func:`changes`, which ignores what values alone explain: a ``null`` where a type was seen
(an absent value, not a new structure) and an empty list where the elements' shape was seen.
Without that, every API with an optional field or an often-empty list would flap.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["MAX_DEPTH", "changes", "describe", "fingerprint", "shape_of"]

Shape = Any  # a JSON value of the form above
MAX_DEPTH = 32
_DEEP = "deeper"  # a leaf standing for everything below MAX_DEPTH


def shape_of(value: Any, depth: int = 0) -> Shape:
    if depth >= MAX_DEPTH:
        return _DEEP
    if isinstance(value, dict):
        return {"object": {str(k): shape_of(v, depth + 1) for k, v in value.items()}}
    if isinstance(value, list):
        merged: Shape = None
        for item in value:
            merged = _merge(merged, shape_of(item, depth + 1))
        return {"array": merged}
    if isinstance(value, bool):  # before int: bool is an int in Python
        return "boolean"
    if isinstance(value, int | float):
        return "number"  # JSON has one number type; 1 and 1.0 are the same structure
    if isinstance(value, str):
        return "string"
    return "null"


def _merge(a: Shape, b: Shape) -> Shape:
    """One shape covering both (None: nothing seen yet)."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if _is(a, "object") and _is(b, "object"):
        keys = a["object"].keys() | b["object"].keys()
        return {"object": {k: _merge(a["object"].get(k), b["object"].get(k)) for k in keys}}
    if _is(a, "array") and _is(b, "array"):
        return {"array": _merge(a["array"], b["array"])}
    options = _options(a) + [s for s in _options(b) if s not in _options(a)]
    return {"anyOf": sorted(options, key=_canonical)}


def _is(shape: Shape, kind: str) -> bool:
    return isinstance(shape, dict) and kind in shape


def _options(shape: Shape) -> list[Shape]:
    return list(shape["anyOf"]) if _is(shape, "anyOf") else [shape]


def _canonical(shape: Shape) -> str:
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


def fingerprint(shape: Shape) -> str:
    return hashlib.sha256(_canonical(shape).encode()).hexdigest()[:16]


def describe(shape: Shape) -> str:
    if shape is None:
        return "empty list"
    if _is(shape, "object"):
        return "object"
    if _is(shape, "array"):
        return f"list of {describe(shape['array'])}" if shape["array"] is not None else "list"
    if _is(shape, "anyOf"):
        return "|".join(describe(s) for s in shape["anyOf"])
    return str(shape)


def changes(accepted: Shape, observed: Shape, path: str = "$", limit: int = 20) -> list[str]:
    """What changed structurally from ``accepted`` to ``observed`` ([] = no drift)."""
    found: list[str] = []
    _diff(accepted, observed, path, found)
    return found[:limit] + ([f"... and {len(found) - limit} more"] if len(found) > limit else [])


def _diff(old: Shape, new: Shape, path: str, found: list[str]) -> None:
    if old == new or old is None or new is None:  # None: an empty list says nothing
        return
    old_opts = [s for s in _options(old) if s != "null"]
    new_opts = [s for s in _options(new) if s != "null"]
    if not old_opts or not new_opts:  # only nulls on one side: values, not structure
        return
    if len(old_opts) == len(new_opts) == 1:
        old, new = old_opts[0], new_opts[0]
        if _is(old, "object") and _is(new, "object"):
            for key in sorted(old["object"].keys() | new["object"].keys()):
                where = f"{path}.{key}"
                if key not in new["object"]:
                    found.append(f"{where}: removed")
                elif key not in old["object"]:
                    found.append(f"{where}: added ({describe(new['object'][key])})")
                else:
                    _diff(old["object"][key], new["object"][key], where, found)
            return
        if _is(old, "array") and _is(new, "array"):
            _diff(old["array"], new["array"], f"{path}[]", found)
            return
    if sorted(map(_canonical, old_opts)) != sorted(map(_canonical, new_opts)):
        found.append(f"{path}: {_describe_options(old_opts)} -> {_describe_options(new_opts)}")


def _describe_options(options: list[Shape]) -> str:
    return describe(options[0] if len(options) == 1 else {"anyOf": options})
