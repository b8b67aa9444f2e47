"""A compose task made ready before its probes: Compose reads its file, envcheck builds its
services (offline, each cached by the hash of its context and build options, as a
Dockerfile task's image is) and the agent's image becomes the environment's. The
:class:`ComposedTask` joins the context: every sandbox of the task is then its agent's
container with the task's services beside it (:meth:`ProbeContext.open_sandbox`)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from envcheck.catalogue.harbor_env import image_tag
from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.catalogue.treehash import tree_hash
from envcheck.kinds.base import ProbeContext
from envcheck.sandbox.base import BuildOptions
from envcheck.sandbox.build import BuiltImage, ImageBuilder
from envcheck.sandbox.compose_project import (
    ComposeBuild,
    ComposedTask,
    ComposeProject,
    read_project,
)

__all__ = ["prepare_compose"]

READ_TIMEOUT_S = 60.0


def _tag(spec: HarborVerifierSpec, build: ComposeBuild, env_dir: Path) -> str:
    content = tree_hash(build.context)
    if build.context == env_dir and build.options == BuildOptions("Dockerfile"):
        return image_tag(spec.task, content)  # the tag the catalogue gave the environment
    both = hashlib.sha256(f"{content}:{build.options_hash()}".encode()).hexdigest()
    return image_tag(f"{spec.task}-{build.service}", both)


@functools.lru_cache(maxsize=256)
def _read(folder: Path, compose: Path, content: str, host: str) -> ComposeProject:
    """Compose's reading of the file, once per content of ``environment/`` (``content``): a
    prepare runs before every probe of the task, most of them identity checks. A refusal is
    an exception, never cached. Runs copy the project before changing it (``run_model``)."""
    return read_project(folder, compose, timeout_s=READ_TIMEOUT_S, host=host)


def prepare_compose(ctx: ProbeContext, spec: HarborVerifierSpec, builder: ImageBuilder
                    ) -> BuiltImage:
    """Read and build the task's project; provide the :class:`ComposedTask`; the agent's
    image (a :class:`BuiltImage`, a cache hit for an image named in the compose file).
    Raises ``ComposeFailed`` or ``ImageBuildFailed`` for the task's defects."""
    assert spec.compose is not None
    folder = Path(spec.task_dir)
    env_dir = (folder / spec.compose).parent.resolve()
    host = str(getattr(ctx.runtime, "host", ""))
    project = _read(folder, folder / spec.compose, tree_hash(env_dir), host)
    images: dict[str, str] = {}
    agent: BuiltImage | None = None
    for build in project.builds:
        built = builder.ensure(build.context, _tag(spec, build, env_dir),
                               timeout_s=spec.build_timeout_s, options=build.options,
                               labels={"org.envcheck.harbor-task": spec.task,
                                       "org.envcheck.compose-service": build.service})
        images[build.service] = built.tag
        if build.service == project.agent:
            agent = built
    composed = ComposedTask(project, images, spec.build_timeout_s)
    ctx.provide(composed)
    if agent is None:  # the agent's image is named, not built: used as given
        agent = BuiltImage(composed.agent_image, ctx.runtime.image_digest(composed.agent_image),
                           False, 0.0)
    return agent
