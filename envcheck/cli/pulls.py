"""``envcheck check``'s pulls as a pipeline (``executors.pipeline.ImagePipeline``), and their
line in the progress bar beside the probes: the cycle's images made local of all of them, the
bytes pulled, what the image cache holds of its budget and how many pulls it evicted."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress

    from envcheck.catalogue.models import Environment
    from envcheck.core.results import ProbeKind
    from envcheck.executors.cycle import Services
    from envcheck.executors.pipeline import ImagePipeline
    from envcheck.registry.fleet import RegistryImages

__all__ = ["pulls_line", "track_pulls", "with_pipeline"]


def with_pipeline(services: Services, registry: RegistryImages, envs: list[Environment],
                  kinds: list[ProbeKind]) -> Services:
    """The cycle's pulls as a pipeline: ahead of the environments, released after them."""
    from envcheck.executors.pipeline import ImagePipeline

    return {**services, ImagePipeline: ImagePipeline(registry, envs, kinds)}


def pulls_line(pipeline: ImagePipeline) -> tuple[int, int, str]:
    """(images of the cycle made local, images of the cycle, what the line says)."""
    ready, total, pulled = pipeline.progress()
    snapshot = pipeline.registry.stats.snapshot()
    cache = f"cache {_mb(snapshot.cache_bytes)}"
    if snapshot.budget_bytes is not None:
        cache += f" of {_mb(snapshot.budget_bytes)}"
    return ready, total, f"{_mb(pulled)} pulled, {cache}, {snapshot.evictions} evicted"


def track_pulls(progress: Progress, services: Services | None) -> None:
    """A second task line, ``pulls n/m``, kept up as the pipeline makes images local."""
    from envcheck.executors.pipeline import ImagePipeline

    pipeline = (services or {}).get(ImagePipeline)
    if not isinstance(pipeline, ImagePipeline) or not pipeline.total:
        return
    ready, total, said = pulls_line(pipeline)
    task = progress.add_task(said, total=total, completed=ready, what="pulls")

    def changed() -> None:
        now, _, line = pulls_line(pipeline)
        progress.update(task, completed=now, description=line)

    pipeline.on_change = changed


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB" if size >= 10**7 else f"{size / 1e6:.1f} MB"
