"""A check cycle: probe environments and hand each result on as it is made.

Used alike by ``envcheck check`` and the daemon, so both produce the same results.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack

from envcheck.catalogue.models import Environment
from envcheck.core.errors import InfraError, RegistryFailed
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds import ProbeContext, Verdict, load_probe
from envcheck.kinds.base import Services
from envcheck.sandbox.base import SandboxRuntime

__all__ = ["ResultSink", "Services", "check_environment", "new_run_id", "run_cycle", "unchecked"]

log = logging.getLogger(__name__)

ResultSink = Callable[[ProbeResult], None]


def new_run_id() -> str:
    return uuid.uuid4().hex


def _infra_results(env: Environment, kinds: Sequence[ProbeKind], exc: InfraError,
                   digest: str | None = None) -> list[ProbeResult]:
    verdict = Verdict(Status.ERROR, exc.reason, str(exc))
    return [load_probe(kind).result(env, verdict, 0.0, digest) for kind in kinds]


def unchecked(envs: Sequence[Environment], kinds: Sequence[ProbeKind],
              exc: InfraError) -> list[ProbeResult]:
    """Results for a cycle envcheck could not run at all (e.g. the engine is down)."""
    return [r for env in envs for r in _infra_results(env, kinds, exc)]


def check_environment(env: Environment, kinds: Sequence[ProbeKind], runtime: SandboxRuntime,
                      run_id: str, sink: ResultSink | None = None,
                      services: Services | None = None) -> list[ProbeResult]:
    """Run ``kinds`` on one environment; read-only probes share one container."""
    results: list[ProbeResult] = []

    def emit(result: ProbeResult) -> None:
        results.append(result)
        if sink is not None:
            sink(result)

    with ExitStack() as stack:
        ctx = ProbeContext(env, run_id, runtime, None, stack, services)
        try:
            # Here, not at the top: the Harbor runner's modules are not on a daemon's way to
            # ready (nor on the CLI's), only on a check's.
            from envcheck.kinds.testvalidity.harbor import prepare_image

            # An image built from the environment's own context is built first (a cache hit
            # when unchanged): its digest exists only then.
            prepare_image(ctx)
            if ctx.blocked is None and env.pull == "watch":
                _registry_identity(ctx, kinds)
            elif ctx.blocked is None:
                ctx.image_digest = runtime.image_digest(ctx.env.image)
        except InfraError as exc:
            for result in _infra_results(env, kinds, exc):
                emit(result)
            return results
        for kind in kinds:
            emit(load_probe(kind).run(ctx))
    return results


def _registry_identity(ctx: ProbeContext, kinds: Sequence[ProbeKind]) -> None:
    """A pulled image's identity is its registry's digest: the tag's (looked up afresh for an
    ``image`` probe, else the watch's last look within its interval), or the one the
    reference pins. A look that gives none blocks every kind with what it says."""
    from envcheck.executors.pipeline import ImagePipeline
    from envcheck.kinds.image import watch_verdict
    from envcheck.registry.fleet import RegistryImages
    from envcheck.registry.reference import ImageReference

    pinned = ImageReference.parse(ctx.env.image).digest
    if pinned is not None:
        ctx.image_digest = pinned
        return
    registry = ctx.service(RegistryImages)
    if registry is None:
        raise RegistryFailed(f"{ctx.env.image}: no registry stage in this process, nothing "
                             "looks its tag up", reason=Reason.REGISTRY_UNREACHABLE)
    pipeline = ctx.service(ImagePipeline)  # envcheck check's: one look per tag a cycle
    ctx.watch = (pipeline.identity(ctx.env) if pipeline is not None
                 else registry.identity(ctx.env, fresh=ProbeKind.IMAGE in kinds))
    if ctx.watch.look is not None:
        ctx.image_digest = ctx.watch.look.digest
    else:
        ctx.blocked = watch_verdict(ctx.env.image, ctx.watch)


def run_cycle(envs: Sequence[Environment], kinds: Sequence[ProbeKind], runtime: SandboxRuntime,
              run_id: str, sink: ResultSink | None = None,
              concurrency: int = 2, services: Services | None = None) -> list[ProbeResult]:
    """Check environments ``concurrency`` at a time; ``sink`` sees results as they come. An
    ``ImagePipeline`` among ``services`` pulls the images of the environments not started yet
    ahead of them, and releases each environment's image once its probes are done."""
    from envcheck.executors.pipeline import ImagePipeline

    results: list[ProbeResult] = []
    found = services.get(ImagePipeline) if services is not None else None
    pipeline = found if isinstance(found, ImagePipeline) else None

    def one(env: Environment) -> list[ProbeResult]:
        if pipeline is None:
            return check_environment(env, kinds, runtime, run_id, sink, services)
        pipeline.started(env)
        try:
            return check_environment(env, kinds, runtime, run_id, sink, services)
        finally:
            pipeline.done(env)  # its image may go first now

    pool = ThreadPoolExecutor(max_workers=max(concurrency, 1), thread_name_prefix="envcheck")
    if pipeline is not None:
        pipeline.start()  # pulls ahead of the environments not started yet
    try:
        futures = [pool.submit(one, env) for env in envs]
        for future in as_completed(futures):
            results.extend(future.result())
    except BaseException:
        # Interrupted: start nothing new; in-flight probes finish and remove their containers.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        if pipeline is not None:
            pipeline.stop()
    pool.shutdown(wait=True)
    order = {env.id: i for i, env in enumerate(envs)}
    results.sort(key=lambda r: (order[r.env_id], list(ProbeKind).index(r.kind)))
    return results


def interrupted(env: Environment, kind: ProbeKind, digest: str | None = None) -> ProbeResult:
    verdict = Verdict(Status.ERROR, Reason.INTERRUPTED, "the check run was interrupted")
    return load_probe(kind).result(env, verdict, 0.0, digest)
