"""A process pulling one image through the registry stage as a Ray node's worker process does
(``RegistryImages.on_engine``: the engine ``DOCKER_HOST`` names, its ledger under the data
directory given, the budget), for tests that run two at once on one engine.

    python -m tests.registry_budget_child DATA_DIR BUDGET REPOSITORY DIGEST

Prints ``ready`` once its stage is open, waits for a line on stdin, pulls, then prints
``pulled <digest>`` or ``refused <reason>``; JSON logs on stderr. Its pulls are not held for
the cache's minimum age (``min_age_s`` 0): another process may evict one once it is done.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import docker
import docker.utils

from envcheck.core.errors import RegistryFailed
from envcheck.core.logs import configure
from envcheck.registry.fleet import RegistryImages, RegistrySettings


def main(argv: list[str]) -> int:
    configure("INFO")
    data_dir, budget, repository, digest = argv
    api = docker.APIClient(**docker.utils.kwargs_from_env(), timeout=60)
    stage = RegistryImages.on_engine(api, RegistrySettings(Path(data_dir), budget), {})
    images = stage.images
    assert images is not None
    images.cache.min_age_s = 0.0
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        images.ensure(repository, digest, time.monotonic() + 300)
    except RegistryFailed as exc:
        print(f"refused {exc.reason.value}", flush=True)
        return 0
    finally:
        stage.close()
    print(f"pulled {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
