"""Build the wrong-fix development set's images: one per instance, offline, from PyPI sources.

Each instance of ``bench/strength_devset/sources.json`` names the release of its project whose
source the record's test patch and gold patch apply to (the release just before the fix) and
the wheels its tests need. At build time (PyPI reachable) the release's sdist is downloaded
(``pip download --no-deps --no-binary :all:``) and the wheels into a wheelhouse, both cached
under ``bench/strength_devset/cache/`` (gitignored: nothing downloaded is committed). Then each
image is built with ``network_mode="none"`` from the local base image (``envcheck/base:
bookworm``, ``images/base/build.sh``), as the demo images are: the sdist's tree at ``/testbed``
as one git commit owned by ``agent``, the wheels installed into the system Python, the project
importable through a ``.pth`` file (``/usr/bin/python3 -I`` ignores ``PYTHONPATH``).

An image whose ``org.envcheck.build-hash`` label matches its inputs is not rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import docker
from docker.errors import BuildError, ImageNotFound

ROOT = Path(__file__).resolve().parent.parent
SET_DIR = Path(__file__).resolve().parent / "strength_devset"
CACHE = SET_DIR / "cache"
BASE_IMAGE = "envcheck/base:bookworm"
REPOSITORY = "envcheck-devset"
HASH_LABEL = "org.envcheck.build-hash"
PIP_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 900

DOCKERFILE = """\
ARG BASE={base}
FROM ${{BASE}}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \\
    PYTHONDONTWRITEBYTECODE=1
RUN useradd --create-home --home-dir /home/agent --shell /bin/bash --uid 1000 --user-group agent
COPY wheels/ /opt/wheels/
RUN if ls /opt/wheels/*.whl >/dev/null 2>&1; then \\
      python3 -m pip install --no-index --no-deps --break-system-packages --quiet \\
        /opt/wheels/*.whl; fi && rm -rf /opt/wheels
RUN install -d -o agent -g agent -m 0755 /testbed \\
 && echo {import_root} > /usr/lib/python3/dist-packages/envcheck_devset_testbed.pth
COPY --chown=agent:agent testbed/ /testbed/
USER agent
RUN cd /testbed \\
 && export HOME=/home/agent GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' \\
    GIT_COMMITTER_DATE='2024-01-01T00:00:00Z' \\
 && git init -q -b main && git add -A \\
 && git -c user.name='envcheck devset' -c user.email='devset@envcheck.invalid' \\
    commit -q -m '{sdist}' \\
 && echo '__pycache__/' >> .git/info/exclude \\
 && python3 -m compileall -q -j 2 . >/dev/null 2>&1; true
USER root
RUN git config --system --add safe.directory /testbed
WORKDIR /testbed
LABEL org.envcheck.devset={instance}
"""


def sources() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SET_DIR / "sources.json").read_text(encoding="utf-8"))
    return data


def tag(instance_id: str) -> str:
    return f"{REPOSITORY}/{instance_id.lower()}:latest"


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
           *args]
    subprocess.run(cmd, check=True, timeout=PIP_TIMEOUT_S)


def sdist(spec: str) -> Path:
    """The sdist of ``NAME==VERSION``, downloaded once into the cache."""
    name, version = spec.split("==")
    folder = CACHE / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    found = [p for p in folder.iterdir()
             if p.name.lower().startswith(f"{name.lower()}-{version}.")]
    if not found:
        _pip("--no-deps", "--no-binary", ":all:", spec, "-d", str(folder))
        found = [p for p in folder.iterdir()
                 if p.name.lower().startswith(f"{name.lower()}-{version}.")]
    if not found:
        raise RuntimeError(f"pip download gave no sdist for {spec}")
    return found[0]


def _wheel(folder: Path, prefix: str) -> list[Path]:
    return [p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix)]


def wheels(specs: list[str]) -> list[Path]:
    """Pure or CPython 3.11 wheels for ``specs`` (each NAME==VERSION), cached."""
    folder = CACHE / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for spec in specs:
        name, version = spec.split("==")
        norm = name.lower().replace("-", "_")
        prefix = f"{norm}-{version}-"
        if not _wheel(folder, prefix):
            _pip("--no-deps", "--only-binary", ":all:", "--python-version", "3.11",
                 "--platform", "manylinux2014_x86_64", spec, "-d", str(folder))
        found = _wheel(folder, prefix)
        if not found:
            raise RuntimeError(f"pip download gave no wheel for {spec}")
        out.append(found[0])
    return out


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    """The sdist unpacked under ``into`` with the standard library's ``data`` filter where
    this Python has it (3.11.4 on; Debian 12's is 3.11.2): else the same refusals by hand,
    a member outside ``into``, a link, a device."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        if not target.is_relative_to(root) or not (member.isfile() or member.isdir()):
            raise ValueError(f"{tar.name}: refusing {member.name!r} (outside the folder, "
                             f"a link or a device)")
    tar.extractall(into)


def _context(instance_id: str, spec: dict[str, Any]) -> tuple[Path, str]:
    """A build context in a temporary folder, and the hash of its inputs."""
    archive = sdist(spec["sdist"])
    wheel_files = wheels(spec.get("wheels", []))
    folder = Path(tempfile.mkdtemp(prefix="envcheck-devset-"))
    with tarfile.open(archive) as tar:
        _extract(tar, folder / "unpacked")
    (top,) = list((folder / "unpacked").iterdir())
    shutil.move(str(top), folder / "testbed")
    (folder / "wheels").mkdir()
    for wheel in wheel_files:
        shutil.copy(wheel, folder / "wheels" / wheel.name)
    dockerfile = DOCKERFILE.format(base=BASE_IMAGE, import_root=spec["import_root"],
                                   sdist=archive.name, instance=instance_id)
    (folder / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    digest = hashlib.sha256(dockerfile.encode())
    for path in [archive, *wheel_files]:
        digest.update(path.name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return folder, digest.hexdigest()[:16]


def build(instance_id: str, spec: dict[str, Any], client: docker.DockerClient,
          force: bool = False) -> str:
    """Build (or keep) the image of one instance; returns what was done."""
    base = client.images.get(BASE_IMAGE)
    folder, digest = _context(instance_id, spec)
    digest = hashlib.sha256(f"{digest}{base.id}".encode()).hexdigest()[:16]
    try:
        try:
            image = client.images.get(tag(instance_id))
            if not force and image.labels.get(HASH_LABEL) == digest:
                return "up to date"
        except ImageNotFound:
            pass
        try:
            client.images.build(path=str(folder), tag=tag(instance_id), rm=True,
                                forcerm=True, network_mode="none",
                                labels={HASH_LABEL: digest}, timeout=BUILD_TIMEOUT_S)
        except BuildError as exc:
            tail = io.StringIO()
            for chunk in exc.build_log[-25:]:
                tail.write(str(chunk.get("stream", chunk.get("error", ""))))
            raise RuntimeError(f"{instance_id}: build failed: {exc}\n{tail.getvalue()}") from exc
        return "built"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def build_all(names: list[str] | None = None, force: bool = False) -> dict[str, str]:
    client = docker.from_env(timeout=BUILD_TIMEOUT_S)
    try:
        client.images.get(BASE_IMAGE)
    except ImageNotFound as exc:
        raise SystemExit(f"the base image {BASE_IMAGE} is missing: run images/base/build.sh"
                         ) from exc
    done = {}
    for instance_id, spec in sources()["instances"].items():
        if names and instance_id not in names:
            continue
        done[instance_id] = build(instance_id, spec, client, force=force)
        print(f"{instance_id:32} {tag(instance_id)}: {done[instance_id]}", flush=True)
    return done
