"""The collaborators a check cycle shares across environments, built in one place.

Probes find them by type (``ctx.service(cls)``), so the runner knows nothing of what they are.
Build them once per process: their caches are scoped by run id already.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.depth import DepthAdvice
from envcheck.core.outages import StoreOutages
from envcheck.core.results import ProbeKind
from envcheck.kinds.adversarial.ledger import ControlsLedger, PriorEvidence
from envcheck.kinds.base import Services
from envcheck.kinds.datasource.sampling import ShapeStore
from envcheck.kinds.reuse import ReuseAdvisor
from envcheck.kinds.testvalidity.depth import DepthAdvisor
from envcheck.registry.fleet import RegistryImages

__all__ = ["build_services"]


def build_services(catalogue: Catalogue, shapes: ShapeStore,
                   depth: Callable[[Environment], DepthAdvice | None] | None = None,
                   reuse: Callable[[Environment, ProbeKind], DepthAdvice | None] | None = None,
                   outages: StoreOutages | None = None,
                   registry: RegistryImages | None = None) -> Services:
    """``shapes``: where data-source fingerprints are kept (the result store); a store that
    also keeps earlier results lets the adversarial controls reuse their evidence.
    ``depth``: the depth advice for an environment's tests probe (``feed.depth.StoreDepth``);
    without it every tests probe validates in full. ``reuse``: whether a terminal or
    dependencies probe may stand on its evidence (``feed.reuse.StoreReuse``); without it
    every such probe starts a container. ``registry``: the registry stage, for the images
    envcheck pulls (``pull: watch``). ``outages``: where the parts that read the store
    say, once per outage, that it is unavailable (the probes find it too)."""
    from envcheck.kinds.datasource.probe import DataSourceChecker

    outages = outages or StoreOutages()
    services: dict[type[Any], object] = {
        DataSourceChecker: DataSourceChecker(catalogue.data_sources, shapes),
        StoreOutages: outages}
    if isinstance(shapes, PriorEvidence):
        services[ControlsLedger] = ControlsLedger(shapes, outages)
    if depth is not None:
        services[DepthAdvisor] = DepthAdvisor(depth, outages)
    if reuse is not None:
        services[ReuseAdvisor] = ReuseAdvisor(reuse, outages)
    if registry is not None:  # the images envcheck pulls: their tags' digests and pulls
        services[RegistryImages] = registry
    return services
