"""Harbor task folders (Terminal-Bench 2 and the hubs using Harbor's format) as a dataset: each
folder with a ``task.toml`` becomes an environment whose tests probe runs Harbor's nop/oracle
protocol (:mod:`envcheck.catalogue.harbor_env` maps a task onto the environment's parts).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from envcheck.catalogue.datasets.base import DatasetBase, Expansion, env_id, resolve_paths
from envcheck.catalogue.harbor_env import harbor_parts
from envcheck.catalogue.harbor_spec import CURRENT_RELEASE, PROTOCOL_OF_RELEASE, HarborRelease
from envcheck.catalogue.harbor_task import read_task
from envcheck.catalogue.messages import describe_error
from envcheck.catalogue.models import Environment, SuiteDefaults
from envcheck.catalogue.probe_specs import DEFAULT_RERUNS
from envcheck.core.errors import CatalogueError

__all__ = ["HarborDataset", "expand"]


class HarborDataset(DatasetBase):
    """A folder of Harbor task folders (or one task folder, or a glob of them)."""

    format: Literal["harbor"]
    network: str | None = Field(None, description=(
        "the Docker network tasks that allow the internet join (none: every task is offline)"))
    images: dict[str, str] = Field(default_factory=dict, description=(
        "task name -> prebuilt image, used as given (for sites that pre-build)"))
    reruns: int | None = Field(None, ge=1, le=50, description="oracle runs per probe")
    harbor_protocol: HarborRelease = Field(CURRENT_RELEASE, description=(
        "the Harbor release whose verifier steps envcheck mirrors: '0.26' or '0.25' (the same "
        "steps: reward.txt and reward.json removed as root after the agent acts, tests/ and "
        "solution/ copied through .harborignore) or '0.24' (for users of Harbor 0.24.0: a "
        "reward file the agent wrote stands, every file is copied)"))


def _task_folders(catalogue_file: str, pattern: str) -> tuple[list[Path], str | None]:
    """The task folders ``pattern`` names: itself if it holds a task.toml, else its entries
    (or a glob's matches) that are folders."""
    single = Path(catalogue_file).resolve().parent / pattern
    if (single / "task.toml").is_file():
        return [single], None
    found, why = resolve_paths(catalogue_file, pattern)
    folders = [p for p in found if p.is_dir()]
    if why is None and not folders:
        why = f"no task folder in {pattern!r}"
    return folders, why


def expand(entry: HarborDataset, catalogue_file: str, defaults: SuiteDefaults,
           suite_id: str, on_entry: Callable[[str, str], None]) -> Expansion:
    """Every task folder as an environment; a bad folder as issues naming its file and key."""
    out = Expansion()
    folders, why = _task_folders(catalogue_file, entry.path)
    if why is not None:
        on_entry("path", why)
        return out
    settings = entry.settings(defaults)  # the entry's controls over the suite's, key by key
    fields = entry.fields(settings)
    tests = settings.tests  # of the suite's defaults.tests, only the controls apply to a task
    for folder in folders:
        out.files.append(str(folder))
        try:
            task = read_task(folder, PROTOCOL_OF_RELEASE[entry.harbor_protocol])
            parts = harbor_parts(task, limits=settings.limits, timeouts=settings.timeouts,
                                 network=entry.network, image_overrides=entry.images,
                                 reruns=entry.reruns or DEFAULT_RERUNS,
                                 adversarial=tests.adversarial if tests else None,
                                 leaks=tests.leaks if tests else None,
                                 strength=tests.strength if tests else None)
            env = Environment(**{**fields, "id": env_id(task.name), "suite": suite_id,
                                 "image": parts.image, "user": parts.user,
                                 "workdir": parts.workdir, "limits": parts.limits,
                                 "timeouts": parts.timeouts, "harbor": parts.harbor})
        except CatalogueError as exc:
            for issue in exc.issues:
                out.issue(issue.file, issue.line, issue.key, issue.message)
            continue
        except ValidationError as exc:
            for err in exc.errors():
                out.issue(str(folder / "task.toml"), None, "", describe_error(err))
            continue
        except ValueError as exc:  # env_id
            out.issue(str(folder), None, "", str(exc))
            continue
        out.environments.append(env)
        out.origins.append((env.id, str(folder), None, ""))
    return out
