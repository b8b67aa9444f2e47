"""A catalogue file split for validation: its outline (all but its suites' environments),
then its environments one by one.

A fleet's file holds 100,000 environments: validated as one model, every entry's model is
alive at once beside the raw values, and the process keeps that peak. Validated one by one,
each raw value can be released as soon as its environment is made. Pydantic's errors stay
those of the whole file, in its order (:func:`in_file_order`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic_core import ErrorDetails

from envcheck.catalogue.keypaths import KeyPath

__all__ = ["at", "in_file_order", "split_environments"]

# The order pydantic checks a catalogue file in: its fields as declared, then unknown keys;
# in a suite, the key, its fields before ``environments``, its environments, unknown keys.
_TOP = {"version": 0, "suites": 1, "data_sources": 2, "datasets": 3, "registries": 4}
_UNKNOWN = len(_TOP)
_BEFORE_ENVIRONMENTS = frozenset({"[key]", "description", "allow_degraded", "defaults"})


def split_environments(data: dict[str, Any], *, release: bool
                       ) -> tuple[dict[str, Any], Iterator[tuple[str, int, Any]]]:
    """``data`` with each suite's ``environments`` list emptied, and those environments'
    raw values ``(suite id, index, value)`` in file order. ``release``: each value is taken
    out of ``data`` as it is handed out (only if no value is shared by an alias)."""
    suites = data.get("suites")
    if not isinstance(suites, dict):
        return data, iter(())
    taken: list[tuple[str, list[Any]]] = []
    outline: dict[str, Any] = {}
    for suite_id, suite in suites.items():
        outline[suite_id] = suite
        if isinstance(suite, dict) and isinstance(suite.get("environments"), list):
            taken.append((suite_id, suite["environments"]))
            outline[suite_id] = {**suite, "environments": []}
    return {**data, "suites": outline}, _handed_out(taken, release)


def _handed_out(taken: list[tuple[str, list[Any]]], release: bool
                ) -> Iterator[tuple[str, int, Any]]:
    for suite_id, items in taken:
        for i, raw in enumerate(items):
            if release:
                items[i] = None
            yield suite_id, i, raw


def at(err: ErrorDetails, where: KeyPath) -> ErrorDetails:
    """An error of a model validated alone, as the file's model reports it at ``where``."""
    return {**err, "loc": (*where, *err["loc"])}


def in_file_order(outline: list[ErrorDetails], environments: list[ErrorDetails],
                  data: dict[str, Any]) -> list[ErrorDetails]:
    """The errors of a file's outline and of its environments (each list in pydantic's
    order) merged as pydantic orders the errors of the whole file."""
    suites = data.get("suites")
    index = {suite_id: i for i, suite_id in enumerate(suites)} if isinstance(suites, dict) else {}

    def rank(err: ErrorDetails) -> tuple[int, ...]:
        loc = err["loc"]
        top = _TOP.get(str(loc[0]), _UNKNOWN) if loc else -1
        if top != _TOP["suites"] or len(loc) < 2:
            return (top,)
        if len(loc) == 2 or loc[2] in _BEFORE_ENVIRONMENTS:
            part = 0
        else:
            part = 1 if loc[2] == "environments" else 2
        return (top, index.get(str(loc[1]), -1), part)

    return sorted([*outline, *environments], key=rank)  # stable: each list keeps its order
