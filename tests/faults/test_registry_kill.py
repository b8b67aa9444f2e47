"""envcheck killed with SIGKILL mid-pull: the cache ledger stays consistent (what was recorded
before is intact, the half pull is not in it), the engine keeps no image that looks complete,
and at the next start the ledger is settled with the engine.

Real parts: a subprocess pulling through the registry stage, the real engine, the real test
registry behind the fault proxy (frozen once the pull's bytes flow, so the kill lands
mid-blob), the ledger's SQLite file read back as the next process would."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from envcheck.registry.cache import reconcile
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.pull import PullTarget
from tests.conftest import ROOT
from tests.pulls import MB, Pulled, push_sized
from tests.registry_images import new_repository
from tests.registry_proxy import RegistryProxy
from tests.registryd import Registry

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_sigkill_mid_pull_leaves_the_ledger_consistent(
        docker_client: docker.DockerClient, registry_htpasswd: Registry,
        registry_proxy: RegistryProxy, pulled_images: Pulled, tmp_path: Path) -> None:
    repo = new_repository()
    small = PullTarget(f"{registry_proxy.host}/{repo}",
                       push_sized(docker_client, registry_htpasswd, repo, "small", 1 * MB))
    big = PullTarget(f"{registry_proxy.host}/{repo}",
                     push_sized(docker_client, registry_htpasswd, repo, "big", 48 * MB))
    pulled_images.add(small, big)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "ENVCHECK_TEST_REGISTRY_LOGIN": f"{registry_htpasswd.user}:"
                                           f"{registry_htpasswd.password}"}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.registry_pull_child", str(tmp_path), small.repository,
         small.digest, big.repository, big.digest], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline().strip() == f"pulled {small.digest}"
        for line in child.stderr:  # the big pull's progress: freeze once its bytes flow
            doc = json.loads(line) if line.startswith("{") else {}
            if doc.get("event") == "pull progress" and doc.get("image") == big.reference \
                    and doc.get("downloaded_bytes", 0) > 0:
                registry_proxy.freeze()
                break
        else:
            pytest.fail(f"the child never reported bytes of the big pull ({child.wait()})")
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)
    engine_id = str(docker_client.info()["ID"])
    path = ledger_path(tmp_path, engine_id)
    with sqlite3.connect(path) as raw:  # as the next process finds it
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    ledger = SqliteLedger(path, engine_id)
    assert [e.reference for e in ledger.entries()] == [small.reference]
    assert ledger.pending() == [(big.repository, big.digest)]  # an intent, not an entry
    registry_proxy.thaw()  # the registry wakes: the killed client's pull must not finish
    time.sleep(3)
    assert not pulled_images.present(big) and not pulled_images.tagged(big)
    assert pulled_images.present(small) and pulled_images.tagged(small)
    # the intent dropped, nothing else (only this test's images: the engine is shared)
    assert reconcile(docker_client.api, ledger,
                     adopt=lambda t: t.repository == big.repository) == (0, 0)
    assert ledger.pending() == []
    assert [e.reference for e in ledger.entries()] == [small.reference]
    ledger.close()
