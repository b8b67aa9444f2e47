"""Equal values of the environments of one load held once.

A fleet's environments repeat the same limits, timeouts, tool lists, dependency specs and
labels: validated one by one, each has its own copy (pydantic copies a list or a mapping it
validates). :class:`Sharing` hash-conses them as they are made: a value's parts first, so that a
model, list or mapping is then known by its type and the identities of its parts, without
serialising it. The models are frozen and nothing changes a list or mapping they hold in
place, so holding an equal value once changes nothing a reader sees.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from sys import intern
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from envcheck.catalogue.models import Environment

__all__ = ["Sharing"]

_SCALARS = frozenset({str, int, float, bool, type(None)})


class Sharing:
    """The values seen so far in one load, each held once (dropped with the load).

    ``previous``: the environments of the catalogue this load replaces (a reload): an
    environment equal to one of them is that one, and the copy just made is freed at once,
    so a reload of an unchanged fleet never holds two fleets' environments."""

    def __init__(self, previous: Iterable[Environment] = ()) -> None:
        self._held: dict[Hashable, Any] = {}
        self._known: set[int] = set()  # ids of the values held: alive, so never reused
        self._names: dict[frozenset[str], frozenset[str]] = {}  # models' sets of fields set
        self._previous = {env.id: env for env in previous}

    def environment(self, env: Environment) -> Environment:
        """``env`` as the catalogue replaced holds it if equal there, else with its fields
        held once."""
        before = self._previous.pop(env.id, None)
        if before is not None and before == env:
            return before
        self.fields(env)
        # the one copy of its id: what reads ids back from the store interns them too (the
        # metrics key 100,000 environments' series by id)
        env.__dict__["id"] = intern(env.id)
        return env

    def fields(self, model: BaseModel) -> None:
        """Hold each field of ``model`` as the equal value seen first."""
        values = model.__dict__
        for name, value in values.items():
            if type(value) not in _SCALARS and id(value) not in self._known:
                values[name] = self.value(value)

    def value(self, value: Any) -> Any:
        """``value``, or the equal one seen first in this load (same types throughout)."""
        kind = type(value)
        if kind in _SCALARS or id(value) in self._known:
            return value  # e.g. a suite's defaults, the same model in every environment
        key: tuple[Any, ...]
        if isinstance(value, BaseModel):
            if value.__pydantic_private__ or value.__pydantic_extra__:
                return value  # state beyond its fields: kept as it is
            self.fields(value)
            names = frozenset(value.__pydantic_fields_set__)
            key = (kind, self._names.setdefault(names, names), *_tokens(value.__dict__.values()))
        elif kind is list:
            value[:] = [self.value(item) for item in value]
            key = (kind, *_tokens(value))
        elif kind is dict:
            for name, item in value.items():
                if type(item) not in _SCALARS:
                    value[name] = self.value(item)
            key = (kind, *value.keys(), *_tokens(value.values()))
        else:
            return value
        held = self._held.setdefault(key, value)
        self._known.add(id(held))
        return held


def _tokens(values: Iterable[Any]) -> list[Hashable]:
    """What tells parts apart once parts are held once: a string or None itself, another
    scalar with its type (``1``, ``1.0`` and ``True`` are equal in Python, not in a
    catalogue; nor are ``0.0`` and ``-0.0``), another value's identity (an int)."""
    out: list[Hashable] = []
    for value in values:
        kind = type(value)
        out.append(value if kind is str or value is None
                   else id(value) if kind not in _SCALARS
                   else (kind, float.hex(value) if kind is float else value))
    return out
