"""``envcheck dashboard`` served for a test, and Debian's headless Chromium to look at it: one
way to start, wait for and stop the server, for the browser tests and the wheel's; and one way
to open a page and wait until it is whole (:func:`open_whole`).

Playwright drives ``/usr/bin/chromium`` (the Debian package ``chromium``); Playwright's own
browsers are never downloaded.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.polling import stop, wait_for
from tests.ports import free_port, listening_addresses

__all__ = ["CHROMIUM_FLAGS", "IDLE", "LOAD_ABORTED", "chromium_path", "failure_boxes",
           "open_whole", "served_dashboard"]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
# A Streamlit page whose script has finished running.
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"
# What the browser and the frontend say of a part of the page whose request was aborted
# (envcheck.dashboard.page_recovery reloads the page then): console errors a whole page may
# leave behind.
LOAD_ABORTED = re.compile(
    r"net::ERR_NETWORK_CHANGED|Failed to fetch dynamically imported module|Unable to preload "
    r"CSS|error loading dynamically imported module|Cannot load Streamlit frontend code")
# The boxes a page shows in place of what it could not draw: an exception, or an element whose
# script or stylesheet did not arrive (an error box with the stack of the frontend's error).
_FAILURE_BOXES = """() => [...document.querySelectorAll(
    '[data-testid=stException], [data-testid=stAlertContentError]')]
    .filter(box => box.matches('[data-testid=stException]')
                   || box.querySelector('[data-testid=stErrorElementStack]'))
    .map(box => box.innerText)"""


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is not installed: the browser tests need Debian's package "
                    "(apt-get install chromium); Playwright's own browsers are never downloaded")
    return found


@contextlib.contextmanager
def served_dashboard(command: Sequence[str], log_path: Path, *, env: Mapping[str, str],
                     cwd: Path | None = None) -> Iterator[str]:
    """``command`` (``envcheck dashboard`` and its options but the port) serving on a free
    port; yields its base URL once it answers, on 127.0.0.1 only. On exit it is stopped with
    SIGTERM and must exit cleanly (its log is the failure message)."""
    port = free_port()
    with log_path.open("w") as log:
        proc = subprocess.Popen([*command, "--port", str(port)], cwd=cwd, env=dict(env),
                                stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: requests.get(f"{base}/_stcore/health", timeout=2).ok,
                     timeout_s=120, what="the dashboard's health endpoint", proc=proc,
                     details=log_path.read_text)
            assert listening_addresses(port) == {"0100007F"}, "must listen on 127.0.0.1 only"
            yield base
        finally:
            stop(proc, 30)
    assert proc.returncode == 0, log_path.read_text()


def failure_boxes(page: Any) -> list[str]:
    """The texts of the error boxes ``page`` shows in place of an element (see above)."""
    found: list[str] = page.evaluate(_FAILURE_BOXES)
    return found


def open_whole(page: Any, url: str, *, timeout_s: float = 90.0) -> int:
    """Open ``url`` and wait until the page is whole: its script idle, no reload of the
    page-recovery script pending, and both still so a moment later. A navigation the browser
    aborts (``net::ERR_NETWORK_CHANGED`` on the document itself: Chromium's error page then
    reloads itself) is tried again. Returns how many times the recovery script reloaded it;
    the caller asserts on :func:`failure_boxes`."""
    from playwright.sync_api import Error as PlaywrightError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            page.goto(url)
            break
        except PlaywrightError as exc:
            if "ERR_NETWORK_CHANGED" not in str(exc) or time.monotonic() > deadline:
                raise
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        try:
            state = page.evaluate(
                """idle => [document.documentElement.dataset.envcheckRecovery || '',
                            !!document.querySelector(idle),
                            sessionStorage.getItem('envcheck.page-recovery') || '{}']""", IDLE)
        except PlaywrightError:  # the page is reloading: its context went away
            quiet_since = None
            page.wait_for_timeout(200)
            continue
        recovery, idle, reloads = state
        if recovery == "reloading" or not idle:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif recovery == "gave-up" or time.monotonic() - quiet_since >= 2.0:
            return int(json.loads(reloads).get("count", 0))
        page.wait_for_timeout(200)
    pytest.fail(f"{url} was never whole and idle within {timeout_s:.0f} s")
