"""Benchmark: a dataset larger than the image cache, probed through a registry that serves
50 MB/s, as ``envcheck check`` runs it: pulls ahead of the probes against the same dataset
pre-pulled, and against pull-then-validate.

    .venv/bin/python bench/registry_pipeline.py [--images 40] [--min-mb 5] [--max-mb 100]
                                                [--budget-mb 500] [--rate-mb 50]
                                                [--concurrency 2] [--json OUT]

Debian's ``docker-registry`` 2.8 runs on 127.0.0.1 (tests/registryd.py) behind a proxy that
passes at most ``--rate-mb`` MB/s, all connections together (tests/registry_proxy.py's
``ThrottledProxy``, in a process of its own), as a remote registry would. The dataset:
``--images`` images, each the demo's healthy task image (``envcheck-demo/healthy``, on the
engine already: its layers are nobody's pull) plus a layer of its own of random bytes
(incompressible), of sizes spread evenly from ``--min-mb`` to ``--max-mb``, built and pushed to
the registry, then removed from the engine. Each is an environment with ``pull: watch`` named
through the proxy, probed for ``terminal`` and ``dependencies``, ``--concurrency`` at a time,
on envcheck's check cycle (``executors.cycle.run_cycle`` with the services ``envcheck check``
builds), in three ways, one after the other in one run:

A. **pipeline**: the image cache's budget ``--budget-mb`` (the dataset is >= 4x that), and
   ``envcheck check``'s pipeline: the images of the environments not started yet pulled
   ahead (at most 4 waiting, at most half the budget), each environment's image released
   once its probes are done, the least recently used of envcheck's pulls evicted;
B. **pre-pulled**: every image on the engine before the cycle starts (pulled untimed, the
   proxy unthrottled), no budget: the floor, the probes alone;
C. **pull-then-validate**: the same budget, no prefetch: each environment's probe pulls its
   image when it needs a container (released after its probes, as in A).

Reported: wall time of each, A / B (target <= 1.3) and C / B; the pulls, bytes, evictions,
prefetches, the largest the cache held (sampled from the engine all through the cycle: the
own layers of envcheck's pulls of the dataset) against the budget, and the results' statuses
(every probe is expected to pass); the host's busy CPU seconds in each side's window and that
work spread over every core (``cpu_floor_s``), and A against the highest of its floors: that
CPU floor, the registry's transfer at the rate, and B (``pipeline_over_its_floor``). On a host
that runs the registry, the proxy and the engine's extraction of every pull beside the probes,
A cannot end before its CPU floor whatever it overlaps. The runs share a machine with
whatever else runs on it: the load is recorded.

Cleans up after itself: every image of the dataset removed from the engine, the registry's
storage deleted. Exit 0 whatever the figures; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
from common import ROOT, git_head, host

sys.path.insert(0, str(ROOT))

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.executors.pipeline import ImagePipeline
from envcheck.kinds.collaborators import build_services
from envcheck.registry.cache import Budget, ImageCache
from envcheck.registry.credentials import RegistryCredentials
from envcheck.registry.fleet import CHECK_PREFETCH_BYTES, RegistryImages, prefetch_bound
from envcheck.registry.images import LocalImages
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.pull import CACHE_REPOSITORY, Puller, PullTarget, cache_tag
from envcheck.registry.sizes import ManifestSizes
from envcheck.registry.watch import TagWatcher
from envcheck.sandbox.docker import DockerRuntime
from envcheck.store import open_store
from tests.registry_images import push_built
from tests.registryd import Registry

BASE = "envcheck-demo/healthy:latest"
KINDS = [ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES]
TARGET_RATIO = 1.3
MB = 10**6


def _serve(conn: Any, registry_port: int, rate: Any) -> None:
    """The child's side of :class:`ProxyProcess`: the proxy, its rate read from ``rate``."""
    from tests.registry_proxy import ThrottledProxy

    class Shared(ThrottledProxy):
        rate_bps = property(lambda self: rate.value or None, lambda self, value: None)

    proxy = Shared(registry_port, None)
    conn.send(proxy.port)
    threading.Event().wait()


class ProxyProcess:
    """The throttling proxy (tests/registry_proxy.py's ``ThrottledProxy``) in a process of its
    own, as a remote registry's link would be: in the bench's process its threads, copying
    2 GB in 64 KiB chunks, would share one interpreter lock with envcheck's cycle (side A and
    C only: B's images are pulled before its clock starts). ``rate_bps`` None: unthrottled."""

    def __init__(self, registry_port: int, rate_bps: float | None) -> None:
        context = multiprocessing.get_context("spawn")
        self._rate = context.Value("d", rate_bps or 0.0)
        parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, registry_port, self._rate),
                                        daemon=True)
        self._process.start()
        if not parent.poll(60):
            self.close()
            raise RuntimeError("the proxy's process did not start")
        self.host = f"127.0.0.1:{parent.recv()}"

    @property
    def rate_bps(self) -> float | None:
        return float(self._rate.value) or None

    @rate_bps.setter
    def rate_bps(self, value: float | None) -> None:
        self._rate.value = value or 0.0

    def close(self) -> None:
        self._process.terminate()
        self._process.join(10)


def sizes(count: int, low: int, high: int) -> list[int]:
    """``count`` sizes spread evenly from ``low`` to ``high`` bytes, interleaved so large
    and small alternate along the dataset."""
    step = (high - low) / max(count - 1, 1)
    even = [int(low + i * step) for i in range(count)]
    return [even[(i * 7) % count] for i in range(count)] if count % 7 else even


def build_and_push(client: docker.DockerClient, registry: Registry, repository: str,
                   index: int, size: int) -> str:
    """The base plus a layer of ``size`` random bytes, pushed as ``repository:v1``, removed
    from the engine; the registry's digest."""
    return push_built(client, registry, repository, "v1",
                      f"FROM {BASE}\nCOPY blob.bin /opt/dataset/blob-{index}.bin\n",
                      {"blob.bin": os.urandom(size)})


def catalogue_text(images: list[str]) -> str:
    envs = "\n".join(f"      - {{ id: task-{i:03d}, image: '{image}' }}"
                     for i, image in enumerate(images))
    return f"""version: 1
suites:
  dataset:
    description: a dataset of task images in a registry, larger than the image cache
    defaults:
      pull: watch
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      limits: {{ memory_mb: 512, cpus: 1.0, pids: 256 }}
      timeouts: {{ start_s: 30, shell_s: 5, exec_s: 60 }}
      dependencies:
        python: {{ pytest: ">=7.2,<8", pluggy: ">=1.0", packaging: ">=23" }}
        debian: {{ python3: ">= 3.11", git: ">= 1:2.39", tmux: ">= 3.3" }}
        imports: [pytest]
    environments:
{envs}
"""


def stage(client: docker.DockerClient, data: Path, budget: int | None,
          prefetch_count: int) -> RegistryImages:
    """The registry stage as ``RegistryImages.open`` builds it, with a ledger of its own
    that adopts nothing (the engine is shared with whatever else runs here)."""
    credentials = RegistryCredentials({})
    watcher = TagWatcher()
    engine_id = str(client.info()["ID"])
    ledger = SqliteLedger(ledger_path(data, engine_id), engine_id)
    puller = Puller(client.api)
    cache = ImageCache(client.api, ledger, Budget(bytes=budget) if budget else None,
                       stats=puller.stats)
    images = LocalImages(client.api, puller, cache, sizes=ManifestSizes(watcher, credentials),
                         prefetch_count=prefetch_count,
                         prefetch_bytes=prefetch_bound(CHECK_PREFETCH_BYTES, cache))
    return RegistryImages(watcher, credentials, images)


class Held:
    """The own bytes (over the base) of envcheck's pulls of the dataset on the engine,
    sampled every ``every_s`` in a thread of its own: the largest seen."""

    def __init__(self, client: docker.DockerClient, marker: str, base_size: int,
                 every_s: float = 0.25) -> None:
        self.client, self.marker, self.base_size, self.every_s = client, marker, base_size, every_s
        self.most = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now(self) -> int:
        return sum(max(int(img.get("Size") or 0) - self.base_size, 0)
                   for img in self.client.api.images()
                   if any(str(t).startswith(f"{CACHE_REPOSITORY}/") and self.marker in str(t)
                          for t in img.get("RepoTags") or []))

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(docker.errors.DockerException):
                self.most = max(self.most, self.now())
            self._stop.wait(self.every_s)

    def __enter__(self) -> Held:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def remove_pulls(client: docker.DockerClient, targets: list[PullTarget]) -> None:
    for target in targets:
        name, tag = cache_tag(target)
        for ref in (f"{name}:{tag}", target.reference):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                client.api.remove_image(ref, force=True)


def cycle(name: str, catalogue: Catalogue, runtime: DockerRuntime,
          client: docker.DockerClient, work: Path, held: Held, *, budget: int | None,
          prefetch_count: int, pipeline: bool, prepull: list[PullTarget] | None = None,
          proxy: ProxyProcess | None = None) -> dict[str, Any]:
    data = work / name
    data.mkdir()
    registry = stage(client, data, budget, prefetch_count)
    if prepull is not None:  # untimed, unthrottled: the floor starts with every image here
        assert proxy is not None and registry.images is not None
        rate, proxy.rate_bps = proxy.rate_bps, None
        try:
            for target in prepull:
                registry.images.ensure(target.repository, target.digest,
                                       time.monotonic() + 600)
        finally:
            proxy.rate_bps = rate
    envs = list(catalogue.environments)
    with open_store(f"sqlite:///{data / 'envcheck.db'}") as store:
        services: dict[type[Any], object] = dict(build_services(catalogue, store,
                                                                registry=registry))
        if pipeline:
            services[ImagePipeline] = ImagePipeline(registry, envs, KINDS)
        held.most = 0
        load = os.getloadavg()[0]
        busy = host_busy_s()
        started = time.perf_counter()
        with held:
            results = run_cycle(envs, KINDS, runtime, new_run_id(), None, 2, services)
        wall = time.perf_counter() - started
        busy = host_busy_s() - busy
    registry.close()
    stats = registry.stats.snapshot()
    firsts = list({r.env_id: r for r in reversed(results)}.values())
    return {
        "side": name, "wall_s": round(wall, 1), "load_at_start": round(load, 1),
        # the host's CPU seconds in the window (every process: the engine's pulls, the
        # registry and the proxy, the probes' containers), and what they take on all its
        # cores at once: no schedule of this work on this host ends sooner
        "host_cpu_s": round(busy, 1), "cpu_floor_s": round(busy / (os.cpu_count() or 1), 1),
        "statuses": dict(Counter(f"{r.status}/{r.reason}" for r in results)),
        "pulls": sum(stats.pulls.values()),
        "pulled_mb": round(sum(stats.pull_bytes.values()) / MB, 1),
        # each environment's pull, as its first result records it (its kinds share it)
        "pull_s_in_results": round(sum(_pull_s(r) for r in firsts), 1),
        "envs_that_pulled": sum(1 for r in firsts if _image(r).get("pulled") is True),
        "prefetches": dict(stats.prefetches), "prefetch_used": stats.prefetch_used,
        "evictions": stats.evictions, "held_max_mb": round(held.most / MB, 1),
        "budget_mb": round(budget / MB) if budget else None,
    }


def host_busy_s() -> float:
    """The host's busy CPU seconds since boot, all cores (``/proc/stat``: every state but
    idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _image(result: ProbeResult) -> dict[str, Any]:
    image = result.details.get("image") if isinstance(result.details, dict) else None
    return image if isinstance(image, dict) else {}


def _pull_s(result: ProbeResult) -> float:
    return float(_image(result).get("pull_s") or 0.0)


@contextlib.contextmanager
def dataset(client: docker.DockerClient, registry: Registry, proxy: ProxyProcess,
            count: int, low: int, high: int, work: Path
            ) -> Iterator[tuple[Catalogue, list[PullTarget], int]]:
    """Built, pushed, named through the proxy: (catalogue, targets, total bytes)."""
    repo_prefix = f"bench-pipeline/r{os.getpid()}"
    spread = sizes(count, low, high)
    targets: list[PullTarget] = []
    images: list[str] = []
    started = time.perf_counter()
    try:
        for i, size in enumerate(spread):
            repo = f"{repo_prefix}/task-{i:03d}"
            digest = build_and_push(client, registry, repo, i, size)
            targets.append(PullTarget(f"{proxy.host}/{repo}", digest))
            images.append(f"{proxy.host}/{repo}:v1")
        print(f"dataset: {count} images, {sum(spread) / MB:.0f} MB of their own layers, "
              f"built and pushed in {time.perf_counter() - started:.0f} s", flush=True)
        path = work / "dataset.yaml"
        path.write_text(catalogue_text(images), encoding="utf-8")
        yield load_catalogue([path]), targets, sum(spread)
    finally:
        remove_pulls(client, targets)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--min-mb", type=int, default=5)
    parser.add_argument("--max-mb", type=int, default=100)
    parser.add_argument("--budget-mb", type=int, default=500)
    parser.add_argument("--rate-mb", type=float, default=50.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    client = docker.from_env(timeout=600)
    base_size = int(client.api.inspect_image(BASE)["Size"])
    registry = Registry("anonymous")
    proxy = ProxyProcess(registry.port, args.rate_mb * MB)
    runtime = DockerRuntime.from_env()
    budget = args.budget_mb * MB
    sides: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="envcheck-bench-pipeline-") as tmp, \
                dataset(client, registry, proxy, args.images, args.min_mb * MB,
                        args.max_mb * MB, Path(tmp)) as (catalogue, targets, total):
            work = Path(tmp)
            held = Held(client, f"/bench-pipeline/r{os.getpid()}/", base_size)
            for name, options in (
                    ("A pipeline", {"budget": budget, "prefetch_count": 4, "pipeline": True}),
                    ("C pull-then-validate", {"budget": budget, "prefetch_count": 0,
                                              "pipeline": True}),
                    ("B pre-pulled", {"budget": None, "prefetch_count": 0, "pipeline": False,
                                      "prepull": targets, "proxy": proxy})):
                side = cycle(name.split()[0], catalogue, runtime, client, work, held,
                             **options)  # type: ignore[arg-type]
                side["side"] = name
                sides.append(side)
                print(json.dumps(side), flush=True)
                remove_pulls(client, targets)
    finally:
        runtime.close()
        proxy.close()
        registry.close()  # its storage goes with it
    by = {s["side"][0]: s for s in sides}
    report = {
        "bench": "registry_pipeline", "commit": git_head(), "host": host(),
        "images": args.images, "dataset_mb": round(total / MB), "budget_mb": args.budget_mb,
        "rate_mb_s": args.rate_mb, "kinds": [str(k) for k in KINDS], "sides": sides,
        "pipeline_over_prepulled": round(by["A"]["wall_s"] / by["B"]["wall_s"], 2),
        "no_prefetch_over_prepulled": round(by["C"]["wall_s"] / by["B"]["wall_s"], 2),
        "pipeline_over_no_prefetch": round(by["A"]["wall_s"] / by["C"]["wall_s"], 2),
        "target_ratio": TARGET_RATIO,
        # the floors no pipeline goes under on this host: the registry's transfer at the
        # rate, and the CPU work side A did spread over every core
        "transfer_floor_s": round(total / (args.rate_mb * MB), 1),
        "pipeline_over_its_floor": round(by["A"]["wall_s"] / max(
            by["A"]["cpu_floor_s"], total / (args.rate_mb * MB), by["B"]["wall_s"]), 2),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "sides"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    broken = [s for s in sides if any(not k.startswith("pass/") for k in s["statuses"])]
    if broken:
        print("probes that did not pass:", [s["statuses"] for s in broken])
    return 0


if __name__ == "__main__":
    sys.exit(main())
