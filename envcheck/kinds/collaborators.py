"""The collaborators a check cycle shares across environments, built in one place.

Probes find them by type (``ctx.service(cls)``), so the runner knows nothing of what they are.
Build them once per process: their caches are scoped by run id already.
"""

from __future__ import annotations

from envcheck.catalogue.models import Catalogue
from envcheck.kinds.base import Services
from envcheck.kinds.datasource.sampling import ShapeStore

__all__ = ["build_services"]


def build_services(catalogue: Catalogue, shapes: ShapeStore) -> Services:
    """``shapes``: where data-source fingerprints are kept (the result store)."""
    from envcheck.kinds.datasource.probe import DataSourceChecker

    return {DataSourceChecker: DataSourceChecker(catalogue.data_sources, shapes)}
