"""The registry stage's series on a real daemon's ``/metrics``: a watched tiny image in the
real test registry, looked up on the ``image`` kind's schedule, the looks counted by registry
and outcome between two scrapes over HTTP; a registry answering 429 (through the fault
proxy) shows its refusals and the quota its headers say is left. A daemon whose catalogue
watches nothing exports none of them."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import docker
import pytest

from tests.registry_images import new_repository, push_tiny
from tests.registry_proxy import RegistryProxy, too_many_requests
from tests.registryd import Registry
from tests.test_daemon import HEALTHY, Daemons, daemons, write_catalogue  # noqa: F401

pytestmark = pytest.mark.docker

LOOKS = "envcheck_registry_looks_total"


def watched_catalogue(path: Path, envs: dict[str, str]) -> Path:
    """``envs`` (id -> image) watched, the ``image`` kind alone, every second."""
    body = "".join(f"      - id: {env_id}\n        image: \"{image}\"\n"
                   for env_id, image in envs.items())
    path.write_text(textwrap.dedent("""\
        version: 1
        suites:
          watched:
            description: images envcheck follows in a registry
            defaults:
              pull: watch
              workdir: /workspace
              user: agent
              tools: [git, python3]
              schedules: { image: 1s, terminal: null, dependencies: null, tests: null,
                           datasource: null, jitter_s: 0 }
            environments:
        """) + body, encoding="utf-8")
    return path


def looks(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float],
          registry: str) -> dict[str, float]:
    """The look counters of ``registry`` by outcome."""
    return {dict(labels)["outcome"]: value for (name, labels), value in metrics.items()
            if name == LOOKS and dict(labels).get("registry") == registry}


def test_the_daemon_exports_its_tag_looks_by_registry_and_outcome(
        daemons: Daemons, tmp_path: Path,  # noqa: F811
        registry_anonymous: Registry, docker_client: docker.DockerClient) -> None:
    reg = registry_anonymous
    repository = new_repository("envcheck-metrics")
    push_tiny(docker_client, reg, repository, "v1")
    path = watched_catalogue(tmp_path / "watched.yaml", {
        "watched-ok": f"{reg.host}/{repository}:v1",
        "watched-missing": f"{reg.host}/{repository}:never-pushed"})
    d = daemons.start(path)
    d.wait("two ok looks and a missing tag's",
           lambda: looks(d.metrics(), reg.host).get("ok", 0) >= 2
           and looks(d.metrics(), reg.host).get("image_not_found", 0) >= 1)
    first = looks(d.metrics(), reg.host)
    d.wait("the ok looks growing", lambda: looks(d.metrics(), reg.host)["ok"] > first["ok"])
    metrics = d.metrics()
    seconds = {dict(labels)["outcome"]: value for (name, labels), value in metrics.items()
               if name == "envcheck_registry_look_seconds_total"}
    assert seconds["ok"] > 0
    # nothing pulled (the image kind never needs a container): the cache's series, at zero,
    # one cache: the daemon's own engine's
    local = (("host", socket.gethostname()), ("node", "local"))
    assert metrics[("envcheck_image_cache_misses_total", local)] == 0
    assert metrics[("envcheck_image_cache_bytes", local)] == 0
    assert [key for key in metrics if key[0] == "envcheck_image_cache_bytes"] == [
        ("envcheck_image_cache_bytes", local)]
    assert not [key for key in metrics if key[0] == "envcheck_registry_pulls_total"]
    assert d.stop() == 0


def test_a_daemon_watching_no_registry_exports_no_registry_series(
        daemons: Daemons, tmp_path: Path) -> None:  # noqa: F811

    path = tmp_path / "local.yaml"
    write_catalogue(path, [HEALTHY])
    d = daemons.start(path)
    d.wait("a probe result", lambda: bool(d.events("probe result")))
    text = d.get("/metrics").text
    assert "envcheck_up 1.0" in text
    assert "envcheck_registry_" not in text and "envcheck_image_cache_" not in text
    assert d.stop() == 0


def test_a_rate_limited_registry_shows_its_refusals_and_the_quota_left(
        daemons: Daemons, tmp_path: Path,  # noqa: F811
        registry_proxy: RegistryProxy) -> None:
    registry_proxy.answer(*too_many_requests(retry_after="1", remaining="0;w=21600"))
    path = watched_catalogue(tmp_path / "watched.yaml", {
        "limited": f"{registry_proxy.host}/envcheck-metrics/limited:v1"})
    d = daemons.start(path)
    d.wait("a rate-limited look",
           lambda: looks(d.metrics(), registry_proxy.host).get("registry_rate_limited", 0) >= 1)
    metrics = d.metrics()
    assert metrics[("envcheck_registry_rate_remaining",
                    (("registry", registry_proxy.host),))] == 0
    assert "ok" not in looks(metrics, registry_proxy.host)
    assert d.stop() == 0
