#!/usr/bin/env python3
"""The demo's registry, for ``scripts/run.sh``: a ``docker-registry`` on 127.0.0.1 with its own
config and storage under the data directory, some demo images pushed into it through the
engine, and one tag moved while the demo runs (``probes/demo-registry.yaml`` follows them).

    demo_registry.py serve --dir DIR --port PORT   # write DIR/config.yml, become the registry
    demo_registry.py push --port PORT NAME...      # push each demo image the registry lacks
    demo_registry.py move --port PORT --after S NAME   # S seconds on, rebuild NAME and push it

``push`` leaves a tag the registry already holds as it is (a second run reuses what the first
pushed, moved tags included). After a push the engine's references to the registry's copy
are dropped (the image itself stays under its demo tag), so the daemon pulls the digest it
sees, as a host that did not build the image would. ``move`` rebuilds the image with one
file more (the time of the move), pushes it to the same tag and removes the local build: the
daemon's watch sees a new digest, pulls it and validates it in full.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import tarfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors

# run as a script: its folder is on sys.path
from registry_config import BINARY, find_binary, registry_config

ENGINE_TIMEOUT_S = 300  # per engine call: a push of a demo image's layers to loopback
ANSWER_TIMEOUT_S = 30
MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json"])
MOVED_FILE = "opt/envcheck-demo/moved-at"
MOVED_LABEL = "org.envcheck.demo.moved-at"


def say(message: str) -> None:
    print(f"demo-registry: {message}", flush=True)


def serve(directory: Path, port: int) -> None:
    """Write the config under ``directory`` and replace this process with the registry, so
    that run.sh's signal reaches the registry itself."""
    binary = find_binary()
    if binary is None:
        raise SystemExit(f"demo-registry: {BINARY} not found (scripts/setup.sh installs it)")
    storage = directory / "data"
    storage.mkdir(parents=True, exist_ok=True)
    config = directory / "config.yml"
    config.write_text(registry_config(f"127.0.0.1:{port}", storage,
                                      secret="envcheck-demo-http-secret"), encoding="utf-8")
    sys.stdout.flush()
    os.execv(binary, [binary, "serve", str(config)])


def tag_digest(port: int, name: str, tag: str = "latest") -> str | None:
    """What ``name:tag`` names in the registry now (one HEAD), None when it has no such tag."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/{name}/manifests/{tag}",
                                     method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def wait_for_registry(port: int) -> None:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2):
                return
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise SystemExit(f"demo-registry: nothing answers on 127.0.0.1:{port} after "
                                 f"{ANSWER_TIMEOUT_S} s") from None
            time.sleep(0.5)


def engine() -> docker.APIClient:
    return docker.from_env(timeout=ENGINE_TIMEOUT_S).api


def push_through_engine(api: docker.APIClient, image: str, remote: str) -> str:
    """Tag ``image`` as ``remote`` (``host/name:tag``), push it, drop the engine's references
    to the registry's copy; the pushed manifest's digest."""
    repository, tag = remote.rsplit(":", 1)
    api.tag(image, repository, tag)
    digest = None
    try:
        for event in api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise SystemExit(f"demo-registry: pushing {remote} failed: {event['error']}")
            digest = (event.get("aux") or {}).get("Digest") or digest
    finally:
        forget(api, remote)
    if digest is None:
        raise SystemExit(f"demo-registry: the engine pushed {remote} without saying its digest")
    forget(api, f"{repository}@{digest}")
    return str(digest)


def forget(api: docker.APIClient, reference: str) -> None:
    """Remove one reference (never by force: the image stays under its other names)."""
    with contextlib.suppress(docker.errors.NotFound):
        api.remove_image(reference)


def push(port: int, names: list[str]) -> None:
    wait_for_registry(port)
    api = engine()
    for name in names:
        found = tag_digest(port, name)
        if found is not None:
            say(f"127.0.0.1:{port}/{name}:latest is there ({found}): kept")
            continue
        started = time.monotonic()
        digest = push_through_engine(api, f"{name}:latest", f"127.0.0.1:{port}/{name}:latest")
        say(f"pushed 127.0.0.1:{port}/{name}:latest {digest} "
            f"in {time.monotonic() - started:.1f} s")


def rebuilt_context(name: str, moved_at: str) -> io.BytesIO:
    """A build context: ``name:latest`` with one file more and a label, the time of the move."""
    dockerfile = (f"FROM {name}:latest\n"
                  f"COPY moved-at /{MOVED_FILE}\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, text in (("Dockerfile", dockerfile), ("moved-at", moved_at + "\n")):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def build(api: docker.APIClient, name: str, moved_at: str) -> str:
    """The rebuilt image's id (no container runs: a COPY and a label)."""
    image_id = None
    output: list[Any] = []
    for event in api.build(fileobj=rebuilt_context(name, moved_at), custom_context=True,
                           rm=True, network_mode="none", labels={MOVED_LABEL: moved_at},
                           decode=True, timeout=ENGINE_TIMEOUT_S):
        output.append(event)
        if "error" in event:
            raise SystemExit(f"demo-registry: rebuilding {name} failed: {event['error']}")
        image_id = (event.get("aux") or {}).get("ID") or image_id
    if image_id is None:
        raise SystemExit(f"demo-registry: rebuilding {name} gave no image: {output[-3:]}")
    return str(image_id)


def move(port: int, name: str, after_s: float) -> None:
    """``after_s`` seconds from now, move ``name:latest`` in the registry to a rebuilt image."""
    say(f"127.0.0.1:{port}/{name}:latest moves in {after_s:.0f} s")
    time.sleep(after_s)
    wait_for_registry(port)
    api = engine()
    before = tag_digest(port, name)
    moved_at = datetime.now(UTC).isoformat(timespec="seconds")
    image_id = build(api, name, moved_at)
    try:
        digest = push_through_engine(api, image_id, f"127.0.0.1:{port}/{name}:latest")
    finally:
        forget(api, image_id)  # the daemon pulls what it validates, as any other host would
    say(f"moved 127.0.0.1:{port}/{name}:latest at {moved_at}: {before} -> {digest}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serving = commands.add_parser("serve")
    serving.add_argument("--dir", type=Path, required=True)
    serving.add_argument("--port", type=int, required=True)
    pushing = commands.add_parser("push")
    pushing.add_argument("--port", type=int, required=True)
    pushing.add_argument("names", nargs="+")
    moving = commands.add_parser("move")
    moving.add_argument("--port", type=int, required=True)
    moving.add_argument("--after", type=float, required=True, help="seconds")
    moving.add_argument("name")
    args = parser.parse_args(argv)
    # run.sh's SIGTERM (or Ctrl-C in its terminal) ends a waiting or working helper at once,
    # quietly
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    if args.command == "serve":
        serve(args.dir, args.port)
    elif args.command == "push":
        push(args.port, args.names)
    else:
        move(args.port, args.name, args.after)


if __name__ == "__main__":
    main()
