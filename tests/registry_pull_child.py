"""A process that pulls through the registry stage, for tests that kill it: its ledger under
the data directory given, JSON logs on stderr (a progress line per event).

    python -m tests.registry_pull_child DATA_DIR REPOSITORY DIGEST [REPOSITORY DIGEST ...]

The registry's login comes in ``ENVCHECK_TEST_REGISTRY_LOGIN`` (``user:password``), as the
catalogue would name it. Each pull done prints ``pulled <digest>`` on stdout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import docker

from envcheck.core.logs import configure
from envcheck.registry.cache import ImageCache
from envcheck.registry.credentials import CredentialSource, RegistryCredentials
from envcheck.registry.images import LocalImages
from envcheck.registry.ledger import SqliteLedger, ledger_path
from envcheck.registry.pull import Puller, PullLimits, credentials_from, registry_of


def main(argv: list[str]) -> int:
    configure("INFO")
    data_dir, pairs = Path(argv[0]), argv[1:]
    client = docker.from_env(version="1.41", timeout=60)
    engine_id = str(client.info()["ID"])
    registries = {registry_of(repository) for repository in pairs[::2]}
    login = CredentialSource(env="ENVCHECK_TEST_REGISTRY_LOGIN")
    credentials = RegistryCredentials(dict.fromkeys(registries, login))
    puller = Puller(client.api, limits=PullLimits(log_every_s=0.0),
                    credentials=credentials_from(credentials))
    ledger = SqliteLedger(ledger_path(data_dir, engine_id), engine_id)
    images = LocalImages(client.api, puller, ImageCache(client.api, ledger, None))
    for repository, digest in zip(pairs[::2], pairs[1::2], strict=True):
        images.ensure(repository, digest, time.monotonic() + 600)
        print(f"pulled {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
