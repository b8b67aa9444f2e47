"""The Ray executor on a local multi-node Ray cluster (127.0.0.1 only) and the real engine.

The cluster: a head that runs no checks (no ``docker`` resource, like a daemon's control
node) and two worker nodes declaring ``docker: 1``, the second also ``net-inside: 1`` with a
secret in its environment that no other node has. All nodes share this host's engine.
"""

from __future__ import annotations

import os

# Before Ray is imported (it reads these once): keep every Ray address on loopback (Ray
# otherwise swaps 127.0.0.1 for the host's own address) and send no usage report anywhere.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_USAGE_STATS_REPORT_URL"] = "http://127.0.0.1:9/"

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The ray extra belongs to the test set-up (scripts/test.sh installs it): without it these
# tests fail at collection, never skip, so a green run means they ran.
try:
    import ray
except ImportError as exc:
    raise ImportError("tests/test_ray.py needs the ray extra: "
                      "ENVCHECK_EXTRAS=dev,dashboard,ray scripts/setup.sh") from exc

from ray.cluster_utils import Cluster

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue, Environment
from envcheck.catalogue.probe_specs import AdaptiveDepth
from envcheck.core.readiness import Check, Readiness
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.executors.base import RayOptions
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.executors.ray import RayExecutor
from envcheck.feed.assess import assess_cycle, evaluate, previous_statuses
from envcheck.feed.depth import StoreDepth
from envcheck.feed.reuse import StoreReuse
from envcheck.kinds.collaborators import build_services
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_ENV, LABEL_OWNER
from envcheck.store import Store, open_store
from tests.conftest import ROOT, SESSION_TAG, envcheck_cmd
from tests.http_server import MisbehavingServer, ok
from tests.polling import wait_for

# Ray 2.60 as used here emits no Python warning (filterwarnings=error would fail the run);
# a future one that does is to be filtered here, precisely, not in pyproject.
pytestmark = [pytest.mark.slow, pytest.mark.docker]

INSIDE_TOKEN = "inside-only-token"
INSIDE_VAR = "ENVCHECK_TEST_INSIDE_TOKEN"
TERMINAL = [ProbeKind.TERMINAL]


@dataclass
class Fleet:
    cluster: Any
    docker_nodes: dict[str, Any]  # node id -> Node; both declare docker: 1
    inside: Any  # the node declaring net-inside
    specs: dict[str, tuple[dict[str, float], dict[str, str]]]  # node id -> (resources, env)

    def raylet_pids(self) -> dict[int, Any]:
        return {n.all_processes["raylet"][0].process.pid: n for n in self.docker_nodes.values()}

    def add(self, resources: dict[str, float], env: dict[str, str]) -> Any:
        with _environ(env):
            node = self.cluster.add_node(**_node_args(resources))
        self.docker_nodes[node.node_id] = node
        self.specs[node.node_id] = (resources, env)
        if "net-inside" in resources:
            self.inside = node
        return node

    def replace(self, node: Any) -> Any:
        """Kill ``node`` now (no grace: as a machine dies) and add one just like it."""
        resources, env = self.specs.pop(node.node_id)
        del self.docker_nodes[node.node_id]
        self.cluster.remove_node(node, allow_graceful=False)
        return self.add(resources, env)


def _node_args(resources: dict[str, float]) -> dict[str, Any]:
    return {"num_cpus": 1, "resources": resources, "include_dashboard": False,
            "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}


@contextmanager
def _environ(changes: dict[str, str]) -> Iterator[None]:
    """Environment for the Ray processes started inside; and pytest keeps its SIGTERM
    handling (a Ray node installs its own in the process that starts it)."""
    saved = {k: os.environ.get(k) for k in changes}
    sigterm = signal.getsignal(signal.SIGTERM)
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # Ray's usage module (on the head) asks cloud metadata services (169.254.169.254) what
    # it runs on unless it finds a cluster config in $HOME: give it one.
    home = tmp_path_factory.mktemp("ray-home")
    (home / "ray_bootstrap_config.yaml").write_text("{}\n", encoding="utf-8")
    cluster = Cluster(shutdown_at_exit=True)
    try:
        with _environ({"HOME": str(home)}):  # the head runs Ray's usage module
            cluster.add_node(**_node_args({}))  # the head: no docker, runs no check
        state = Fleet(cluster, {}, None, {})
        state.add({"docker": 1}, {})
        state.add({"docker": 1, "net-inside": 1}, {INSIDE_VAR: INSIDE_TOKEN})
        cluster.wait_for_nodes()
        yield state
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def executor(fleet: Fleet) -> Iterator[RayExecutor]:
    ex = RayExecutor.connect(RayOptions(address=fleet.cluster.address, max_retries=1,
                                        unschedulable_grace_s=3.0))
    try:
        yield ex
    finally:
        ex.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'ray.db'}") as db:
        yield db


def verdicts(results: list[ProbeResult]) -> dict[tuple[str, ProbeKind], tuple[Status, Reason]]:
    return {(r.env_id, r.kind): (r.status, r.reason) for r in results}


def node_of(result: ProbeResult) -> str:
    return str(result.details["ray"]["node_id"])


def test_the_demo_fleet_gets_the_local_executors_verdicts(
        demo_catalogue: Catalogue, runtime: DockerRuntime, executor: RayExecutor,
        fleet: Fleet) -> None:
    envs = list(demo_catalogue.environments)
    local = run_cycle(envs, TERMINAL, runtime, new_run_id(), concurrency=2)
    seen: list[ProbeResult] = []
    remote = executor.run_cycle(envs, TERMINAL, new_run_id(), seen.append)
    assert verdicts(remote) == verdicts(local)
    assert [r.env_id for r in remote] == [e.id for e in envs]  # in catalogue order
    assert sorted(r.env_id for r in seen) == sorted(e.id for e in envs)  # sink: each once
    # Ray placed them, on the docker nodes only, and used both
    assert {node_of(r) for r in remote} == set(fleet.docker_nodes)
    assert executor.capacity() == 2


KILL_CATALOGUE = """\
version: 1
suites:
  ray-kill:
    description: healthy environments; one takes ~8 s (slow but within its limits)
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      limits: { memory_mb: 512, cpus: 1.0, pids: 256 }
      timeouts: { start_s: 15, shell_s: 2, exec_s: 30 }
    environments:
      - id: slow-ok
        image: envcheck-demo/slow-shell:latest
        timeouts: { shell_s: 10 }
      - id: healthy-a
        image: envcheck-demo/healthy:latest
      - id: healthy-b
        image: envcheck-demo/healthy:latest
"""


def _parent(owner: str) -> int:
    pid = int(owner.split(":")[1])
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def kill_node_running(fleet: Fleet, runtime: DockerRuntime, env_id: str,
                      cycle: threading.Thread) -> str:
    """Kill (no grace, as a machine dies) the node whose worker has been running
    ``env_id``'s sandbox for a second, found through the container's owner label (the
    worker's pid) and the worker's parent raylet; then add a node just like it. Ray's node
    handling wants the main thread: the cycle runs in ``cycle``."""
    first_seen: float | None = None

    def running_node() -> Any:
        nonlocal first_seen
        if not cycle.is_alive():
            pytest.fail(f"the cycle ended before {env_id}'s node was caught mid-check")
        for info in runtime._client.api.containers(
                all=True, filters={"label": f"org.envcheck.tag={SESSION_TAG}"}):
            labels = info["Labels"]
            if labels.get(LABEL_ENV) != env_id:
                continue
            first_seen = first_seen or time.monotonic()
            node = fleet.raylet_pids().get(_parent(labels[LABEL_OWNER]))
            # a second in: the check is well inside the sandbox, not still starting it
            if node is not None and time.monotonic() - first_seen > 1.0:
                return node
        return None

    node = wait_for(running_node, timeout_s=60, what=f"the node running {env_id}",
                    interval_s=0.05)
    fleet.replace(node)
    return str(node.node_id)


def _cycle(fleet: Fleet, executor: RayExecutor, store: Store, catalogue: Catalogue,
           kill: str, exports: Path, runtime: DockerRuntime
           ) -> tuple[list[ProbeResult], str]:
    envs = list(catalogue.environments)
    store.sync_suites(catalogue.suites)
    store.sync_environments(envs)
    before = previous_statuses(store.latest_results([e.id for e in envs]))
    run_id = store.start_run("test", list(catalogue.files))
    results: list[ProbeResult] = []

    def run() -> None:
        results.extend(executor.run_cycle(envs, TERMINAL, run_id,
                                          lambda r: store.record(run_id, r)))

    cycle = threading.Thread(target=run, name="ray-cycle")
    cycle.start()
    try:
        killed = kill_node_running(fleet, runtime, kill, cycle)
    finally:
        cycle.join(timeout=120)
    assert not cycle.is_alive()
    store.finish_run(run_id)
    assess_cycle(store, run_id, envs, results, before, export_dir=exports)
    stored = store.results_for_run(run_id)
    assert sorted(r.env_id for r in stored) == sorted(e.id for e in envs), "one result each"
    assert len(results) == len(envs)
    return results, killed


def wait_for_no_leftovers(runtime: DockerRuntime) -> None:
    """The dead worker's containers are the next reaper's on that host: run one."""

    def reaped() -> bool:
        runtime.reap()
        return not runtime.containers(SESSION_TAG)

    wait_for(reaped, timeout_s=60, what="no leftover containers", interval_s=0.5,
             details=lambda: f"left: {runtime.containers(SESSION_TAG)}")


def test_a_node_killed_mid_check_loses_nothing_and_quarantines_nothing(
        fleet: Fleet, executor: RayExecutor, store: Store, runtime: DockerRuntime,
        tmp_path: Path) -> None:
    path = tmp_path / "kill.yaml"
    path.write_text(KILL_CATALOGUE, encoding="utf-8")
    catalogue = load_catalogue([path])
    no_retry = RayExecutor(RayOptions(address=fleet.cluster.address, max_retries=0))
    exports = tmp_path / "exports"

    # 1. retries left: the check runs again on the other node, with the same verdict
    results, killed = _cycle(fleet, executor, store, catalogue, "slow-ok", exports, runtime)
    by_env = {r.env_id: r for r in results}
    assert (by_env["slow-ok"].status, by_env["slow-ok"].reason) == (Status.PASS, Reason.OK)
    assert node_of(by_env["slow-ok"]) != killed
    assert {r.status for r in results} == {Status.PASS}
    wait_for_no_leftovers(runtime)

    # 2. no retries left: error/worker_lost, never a failure of the environment
    results, killed = _cycle(fleet, no_retry, store, catalogue, "slow-ok", exports, runtime)
    by_env = {r.env_id: r for r in results}
    assert (by_env["slow-ok"].status, by_env["slow-ok"].reason) == (Status.ERROR,
                                                                   Reason.WORKER_LOST)
    # a check queued on the dead node is lost with it too: an error, never a failure
    assert {(r.status, r.reason) for r in results} <= {(Status.PASS, Reason.OK),
                                                       (Status.ERROR, Reason.WORKER_LOST)}
    wait_for_no_leftovers(runtime)

    states = {row.env_id: row for row in store.env_states()}
    assert not any(row.quarantined for row in states.values())
    assert states["slow-ok"].state == "healthy"  # the lost check counted for nothing


def test_a_pinned_data_source_is_probed_on_its_node(
        fleet: Fleet, executor: RayExecutor, store: Store, tmp_path: Path) -> None:
    with MisbehavingServer() as api:
        api.route("/inside", default=ok({"rows": 3}))
        path = tmp_path / "pinned.yaml"
        path.write_text(f"""\
version: 1
suites:
  ray-pinned:
    description: data APIs reachable from one network only
    defaults: {{ workdir: /workspace, user: agent }}
    environments:
      - id: pinned
        image: envcheck-demo/healthy:latest
        data_sources: [inside]
      - id: stranded
        image: envcheck-demo/healthy:latest
        data_sources: [nowhere]
data_sources:
  - id: inside
    url: {api.url("/inside")}
    auth: {{ env: {INSIDE_VAR} }}   # only the net-inside node has it
    node: net-inside
    samples: 2
  - id: nowhere
    url: {api.url("/nowhere")}
    node: no-such-network
    samples: 1
""", encoding="utf-8")
        catalogue = load_catalogue([path])
        pinned_executor = RayExecutor(RayOptions(address=fleet.cluster.address),
                                      shapes=store)
        results = pinned_executor.run_cycle(
            list(catalogue.environments), [ProbeKind.TERMINAL, ProbeKind.DATASOURCE],
            new_run_id(), services=build_services(catalogue, store))
        seen = api.seen
    got = {(r.env_id, r.kind): r for r in results}
    inside = got[("pinned", ProbeKind.DATASOURCE)]
    assert (inside.status, inside.reason) == (Status.PASS, Reason.OK), inside.summary
    assert node_of(inside) == fleet.inside.node_id
    assert got[("pinned", ProbeKind.TERMINAL)].status is Status.PASS  # unpinned: any node
    assert {r["headers"].get("Authorization") for r in seen} == {f"Bearer {INSIDE_TOKEN}"}
    stranded = got[("stranded", ProbeKind.DATASOURCE)]
    assert (stranded.status, stranded.reason) == (Status.ERROR, Reason.NODE_UNAVAILABLE)
    assert "no-such-network" in stranded.summary
    # the node returned what it observed; the caller wrote it (first shape: accepted)
    shape = store.accepted_shape("inside")
    assert shape is not None and shape.seen == 2


def probed_twice(executor: RayExecutor, store: Store, file: str, env_id: str,
                 changed: Callable[[Environment], Environment] | None = None
                 ) -> tuple[ProbeResult, ProbeResult]:
    """The tests probe of ``env_id`` (of ``probes/FILE``; ``changed`` by that, if given) run
    twice on Ray, each result recorded in ``store`` before the next probe (which may reuse
    its evidence)."""
    catalogue = load_catalogue([ROOT / "probes" / file])
    env = catalogue.environment(env_id)
    if changed is not None:
        env = changed(env)
    services = build_services(catalogue, store)
    run_id = store.start_run("test", [])

    def check() -> ProbeResult:
        [result] = executor.run_cycle([env], [ProbeKind.TESTS], run_id, services=services)
        store.record(run_id, result)
        return result

    first = check()
    return first, check()


def test_adversarial_controls_run_once_per_image_and_spec_on_ray(
        executor: RayExecutor, store: Store) -> None:
    """The same reuse as locally: the caller sends the newest controls of the environment's
    spec with the task, the node reuses them when its image digest matches."""
    first, second = probed_twice(executor, store, "demo-hacks.yaml",
                                 "demo-hacks-site-packages-subset")
    assert "reused" not in first.details["adversarial"], first.summary
    assert first.details["adversarial"]["rewarded"] == ["assertions_patched"]
    reused = second.details["adversarial"]
    assert reused["reused"]["from"] == first.started_at.isoformat()
    assert reused["rewarded"] == ["assertions_patched"]
    assert (second.status, second.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert second.image_digest == first.image_digest and "ray" in second.details


def test_wrong_fix_controls_run_once_per_image_and_spec_on_ray(
        executor: RayExecutor, store: Store) -> None:
    """The wrong-fix controls on a node, and reused there as locally: the caller sends the
    newest outcome of the environment's spec, the node reuses it when its digest matches."""
    def fewer(env: Environment) -> Environment:
        assert env.tests is not None and env.tests.strength is not None
        return env.model_copy(update={"tests": env.tests.model_copy(update={
            "strength": env.tests.strength.model_copy(update={"mutants": 4})})})

    first, second = probed_twice(executor, store, "demo-strength.yaml",
                                 "envcheck-demo__pyutils-6-weak", fewer)
    assert (first.status, first.reason) == (Status.PASS, Reason.WEAK_VERIFIER), first.summary
    assert "reused" not in first.details["strength"] and "ray" in first.details
    reused = second.details["strength"]
    assert reused["reused"]["from"] == first.started_at.isoformat()
    assert reused["survivors"] == first.details["strength"]["survivors"]
    assert (second.status, second.reason) == (Status.PASS, Reason.WEAK_VERIFIER)


def test_wrong_output_controls_run_once_per_image_and_spec_on_ray(
        executor: RayExecutor, store: Store) -> None:
    """A Harbor task's wrong outputs played on a node (its verifier only checks that the file
    exists: every output survives), and reused there when the node's digest matches."""
    first, second = probed_twice(executor, store, "demo-strength-outputs.yaml",
                                 "totals-exist-only")
    assert (first.status, first.reason) == (Status.PASS, Reason.WEAK_VERIFIER), first.summary
    assert first.details["strength"]["generated"]["of"] == "outputs"
    assert first.details["strength"]["survivors"] and "ray" in first.details
    assert "reused" not in first.details["strength"]
    assert second.details["strength"]["reused"]["from"] == first.started_at.isoformat()
    assert second.details["strength"]["survivors"] == first.details["strength"]["survivors"]
    assert (second.status, second.reason) == (Status.PASS, Reason.WEAK_VERIFIER)


def test_leak_checks_run_once_per_image_and_spec_on_ray(executor: RayExecutor,
                                                        store: Store) -> None:
    """A task without adversarial controls carries its newest leak checks instead."""
    first, second = probed_twice(executor, store, "demo-leaks.yaml",
                                 "envcheck-demo__pyutils-1-leaked")
    assert (first.status, first.reason) == (Status.PASS, Reason.SOLUTION_LEAKED), first.summary
    assert "reused" not in first.details["leaks"] and "ray" in second.details
    assert second.details["leaks"]["reused"]["from"] == first.started_at.isoformat()
    assert second.details["leaks"]["found"] == first.details["leaks"]["found"]
    assert (second.status, second.reason) == (Status.PASS, Reason.SOLUTION_LEAKED)


def test_the_depth_advice_travels_with_the_task(executor: RayExecutor, store: Store) -> None:
    """The caller looks the advice up in its store and sends it; the node follows it for the
    digest it finds: the whole protocol while the evidence is short, then a light check."""
    catalogue = load_catalogue([ROOT / "probes" / "demo-tests.yaml"])
    healthy = catalogue.environment("demo-tests-healthy")
    assert healthy.tests is not None
    env = healthy.model_copy(update={"tests": healthy.tests.model_copy(update={
        "adversarial": None,
        "adaptive": AdaptiveDepth(light_after_runs=18, light_after_s=1.0)})})
    store.sync_suites(catalogue.suites)
    store.sync_environments([env])
    services = build_services(catalogue, store, StoreDepth(store).advice)
    run_id = store.start_run("test", [])

    def check() -> dict[str, Any]:
        [result] = executor.run_cycle([env], [ProbeKind.TESTS], run_id, services=services)
        assert result.status is Status.PASS and "ray" in result.details, result.summary
        store.record(run_id, result)
        evaluate(store, [env])
        return dict(result.details["depth"])

    modes = [check()["mode"], check()["mode"]]
    time.sleep(1.0)  # the clean streak must have begun light_after_s ago
    light = check()
    assert modes == ["full", "full"] and (light["mode"], light["runs"]) == ("light", 2), light


def test_the_reuse_advice_travels_with_the_task(executor: RayExecutor, store: Store) -> None:
    """The caller looks up whether the terminal's evidence stands and sends the advice; the
    node checks the identity it finds and starts no container for a proven image."""
    catalogue = load_catalogue([ROOT / "probes" / "demo.yaml"])
    env = catalogue.environment("demo-healthy")
    store.sync_suites(catalogue.suites)
    store.sync_environments([env])
    services = build_services(catalogue, store, reuse=StoreReuse(store).advice)
    run_id = store.start_run("test", [])

    def check() -> ProbeResult:
        [result] = executor.run_cycle([env], [ProbeKind.TERMINAL], run_id, services=services)
        assert result.status is Status.PASS and "ray" in result.details, result.summary
        store.record(run_id, result)
        evaluate(store, [env])
        return result

    first, second = check(), check()
    assert first.details["depth"]["mode"] == "full"
    assert first.details["depth"]["why"] == "no evidence yet"
    assert (second.details["depth"]["mode"], second.details["depth"]["runs"]) == ("reused", 0)
    assert second.image_digest == first.image_digest
    assert "login_ready_s" not in second.details  # no shell ran: no container


def test_readiness_watches_the_cluster_from_its_own_thread(fleet: Fleet,
                                                          executor: RayExecutor) -> None:
    """The daemon's /readyz reads what a watcher thread heard from the executor's ping: on
    Ray too, ok from that thread, and why not when no live node can run a check."""
    nowhere = RayExecutor(RayOptions(address=fleet.cluster.address,
                                     docker_resource="docker-nowhere"))
    ready = Readiness({"ray": executor.ping, "nowhere": nowhere.ping}, interval_s=0.1)
    ready.start()
    try:
        def answered() -> dict[str, Check] | None:
            checks = ready.checks()
            return checks if all(c.age_s is not None for c in checks.values()) else None

        checks = wait_for(answered, timeout_s=60, what="both watchers' first answers")
    finally:
        ready.stop()
    assert checks["ray"].status == "ok"
    assert checks["nowhere"].status == \
        "error: no live Ray node declares the 'docker-nowhere' resource"


def test_check_with_an_unreachable_cluster_exits_3(cli_env: dict[str, str]) -> None:
    # the subprocess timeout is the hang guard: no retries against a cluster that is not there
    proc = subprocess.run([*envcheck_cmd(), "check", "probes/demo.yaml", "-e", "demo-healthy",
                           "-p", "terminal", "--executor", "ray", "--ray-address",
                           "127.0.0.1:9", "--json"],
                          check=False, env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert '"reason": "node_unavailable"' in proc.stdout



def test_ray_failures_map_to_infrastructure_reasons() -> None:
    from envcheck.executors.ray import _reason

    assert _reason(ray.exceptions.TaskCancelledError()) is Reason.INTERRUPTED
    assert _reason(ray.exceptions.WorkerCrashedError()) is Reason.WORKER_LOST
    assert _reason(ray.exceptions.NodeDiedError("node died")) is Reason.WORKER_LOST
    assert _reason(ray.exceptions.OutOfMemoryError("oom")) is Reason.CHECKER_OOM
    assert _reason(ray.exceptions.TaskUnschedulableError("no node")) is Reason.NODE_UNAVAILABLE
