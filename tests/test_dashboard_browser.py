"""The dashboard in a real headless Chromium: ``envcheck dashboard`` serves it on 127.0.0.1 over
the seeded store, Playwright drives Debian's ``/usr/bin/chromium`` (no browser download), each
page loads without an exception, shows its key elements and draws its charts, the page asks
nothing of any host but 127.0.0.1, and a full-page screenshot of each lands in
``tests/artifacts/`` (gitignored) for a person to look at.

CI needs the Debian package ``chromium`` (and ``fonts-liberation``, which it pulls in).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from envcheck.catalogue.probe_specs import TRICK_NAMES
from tests import dashboard_seed as fleet
from tests.browser import (
    CHROMIUM_FLAGS,
    IDLE,
    LOAD_ABORTED,
    chromium_path,
    failure_boxes,
    open_whole,
    served_dashboard,
)
from tests.conftest import ROOT, envcheck_cmd

pytestmark = pytest.mark.slow

ARTIFACTS = ROOT / "tests" / "artifacts"
WIDTH = 1400


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, fleet.Seeded]]:
    """``envcheck dashboard`` serving a copy of the seeded store on a free port."""
    folder = tmp_path_factory.mktemp("browser")
    template = tmp_path_factory.getbasetemp() / "dashboard-template.db"
    seeded = fleet.sqlite_template(template)
    url = fleet.copy_sqlite(template, folder / "envcheck.db")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ENVCHECK_API", "STREAMLIT_"))}
    with served_dashboard([*envcheck_cmd(), "dashboard", "--database", url],
                          folder / "dashboard.log", env=env) as base:
        yield base, seeded


@dataclass
class Browser:
    page: Any
    base: str
    external: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def load(self, path: str, name: str) -> str:
        """Open ``path``, wait until the script is idle and every element drawn, save a
        full-page screenshot as ``dashboard-<name>.png``; returns the page's text."""
        self.page.set_viewport_size({"width": WIDTH, "height": 1000})
        open_whole(self.page, self.base + path)  # whole, even if its loads were aborted
        # Streamlit draws elements below the fold lazily: grow the window to the content
        # until it stops growing.
        height = 0
        for _ in range(8):
            grown = self.page.evaluate(
                "() => document.querySelector('[data-testid=stMain]').scrollHeight")
            if grown == height:
                break
            height = grown
            self.page.set_viewport_size({"width": WIDTH, "height": min(height + 60, 12_000)})
            self.page.wait_for_timeout(600)
            self.page.wait_for_selector(IDLE, timeout=60_000)
        for chart in self.page.query_selector_all("[data-testid=stVegaLiteChart]"):
            chart.wait_for_selector("canvas, svg", timeout=20_000)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)
        assert failure_boxes(self.page) == []
        text: str = self.page.inner_text("[data-testid=stApp]")
        return " ".join(text.split())  # whitespace as a person reads it

    def charts(self) -> list[tuple[float, float]]:
        """Sizes of the drawn charts (their canvas or svg)."""
        sizes = []
        for chart in self.page.query_selector_all("[data-testid=stVegaLiteChart]"):
            box = chart.query_selector("canvas, svg").bounding_box()
            sizes.append((box["width"], box["height"]))
        return sizes


@pytest.fixture(scope="module")
def browser(dashboard: tuple[str, fleet.Seeded],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser tests drive Chromium with Playwright: pip install -e '.[dev]'")
    executable = chromium_path()
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user data dir
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": WIDTH, "height": 1000})
        try:
            driver = Browser(context.new_page(), dashboard[0])

            def only_loopback(route: Any) -> None:
                url = route.request.url
                if url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
                    route.continue_()
                else:
                    driver.external.append(url)
                    route.abort()

            context.route("**/*", only_loopback)
            driver.page.on("console", lambda m: driver.errors.append(m.text)
                           if m.type == "error" else None)
            driver.page.on("response", lambda r: driver.errors.append(f"{r.status} {r.url}")
                           if r.status >= 400 and "/_stcore/" not in r.url else None)
            yield driver
            assert driver.external == [], f"the page reached beyond 127.0.0.1: {driver.external}"
            # a load the browser aborted (another container's addresses on this host) leaves
            # its console error; the page recovered from it (load() found no error box)
            real = [e for e in driver.errors
                    if "404 (Not Found)" not in e and not LOAD_ABORTED.search(e)]
            assert real == [], real
        finally:
            context.close()


def test_fleet(browser: Browser) -> None:
    text = browser.load("/", "fleet")
    for expected in ("Fleet", "Environments 21", "Healthy fraction 57.1%", "Suites",
                     "Reward-hackable 0", "Environments by time", "Environments 1-21 of 21",
                     "Filters"):
        assert expected in text
    [heatmap] = browser.charts()
    assert heatmap[0] > 600 and heatmap[1] > 21 * 20  # a row per environment


def test_fleet_filtered_from_the_url(browser: Browser) -> None:
    text = browser.load("/?state=broken", "fleet-broken")
    assert "Environments 1-2 of 2" in text
    [heatmap] = browser.charts()
    assert heatmap[1] < 320  # two rows (and the axes)


def test_environment(browser: Browser) -> None:
    text = browser.load("/environment?env=swe-flaky-tests", "environment")
    for expected in ("swe-flaky-tests", "Why: tests: nondeterministic", "Quarantined (auto)",
                     "Failure rate per probe kind", "Timeline", "Evidence", "Flaky tests",
                     "Pass/fail pattern of result", "Image digest history", "Transitions"):
        assert expected in text, expected
    assert len(browser.charts()) == 3  # Wilson intervals, timeline, pass/fail pattern
    assert all(w > 300 and h > 50 for w, h in browser.charts())


def test_environment_rollouts(browser: Browser) -> None:
    """The training run's evidence beside the probes: the rollouts' state and why, a chart
    of rollouts per hour by whose outcome and one of the failure rate and reward, the table."""
    text = browser.load(f"/environment?env={fleet.ROLLOUT_FLAGGED}", "environment-rollouts")
    for expected in ("Rollouts", "Rollout state degraded", "Flagged by rollouts yes",
                     "Rollouts say: rollout_failures", "Fails on the cluster, passes here",
                     "Per hour, the rollouts a training run reported", "Timeline"):
        assert expected in text, expected
    assert text.index("Rollouts say") < text.index("Timeline")  # beside the probes' kinds
    # Wilson intervals, rollouts per hour, failure rate and reward, the timeline
    drawn = browser.charts()
    assert len(drawn) == 4 and all(w > 300 and h > 100 for w, h in drawn), drawn
    assert "always_solved" in browser.load(f"/environment?env={fleet.ROLLOUT_SOLVED}",
                                           "environment-rollouts-solved")


def test_environment_adversarial_controls(browser: Browser) -> None:
    text = browser.load("/environment?env=swe-healthy-2", "environment-adversarial")
    for expected in ("Adversarial controls", "Each trick played by a do-nothing agent",
                     "Is my verifier hack-resistant?"):
        assert expected in text, expected
    # the table (drawn on a canvas: its cells are no text) has a row per trick of the library
    height = browser.page.evaluate("""() => {
        const heading = [...document.querySelectorAll('h3')]
            .find(h => h.innerText.includes('Adversarial controls'));
        const table = [...document.querySelectorAll('[data-testid=stDataFrame]')]
            .find(t => heading.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING);
        return table ? table.getBoundingClientRect().height : 0;
    }""")
    assert height >= 35 * (len(TRICK_NAMES) + 1)
    assert "Adversarial controls" not in browser.load("/environment?env=term-ok-1",
                                                      "environment-no-controls")


def test_environment_evidence_link(browser: Browser, dashboard: tuple[str, fleet.Seeded]
                                   ) -> None:
    ids = dashboard[1].failing["term-tool-missing"][-2:]
    text = browser.load(f"/environment?env=term-tool-missing&results={ids[0]},{ids[1]}",
                        "environment-evidence")
    assert f"Results #{ids[0]}, #{ids[1]} (from the link you followed)" in text
    assert "git: not found" in text and "exit 1" in text


def test_quarantine(browser: Browser) -> None:
    text = browser.load("/quarantine", "quarantine")
    for expected in ("Quarantine", "Read-only.", "Quarantined 7", "By hand 1",
                     "Quarantine or release by hand", "Audit history",
                     "Quarantined environments 1-7 of 7"):
        assert expected in text, expected
    assert browser.page.get_by_role("button", name="Apply").is_disabled()


def test_data_sources(browser: Browser) -> None:
    text = browser.load("/data-sources?source=weather-api", "data-sources")
    for expected in ("Data sources", "weather-api", "Availability", "Latency",
                     "Failures by class", "Schema drift", "Shapes seen"):
        assert expected in text, expected
    assert len(browser.charts()) == 3


def test_environment_verifier_strength(browser: Browser) -> None:
    """Per operator what was generated and what became of it, and each survivor by class."""
    text = browser.load("/environment?env=swe-healthy-2", "environment-strength")
    for expected in ("Verifier strength", "Score 0.67", "the share of the mutants told apart "
                     "from the fix that the tests refuse", "not_distinguished",
                     "Do the tests refuse a wrong fix?"):
        assert expected in text, expected
    heights = browser.page.evaluate("""() => {
        const heading = [...document.querySelectorAll('h3')]
            .find(h => h.innerText.includes('Verifier strength'));
        const below = [...document.querySelectorAll('[data-testid=stDataFrame]')]
            .filter(t => heading.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING);
        return below.slice(0, 2).map(t => t.getBoundingClientRect().height);
    }""")
    # five operators, then two survivors (confirmed, not distinguished), each with a header
    assert heights[0] >= 35 * 6 and heights[1] >= 35 * 3, heights
    assert "Verifier strength" not in browser.load("/environment?env=term-ok-1",
                                                   "environment-no-strength")
