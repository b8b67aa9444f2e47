"""The labels on every envcheck container: whose it is, for which run and environment, so
the reaper, an operator and the tests can find them on the engine."""

from __future__ import annotations

__all__ = ["LABEL_ENV", "LABEL_MANAGED", "LABEL_OWNER", "LABEL_RUN", "LABEL_RUNTIME",
           "LABEL_SANDBOX", "LABEL_TAG"]

LABEL_MANAGED = "org.envcheck.managed"
LABEL_RUN = "org.envcheck.run"
LABEL_ENV = "org.envcheck.env"
LABEL_OWNER = "org.envcheck.owner"
# An operator's tag on every container (ENVCHECK_CONTAINER_TAG), e.g. a deployment name.
LABEL_TAG = "org.envcheck.tag"
# One runtime (engine client) of a process, and one sandbox of it: the sandbox key is chosen
# before the create call, so even a container whose create response was lost is known.
LABEL_RUNTIME = "org.envcheck.runtime"
LABEL_SANDBOX = "org.envcheck.sandbox"
