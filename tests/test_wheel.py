"""envcheck as a user installs it: the wheel holds every package and the dashboard, and
``envcheck dashboard`` serves the seeded store from a fresh venv, outside any checkout.

The wheel is built offline from a copy of the sources (``pip wheel --no-build-isolation`` with
the setuptools of the dev extra) and installed with ``--no-deps`` into a new venv; its
dependencies come from the test's own environment through one ``.pth`` line, which adds that
site-packages as a plain path (its ``.pth`` files, the editable install among them, are not
run), so every ``envcheck`` module the venv imports is the wheel's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from setuptools import find_packages

from tests import dashboard_seed as fleet
from tests.browser import (
    CHROMIUM_FLAGS,
    IDLE,
    chromium_path,
    failure_boxes,
    open_whole,
    served_dashboard,
)
from tests.conftest import ROOT

# What `import envcheck.client` may bring in besides the standard library: requests (and what
# it imports) and tenacity for the retries.
CLIENT_MAY_IMPORT = {"envcheck", "requests", "urllib3", "idna", "charset_normalizer", "certifi",
                     "tenacity"}
SERVER_STACK = {"fastapi", "starlette", "uvicorn", "docker", "sqlalchemy", "sqlmodel", "alembic",
                "streamlit", "pydantic", "ray", "apscheduler", "prometheus_client"}
# What ``import envcheck.client`` adds: the interpreter's own start (a distribution's
# sitecustomize, .pth hooks) is there before it and is no import of the client's.
IMPORTED = ("import sys; before = set(sys.modules); import envcheck.client; "
            "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
            "- set(sys.stdlib_module_names))))")


def third_party_imports_of_the_client(python: str, cwd: Path, env: dict[str, str]) -> set[str]:
    proc = subprocess.run([python, "-c", IMPORTED], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return {m for m in proc.stdout.split() if not m.startswith("_") and m != "cython_runtime"}


def test_the_client_imports_requests_alone() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    imported = third_party_imports_of_the_client(sys.executable, ROOT, env)
    assert imported & SERVER_STACK == set()
    assert imported <= CLIENT_MAY_IMPORT, imported - CLIENT_MAY_IMPORT


def test_every_package_is_in_the_wheel_list() -> None:
    """pyproject.toml lists the packages (``packages.find`` cannot map dashboards/): a package
    added under envcheck/ or dashboards/ must be listed there too."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {*find_packages(str(ROOT), include=["envcheck", "envcheck.*"]),
               "envcheck.dashboards",
               *(f"envcheck.dashboards.{p}" for p in find_packages(str(ROOT / "dashboards")))}
    assert set(setuptools["packages"]) == on_disk
    assert setuptools["package-dir"] == {"envcheck.dashboards": "dashboards"}


# --- the wheel in a fresh venv ------------------------------------------------------------------

@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    envcheck: Path
    home: Path  # a working directory outside the checkout
    env: dict[str, str]


def build_wheel(out: Path, work: Path) -> Path:
    """The wheel built from a copy of what the sdist would hold (the checkout stays clean)."""
    src = work / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in ("envcheck", "dashboards"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", str(src), "-w", str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [wheel] = out.glob("envcheck-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(work / "dist", work)
    target = work / "venv"
    venv.create(target, with_pip=False)  # no system site-packages, no copy of the checkout
    python = target / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(purelib) / "zz-envcheck-test-dependencies.pth").write_text("\n".join(ours) + "\n")
    home = work / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("ENVCHECK_API", "ENVCHECK_DASHBOARD",
                                                      "STREAMLIT_", "VIRTUAL_ENV"))}
    proc = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                           "--disable-pip-version-check", str(wheel)],
                          cwd=home, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Installed(wheel, python, target / "bin" / "envcheck", home, env)


@pytest.mark.slow
def test_the_wheel_holds_the_dashboard(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for shipped in ("envcheck/dashboards/app.py", "envcheck/dashboards/envcheck_ui.py",
                    "envcheck/dashboards/views/fleet.py", "envcheck/dashboards/views/quarantine.py",
                    "envcheck/dashboards/.streamlit/config.toml",
                    "envcheck/dashboards/serve.py", "envcheck/dashboard/page_recovery.py",
                    "envcheck/store/migrations/script.py.mako",
                    "envcheck/kinds/dependencies/dependencies.sh", "envcheck/py.typed"):
        assert shipped in names, shipped
    # every non-Python file of the package (trick scripts, shell helpers) ships too
    data = {str(f.relative_to(ROOT)) for f in (ROOT / "envcheck").rglob("*")
            if f.is_file() and f.suffix not in (".py", ".pyc")}
    tricks = {str(f.relative_to(ROOT))
              for f in (ROOT / "envcheck/kinds/adversarial/tricks").iterdir()}
    assert (data | tricks) - names == set()
    assert not any(n.startswith(("dashboards/", "tests/")) for n in names)


@pytest.mark.slow
def test_the_installed_modules_are_the_wheels(installed: Installed) -> None:
    proc = subprocess.run(
        [installed.python, "-c", "import envcheck, envcheck.dashboards, envcheck.cli.dashboard as"
         " d; print(envcheck.__file__); print(envcheck.dashboards.__file__); "
         "print(d.dashboard_app())"],
        cwd=installed.home, env=installed.env, capture_output=True, text=True, timeout=120,
        check=True)
    site = installed.python.parent.parent.resolve()
    for line in proc.stdout.split():
        assert Path(line).resolve().is_relative_to(site), line
    assert proc.stdout.split()[-1].endswith("envcheck/dashboards/app.py")


@pytest.mark.slow
def test_the_installed_client_imports_requests_alone(installed: Installed) -> None:
    imported = third_party_imports_of_the_client(str(installed.python), installed.home,
                                                 installed.env)
    assert imported & SERVER_STACK == set()
    assert imported <= CLIENT_MAY_IMPORT, imported - CLIENT_MAY_IMPORT


@pytest.fixture
def served(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``envcheck dashboard`` of the wheel's venv, run outside the checkout, over a copy of the
    seeded store."""
    template = tmp_path_factory.getbasetemp() / "dashboard-template.db"
    fleet.sqlite_template(template)
    url = fleet.copy_sqlite(template, installed.home / "envcheck.db")
    with served_dashboard([str(installed.envcheck), "dashboard", "--database", url],
                          installed.home / "dashboard.log", env=installed.env,
                          cwd=installed.home) as base:
        yield base


@pytest.mark.slow
def test_envcheck_dashboard_runs_from_the_wheel(served: str) -> None:
    health = requests.get(f"{served}/_stcore/health", timeout=10)
    assert health.status_code == 200 and health.text == "ok"
    index = requests.get(served, timeout=10, headers={"Accept": "text/html"})
    assert index.status_code == 200 and "<title>" in index.text
    assert "envcheck.page-recovery" in index.text  # served through the wheel's serve.py
    # The pages are Python run by the server: a browser shows that they ran, from the wheel.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for path, title, expected in (("/", "Fleet", "Environments 21"),
                                          ("/quarantine", "Quarantine", "Read-only.")):
                open_whole(page, served + path)
                # the page's title is drawn while its script runs; idle after it, the run ended
                page.wait_for_selector(f"h1:has-text('{title}')", timeout=60_000)
                page.wait_for_selector(IDLE, timeout=60_000)
                assert failure_boxes(page) == []
                # an idle marker can show between two reruns: wait for the content itself
                page.wait_for_function(
                    """expected => document.querySelector('[data-testid=stApp]')
                        .innerText.split(/\\s+/).join(' ').includes(expected)""",
                    arg=expected, timeout=60_000)
                text = " ".join(page.inner_text("[data-testid=stApp]").split())
                assert expected in text, (path, text)
        finally:
            browser.close()
