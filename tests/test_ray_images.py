"""On Ray each node pulls what it runs into its own engine, under its own budget, with its own
ledger; a check goes first to a node whose engine holds its image; what a node's stage did
shows in the caller's metrics; the daemon's pulls ahead go to the node each check will run on.

The cluster: two nodes, each with an engine and a data directory of its own
(tests/ray_engines.py); the images: tiny ones in the real test registry.
"""

from __future__ import annotations

import os

# Before Ray is imported (it reads these once, and envcheck's executor imports it): every Ray
# address on loopback (Ray otherwise swaps 127.0.0.1 for the host's own), no usage report.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_USAGE_STATS_REPORT_URL"] = "http://127.0.0.1:9/"

import threading
import time
from pathlib import Path

import docker
import docker.errors
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from envcheck.core.results import Reason, Status
from envcheck.executors.cycle import new_run_id
from envcheck.executors.ray import RayExecutor
from envcheck.kinds.collaborators import build_services
from envcheck.metrics.images import RegistrySeries
from envcheck.metrics.own import own_registry
from envcheck.registry.cache import parse_budget
from envcheck.registry.fleet import RegistryImages, RegistrySettings
from envcheck.schedule.prefetch import Prefetch
from envcheck.store import Store
from tests import ray_engines
from tests.polling import wait_for
from tests.ray_engines import (
    BUDGET,
    TERMINAL,
    TwoEngines,
    catalogue,
    check,
    created_on,
    node_of,
    push_runnable,
    stage,
)
from tests.registryd import Registry

pytestmark = [pytest.mark.slow, pytest.mark.docker]

# the cluster's fixtures: one cluster for the module, its executor, a store, test repositories
engines = ray_engines.engines
executor = ray_engines.executor
store = ray_engines.store
repositories = ray_engines.repositories


def test_a_check_goes_to_the_node_whose_engine_holds_its_image(
        engines: TwoEngines, executor: RayExecutor, store: Store, tmp_path: Path,
        registry_anonymous: Registry, docker_client: docker.DockerClient,
        repositories: list[str]) -> None:
    repository, digest = push_runnable(docker_client, registry_anonymous, repositories)
    # only the second node's engine holds it (pulled there by someone else, not envcheck)
    engines.engine2.client.api.pull(repository, tag=digest)
    assert engines.holds(engines.second, repository, digest)
    assert not engines.holds(engines.main, repository, digest)
    cat = catalogue(tmp_path, {"held-on-second": repository})
    registry = stage(engines, cat)
    try:
        since = time.time() - 1
        result = check(executor, cat, store, registry, "held-on-second")
    finally:
        registry.close()
    # the image's verdict (no shell in it), given on the second node, by its engine
    assert (result.status, result.reason) == (Status.FAIL, Reason.SHELL_MISSING), \
        result.summary
    assert result.image_digest == digest
    assert node_of(result) == engines.second
    assert created_on(engines.engine2.client, "held-on-second", since) >= 1
    assert created_on(engines.engine1.client, "held-on-second", since) == 0
    # nothing pulled anywhere: the main engine still lacks it, no ledger recorded it
    assert not engines.holds(engines.main, repository, digest)
    assert all(repo != repository for node in (engines.main, engines.second)
               for repo, _, _ in engines.ledger(node))


def test_an_image_no_node_holds_is_pulled_by_the_node_that_runs_it_into_its_own_ledger(
        engines: TwoEngines, executor: RayExecutor, store: Store, tmp_path: Path,
        registry_anonymous: Registry, docker_client: docker.DockerClient,
        repositories: list[str]) -> None:
    repository, digest = push_runnable(docker_client, registry_anonymous, repositories)
    cat = catalogue(tmp_path, {"held-nowhere": repository})
    registry = stage(engines, cat)
    try:
        first = check(executor, cat, store, registry, "held-nowhere")
        ran = node_of(first)
        other = engines.second if ran == engines.main else engines.main
        assert (first.status, first.reason) == (Status.FAIL, Reason.SHELL_MISSING), \
            first.summary
        assert first.image_digest == digest
        # pulled by digest into the engine of the node that ran it, recorded in its ledger
        assert engines.holds(ran, repository, digest)
        assert not engines.holds(other, repository, digest)
        mine = [(r, d) for r, d, _ in engines.ledger(ran)]
        assert (repository, digest) in mine
        assert all(r != repository for r, _, _ in engines.ledger(other))
        budget = parse_budget(BUDGET).bytes
        assert budget is not None
        assert sum(size for _, _, size in engines.ledger(ran)) <= budget
        image = first.details.get("image") or {}
        assert image.get("pulled") is True, first.details
        # the node's pull and its cache in the metrics the caller's daemon exports
        metrics = exported(registry)
        pulls = {dict(labels)["outcome"]: value for (name, labels), value in metrics.items()
                 if name == "envcheck_registry_pulls_total"
                 and dict(labels)["registry"] == registry_anonymous.host}
        assert pulls == {"ok": 1}
        downloaded = metrics[("envcheck_registry_pull_bytes_total",
                              (("registry", registry_anonymous.host),))]
        assert downloaded > 0
        caches = {dict(labels)["node"]: value for (name, labels), value in metrics.items()
                  if name == "envcheck_image_cache_bytes"}
        assert set(caches) == {ran}  # the node's cache; the caller's engine pulled nothing
        assert 0 < caches[ran] <= budget
        assert sum(size for _, _, size in engines.ledger(ran)) >= caches[ran] > 0
        assert metrics[("envcheck_image_cache_budget_bytes", cache_labels(metrics, ran))
                       ] == budget
        assert metrics[("envcheck_image_cache_misses_total", cache_labels(metrics, ran))] == 1
        # checked again: to the node that holds it now, no pull
        again = check(executor, cat, store, registry, "held-nowhere")
    finally:
        registry.close()
    assert node_of(again) == ran
    assert (again.details.get("image") or {}).get("pulled") is False, again.details
    metrics = exported(registry)
    assert metrics[("envcheck_image_cache_hits_total", cache_labels(metrics, ran))] == 1
    assert [value for (name, labels), value in metrics.items()
            if name == "envcheck_registry_pulls_total"] == [1]  # no second pull


def exported(registry: RegistryImages) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The registry stage's series as the daemon's ``/metrics`` renders them."""
    series = own_registry(lambda: True)
    series.register(RegistrySeries(registry.stats.snapshot))
    text = generate_latest(series).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def cache_labels(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], node: str
                 ) -> tuple[tuple[str, str], ...]:
    [labels] = {labels for name, labels in metrics if name == "envcheck_image_cache_bytes"
                and dict(labels)["node"] == node}
    return labels


def test_each_node_applies_the_budget_to_its_own_engine(
        engines: TwoEngines, executor: RayExecutor, store: Store, tmp_path: Path,
        registry_anonymous: Registry, docker_client: docker.DockerClient,
        repositories: list[str]) -> None:
    repository, digest = push_runnable(docker_client, registry_anonymous, repositories)
    cat = catalogue(tmp_path, {"too-big": repository})
    registry = stage(engines, cat, budget="1KiB")  # smaller than any image
    try:
        result = check(executor, cat, store, registry, "too-big")
    finally:
        registry.close()
    # refused on the node before any byte moved: envcheck's error, never the environment's
    assert (result.status, result.reason) == (Status.ERROR, Reason.IMAGE_CACHE_FULL), \
        result.summary
    assert node_of(result) in (engines.main, engines.second)
    assert not any(engines.holds(node, repository, digest)
                   for node in (engines.main, engines.second))


def test_the_daemon_pulls_ahead_on_the_node_each_check_will_run_on(
        engines: TwoEngines, executor: RayExecutor, store: Store, tmp_path: Path,
        registry_anonymous: Registry, docker_client: docker.DockerClient,
        repositories: list[str]) -> None:
    images = {f"ahead-{i}": push_runnable(docker_client, registry_anonymous, repositories)
              for i in range(2)}
    cat = catalogue(tmp_path, {env_id: repository for env_id, (repository, _) in images.items()})
    envs = {env.id: env for env in cat.environments}
    # the caller's stage over this host's engine, which runs no check: nothing goes there
    registry = RegistryImages.open(docker_client.api, cat,
                                   RegistrySettings(tmp_path / "caller", BUDGET))
    services = build_services(cat, store, registry=registry)
    prefetch = Prefetch(lambda limit: [(envs[i], TERMINAL[0]) for i in sorted(envs)][:limit],
                        lambda: services, threading.Event(), ahead=executor.pull_ahead)
    nodes = (engines.main, engines.second)
    try:
        assert prefetch.once() == 2  # the daemon's pass: both images sent ahead

        def holders(env_id: str) -> list[str]:
            repository, digest = images[env_id]
            return [node for node in nodes if engines.holds(node, repository, digest)]

        wait_for(lambda: all(len(holders(env_id)) == 1 for env_id in images), timeout_s=180,
                 what="each image pulled ahead into one node's engine")
        wait_for(lambda: executor.pulls_ahead.collect(1.0) >= 0
                 and executor.pulls_ahead.pending == 0, timeout_s=60,
                 what="the pulls ahead reported")
        where = {env_id: holders(env_id)[0] for env_id in images}
        for env_id, (repository, digest) in images.items():
            assert (repository, digest) in [(r, d) for r, d, _ in engines.ledger(where[env_id])]
            with pytest.raises(docker.errors.NotFound):  # never into the caller's engine
                docker_client.api.inspect_image(f"{repository}@{digest}")
        assert registry.images is not None and registry.images.cache.ledger.entries() == []
        assert registry.stats.snapshot().prefetches == {"ok": 2}  # as the nodes said
        assert prefetch.once() == 0  # held, or on their way: nothing sent twice
        since = time.time() - 1
        # one at a time, as the daemon's jobs come (two at once on one node of one docker
        # slot: the second would spill to the other node, which would pull, by design)
        results = [result for env_id in sorted(images)
                   for result in executor.run_cycle([envs[env_id]], TERMINAL, new_run_id(),
                                                    services=services)]
    finally:
        registry.close()
    for result in results:
        # each check went to the node its image was pulled ahead on, and pulled nothing
        assert (result.status, result.reason) == (Status.FAIL, Reason.SHELL_MISSING), \
            result.summary
        assert result.image_digest == images[result.env_id][1]
        assert node_of(result) == where[result.env_id]
        assert (result.details.get("image") or {}).get("pulled") is False, result.details
        other = engines.engine2 if where[result.env_id] == engines.main else engines.engine1
        assert created_on(other.client, result.env_id, since) == 0
    snapshot = registry.stats.snapshot()
    assert snapshot.prefetch_used == 2
    assert sum(snapshot.pulls.values()) == 2  # the two pulls ahead, none by the checks

