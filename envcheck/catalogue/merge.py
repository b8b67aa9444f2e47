"""Suite defaults applied to an environment: the one place that decides what wins.

Suite ``defaults`` fill what an environment leaves unset, key by key; nested blocks
(``limits``, ``timeouts``, ``schedules``, ``tests``, ``dependencies``) merge per key; lists
and free-form mappings (``tools``, ``data_sources``, ``labels``, ``dependencies.python``)
are replaced whole, and so is ``tests.oracle`` (a script replaces a default path). A suite's
``tests`` may leave out the command (:class:`~envcheck.catalogue.probe_specs.TestDefaults`):
merged under an environment's ``tests`` they make its spec, alone they make one only if they
name a command.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

from envcheck.catalogue.models import (
    Environment,
    EnvironmentEntry,
    EnvironmentSettings,
    SuiteDefaults,
)
from envcheck.catalogue.probe_specs import TestDefaults

__all__ = ["merge_models", "resolve_environment"]

M = TypeVar("M", bound=BaseModel)


@cache
def _field_names(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(model.model_fields)


def merge_models(base: M, over: M) -> M:
    """``over``'s explicitly set fields win; nested models merge key by key. The result is of
    ``base``'s model, or of ``over``'s when that is the more general one: a suite's
    :class:`TestDefaults` under an environment's ``TestSpec`` make a ``TestSpec``."""
    model = type(over) if isinstance(base, type(over)) else type(base)
    return model.model_validate(_merged(base, over))


def _merged(base: BaseModel, over: BaseModel) -> dict[str, Any]:
    """The fields of ``base``'s model set in either: ``over``'s win, nested models merged."""
    values: dict[str, Any] = {}
    set_over, set_base = over.model_fields_set, base.model_fields_set
    for name in _field_names(type(base)):
        if name in set_over:
            mine = getattr(over, name)
            theirs = getattr(base, name)
            if (isinstance(mine, BaseModel) and isinstance(theirs, BaseModel)
                    and not getattr(mine, "merge_whole", False)):
                mine = merge_models(theirs, mine)
            values[name] = mine
        elif name in set_base:
            values[name] = getattr(base, name)
    return values


def resolve_environment(suite_id: str, defaults: SuiteDefaults,
                        entry: EnvironmentEntry) -> Environment:
    """The environment ``entry`` of suite ``suite_id`` with the suite's ``defaults`` applied."""
    values = _merged(defaults, entry)  # the settings' fields only: not id nor image
    tests = values.get("tests")
    if isinstance(tests, TestDefaults):  # the suite's alone: a spec only if they name a command
        values["tests"] = tests.spec()
    # Every field given (an unset one as its default): validated once, into the one model.
    fields = {k: values[k] if k in values else getattr(defaults, k)
              for k in _field_names(EnvironmentSettings)}
    return Environment.model_validate({**fields, "id": entry.id, "image": entry.image,
                                       "suite": suite_id})
