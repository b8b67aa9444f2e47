"""A local Ray cluster of two nodes (127.0.0.1 only), each with a Docker engine of its own, for
the tests of images envcheck pulls on Ray (tests/test_ray_images.py).

Each node's engine is a ``dockerd`` of the test's (tests/second_engine.py: its own socket and
data root) named by ``DOCKER_HOST`` in that node's environment. Neither is this host's shared
engine: a node's cache evicts envcheck's pulls on its engine to keep its budget, and this
host's engine holds other tests' pulls. Each node has its own data directory
(``ENVCHECK_DATA_DIR``), where its ledger lives under its engine's ID. The images live in the
real test registry (tests/registryd.py): tiny ones, a user, ``sleep`` with its C library and a
file of their own, so that a sandbox starts on them (the terminal probe then fails on the
missing shell: a verdict on the image, given by whichever engine ran it).
"""

from __future__ import annotations

import os

# Before Ray is imported (it reads these once): every Ray address on loopback, no usage report.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_USAGE_STATS_REPORT_URL"] = "http://127.0.0.1:9/"

import io
import sqlite3
import tarfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

try:
    import ray
except ImportError as exc:  # the ray extra belongs to the test set-up: fail, never skip
    raise ImportError("tests/ray_engines.py needs the ray extra: "
                      "ENVCHECK_EXTRAS=dev,dashboard,ray scripts/setup.sh") from exc

from ray.cluster_utils import Cluster

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.base import RayOptions
from envcheck.executors.cycle import new_run_id
from envcheck.executors.ray import RayExecutor
from envcheck.kinds.collaborators import build_services
from envcheck.registry.fleet import RegistryImages, RegistrySettings
from envcheck.registry.ledger import ledger_path
from envcheck.sandbox.labels import LABEL_ENV
from envcheck.store import Store, open_store
from tests.registry_images import new_repository
from tests.registryd import Registry
from tests.second_engine import SecondEngine, second_engine
from tests.test_ray import _environ, _node_args

BUDGET = "64MiB"  # per node: several tiny images
TERMINAL = [ProbeKind.TERMINAL]
# sleep and what it loads: a sandbox's keep-alive (``sleep infinity``) runs on the image
_RUNTIME_FILES = {"bin/sleep": "/bin/sleep",
                  "lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
                  "lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2"}


@dataclass
class TwoEngines:
    cluster: Any
    main: str  # node id of the head, on the first engine
    second: str  # node id of the other node, on the second engine
    engine1: SecondEngine
    engine2: SecondEngine
    data: dict[str, Path]  # node id -> its data directory
    engine_ids: dict[str, str]  # node id -> its engine's ID (docker info)
    clients: dict[str, docker.DockerClient]  # node id -> its engine

    def ledger(self, node: str) -> list[tuple[str, str, int]]:
        """(repository, digest, size) of every pull the node's ledger recorded."""
        path = ledger_path(self.data[node], self.engine_ids[node])
        if not path.exists():
            return []
        with sqlite3.connect(path, timeout=10) as db:
            rows = db.execute("SELECT repository, digest, size_bytes FROM pulls").fetchall()
        return [(str(r), str(d), int(s)) for r, d, s in rows]

    def holds(self, node: str, repository: str, digest: str) -> bool:
        try:
            attrs = self.clients[node].api.inspect_image(f"{repository}@{digest}")
        except docker.errors.NotFound:
            return False
        return any(str(d).endswith(digest) for d in attrs.get("RepoDigests") or [])


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoEngines]:
    home = tmp_path_factory.mktemp("ray-home")  # Ray's usage module finds a config here
    (home / "ray_bootstrap_config.yaml").write_text("{}\n", encoding="utf-8")
    data_main, data_second = (tmp_path_factory.mktemp("data-main"),
                              tmp_path_factory.mktemp("data-second"))
    with second_engine() as engine1, second_engine() as engine2:
        cluster = Cluster(shutdown_at_exit=True)
        try:
            with _environ({"HOME": str(home), "DOCKER_HOST": engine1.host,
                           "ENVCHECK_DATA_DIR": str(data_main)}):
                head = cluster.add_node(**_node_args({"docker": 1}))
            with _environ({"DOCKER_HOST": engine2.host,
                           "ENVCHECK_DATA_DIR": str(data_second)}):
                second = cluster.add_node(**_node_args({"docker": 1}))
            cluster.wait_for_nodes()
            clients = {head.node_id: engine1.client, second.node_id: engine2.client}
            yield TwoEngines(cluster, head.node_id, second.node_id, engine1, engine2,
                             {head.node_id: data_main, second.node_id: data_second},
                             {n: str(c.info()["ID"]) for n, c in clients.items()}, clients)
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()


@pytest.fixture(scope="module")
def executor(engines: TwoEngines) -> Iterator[RayExecutor]:
    ex = RayExecutor.connect(RayOptions(address=engines.cluster.address, max_retries=0,
                                        unschedulable_grace_s=3.0))
    try:
        yield ex
    finally:
        ex.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'ray.db'}") as db:
        yield db


@pytest.fixture
def repositories(engines: TwoEngines, registry_anonymous: Registry) -> Iterator[list[str]]:
    """Repositories of this test's own; whatever either engine holds of them is removed."""
    made: list[str] = []
    yield made
    for client in engines.clients.values():
        for image in client.images.list():
            names = [*(image.attrs.get("RepoDigests") or []), *(image.tags or [])]
            if any(repo in str(name) for repo in made for name in names):
                client.images.remove(image.id, force=True)


def push_runnable(client: docker.DockerClient, registry: Registry, repositories: list[str]
                  ) -> tuple[str, str]:
    """A tiny image a sandbox starts on, pushed as ``repository:v1`` and removed from the
    engine again: (repository as the engine names it, the registry's digest)."""
    repository = new_repository("envcheck-ray")
    repositories.append(repository)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, source in _RUNTIME_FILES.items():
            tar.add(os.path.realpath(source), arcname=name)
        for name, content in (("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
                              ("payload.txt", uuid.uuid4().bytes)):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    ref = f"{registry.host}/{repository}"
    client.api.import_image_from_data(buf.getvalue(), repository=ref, tag="v1")
    digest = None
    try:
        for event in client.images.push(ref, tag="v1", stream=True, decode=True):
            if "error" in event:
                raise RuntimeError(f"push of {ref}:v1 failed: {event['error']}")
            digest = (event.get("aux") or {}).get("Digest", digest)
    finally:
        client.images.remove(f"{ref}:v1", force=True)
    assert digest is not None
    return ref, str(digest)


def catalogue(tmp_path: Path, images: dict[str, str]) -> Catalogue:
    envs = "".join(f'      - id: {env_id}\n        image: "{image}:v1"\n'
                   for env_id, image in images.items())
    path = tmp_path / "ray-images.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        suites:
          ray-images:
            description: images envcheck pulls, checked on a cluster of two engines
            defaults:
              pull: watch
              workdir: /
              user: root
              timeouts: { start_s: 30, shell_s: 5, exec_s: 15 }
            environments:
        """) + envs, encoding="utf-8")
    return load_catalogue([path])


def stage(engines: TwoEngines, cat: Catalogue, budget: str = BUDGET) -> RegistryImages:
    """The caller's registry stage: its tag watch (the nodes pull what it saw) and the budget
    every node applies to its own engine."""
    api = engines.clients[engines.main].api
    return RegistryImages.open(api, cat, RegistrySettings(engines.data[engines.main], budget))


def check(executor: RayExecutor, cat: Catalogue, store: Store, registry: RegistryImages,
          env_id: str) -> ProbeResult:
    env = next(e for e in cat.environments if e.id == env_id)
    services = build_services(cat, store, registry=registry)
    [result] = executor.run_cycle([env], TERMINAL, new_run_id(), services=services)
    return result


def node_of(result: ProbeResult) -> str:
    return str(result.details["ray"]["node_id"])


def created_on(client: docker.DockerClient, env_id: str, since: float) -> int:
    """How many sandboxes of ``env_id`` the engine behind ``client`` created since then."""
    events = client.api.events(since=int(since), until=int(time.time()) + 1, decode=True,
                               filters={"type": "container", "event": "create"})
    return sum(1 for e in events
               if (e.get("Actor") or {}).get("Attributes", {}).get(LABEL_ENV) == env_id)
