#!/usr/bin/env python3
"""Build the demo fleet under images/demo/ with the Docker SDK, in dependency order.

Each image is labelled ``org.envcheck.build-hash`` with a hash of its build directory, its build
arguments and its parent image's ID. An image whose label already matches is skipped, so a run
with nothing to do takes a second or two; a rebuilt parent rebuilds its children.

Builds run with ``network_mode="none"``: the Dockerfiles never reach a registry or a mirror.
The base image (``envcheck/base:bookworm``) comes from ``images/base/build.sh``.

    .venv/bin/python scripts/build_images.py [--force] [--base IMAGE] [NAME ...]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = REPO_ROOT / "images" / "demo"
BASE_IMAGE = "envcheck/base:bookworm"
REPOSITORY = "envcheck-demo"
TASK_IMAGE = f"{REPOSITORY}/task:latest"

HASH_LABEL = "org.envcheck.build-hash"
DEMO_LABEL = "org.envcheck.demo"
HASH_VERSION = "1"
IGNORED_NAMES = frozenset({"__pycache__", ".pytest_cache"})
IGNORED_SUFFIXES = (".pyc",)
BUILD_TIMEOUT_S = 900
LOG_TAIL_LINES = 25
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class DemoImage:
    """One image of the demo fleet: ``images/demo/<name>/`` built FROM ``parent``."""

    name: str
    parent: str | None  # None: the base image given on the command line
    parent_arg: str  # the Dockerfile ARG that names the parent image

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}/{self.name}:latest"

    @property
    def context(self) -> Path:
        return DEMO_DIR / self.name


_PARENT = re.compile(rf"^ARG TASK={re.escape(REPOSITORY)}/([\w.-]+):latest\s*$", re.MULTILINE)


def _defect(name: str) -> DemoImage:
    """FROM the task image, or FROM the demo image its Dockerfile's ``ARG TASK=`` default names
    (a variant of another defect: built after the task's children, rebuilt when its parent is)."""
    found = _PARENT.search((DEMO_DIR / name / "Dockerfile").read_text(encoding="utf-8"))
    parent = TASK_IMAGE if found is None else f"{REPOSITORY}/{found.group(1)}:latest"
    return DemoImage(name, parent=parent, parent_arg="TASK")


# Build order: the task image first, then every other folder of images/demo/ (each a defect
# built FROM the task image), then the variants of those defects, so adding a demo image is
# adding a folder. One level of variants: a variant's parent is a child of the task image.
_DEFECTS = [
    _defect(path.name)
    for path in sorted(DEMO_DIR.iterdir())
    if path.name != "task" and (path / "Dockerfile").is_file()
]
FLEET: tuple[DemoImage, ...] = (
    DemoImage("task", parent=None, parent_arg="BASE"),
    *sorted(_DEFECTS, key=lambda image: image.parent != TASK_IMAGE),
)


class BuildFailedError(Exception):
    """A demo image could not be built; the message says which and why."""


def context_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_NAMES)
        for filename in sorted(filenames):
            if filename in IGNORED_NAMES or filename.endswith(IGNORED_SUFFIXES):
                continue
            yield Path(dirpath) / filename


def content_hash(context: Path, buildargs: dict[str, str], parent_id: str) -> str:
    """Hash of what determines the image: files (path, exec bit, bytes), build args, parent."""
    digest = hashlib.sha256()
    digest.update(f"envcheck-demo-build/{HASH_VERSION}\0parent={parent_id}\0".encode())
    for key in sorted(buildargs):
        digest.update(f"arg:{key}={buildargs[key]}\0".encode())
    for path in context_files(context):
        rel = path.relative_to(context).as_posix()
        if path.is_symlink():
            digest.update(f"link:{rel}->{os.readlink(path)}\0".encode())
            continue
        executable = os.access(path, os.X_OK)
        digest.update(f"file:{rel}:{'x' if executable else '-'}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def image_id(client: Any, ref: str) -> str | None:
    try:
        return str(client.images.get(ref).id)
    except ImageNotFound:
        return None


def _log_tail(log: Iterable[dict[str, Any]]) -> str:
    lines: list[str] = []
    for chunk in log:
        text = ANSI_ESCAPE.sub("", str(chunk.get("stream") or chunk.get("error") or ""))
        lines.extend(line for line in text.splitlines() if line.strip())
    return "\n".join("    " + line for line in lines[-LOG_TAIL_LINES:])


def labelled(client: Any, tag: str) -> tuple[str | None, str | None]:
    """(image ID, build-hash label) of ``tag``, (None, None) when there is no such image."""
    try:
        current = client.images.get(tag)
    except ImageNotFound:
        return None, None
    return str(current.id), (current.labels or {}).get(HASH_LABEL)


def build_context(client: Any, tag: str, context: Path, buildargs: dict[str, str],
                  labels: dict[str, str]) -> str:
    """Build ``context`` as ``tag`` with no network; return the new image ID."""
    try:
        built, _log = client.images.build(
            path=str(context),
            tag=tag,
            buildargs=buildargs,
            network_mode="none",
            rm=True,
            forcerm=True,
            pull=False,
            labels=labels,
        )
    except BuildError as exc:
        raise BuildFailedError(
            f"{tag}: build failed: {exc.msg}\n{_log_tail(exc.build_log)}"
        ) from exc
    except APIError as exc:
        raise BuildFailedError(f"{tag}: Docker engine refused the build: {exc}") from exc
    return str(built.id)


def build_one(client: Any, image: DemoImage, base: str, force: bool) -> tuple[str, str | None]:
    """Build ``image`` unless its hash label matches; return (outcome, replaced image ID)."""
    parent = image.parent or base
    parent_id = image_id(client, parent)
    if parent_id is None:
        hint = " (run images/base/build.sh)" if image.parent is None else ""
        raise BuildFailedError(f"{image.tag}: parent image {parent} is missing{hint}")
    if not (image.context / "Dockerfile").is_file():
        raise BuildFailedError(f"{image.tag}: no Dockerfile in {image.context}")
    buildargs = {image.parent_arg: parent}
    wanted = content_hash(image.context, buildargs, parent_id)

    old_id, have = labelled(client, image.tag)
    if old_id is not None and not force and have == wanted:
        return "up to date", None
    built = build_context(client, image.tag, image.context, buildargs,
                          {HASH_LABEL: wanted, DEMO_LABEL: image.name})
    replaced = old_id if old_id is not None and old_id != built else None
    return "built", replaced


def remove_stale(client: Any, image_ids: Sequence[str]) -> None:
    """Best effort: drop images replaced by this run (children first); ignore ones in use."""
    for image_id in reversed(image_ids):
        try:
            client.images.remove(image_id, noprune=False)
        except (APIError, ImageNotFound):
            continue


def select(names: Sequence[str]) -> list[DemoImage]:
    if not names:
        return list(FLEET)
    known = {image.name: image for image in FLEET}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise BuildFailedError(
            f"unknown demo image(s): {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return [image for image in FLEET if image.name in names]


BuildJob = Callable[[Any], tuple[str, str | None]]  # client -> (outcome, replaced image ID)


def build_all(prog: str, what: str, jobs: Sequence[tuple[str, BuildJob]]) -> int:
    """Run each (tag, job) in order on one engine client, a line per image and a summary;
    images replaced by this run are removed at the end. The exit code: 0, or 1 on a failure."""
    started = time.monotonic()
    try:
        client = docker.from_env(timeout=BUILD_TIMEOUT_S)
        client.ping()
    except DockerException as exc:
        print(f"{prog}: Docker engine not reachable: {exc}", file=sys.stderr)
        return 1

    width = max(len(tag) for tag, _ in jobs)
    counts = {"built": 0, "up to date": 0}
    stale: list[str] = []
    try:
        for tag, job in jobs:
            t0 = time.monotonic()
            outcome, replaced = job(client)
            counts[outcome] += 1
            if replaced:
                stale.append(replaced)
            elapsed = time.monotonic() - t0
            print(f"{tag:<{width}}  {outcome:<10}  {elapsed:5.1f} s", flush=True)
    except BuildFailedError as exc:
        print(f"{prog}: FAILED: {exc}", file=sys.stderr)
        return 1
    except DockerException as exc:
        print(f"{prog}: FAILED: Docker engine error: {exc}", file=sys.stderr)
        return 1
    finally:
        remove_stale(client, stale)
        client.close()

    print(
        f"{what}: {len(jobs)} ({counts['built']} built, {counts['up to date']} up to date)"
        f" in {time.monotonic() - started:.1f} s"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="build only these images (default: all)")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--base", default=BASE_IMAGE, help=f"base image (default {BASE_IMAGE})")
    args = parser.parse_args(argv)
    try:
        images = select(args.names)
    except BuildFailedError as exc:
        print(f"build_images: {exc}", file=sys.stderr)
        return 2
    return build_all("build_images", "demo images", [
        (image.tag, functools.partial(build_one, image=image, base=args.base, force=args.force))
        for image in images])


if __name__ == "__main__":
    sys.exit(main())
