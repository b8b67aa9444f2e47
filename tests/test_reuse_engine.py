"""Evidence reuse on the real engine, through a real daemon: once an environment's terminal and
dependencies are proven, their scheduled probes start no container (the engine's own events
count the creates); a new image digest behind the tag is seen at the next terminal probe and
every kind, the tests probe included, is validated in full at once (their schedules are an
hour away); a suite that pins ``reprove_every: null`` starts a container every time."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import pytest

from envcheck.catalogue.models import Catalogue
from envcheck.core.depth import Depth, DepthAdvice
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import check_environment, new_run_id
from envcheck.kinds.reuse import ReuseAdvisor
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_ENV, LABEL_TAG
from tests.conftest import ROOT
from tests.test_daemon import Daemon, Daemons

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BASE_IMAGE = "envcheck-demo/hack-resistant:latest"
TASK = """
      tests:
        command: JUNIT={junit} /opt/task/run_tests.sh {tests}
        junit_path: /tmp/envcheck-junit.xml
        fail_to_pass: [tests/test_stats.py::test_median_even_length]
        pass_to_pass: [tests/test_stats.py::test_mean]
        oracle: { path: /opt/task/oracle.sh }
        reruns: 2
        timeout_s: 60s"""


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    yield d
    d.close()


@pytest.fixture
def image() -> Iterator[str]:
    """A tag of its own on the demo task, rebuilt by the test to a new digest."""
    tag = f"envcheck-test/reuse-{uuid.uuid4().hex[:8]}:latest"
    subprocess.run(["docker", "tag", BASE_IMAGE, tag], check=True, timeout=60)
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120,
                       check=False)


def write(path: Path, image: str, reprove: str) -> None:
    path.write_text(f"""version: 1
suites:
  reuse:
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3]
      timeouts: {{ start_s: 15, shell_s: 5, exec_s: 30 }}
      schedules: {{ terminal: 2s, dependencies: 1h, tests: 1h, datasource: null,
                   jitter_s: 0 }}
      reprove_every: {reprove}
      dependencies: {{ executables: {{ git: '^git version' }} }}{TASK}
    environments:
      - {{ id: task, image: '{image}' }}
""", encoding="utf-8")


def results(d: Daemon, kind: ProbeKind) -> list[Any]:
    with d.store() as store:
        return list(reversed(store.history("task", kind, limit=500)))


def mode(result: Any) -> str:
    return str(result.details.get("depth", {}).get("mode", "full"))


def created(client: docker.DockerClient, tag: str, env_id: str, since: datetime,
            until: datetime) -> int:
    """Containers the daemon created for the environment between the two times, as the
    engine itself reports them."""
    events = client.events(since=since, until=until, decode=True, filters={
        "type": "container", "event": "create", "label": [f"{LABEL_TAG}={tag}",
                                                          f"{LABEL_ENV}={env_id}"]})
    return sum(1 for _ in events)


def test_proven_evidence_starts_no_container_and_a_new_digest_is_validated_at_once(
        daemons: Daemons, tmp_path: Path, image: str) -> None:
    catalogue = tmp_path / "reuse.yaml"
    write(catalogue, image, "{ terminal: 1h, dependencies: 1h }")
    d = daemons.start(catalogue, args=["--host-sample-every", "0"])
    d.wait("every kind proven, then the terminal's evidence reused", lambda: all(
        results(d, k) for k in (ProbeKind.TESTS, ProbeKind.DEPENDENCIES)) and sum(
        mode(r) == "reused" for r in results(d, ProbeKind.TERMINAL)) >= 3, timeout=240)
    [tests] = results(d, ProbeKind.TESTS)
    [deps] = results(d, ProbeKind.DEPENDENCIES)
    assert (str(tests.status), str(deps.status)) == ("pass", "pass")
    first = results(d, ProbeKind.TERMINAL)
    assert (str(first[0].status), mode(first[0])) == ("pass", "full")
    old_digest = first[0].image_digest
    reused = [r for r in first if mode(r) == "reused"]
    assert all(str(r.status) == "pass" and r.image_digest == old_digest for r in reused)
    assert reused[0].details["depth"]["runs"] == 0
    assert reused[0].summary.startswith("evidence reused: image and spec unchanged")

    # steady state: several terminal probes, no container
    client = docker.from_env(timeout=30)
    try:
        since = datetime.now(UTC)
        count = len(results(d, ProbeKind.TERMINAL))
        d.wait("three more terminal probes",
               lambda: len(results(d, ProbeKind.TERMINAL)) >= count + 3, timeout=60)
        assert created(client, d.tag, "task", since, datetime.now(UTC)) == 0

        # a rebuilt image behind the same tag: seen at the next terminal probe, then every
        # kind in full at once, though dependencies and tests are not due for an hour
        build = subprocess.run(["docker", "build", "-q", "-t", image, "-"],
                               input=f"FROM {BASE_IMAGE}\nLABEL envcheck.test=reuse\n",
                               capture_output=True, text=True, timeout=300, check=False)
        assert build.returncode == 0, build.stderr

        def new(kind: ProbeKind) -> list[Any]:
            return [r for r in results(d, kind) if r.image_digest != old_digest]

        # an hour before they are due: only the new digest can have queued them
        d.wait("every kind validated on the new digest",
               lambda: all(new(k) for k in (ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES,
                                             ProbeKind.TESTS)),
               timeout=300)
        seen = new(ProbeKind.TERMINAL)[0]
        assert (str(seen.status), mode(seen)) == ("pass", "full")
        assert seen.details["depth"]["why"] == "new image digest: no evidence for it yet"
        for kind in (ProbeKind.DEPENDENCIES, ProbeKind.TESTS):
            [moved] = new(kind)
            assert str(moved.status) == "pass" and moved.started_at >= seen.started_at
            assert moved.details["depth"]["mode"] == "full", moved.details["depth"]
        # and the new digest's evidence is reused in turn
        d.wait("the new digest's evidence reused", lambda: any(
            mode(r) == "reused" for r in new(ProbeKind.TERMINAL)), timeout=60)
    finally:
        client.close()
    assert d.stop() == 0
    assert daemons.containers(d.tag) == []


def test_a_suite_that_pins_full_probes_starts_a_container_every_time(
        daemons: Daemons, tmp_path: Path, image: str) -> None:
    catalogue = tmp_path / "pinned.yaml"
    write(catalogue, image, "{ terminal: null }")
    d = daemons.start(catalogue, args=["--host-sample-every", "0"])
    d.wait("four terminal probes", lambda: len(results(d, ProbeKind.TERMINAL)) >= 4,
           timeout=240)
    terminal = results(d, ProbeKind.TERMINAL)
    assert {(str(r.status), mode(r)) for r in terminal} == {("pass", "full")}
    assert terminal[-1].details["depth"]["why"] == "full every time (reprove_every: null)"
    assert d.stop() == 0
    assert daemons.containers(d.tag) == []


def test_a_slow_start_of_a_proven_image_is_the_hosts_not_the_environments(
        demo_catalogue: Catalogue, runtime: DockerRuntime) -> None:
    """No container starts within 1 ms: on an image and spec a full probe proved fast the
    slowness is the host's (envcheck's error, never counted); on one never proven it is the
    environment's failure, as before."""
    [healthy] = [e for e in demo_catalogue.environments if e.id == "demo-healthy"]
    env = healthy.model_copy(update={"timeouts": healthy.timeouts.model_copy(
        update={"start_s": 0.001})})
    digest, spec = runtime.image_digest(env.image), env.spec_hash(ProbeKind.TERMINAL)

    def probe(proven: bool) -> ProbeResult:
        advice = DepthAdvice(Depth.FULL, "host sample", digest, spec, datetime.now(UTC),
                             proven)
        services = {ReuseAdvisor: ReuseAdvisor(lambda env, kind: advice)}
        [result] = check_environment(env, [ProbeKind.TERMINAL], runtime, new_run_id(),
                                     services=services)
        return result

    slow_host = probe(proven=True)
    assert (str(slow_host.status), str(slow_host.reason)) == ("error", "host_slow")
    assert "the host is slow" in slow_host.summary
    assert slow_host.details["depth"]["why"] == "host sample"
    slow_image = probe(proven=False)
    assert (str(slow_image.status), str(slow_image.reason)) == ("fail", "container_start_slow")


def test_the_demo_fleet_starts_containers_only_for_what_is_not_proven(
        daemons: Daemons, tmp_path: Path) -> None:
    """The demo fleet (probes/demo.yaml) with its terminal every 2 s and its dependencies
    every 3 s: once proven, its healthy environments start no container; the broken ones are
    still probed in full, every time (a failure is never reused; quarantined, they are
    probed four times less often)."""
    demo = (ROOT / "probes" / "demo.yaml").read_text(encoding="utf-8")
    fast = demo.replace("schedules: { terminal: 5m, dependencies: 1h, tests: 6h }",
                        "schedules: { terminal: 2s, dependencies: 3s, tests: null, "
                        "jitter_s: 0 }")
    assert fast != demo
    catalogue = tmp_path / "demo.yaml"
    catalogue.write_text(fast, encoding="utf-8")
    d = daemons.start(catalogue, args=["--host-sample-every", "0"])

    def states() -> dict[str, dict[str, str]]:
        with d.store() as store:
            return {row.env_id: {k: v["state"] for k, v in (row.kinds or {}).items()}
                    for row in store.env_states()}

    def proven() -> set[str]:
        return {env for env, kinds in states().items()
                if kinds.get("terminal") == kinds.get("dependencies") == "healthy"}

    d.wait("the healthy demo environments proven", lambda: "demo-healthy" in proven(),
           timeout=240)
    time.sleep(4.0)  # a window to assess what was proven alongside
    good = proven()
    bad = set(states()) - good - {"demo-image-missing"}
    assert good and bad, states()
    client = docker.from_env(timeout=30)
    try:
        since = datetime.now(UTC)
        with d.store() as store:
            count = len(store.history("demo-healthy", ProbeKind.TERMINAL, limit=500))
        d.wait("five more rounds", lambda: len(d.store().history(
            "demo-healthy", ProbeKind.TERMINAL, limit=500)) >= count + 5, timeout=120)
        until = datetime.now(UTC)
        made = {env: created(client, d.tag, env, since, until) for env in good | bad}
    finally:
        client.close()
    assert {env: made[env] for env in good} == dict.fromkeys(good, 0), made
    now = states()
    with d.store() as store:
        for env in bad:  # a kind that failed is never reused, before or after quarantine
            failed = [ProbeKind(k) for k, state in now[env].items() if state != "healthy"]
            found = [r for kind in failed for r in store.history(env, kind, limit=500)]
            assert found and all(mode(r) == "full" for r in found), env
    assert d.stop() == 0
    assert daemons.containers(d.tag) == []
