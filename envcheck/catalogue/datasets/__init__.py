"""Datasets as catalogue entries: a catalogue's ``datasets:`` list, next to its suites.

An entry names a path (a file, a folder, a glob, relative to the catalogue file), its
``format``, the suite its tasks join, and the mapping that format needs; at every load (so at
every SIGHUP) each record or task becomes an :class:`~envcheck.catalogue.models.Environment`
of that suite with the suite's defaults applied, its id the dataset's own.

A format is one module with an entry model (a ``format: Literal[...]`` discriminator over
:class:`~.base.DatasetBase`) and an ``expand`` function, registered once in :data:`FORMATS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Union

from pydantic import Field

from envcheck.catalogue.datasets import harbor, swebench
from envcheck.catalogue.datasets.base import DatasetBase, Expansion
from envcheck.catalogue.models import SuiteDefaults

__all__ = ["FORMATS", "DatasetEntry", "DatasetFormat", "expand"]

Expander = Callable[[Any, str, SuiteDefaults, str, Callable[[str, str], None]], Expansion]


@dataclass(frozen=True)
class DatasetFormat:
    entry: type[DatasetBase]
    expand: Expander


FORMATS: dict[str, DatasetFormat] = {
    "swebench": DatasetFormat(swebench.SwebenchDataset, swebench.expand),
    "harbor": DatasetFormat(harbor.HarborDataset, harbor.expand),
}

_ENTRIES = tuple(f.entry for f in FORMATS.values())
# One format: its model; more: a union told apart by 'format' (errors then name the format).
DatasetEntry = (_ENTRIES[0] if len(_ENTRIES) == 1
                else Annotated[Union[_ENTRIES], Field(discriminator="format")])  # noqa: UP007


def expand(entry: DatasetBase, catalogue_file: str, defaults: SuiteDefaults,
           on_entry: Callable[[str, str], None]) -> Expansion:
    """The environments ``entry`` expands into (``on_entry(key, message)`` reports a problem
    with the entry itself, e.g. a path that names no file)."""
    fmt = FORMATS[entry.format]
    return fmt.expand(entry, catalogue_file, defaults, entry.suite, on_entry)
