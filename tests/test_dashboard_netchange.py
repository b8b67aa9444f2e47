"""The dashboard in a real headless Chromium on the engine's host while compose projects come
up and go down beside it: every page ends whole, with no error box left.

Chromium on Linux aborts every request in flight, loopback included, with
``net::ERR_NETWORK_CHANGED`` when an address of its host comes or goes, and Streamlit loads
most of a page on demand: an aborted chunk or stylesheet left a box ("Failed to fetch
dynamically imported module", "Unable to preload CSS") where an element should be. Beside the
browser, two kinds of work come and go on the real engine: envcheck's own compose projects
(through the runtime, as the daemon probes the demo's compose tasks; they change no address of
the host, tests/test_compose_network.py) and other container work on the same host (a plain
engine network and a container on it, whose addresses envcheck does not choose: they keep
aborting the page's requests). Each page opens in a fresh browser context, with nothing
cached; the page-recovery script (envcheck.dashboard.page_recovery) reloads what did not arrive.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from envcheck.catalogue.models import Limits
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.compose_project import read_project
from envcheck.sandbox.docker import DockerRuntime
from tests import dashboard_seed as fleet
from tests.browser import (
    CHROMIUM_FLAGS,
    LOAD_ABORTED,
    chromium_path,
    failure_boxes,
    open_whole,
    served_dashboard,
)
from tests.conftest import envcheck_cmd

pytestmark = [pytest.mark.slow, pytest.mark.docker]

BASE_IMAGE = "envcheck/base:bookworm"
# Every page of the dashboard, and a text it shows once its script ran.
PAGES = (("/", "Environments by time"),
         ("/environment?env=swe-flaky-tests", "Pass/fail pattern of result"),
         ("/quarantine", "Audit history"),
         ("/data-sources?source=weather-api", "Shapes seen"))


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("netchange")
    template = tmp_path_factory.getbasetemp() / "dashboard-template.db"
    fleet.sqlite_template(template)
    url = fleet.copy_sqlite(template, folder / "envcheck.db")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ENVCHECK_API", "STREAMLIT_"))}
    with served_dashboard([*envcheck_cmd(), "dashboard", "--database", url],
                          folder / "dashboard.log", env=env) as base:
        yield base


class Beside:
    """Work that comes and goes on the engine in threads of its own until stopped."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.cycles: dict[str, int] = {}
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []

    def run(self, name: str, cycle: Callable[[], None]) -> None:
        def loop() -> None:
            while not self.stopping.is_set():
                try:
                    cycle()
                except Exception as exc:  # the test fails on it, after the pages
                    self.errors.append(f"{name}: {exc!r}")
                    return
                self.cycles[name] = self.cycles.get(name, 0) + 1

        thread = threading.Thread(target=loop, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in self._threads), "a churn thread hangs"


def compose_project_cycle(runtime: DockerRuntime, root: Path) -> Callable[[], None]:
    """One run of a two-service compose task through envcheck's runtime: up, then down."""
    folder = root / "task"
    (folder / "environment").mkdir(parents=True)
    compose = folder / "environment" / "docker-compose.yaml"
    compose.write_text(f"""\
services:
  main:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
    depends_on: [side]
  side:
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
""")
    project = read_project(folder, compose, host=runtime.host)

    def cycle() -> None:
        spec = SandboxSpec(env_id="compose-beside-the-dashboard", image=BASE_IMAGE,
                           run_id=uuid.uuid4().hex, limits=Limits(memory_mb=128, cpus=0.5))
        with runtime.compose(project, spec, images={}, up_timeout_s=60) as sandbox:
            sandbox.exec(["true"], timeout_s=10)

    return cycle


def other_container_cycle(client: docker.DockerClient) -> Callable[[], None]:
    """What any other user of the engine does: an internal network of the engine's defaults
    and a container on it, started, then both removed."""

    def cycle() -> None:
        name = f"envcheck-test-beside-{uuid.uuid4().hex[:8]}"
        network = client.networks.create(name, driver="bridge", internal=True)
        try:
            container = client.containers.run(BASE_IMAGE, ["sleep", "30"], name=name,
                                              network=name, detach=True)
            try:
                container.reload()
            finally:
                container.remove(force=True)
        finally:
            network.remove()

    return cycle


def test_every_page_whole_while_compose_projects_come_and_go(
        dashboard: str, runtime: DockerRuntime, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    other = DockerRuntime.from_env()
    beside = Beside()
    aborted: list[str] = []
    console: list[str] = []
    reloads: dict[str, int] = {}
    try:
        beside.run("envcheck compose projects", compose_project_cycle(runtime, tmp_path))
        beside.run("other container work", other_container_cycle(other.client))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(),
                                                 headless=True, args=CHROMIUM_FLAGS)
            try:
                for path, expected in PAGES:
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    try:
                        page = context.new_page()
                        page.on("requestfailed", lambda r: aborted.append(
                            f"{r.url} {r.failure}") if "ERR_NETWORK_CHANGED" in str(
                                r.failure) else None)
                        page.on("console", lambda m: console.append(m.text)
                                if m.type == "error" else None)
                        reloads[path] = open_whole(page, dashboard + path)
                        assert failure_boxes(page) == [], (path, failure_boxes(page))
                        text = page.inner_text("[data-testid=stApp]")
                        assert expected in " ".join(text.split()), (path, text[:2000])
                    finally:
                        context.close()
            finally:
                browser.close()
    finally:
        beside.stop()
        other.close()
    assert beside.errors == [], beside.errors
    assert set(beside.cycles) == {"envcheck compose projects", "other container work"}, \
        beside.cycles
    # the work beside did abort the pages' requests (else this test showed nothing), and the
    # only console errors are of those aborted loads
    assert aborted, f"no request was aborted by the work beside the browser: {beside.cycles}"
    assert [m for m in console if not LOAD_ABORTED.search(m) and "404" not in m] == []
    print(f"reloads per page {reloads}; {len(aborted)} requests aborted; cycles "
          f"{beside.cycles}")

