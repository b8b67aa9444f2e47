"""The systemd unit (images/systemd/envcheck.service) and the documented lines that install it
(docs/how-to/deploy.md).

``systemd-analyze verify`` (Debian's systemd, which scripts/test.sh installs) checks the unit
with its ExecStart pointed at this venv's envcheck (the unit names /opt/envcheck, where the
documented lines install it); it exits 0 on a misspelt key too, so a clean check is exit 0 with
nothing printed. The daemon is then started as the unit starts it: its command line, the
settings of its EnvironmentFile and Environment= lines, the token systemd would hand over."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT, SESSION_TAG, envcheck_cmd
from tests.deploy import HTTP_TIMEOUT, write_catalogue
from tests.docs_pages import blocks, page, section
from tests.polling import stop, wait_for
from tests.ports import free_port

UNIT = ROOT / "images" / "systemd" / "envcheck.service"
ENV_FILE = ROOT / "images" / "systemd" / "envcheck.env"
INSTALLED_AT = "/opt/envcheck/bin/envcheck"


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze not found: apt-get install systemd (scripts/test.sh does)")
    return path


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([systemd_analyze(), "verify", "--man=no", str(unit)],
                          capture_output=True, text=True, timeout=60, check=False)


def unit_here(folder: Path, text: str | None = None) -> Path:
    """The unit as shipped (or ``text``), its ExecStart on this venv's envcheck."""
    [envcheck] = envcheck_cmd()[:1]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "envcheck.service"
    path.write_text((text or UNIT.read_text(encoding="utf-8")).replace(INSTALLED_AT, envcheck),
                    encoding="utf-8")
    return path


def settings(key: str) -> list[str]:
    """Every value of ``key=`` in the unit, in order."""
    return [line.split("=", 1)[1] for line in UNIT.read_text(encoding="utf-8").splitlines()
            if line.startswith(f"{key}=")]


def install_block() -> str:
    """The shell block under 'The service unit' in docs/how-to/deploy.md."""
    found = blocks(section(page("how-to/deploy.md"), "## The service unit"), "sh")
    assert found, "docs/how-to/deploy.md: no install block under '## The service unit'"
    return found[0]


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    proc = verify(unit_here(tmp_path))
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), (
        proc.stdout + proc.stderr)


def test_verify_reports_a_misspelt_key(tmp_path: Path) -> None:
    bad = UNIT.read_text(encoding="utf-8").replace("KillMode=", "KilMode=")
    proc = verify(unit_here(tmp_path, bad))
    assert "KilMode" in proc.stdout + proc.stderr


def test_the_documented_install_makes_what_the_unit_reads() -> None:
    block = install_block()
    for source in ("images/systemd/envcheck.service", "images/systemd/envcheck.env"):
        assert source in block and (ROOT / source).is_file(), source
    [start] = settings("ExecStart")
    binary, _, catalogue = shlex.split(start)
    credential = settings("LoadCredential")[0].split(":", 1)[1]
    env_file = settings("EnvironmentFile")[0].lstrip("-")
    for path in (str(Path(binary).parent.parent), catalogue, credential, env_file,
                 "/etc/systemd/system/envcheck.service"):
        assert path in block, f"the documented install lines do not make {path}"
    assert "systemctl enable --now envcheck" in block
    assert "journalctl -u envcheck" in block


@pytest.mark.docker
@pytest.mark.timeout(180)
def test_the_daemon_runs_as_the_unit_starts_it(tmp_path: Path) -> None:
    """ExecStart with the unit's environment: %S and %d are the state and credentials
    directories systemd would make; the port and a short window are this test's."""
    state, credentials = tmp_path / "state", tmp_path / "credentials"
    state.mkdir()
    credentials.mkdir()
    token = "unit-test-token-0123456789"
    (credentials / "api-token").write_text(token, encoding="utf-8")
    env = {"PATH": os.environ["PATH"], "ENVCHECK_CONTAINER_TAG": SESSION_TAG,
           "ENVCHECK_MIN_SCHEDULE": "1s"}
    for line in ENV_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value
    for assignment in settings("Environment"):
        key, value = assignment.split("=", 1)
        env[key] = value.replace("%S", str(state)).replace("%d", str(credentials))
    port = free_port()
    env["ENVCHECK_PORT"] = str(port)
    env["ENVCHECK_WINDOW"] = "2"
    catalogue = write_catalogue(tmp_path / "catalogue", "unit",
                                {"unit-healthy": "envcheck-demo/healthy:latest"})
    [start] = settings("ExecStart")
    argv = [sys.executable, "-m", "envcheck.cli.app",
            *shlex.split(start)[1:-1], str(catalogue.parent)]
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env={**env, "PYTHONPATH": str(ROOT)}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: requests.get(f"{url}/readyz", timeout=HTTP_TIMEOUT).ok, timeout_s=60,
                 what="/readyz", proc=proc, details=lambda: log.read_text(errors="replace"))
        wait_for(lambda: requests.get(f"{url}/v1/environments/unit-healthy",
                                      timeout=HTTP_TIMEOUT).json().get("state") == "healthy",
                 timeout_s=60, what="a probed environment", proc=proc,
                 details=lambda: log.read_text(errors="replace"))
        answer = requests.post(f"{url}/v1/quarantine/unit-healthy",
                               json={"reason": "unit test"}, timeout=HTTP_TIMEOUT,
                               headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text  # the credential is the API's token
        assert (state / "envcheck" / "envcheck.db").is_file(), "the store is not in %S/envcheck"
    finally:
        stop(proc, timeout_s=150, sig=signal.SIGTERM)
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
