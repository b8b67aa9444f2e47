"""Suite defaults applied to an environment: the one place that decides what wins.

Suite ``defaults`` fill what an environment leaves unset, key by key; nested blocks
(``limits``, ``timeouts``, ``schedules``, ``tests``, ``dependencies``) merge per key; lists
and free-form mappings (``tools``, ``data_sources``, ``labels``, ``dependencies.python``)
are replaced whole, and so is ``tests.oracle`` (a script replaces a default path).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from envcheck.catalogue.models import Environment, EnvironmentEntry, EnvironmentSettings

__all__ = ["merge_models", "resolve_environment"]

M = TypeVar("M", bound=BaseModel)


def merge_models(base: M, over: M) -> M:
    """``over``'s explicitly set fields win; nested models merge key by key."""
    values: dict[str, Any] = {}
    for name in type(base).model_fields:
        mine, theirs = getattr(over, name), getattr(base, name)
        if name in over.model_fields_set:
            if (isinstance(mine, BaseModel) and isinstance(theirs, BaseModel)
                    and not getattr(mine, "merge_whole", False)):
                mine = merge_models(theirs, mine)
            values[name] = mine
        elif name in base.model_fields_set:
            values[name] = theirs
    return type(base).model_validate({**values})


def resolve_environment(suite_id: str, defaults: EnvironmentSettings,
                        entry: EnvironmentEntry) -> Environment:
    """The environment ``entry`` of suite ``suite_id`` with the suite's ``defaults`` applied."""
    merged = merge_models(defaults, EnvironmentSettings.model_validate(
        {k: getattr(entry, k) for k in entry.model_fields_set if k not in ("id", "image")}
    ))
    fields = {k: getattr(merged, k) for k in EnvironmentSettings.model_fields}
    return Environment(id=entry.id, image=entry.image, suite=suite_id, **fields)
