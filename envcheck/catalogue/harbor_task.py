"""Harbor task folders, read into frozen models: one task per folder.

The layout and the ``task.toml`` keys follow Harbor's own task model and harness (read from
``src/harbor/models/task/config.py``, ``models/task/task.py``, ``models/trial/paths.py``,
``environments/docker/docker.py`` and ``verifier/verifier.py`` of Harbor's repository, task
schema 1.0/1.1, and harborframework.com/docs/tasks)::

    task/
    ├── task.toml          [verifier] timeout_sec env user; [agent] timeout_sec user;
    │                      [environment] docker_image cpus memory_mb storage_mb gpus
    │                      allow_internet network_mode build_timeout_sec workdir env;
    │                      [solution] env
    ├── instruction.md
    ├── environment/       Dockerfile (the build context) or docker-compose.yaml
    ├── tests/test.sh      copied to /tests; writes /logs/verifier/reward.txt or reward.json
    └── solution/solve.sh  optional; copied to /solution by the oracle

``tests/`` and ``solution/`` are checked as Harbor checks them at load, under the protocol the
dataset names (:mod:`envcheck.catalogue.harbor_files`): a link out of the task, or a
``.harborignore`` that excludes ``test.sh`` or ``solve.sh``, is an issue naming the file.

Like Harbor, unknown keys are ignored (its metadata is free-form) and values are coerced
leniently (``"120"`` is 120 s). Every problem is one :class:`CatalogueIssue` naming the folder's
file and the key: ``tasks/foo/task.toml: verifier.timeout_sec: must be a number``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envcheck.catalogue.harbor_files import TaskInputError, select_inputs
from envcheck.catalogue.harbor_spec import CURRENT_PROTOCOL, HarborProtocol
from envcheck.catalogue.treehash import tree_hash
from envcheck.core.errors import CatalogueError, CatalogueIssue

__all__ = ["HarborTask", "TaskToml", "read_task"]

Kind = Literal["dockerfile", "compose", "prebuilt"]
_TOML_LINE = re.compile(r"\(at line (\d+)")
_MESSAGES = {"float_parsing": "must be a number", "float_type": "must be a number",
             "int_parsing": "must be an integer", "int_type": "must be an integer",
             "int_from_float": "must be an integer", "bool_parsing": "must be true or false",
             "bool_type": "must be true or false", "string_type": "must be a string",
             "dict_type": "must be a table", "model_type": "must be a table",
             "greater_than": "must be above 0", "literal_error": "is not one of the allowed "
             "values"}


class _Section(BaseModel):
    # Harbor's models ignore unknown keys and coerce leniently: so does envcheck, here only.
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Verifier(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: str | None = None  # 'separate': a container of its own (not run)
    environment: dict[str, Any] | None = None  # that container's [environment]

    @property
    def separate(self) -> bool:
        """Harbor runs this verifier in a fresh container of its own, not the agent's."""
        return self.environment_mode == "separate" or (
            self.environment_mode is None and self.environment is not None)


class _Agent(_Section):
    timeout_sec: float | None = Field(None, gt=0)
    user: str | int | None = None


class _Solution(_Section):
    env: dict[str, str] = Field(default_factory=dict)


def _size_mb(text: str) -> int:
    """Harbor's deprecated ``memory``/``storage`` strings: ``"4G"``, ``"512M"``."""
    units = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    value = text.strip().upper()
    if not value or value[-1] not in units:
        raise ValueError(f"{text!r} is not a size such as '4G' or '512M'")
    try:
        return int(float(value[:-1]) * units[value[-1]])
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as '4G' or '512M'") from None


class _Environment(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    cpus: int = Field(1, gt=0)
    memory_mb: int = Field(2048, gt=0)
    storage_mb: int = Field(10240, gt=0)
    gpus: int = Field(0, ge=0)
    allow_internet: bool = True
    network_mode: Literal["public", "no-network", "allowlist"] | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    workdir: str | None = None  # where Harbor runs every command (over the image's WORKDIR)
    env: dict[str, str] = Field(default_factory=dict)  # the container's, every command's

    @model_validator(mode="before")
    @classmethod
    def _deprecated_sizes(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
                if isinstance(data.get(old), str):
                    data[new] = _size_mb(data.pop(old))
        return data

    @property
    def internet(self) -> bool:
        """Harbor's baseline policy: network_mode wins, else allow_internet."""
        if self.network_mode is not None:
            return self.network_mode != "no-network"
        return self.allow_internet


class _TaskInfo(_Section):
    name: str = Field(min_length=1)


class TaskToml(_Section):
    """The parts of ``task.toml`` envcheck reads (Harbor's defaults where a key is absent)."""

    task: _TaskInfo | None = None
    verifier: _Verifier = _Verifier()
    agent: _Agent = _Agent()
    environment: _Environment = _Environment()
    solution: _Solution = _Solution()


class HarborTask(BaseModel):
    """One task folder as read: its config, what it holds, and content hashes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    folder: str  # as given: for messages
    path: str  # absolute
    config: TaskToml
    instruction: str
    kind: Kind
    has_solution: bool
    context_hash: str | None  # of environment/ when it builds there
    tests_hash: str
    solution_hash: str | None
    workdir: str | None  # the Dockerfile's last WORKDIR: where Harbor's commands run
    user: str | None  # the Dockerfile's last USER
    protocol: HarborProtocol = CURRENT_PROTOCOL  # the Harbor verifier steps it was read for

    @property
    def environment_dir(self) -> Path:
        return Path(self.path) / "environment"


def _issue(folder: Path, file: str, key: str, message: str, line: int | None = None) -> \
        CatalogueError:
    return CatalogueError([CatalogueIssue(str(folder / file), line, key, message)])


def _read_text(folder: Path, file: str) -> str:
    path = folder / file
    if not path.is_file():
        raise _issue(folder, file, "", "missing")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _issue(folder, file, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    except OSError as exc:
        raise _issue(folder, file, "", f"unreadable: {exc.strerror}") from None


def _parse_toml(folder: Path, text: str) -> TaskToml:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        raise _issue(folder, "task.toml", "", f"not valid TOML: {exc}",
                     int(found.group(1)) if found else None) from None
    try:
        return TaskToml.model_validate(data)
    except ValidationError as exc:
        issues = [CatalogueIssue(str(folder / "task.toml"), None,
                                 ".".join(str(p) for p in err["loc"]),
                                 _MESSAGES.get(err["type"], err["msg"]))
                  for err in exc.errors()]
        raise CatalogueError(issues) from None


def _last_instruction(dockerfile: str, keyword: str) -> str | None:
    """The argument of the Dockerfile's last ``keyword`` line (WORKDIR, USER), if literal."""
    found = None
    for line in dockerfile.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0].upper() == keyword:
            found = parts[1].strip()
    return None if found is None or "$" in found else found


def _check_inputs(folder: Path, has_solution: bool, protocol: HarborProtocol) -> None:
    """tests/ and solution/ as Harbor checks them when it loads the task (and as the oracle
    does before it copies solution/ in)."""
    for name, script, present in (("tests", "test.sh", True),
                                  ("solution", "solve.sh", has_solution)):
        if not present:
            continue
        try:
            select_inputs(folder, name, script, ignore_rules=protocol != "0.24")
        except TaskInputError as exc:
            raise _issue(folder, name, "", f"{exc} (Harbor refuses the task)") from None


def read_task(folder: Path | str, protocol: HarborProtocol = CURRENT_PROTOCOL) -> HarborTask:
    """Read one task folder for Harbor's ``protocol``; raise :class:`CatalogueError` naming
    the file and key."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CatalogueError([CatalogueIssue(str(folder), None, "", "not a task folder")])
    config = _parse_toml(folder, _read_text(folder, "task.toml"))
    instruction = _read_text(folder, "instruction.md")
    env_dir = folder / "environment"
    compose = (env_dir / "docker-compose.yaml").is_file()
    dockerfile = (env_dir / "Dockerfile").is_file()
    kind: Kind
    if compose:
        kind = "compose"
    elif config.environment.docker_image:
        kind = "prebuilt"
    elif dockerfile:
        kind = "dockerfile"
    else:
        raise _issue(folder, "environment/Dockerfile", "", "missing (a task needs "
                     "environment/Dockerfile, environment/docker-compose.yaml or "
                     "environment.docker_image in task.toml)")
    if not (folder / "tests" / "test.sh").is_file():
        raise _issue(folder, "tests/test.sh", "", "missing (the verifier's entry point)")
    docker_text = _read_text(folder, "environment/Dockerfile") if dockerfile else ""
    has_solution = (folder / "solution" / "solve.sh").is_file()
    try:
        _check_inputs(folder, has_solution, protocol)
        return HarborTask(
            name=config.task.name if config.task is not None else folder.resolve().name,
            folder=str(folder), path=str(folder.resolve()), config=config,
            instruction=instruction, kind=kind, has_solution=has_solution,
            context_hash=tree_hash(env_dir) if kind in ("dockerfile", "compose") else None,
            tests_hash=tree_hash(folder / "tests"),
            solution_hash=tree_hash(folder / "solution") if has_solution else None,
            workdir=_last_instruction(docker_text, "WORKDIR"),
            user=_last_instruction(docker_text, "USER"), protocol=protocol)
    except OSError as exc:
        where = str(exc.filename) if exc.filename else str(folder)
        raise CatalogueError([CatalogueIssue(where, None, "", f"unreadable: {exc.strerror}")]) \
            from None
