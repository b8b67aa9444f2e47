"""How a Harbor task becomes an envcheck environment: image, user, workdir, limits, timeouts,
network and the tests probe's spec. A dataset loader calls :func:`harbor_parts` per task folder.

- **Image**: the operator's override for the task, else ``environment.docker_image`` (both used
  as given), else ``envcheck-harbor/<task>:<hash of environment/>``, built by the tests probe
  (an unchanged folder keeps its tag and is never rebuilt).
- **Limits**: ``cpus`` and ``memory_mb`` from ``[environment]``; pids, tmpfs and output caps
  from the suite. ``storage_mb`` is not enforced (noted in the spec).
- **Timeouts**: the verifier, agent (the oracle's ``solve.sh``) and build timeouts go into the
  spec; ``probe_s`` grows to fit the declared worst case of the whole protocol.
- **Network**: ``none``, unless the task allows the internet (``allow_internet``, or
  ``network_mode`` public/allowlist) *and* the operator named a network for such tasks.
- **Compose tasks** (``environment/docker-compose.yaml``): the image is the agent service's,
  built by the tests probe like a Dockerfile task's, tagged by the hash of ``environment/``;
  every run brings the task's services up (:mod:`envcheck.sandbox.compose`).
- **GPU tasks**, and tasks whose verifier Harbor runs in a container of its own
  (``[verifier].environment_mode = "separate"`` or a ``[verifier.environment]`` table), carry
  an ``unsupported`` reason: the probe skips them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.catalogue.harbor_task import HarborTask
from envcheck.catalogue.models import Limits, Timeouts
from envcheck.catalogue.probe_specs import DEFAULT_RERUNS, Adversarial, LeakChecks, Strength
from envcheck.core.errors import CatalogueError, CatalogueIssue

__all__ = ["DEFAULT_AGENT_TIMEOUT_S", "IMAGE_REPOSITORY", "HarborParts", "harbor_parts",
           "image_tag"]

IMAGE_REPOSITORY = "envcheck-harbor"
# Harbor runs an agent without a timeout when the task sets none; envcheck bounds every
# command, so the oracle gets this much.
DEFAULT_AGENT_TIMEOUT_S = 600.0
_MAX_CPUS = 64


@dataclass(frozen=True, slots=True)
class HarborParts:
    image: str
    user: str
    workdir: str
    limits: Limits
    timeouts: Timeouts
    harbor: HarborVerifierSpec


def image_tag(task: str, context_hash: str) -> str:
    """The tag of a task's image built from its ``environment/`` folder: one per content."""
    name = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:100] or "task"
    return f"{IMAGE_REPOSITORY}/{name}:{context_hash[:16]}"


def _user(value: str | int | None) -> str | None:
    return None if value is None else str(value)


def harbor_parts(task: HarborTask, *, limits: Limits, timeouts: Timeouts,
                 network: str | None = None, image_overrides: Mapping[str, str] | None = None,
                 reruns: int = DEFAULT_RERUNS,
                 agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S,
                 adversarial: Adversarial | None = None,
                 leaks: LeakChecks | None = None,
                 strength: Strength | None = None) -> HarborParts:
    """The environment parts of ``task`` over the suite's ``limits`` and ``timeouts``.

    ``network`` is the Docker network the operator lets internet-allowed tasks join (None:
    every task runs with no network); ``image_overrides`` maps task names to prebuilt images;
    ``adversarial``: the adversarial controls to play against the task's verifier;
    ``leaks``: the answer-leak checks to run on its image; ``strength``: the wrong-output
    controls (mutants of the files ``solve.sh`` writes) its verifier must refuse.
    """
    cfg = task.config
    env = cfg.environment
    if env.cpus > _MAX_CPUS:
        raise CatalogueError([CatalogueIssue(f"{task.folder}/task.toml", None,
                                             "environment.cpus", f"{env.cpus} is more than "
                                             f"envcheck's sandbox limit of {_MAX_CPUS}")])
    unsupported = None
    if env.gpus:
        unsupported = f"environment.gpus = {env.gpus}: envcheck's sandboxes have no GPU"
    elif cfg.verifier.separate:
        unsupported = ("verifier.environment_mode = 'separate': Harbor verifies in a container "
                       "of its own, envcheck only in the agent's")
    notes = [f"environment.storage_mb = {env.storage_mb} is not enforced"]
    if env.internet and env.network_mode == "allowlist":
        notes.append("environment.allowed_hosts is not enforced: the whole named network "
                     "is reachable")
    override = (image_overrides or {}).get(task.name)
    # a compose task's images are its services' own (built, or named in its compose file)
    prebuilt = None if task.kind == "compose" else override or env.docker_image
    agent_s = cfg.agent.timeout_sec or agent_timeout_s
    spec = HarborVerifierSpec(
        task=task.name, task_dir=task.path, image=prebuilt,
        context_hash=None if prebuilt else task.context_hash,
        tests_hash=task.tests_hash, solution_hash=task.solution_hash,
        verifier_timeout_s=cfg.verifier.timeout_sec, agent_timeout_s=agent_s,
        build_timeout_s=env.build_timeout_sec, verifier_env=cfg.verifier.env,
        solution_env=cfg.solution.env, task_env=env.env, command_dir=env.workdir,
        verifier_user=_user(cfg.verifier.user),
        agent_user=_user(cfg.agent.user),
        network=network if network and env.internet else "none",
        compose="environment/docker-compose.yaml" if task.kind == "compose" else None,
        reruns=reruns, unsupported=unsupported, notes=tuple(notes), adversarial=adversarial,
        leaks=leaks, strength=strength, protocol=task.protocol)
    if prebuilt:
        image = prebuilt
    else:  # built from environment/ (a compose task: its agent service's image)
        assert task.context_hash is not None
        image = image_tag(task.name, task.context_hash)
    worst = spec.build_timeout_s + (1 + reruns) * spec.verifier_timeout_s + reruns * agent_s
    return HarborParts(
        image=image,
        user=_user(cfg.agent.user) or task.user or "root",
        workdir=next((w for w in (env.workdir, task.workdir) if w and w.startswith("/")), "/"),
        limits=limits.model_copy(update={"cpus": float(env.cpus),
                                         "memory_mb": max(env.memory_mb, 16)}),
        timeouts=timeouts.model_copy(update={"probe_s": max(timeouts.probe_s, worst)}),
        harbor=spec)
