"""What a Ray node's registry stage did, carried back to the caller and exported: each growth of
a node process's counters handed on once, folded into the caller's counters (a registry's
pulls wherever they ran) and into the node's cache figures, and rendered as the daemon's
``/metrics`` renders them (pure counters; the cluster itself is tests/test_ray_images.py's)."""

from __future__ import annotations

import socket

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from envcheck.metrics.images import RegistrySeries
from envcheck.registry.stats import RegistryStats

REG = "127.0.0.1:5000"
NODE_A, NODE_B = "a1" * 28, "b2" * 28


def rendered(stats: RegistryStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RegistrySeries(stats.snapshot))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def cache_of(node: str, host: str) -> tuple[tuple[str, str], ...]:
    return (("host", host), ("node", node))


def test_each_growth_is_handed_on_once() -> None:
    node = RegistryStats()
    node.pulled(REG, "ok", 1.5, 1000)
    first = node.delta()  # all since the process started
    assert first.pulls == {(REG, "ok"): 1} and first.pull_bytes == {REG: 1000}
    assert first.measured_at is None  # nothing measured yet: no cache figure to hand on
    node.pulled(REG, "ok", 0.5, 300)
    node.pulled(REG, "registry_unreachable", 2.0, 0)
    node.evicted(400)
    node.looked_up(hit=True)
    node.cache(900, 2000)
    second = node.delta()
    assert second.pulls == {(REG, "ok"): 1, (REG, "registry_unreachable"): 1}
    assert second.pull_bytes == {REG: 300}
    assert second.pull_seconds == {(REG, "ok"): 0.5, (REG, "registry_unreachable"): 2.0}
    assert (second.evictions, second.evicted_bytes, second.hits) == (1, 400, 1)
    assert (second.cache_bytes, second.budget_bytes) == (900, 2000)  # gauges: as they are
    third = node.delta()
    assert (third.pulls, third.pull_bytes, third.evictions, third.hits) == ({}, {}, 0, 0)
    assert node.snapshot().pulls == {(REG, "ok"): 2, (REG, "registry_unreachable"): 1}


def test_a_node_s_work_shows_in_the_callers_metrics_per_node() -> None:
    caller = RegistryStats()
    caller.looked(REG, "ok", 0.01)  # the caller looks at tags; the nodes pull
    caller.cache(0, 5000)  # measured at its start: its own engine holds nothing of envcheck's
    a1, a2, b = RegistryStats(), RegistryStats(), RegistryStats()  # two processes on node A
    a1.pulled(REG, "ok", 2.0, 1500)
    a1.looked_up(hit=False)
    a1.cache(1600, 5000)
    a2.looked_up(hit=True)
    a2.evicted(700)
    a2.cache(900, 5000)  # measured after a1's
    b.pulled(REG, "ok", 1.0, 800)
    b.looked_up(hit=False)
    b.cache(800, 5000)
    late = a1.delta()
    caller.fold(NODE_A, "host-a", a2.delta())
    caller.fold(NODE_A, "host-a", late)  # an older measure arriving later changes no gauge
    caller.fold(NODE_B, "host-b", b.delta())
    metrics = rendered(caller)
    # a registry's pulls, wherever they ran
    assert metrics[("envcheck_registry_pulls_total", (("outcome", "ok"), ("registry", REG)))] == 2
    assert metrics[("envcheck_registry_pull_bytes_total", (("registry", REG),))] == 2300
    assert metrics[("envcheck_registry_pull_seconds_total",
                    (("outcome", "ok"), ("registry", REG)))] == 3.0
    assert metrics[("envcheck_registry_looks_total", (("outcome", "ok"), ("registry", REG)))] == 1
    # each node's cache: bytes against its budget, its evictions, hits and misses
    a, bb = cache_of(NODE_A, "host-a"), cache_of(NODE_B, "host-b")
    assert metrics[("envcheck_image_cache_bytes", a)] == 900
    assert metrics[("envcheck_image_cache_bytes", bb)] == 800
    assert metrics[("envcheck_image_cache_budget_bytes", a)] == 5000
    assert metrics[("envcheck_image_cache_evictions_total", a)] == 1
    assert metrics[("envcheck_image_cache_evicted_bytes_total", a)] == 700
    assert (metrics[("envcheck_image_cache_hits_total", a)],
            metrics[("envcheck_image_cache_misses_total", a)]) == (1, 1)
    assert metrics[("envcheck_image_cache_misses_total", bb)] == 1
    # the caller's own engine did nothing while the nodes pulled: not a cache of the fleet's
    assert not [key for key in metrics if ("node", "local") in key[1]]


def test_a_local_daemon_exports_its_own_cache() -> None:
    stats = RegistryStats()
    stats.pulled(REG, "ok", 1.0, 100)
    stats.looked_up(hit=False)
    stats.cache(100, 1000)
    metrics = rendered(stats)
    local = cache_of("local", socket.gethostname())
    assert metrics[("envcheck_image_cache_bytes", local)] == 100
    assert metrics[("envcheck_image_cache_budget_bytes", local)] == 1000
    assert metrics[("envcheck_image_cache_misses_total", local)] == 1
    assert [key[1] for key in metrics if key[0] == "envcheck_image_cache_bytes"] == [local]
