"""Pulls ahead of the probes, on the real engine and the real test registry, with tiny images:

- ``envcheck check``'s cycle over watched images that add up to more than the image cache's
  budget runs as a pipeline (the images of the environments not started yet pulled ahead,
  each environment's image released once its probes are done, the least recently used of
  envcheck's pulls evicted) and never holds more than the budget: the engine's images are
  sampled all through the cycle;
- the daemon's scheduler pulls the image of a due probe before its slot: the probe then finds
  it local (no pull of its own, no blob asked of the registry after the prefetch).

The probes run ``terminal`` on images of one file (no shell: each fails to start at once),
which is all a pull needs to be asked for; what they find is not what is tested here.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pytest
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress, TextColumn

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.cli.pulls import track_pulls
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.executors.local import LocalExecutor
from envcheck.executors.pipeline import ImagePipeline
from envcheck.feed.assess import StoreAssessment
from envcheck.kinds import Verdict, load_probe
from envcheck.kinds.collaborators import build_services
from envcheck.registry.cache import Budget
from envcheck.registry.credentials import RegistryCredentials
from envcheck.registry.fleet import RegistryImages
from envcheck.registry.pull import CACHE_REPOSITORY
from envcheck.registry.sizes import ManifestSizes
from envcheck.registry.watch import TagWatcher
from envcheck.sandbox.base import Sandbox, SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store, open_store
from tests.polling import wait_for
from tests.pulls import MB, Pulled, local_images, push_sized, target
from tests.registry_images import new_repository
from tests.registryd import Registry

pytestmark = pytest.mark.docker

T = ProbeKind.TERMINAL


def watched_catalogue(path: Path, images: list[str], schedules: str = "") -> Catalogue:
    envs = "\n".join(f"      - {{ id: e{i:02d}, image: '{image}' }}"
                     for i, image in enumerate(images))
    path.write_text(f"""version: 1
suites:
  s:
    defaults:
      pull: watch
      workdir: /workspace
      user: agent
      tools: [git]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ dependencies: null, tests: null, datasource: null{schedules} }}
    environments:
{envs}
""", encoding="utf-8")
    return load_catalogue([path])


def stage(client: docker.DockerClient, data: Path, budget: int | None, *,
          prefetch_count: int = 4, prefetch_bytes: int | None = None) -> RegistryImages:
    """The registry stage over the real engine with its own ledger (no adoption of what
    other tests on this shared engine pulled), envcheck's own 2-minute minimum age."""
    credentials = RegistryCredentials({})
    watcher = TagWatcher()
    images = local_images(client, data, Budget(bytes=budget) if budget else None,
                          min_age_s=120.0, sizes=ManifestSizes(watcher, credentials),
                          prefetch_count=prefetch_count, prefetch_bytes=prefetch_bytes)
    return RegistryImages(watcher, credentials, images)


class EngineSampler:
    """The bytes of envcheck's pulls of ``repository`` the engine holds, sampled in a thread
    of its own until stopped: the largest seen."""

    def __init__(self, client: docker.DockerClient, repository: str) -> None:
        self.client = client
        self.prefix = f"{CACHE_REPOSITORY}/"
        self.repository = repository
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def held(self) -> int:
        return sum(int(image.get("Size") or 0) for image in self.client.api.images()
                   if any(str(tag).startswith(self.prefix) and self.repository in str(tag)
                          for tag in image.get("RepoTags") or []))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.held())
            self.samples += 1
            self._stop.wait(0.05)

    def __enter__(self) -> EngineSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.most = max(self.most, self.held())


class Gated:
    """The real runtime, but the sandbox of ``env_id`` waits until ``until()`` holds (a
    slot kept busy: what the pipeline does meanwhile is what a slow probe lets it do)."""

    def __init__(self, runtime: DockerRuntime, env_id: str, until: Callable[[], object]
                 ) -> None:
        self.runtime, self.env_id, self.until = runtime, env_id, until

    def sandbox(self, spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        if spec.env_id == self.env_id:
            wait_for(self.until, timeout_s=120, what="a pull ahead of its environment")
        return self.runtime.sandbox(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)


@pytest.fixture
def pulled(docker_client: docker.DockerClient) -> Iterator[Pulled]:
    done = Pulled(docker_client)
    yield done
    done.remove_all()


def test_check_over_more_than_the_budget_pulls_ahead_evicts_and_never_holds_more(
        docker_client: docker.DockerClient, registry_anonymous: Registry, pulled: Pulled,
        runtime: DockerRuntime, tmp_path: Path) -> None:
    reg, count, size, budget = registry_anonymous, 10, MB, 6 * MB  # 10 MB of images, 6 of room
    repo = new_repository("envcheck-pipeline")
    digests = [push_sized(docker_client, reg, repo, f"v{i}", size) for i in range(count)]
    targets = [target(reg, repo, d) for d in digests]
    pulled.add(*targets)
    catalogue = watched_catalogue(tmp_path / "c.yaml",
                                  [f"{reg.host}/{repo}:v{i}" for i in range(count)])
    registry = stage(docker_client, tmp_path / "data", budget,
                     prefetch_bytes=budget // 2)
    pipeline = ImagePipeline(registry, catalogue.environments, [T])
    services = {RegistryImages: registry, ImagePipeline: pipeline}
    progress = Progress(TextColumn("{task.fields[what]}"), MofNCompleteColumn(),
                        TextColumn("{task.description}"), console=Console(file=io.StringIO()))
    track_pulls(progress, services)  # envcheck check's second line: the pulls
    mark = reg.mark()
    try:
        with EngineSampler(docker_client, repo) as sampler:
            # one slot, kept busy by the first environment until an image is pulled ahead
            gated = Gated(runtime, catalogue.environments[0].id,
                          lambda: registry.stats.snapshot().prefetches.get("ok"))
            results = run_cycle(catalogue.environments, [T], gated,  # type: ignore[arg-type]
                                new_run_id(), concurrency=1, services=services)
    finally:
        registry.close()

    assert sampler.samples > 1
    assert 0 < sampler.most <= budget  # never more than the budget on the engine
    images = [r.details["image"] for r in results]
    assert [r.image_digest for r in results] == digests  # each probed on its tag's digest
    assert all(i["local_id"].startswith("sha256:") for i in images)  # every one made local
    # some were pulled ahead of their environment: its probe found the image local (or
    # waited for the pull under way rather than pulling it again)
    assert any(i["pulled"] is False for i in images)
    stats = registry.stats.snapshot()
    assert stats.prefetches.get("ok", 0) >= 1 and stats.prefetch_used >= 1
    assert stats.evictions >= count - budget // size  # the rest made room for the others
    counts = reg.counts(since=mark, repository=repo)
    assert counts["head_manifest"] == count  # one look per tag, the pipeline's or the probe's
    [line] = [t for t in progress.tasks if t.fields["what"] == "pulls"]
    assert (line.completed, line.total) == (count, count)  # every image of the cycle local
    assert f"{stats.evictions} evicted" in line.description and "pulled" in line.description
    assert pulled.present(targets[-1]) and not pulled.present(targets[0])  # LRU went first


def seed(store: Store, catalogue: Catalogue, env_id: str) -> None:
    """A terminal result a moment ago: its next one is due an interval after it."""
    store.sync_suites(catalogue.suites)
    store.sync_environments(catalogue.environments)
    result = load_probe(T).result(catalogue.environment(env_id),
                                  Verdict(Status.PASS, Reason.OK, "seeded"), 0.01, None)
    result = replace(result, started_at=datetime.now(UTC) - timedelta(seconds=1))
    run_id = store.start_run("seed", [])
    store.record(run_id, result)
    store.finish_run(run_id)


def newest(store: Store, env_id: str) -> ProbeResult | None:
    found = [r for r in store.latest_results([env_id], [T]) if r.summary != "seeded"]
    return found[0] if found else None


def test_the_scheduler_pulls_a_due_probes_image_before_its_slot(
        docker_client: docker.DockerClient, registry_anonymous: Registry, pulled: Pulled,
        runtime: DockerRuntime, tmp_path: Path) -> None:
    reg = registry_anonymous
    repo = new_repository("envcheck-prefetch")
    digest = push_sized(docker_client, reg, repo, "v1", MB)
    wanted = target(reg, repo, digest)
    pulled.add(wanted)
    catalogue = watched_catalogue(tmp_path / "c.yaml", [f"{reg.host}/{repo}:v1"],
                                  ", terminal: 10m")
    env_id = catalogue.environments[0].id
    registry = stage(docker_client, tmp_path / "data", 50 * MB)
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as store:
        seed(store, catalogue, env_id)  # its terminal probe is due ten minutes from now
        scheduler = ProbeScheduler(
            catalogue, LocalExecutor(runtime), store, window_s=3600.0,
            services=lambda cat, st: build_services(cat, st, registry=registry),
            assessment=StoreAssessment(store), prefetch_interval_s=0.2,
            prefetch_horizon_s=3600.0)
        scheduler.start()
        try:
            # ahead of its slot: pulled by the prefetch, no probe has asked for it yet
            wait_for(lambda: registry.stats.snapshot().prefetches.get("ok"), timeout_s=120,
                     what="the prefetch of the due probe's image")
            assert pulled.present(wanted) and pulled.tagged(wanted)
            assert newest(store, env_id) is None
            assert registry.images is not None and registry.images.ahead == [wanted]
            mark = reg.mark()
            assert scheduler.enqueue_now(env_id, T)  # its slot
            result = wait_for(lambda: newest(store, env_id), timeout_s=120,
                              what="the terminal probe's result")
        finally:
            scheduler.stop(grace_s=30)
            registry.close()
    image = result.details["image"]
    assert (result.image_digest, image["digest"]) == (digest, digest)
    assert image["pulled"] is False and image["pull_s"] == 0.0  # found local: no wait
    stats = registry.stats.snapshot()
    assert stats.prefetch_used == 1 and stats.misses == 0
    assert sum(n for (_, outcome), n in stats.pulls.items() if outcome == "ok") == 1
    counts = reg.counts(since=mark, repository=repo)
    assert counts["get_blob"] == 0 and counts["get_manifest"] == 0  # nothing pulled at its slot


def test_prefetch_skips_an_image_already_ahead_and_stops_at_its_count(
        docker_client: docker.DockerClient, registry_anonymous: Registry, pulled: Pulled,
        tmp_path: Path) -> None:
    """The bound the scheduler and the pipeline lean on: at most ``prefetch_count`` images
    wait unused, each pulled once however often it is asked for."""
    reg = registry_anonymous
    repo = new_repository("envcheck-prefetch")
    targets = [target(reg, repo, push_sized(docker_client, reg, repo, f"v{i}", MB // 4))
               for i in range(3)]
    pulled.add(*targets)
    registry = stage(docker_client, tmp_path / "data", None, prefetch_count=2)
    images = registry.images
    assert images is not None
    try:
        first = images.prefetch(targets)
        assert len(first) == 2 and all(f.result(timeout=120) for f in first)
        assert images.prefetch(targets) == []  # two wait unused: the third waits its turn
        assert not pulled.present(targets[2])
        used = images.ensure(targets[0].repository, targets[0].digest, time.monotonic() + 60)
        assert used.pulled is False
        [third] = images.prefetch(targets)
        assert third.result(timeout=120) is not None and pulled.present(targets[2])
    finally:
        registry.close()
