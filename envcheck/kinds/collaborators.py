"""The collaborators a check cycle shares across environments, built in one place.

Probes find them by type (``ctx.service(cls)``), so the runner knows nothing of what they are.
Build them once per process: their caches are scoped by run id already.
"""

from __future__ import annotations

from envcheck.catalogue.models import Catalogue
from envcheck.executors.cycle import Services
from envcheck.store import Store

__all__ = ["build_services"]


def build_services(catalogue: Catalogue, store: Store) -> Services:
    from envcheck.kinds.datasource.probe import DataSourceChecker

    return {DataSourceChecker: DataSourceChecker(catalogue.data_sources, store)}
