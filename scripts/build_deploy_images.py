#!/usr/bin/env python3
"""Build the deployment images offline: envcheck's own and the stack's services.

``envcheck/envcheck:latest`` (images/envcheck/): envcheck's wheel and its dependencies, at the
versions installed in the venv running this script, installed from a wheelhouse.
``envcheck/stack:bookworm`` (images/stack/): PostgreSQL, Prometheus and Alertmanager from the
Debian packages that images/stack/packages names (and what they need beyond the base).

Like the demo fleet (scripts/build_images.py) both build FROM the local base with
``network_mode="none"``: what they install is fetched on the host first (pip with this
machine's configuration, apt with its sources) into a temporary build context. Each image is
labelled with a hash of what determines it; an image whose label matches is left alone, and
nothing is fetched.

    .venv/bin/python scripts/build_deploy_images.py [--force] [--base IMAGE] [envcheck|stack ...]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_images import (
    BASE_IMAGE,
    HASH_LABEL,
    REPO_ROOT,
    BuildFailedError,
    build_all,
    build_context,
    content_hash,
    context_files,
    image_id,
    labelled,
)

ENVCHECK_IMAGE = "envcheck/envcheck:latest"
STACK_IMAGE = "envcheck/stack:bookworm"
DEPLOY_LABEL = "org.envcheck.deploy"
FETCH_TIMEOUT_S = 900
# What goes into envcheck's wheel (pyproject.toml's readme is README.md).
WHEEL_SOURCES = ("envcheck", "dashboards", "pyproject.toml", "README.md")
EXTRAS = "postgres"
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def run(argv: Sequence[str], what: str, cwd: Path | None = None) -> str:
    """Run a fetch step; a failure is a BuildFailedError with the tail of its output."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd,
                              timeout=FETCH_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise BuildFailedError(f"{what}: no answer in {FETCH_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BuildFailedError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


# --- envcheck: a wheelhouse -----------------------------------------------------------------

def pinned_versions() -> str:
    """This venv's versions as pip constraints: the image gets what the tests ran with.
    Editable and local-path installs are left out (envcheck itself is the wheel built here)."""
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable",
                  "--disable-pip-version-check"], "pip freeze")
    return "".join(f"{line}\n" for line in frozen.splitlines()
                   if line and not line.startswith(("-e", "#")) and " @ " not in line)


def source_digest() -> str:
    digest = hashlib.sha256()
    for name in WHEEL_SOURCES:
        path = REPO_ROOT / name
        for file in context_files(path) if path.is_dir() else [path]:
            digest.update(f"{file.relative_to(REPO_ROOT).as_posix()}\0".encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def fill_wheelhouse(context: Path, constraints: str) -> None:
    """envcheck's wheel, built from a copy of its sources (the checkout stays clean), and the
    wheels of everything it needs with the postgres extra, under the venv's versions."""
    work = context.parent
    src = work / "src"
    for name in WHEEL_SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=SKIP)
        else:
            shutil.copy(path, src / name)
    dist = work / "dist"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check"]
    run([*pip, "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(src)],
        "building envcheck's wheel")
    [wheel] = dist.glob("envcheck-*.whl")
    (work / "constraints.txt").write_text(constraints, encoding="utf-8")
    run([*pip, "-w", str(context / "wheels"), "-c", str(work / "constraints.txt"),
         f"{wheel}[{EXTRAS}]"], "fetching envcheck's dependencies (pip wheel)")


# --- the stack: a folder of Debian packages -------------------------------------------------

def fill_debs(context: Path, client: Any, base: str) -> None:
    """The packages named in ``packages`` and whatever they need that ``base`` lacks: apt on
    the host resolves them against the base's own dpkg status and downloads them."""
    wanted = (context / "packages").read_text(encoding="utf-8").split()
    status = context.parent / "status"
    status.write_bytes(client.containers.run(base, ["cat", "/var/lib/dpkg/status"],
                                             network_mode="none", remove=True))
    debs = context / "debs"
    (debs / "partial").mkdir(parents=True)
    apt = ["apt-get", "-q", "-y", "--download-only", "--no-install-recommends",
           "-o", f"Dir::State::status={status}", "-o", f"Dir::Cache::archives={debs}",
           "-o", "Debug::NoLocking=1", "install", *wanted]
    try:
        run(apt, "fetching the stack's Debian packages (apt-get --download-only)")
    except BuildFailedError:  # lists too old or missing: refresh them once
        run(["apt-get", "-q", "update"], "apt-get update")
        run(apt, "fetching the stack's Debian packages (apt-get --download-only)")
    shutil.rmtree(debs / "partial")
    if not any(debs.glob("*.deb")):
        raise BuildFailedError(f"{STACK_IMAGE}: the base already has every package: "
                               f"{' '.join(wanted)}")


# --- the images -----------------------------------------------------------------------------

@dataclass(frozen=True)
class DeployImage:
    name: str
    tag: str
    folder: Path
    files: tuple[str, ...]  # the build context, besides what ``fill`` adds
    fill: Callable[[Path, Any, str, str], None]  # (context, client, base, pins) -> None
    pinned: bool  # whether the venv's versions are an input

    def stage(self, into: Path) -> Path:
        context = into / "context"
        context.mkdir(parents=True)
        for name in self.files:
            shutil.copy2(self.folder / name, context / name)
        return context


IMAGES = (
    DeployImage("envcheck", ENVCHECK_IMAGE, REPO_ROOT / "images" / "envcheck",
                ("Dockerfile", "entrypoint.sh", "healthcheck.py"),
                lambda ctx, _client, _base, pins: fill_wheelhouse(ctx, pins), pinned=True),
    DeployImage("stack", STACK_IMAGE, REPO_ROOT / "images" / "stack",
                ("Dockerfile", "packages"),
                lambda ctx, client, base, _pins: fill_debs(ctx, client, base), pinned=False),
)


def build(client: Any, image: DeployImage, base: str, force: bool) -> tuple[str, str | None]:
    """Build ``image`` unless its hash label matches; return (outcome, replaced image ID)."""
    parent_id = image_id(client, base)
    if parent_id is None:
        raise BuildFailedError(f"{image.tag}: base image {base} is missing "
                               "(run images/base/build.sh)")
    pins = pinned_versions() if image.pinned else ""
    buildargs = {"BASE": base}
    with tempfile.TemporaryDirectory(prefix=f"envcheck-{image.name}-") as tmp:
        context = image.stage(Path(tmp))
        digest = hashlib.sha256(content_hash(context, buildargs, parent_id).encode())
        if image.pinned:
            digest.update(f"\0pins={pins}\0source={source_digest()}".encode())
        wanted = digest.hexdigest()
        old_id, have = labelled(client, image.tag)
        if old_id is not None and not force and have == wanted:
            return "up to date", None
        image.fill(context, client, base, pins)
        built = build_context(client, image.tag, context, buildargs,
                              {HASH_LABEL: wanted, DEPLOY_LABEL: image.name})
    return "built", old_id if old_id is not None and old_id != built else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="build only these images (default: all): "
                        + ", ".join(i.name for i in IMAGES))
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--base", default=BASE_IMAGE, help=f"base image (default {BASE_IMAGE})")
    args = parser.parse_args(argv)
    unknown = set(args.names) - {i.name for i in IMAGES}
    if unknown:
        parser.error(f"unknown image(s): {', '.join(sorted(unknown))}")
    return build_all("build_deploy_images", "deploy images", [
        (image.tag, functools.partial(build, image=image, base=args.base, force=args.force))
        for image in IMAGES if not args.names or image.name in args.names])


if __name__ == "__main__":
    sys.exit(main())
