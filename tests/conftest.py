"""Shared fixtures. Docker tests run against the real engine and the demo images built by
``scripts/setup.sh``; they fail (not skip) without them, so a green run means they ran."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.core.errors import EngineUnreachable
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.collaborators import build_services
from envcheck.sandbox.docker import DockerRuntime
from envcheck.store import open_store
from tests.registry_proxy import RegistryProxy
from tests.registryd import Registry
from tests.token_issuer import IssuerKey

pytest_plugins = ["tests.backends", "tests.deploy", "tests.pulls"]

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "probes" / "demo.yaml"
# Every container this session starts (in-process or through the CLI) carries this tag, so
# the leak check sees only ours even when other envcheck processes share the engine.
SESSION_TAG = f"pytest-{uuid.uuid4().hex[:12]}"
os.environ["ENVCHECK_CONTAINER_TAG"] = SESSION_TAG


def probe_each(catalogue: Catalogue, kind: ProbeKind, runtime: DockerRuntime
               ) -> dict[str, ProbeResult]:
    """One cycle of ``kind`` over every environment of ``catalogue`` (two at a time), by id."""
    results = run_cycle(catalogue.environments, [kind], runtime, new_run_id(), concurrency=2)
    return {r.env_id: r for r in results}


def probed_in_turn(catalogue: Catalogue, runtime: DockerRuntime, store_path: Path,
                   *envs: Environment) -> list[ProbeResult]:
    """The tests probe of each of ``envs`` in turn, each result recorded in a SQLite store at
    ``store_path`` before the next probe, which may reuse its evidence (the controls' ledger
    reads the store)."""
    with open_store(f"sqlite:///{store_path}") as store:
        services = build_services(catalogue, store)
        run_id = store.start_run("test", [])
        results = []
        for env in envs:
            [result] = run_cycle([env], [ProbeKind.TESTS], runtime, run_id, services=services)
            store.record(run_id, result)
            results.append(result)
        return results


def envcheck_cmd() -> list[str]:
    exe = shutil.which("envcheck", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "envcheck.cli.app"]


@pytest.fixture(scope="session")
def demo_catalogue() -> Catalogue:
    return load_catalogue([DEMO])


@pytest.fixture(scope="session")
def runtime() -> Iterator[DockerRuntime]:
    try:
        rt = DockerRuntime.from_env()
    except EngineUnreachable as exc:
        pytest.fail(f"no Docker engine ({exc}); run scripts/setup.sh first")
    yield rt
    rt.close()


@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the whole session no envcheck container may remain on the engine."""
    yield
    if not any(item.get_closest_marker("docker") for item in request.session.items):
        return
    rt = DockerRuntime.from_env()
    try:
        left = rt.containers(SESSION_TAG)
    finally:
        rt.close()
    assert left == [], f"envcheck containers left behind: {left}"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private SQLite store for CLI runs."""
    monkeypatch.setenv("ENVCHECK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("ENVCHECK_DATABASE_URL", raising=False)
    return tmp_path / "data"


@pytest.fixture
def cli_env(data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ENVCHECK_DATA_DIR"] = str(data_dir)
    env.pop("ENVCHECK_DATABASE_URL", None)
    env["COLUMNS"] = "200"
    return env


# --- the real registry (tests/registryd.py): one process per mode per session ---------------
@pytest.fixture(scope="session")
def registry_anonymous() -> Iterator[Registry]:
    """Debian's docker-registry on 127.0.0.1 without auth."""
    reg = Registry("anonymous")
    yield reg
    reg.close()


@pytest.fixture(scope="session")
def registry_htpasswd() -> Iterator[Registry]:
    """The registry with basic auth (htpasswd, bcrypt cost 4): ``.user``, ``.password``."""
    reg = Registry("htpasswd")
    yield reg
    reg.close()


@pytest.fixture(scope="session")
def registry_token() -> Iterator[Registry]:
    """The registry with ``auth: token`` and the tests' issuer (``.issuer``) at its realm."""
    reg = Registry("token", issuer_key=IssuerKey.generate())
    yield reg
    reg.close()


@pytest.fixture(scope="session")
def registry_tls() -> Iterator[Registry]:
    """The registry without auth over TLS, its certificate signed by a test CA (``ca_file``)."""
    reg = Registry("anonymous", tls=True)
    yield reg
    reg.close()


@pytest.fixture
def registry_proxy(registry_htpasswd: Registry) -> Iterator[RegistryProxy]:
    """A fault proxy before the basic-auth registry, for one test."""
    proxy = RegistryProxy(registry_htpasswd.port)
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """docker-py's client of the real engine (pushes to the test registry go through it)."""
    client = docker.from_env(timeout=120)
    yield client
    client.close()
