"""What the tests probe checks for an environment made from a Harbor task folder.

Read from the folder at load (:mod:`envcheck.catalogue.harbor_task`) and carried by the
environment, so the probe never parses ``task.toml`` itself. The folder's location is excluded
from dumps: spec hashes depend on the content hashes of ``environment/``, ``tests/`` and
``solution/``, not on where the checkout lives.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from envcheck.catalogue.fields import Seconds
from envcheck.catalogue.probe_specs import DEFAULT_RERUNS, ControlledSpec

__all__ = ["HarborVerifierSpec"]


class HarborVerifierSpec(ControlledSpec):
    """A Harbor task's verification: nop must score 0, the oracle 1, every rerun."""

    task: str = Field(min_length=1, description="the task's name ([task].name or its folder)")
    task_dir: SkipJsonSchema[str] = Field(exclude=True, description="absolute path of the folder")
    image: str | None = Field(None, description=(
        "an image used as given (environment.docker_image, or the operator's override); "
        "None: build environment/Dockerfile"))
    context_hash: str | None = Field(None, description="hash of environment/ (files, modes)")
    tests_hash: str
    solution_hash: str | None = Field(None, description="None: no solution/solve.sh")
    verifier_timeout_s: Seconds = 600.0
    agent_timeout_s: Seconds = 600.0
    build_timeout_s: Seconds = 600.0
    verifier_env: dict[str, str] = Field(default_factory=dict)
    solution_env: dict[str, str] = Field(default_factory=dict)
    verifier_user: str | None = None
    agent_user: str | None = None
    network: str = Field("none", description=(
        "the Docker network the task's containers join: 'none' unless the task allows the "
        "internet and the operator named a network"))
    reruns: int = Field(DEFAULT_RERUNS, ge=1, le=50, description=(
        "oracle runs, each in a fresh container; any disagreement is flaky"))
    unsupported: str | None = Field(None, description=(
        "why envcheck cannot run this task (GPUs): the probe skips it"))
    compose: str | None = Field(None, description=(
        "the task's compose file (environment/docker-compose.yaml): every run brings its "
        "services up, within build_timeout_s, and runs in the agent's; None: one container"))
    notes: tuple[str, ...] = Field((), description="task.toml settings envcheck cannot enforce")

    # Keys added after specs were first hashed: left out of dumps while unset.
    _LATER_KEYS: ClassVar[tuple[str, ...]] = (*ControlledSpec._LATER_KEYS, "compose")

