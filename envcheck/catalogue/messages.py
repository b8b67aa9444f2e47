"""Pydantic's validation errors in words for the person editing the YAML.

A catalogue is written by hand: an error names what was expected and what was found, as the
author wrote it, and an unknown key suggests the closest key the schema allows there.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from envcheck.catalogue.fields import ID_PATTERN
from envcheck.catalogue.keypaths import KeyPath
from envcheck.catalogue.models import CATALOGUE_VERSION

__all__ = ["describe_error", "show_value"]

_PATTERN_HELP = {
    ID_PATTERN: "invalid id {got}: use up to 63 lowercase letters, digits, '.', '_' or '-', "
         "starting with a letter or digit",
    r"^https?://": "expected an http:// or https:// URL, got {got}",
    r"^/": "expected an absolute path (starting with /), got {got}",
}
_EXPECTED = {
    "model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "string_type": "a string",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "finite_number": "a finite number",
}


def describe_error(err: ErrorDetails, schema: type[BaseModel] | None = None) -> str:
    """A pydantic error in words for the person editing the YAML; ``schema``, the model at the
    error's root, lets an unknown key suggest the closest known one."""
    kind, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx", {})
    got = show_value(err["input"])
    if kind == "extra_forbidden":
        keys = _keys_at(loc[:-1], schema) if schema is not None else []
        close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
        return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        if loc == ("version",):
            return "required key is missing (a catalogue starts with 'version: 1')"
        return "required key is missing"
    if loc == ("version",):
        return (f"unsupported catalogue version {got} "
                f"(this envcheck reads version {CATALOGUE_VERSION})")
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        if pattern in _PATTERN_HELP:
            return _PATTERN_HELP[pattern].format(got=got)
        return f"does not match the pattern {pattern!r}, got {got}"
    if kind == "union_tag_invalid":  # a dataset's 'format'
        return (f"unknown {str(ctx.get('discriminator', 'tag')).strip(chr(39))} "
                f"{show_value(ctx.get('tag'))} (known: {ctx.get('expected_tags')})")
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}, got {got}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind in _EXPECTED:
        hint = ""
        if kind == "string_type" and not isinstance(err["input"], dict | list | None):
            hint = " (quote it in the YAML)"
        return f"expected {_EXPECTED[kind]}, got {got}{hint}"
    msg = str(err["msg"])
    if msg.startswith("Input should be "):
        msg = "must be " + msg.removeprefix("Input should be ")
    return f"{msg}, got {got}"


def show_value(value: Any) -> str:
    """A value as the YAML author would recognise it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def _keys_at(loc: KeyPath, schema: type[BaseModel]) -> list[str]:
    """The keys ``schema`` allows in the mapping at ``loc`` (for suggestions)."""
    tp: Any = schema
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {(f.alias or name): f for name, f in tp.model_fields.items()}
            if part not in fields:
                return []
            tp = fields[str(part)].annotation
        elif get_origin(tp) in (list, tuple) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict and isinstance(part, str):
            tp = get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any) -> Any:
    """``Annotated[X, ...]`` -> X; ``X | None`` -> X."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp
