"""What the tests probe checks for an environment made from a Harbor task folder.

Read from the folder at load (:mod:`envcheck.catalogue.harbor_task`) and carried by the
environment, so the probe never parses ``task.toml`` itself. The folder's location is excluded
from dumps: spec hashes depend on the content hashes of ``environment/``, ``tests/`` and
``solution/``, not on where the checkout lives.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from envcheck.catalogue.fields import Seconds
from envcheck.catalogue.probe_specs import DEFAULT_RERUNS, ControlledSpec

__all__ = ["CURRENT_PROTOCOL", "CURRENT_RELEASE", "PROTOCOL_OF_RELEASE", "HarborProtocol",
           "HarborRelease", "HarborVerifierSpec"]

# The Harbor releases whose verifier envcheck mirrors, and the protocol each runs: 0.25.0
# changed the verifier's steps (reward files removed after the agent, tests/ and solution/
# copied through .harborignore); 0.26.0 left them as they were.
HarborRelease = Literal["0.24", "0.25", "0.26"]
HarborProtocol = Literal["0.24", "0.25"]  # named after the release that introduced it
PROTOCOL_OF_RELEASE: dict[str, HarborProtocol] = {"0.24": "0.24", "0.25": "0.25",
                                                  "0.26": "0.25"}
CURRENT_RELEASE: HarborRelease = "0.26"
CURRENT_PROTOCOL: HarborProtocol = PROTOCOL_OF_RELEASE[CURRENT_RELEASE]


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
    task_env: dict[str, str] = Field(default_factory=dict, description=(
        "[environment].env: the container's own variables in Harbor, so every command's, "
        "under [verifier].env and [solution].env"))
    command_dir: str | None = Field(None, description=(
        "[environment].workdir: where Harbor runs every command; None: the image's WORKDIR"))
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
    # Always dumped, never a later key left out while unset: evidence gathered before the
    # protocol was named (or under the other one) must not stand for this one.
    protocol: HarborProtocol = Field(CURRENT_PROTOCOL, description=(
        "Harbor's verifier steps mirrored: '0.25' (Harbor 0.25.0 and 0.26.0: the reward files "
        "removed as root after the agent acts, tests/ and solution/ copied through "
        ".harborignore) or '0.24' (Harbor 0.24.0: neither)"))

    @property
    def removes_stale_rewards(self) -> bool:
        """The verifier removes reward.txt and reward.json before it copies tests/ in."""
        return self.protocol != "0.24"

    @property
    def ignore_rules(self) -> bool:
        """tests/ and solution/ are copied through their .harborignore rules."""
        return self.protocol != "0.24"

    # Keys added after specs were first hashed: left out of dumps while unset.
    _LATER_KEYS: ClassVar[tuple[str, ...]] = (*ControlledSpec._LATER_KEYS, "compose")

