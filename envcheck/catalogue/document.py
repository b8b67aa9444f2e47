"""One catalogue file, as written: its suites, data sources and datasets.

Apart from :mod:`.models` because datasets (:mod:`.datasets`) build on the models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from envcheck.catalogue.datasets import DatasetEntry
from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.fields import CatalogueModel, Ident
from envcheck.catalogue.models import SuiteEntry
from envcheck.catalogue.registries import RegistryCredentials

__all__ = ["CatalogueFile"]


class CatalogueFile(CatalogueModel):
    """One catalogue file, as written. ``envcheck schema`` prints its JSON Schema."""

    version: Literal[1]
    suites: dict[Ident, SuiteEntry] = Field(
        default_factory=dict, json_schema_extra={"additionalProperties": False}
    )
    data_sources: list[DataSource] = Field(default_factory=list)
    datasets: list[DatasetEntry] = Field(default_factory=list, description=(  # type: ignore[valid-type]
        "instance files or task folders whose tasks join a suite as environments"))
    registries: list[RegistryCredentials] = Field(default_factory=list, description=(
        "credentials for the registries of watched images (pull: watch); without an entry, "
        "a registry's credentials are read as the Docker CLI reads them"))
