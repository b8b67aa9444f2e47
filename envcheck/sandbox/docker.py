"""Sandbox runtime on the docker SDK: hardened containers, deadlines on every call, no leaks.

docker and requests errors are translated into envcheck's tree at one boundary
(:mod:`.engine`) and nowhere else. The runtime's parts: how a container is created
(:mod:`.hardening`, labels in :mod:`.labels`), a running sandbox with its deadlines and capped
output (:mod:`.container`, its exec streams in :mod:`.streams`), and leftovers
(:mod:`.reaping`).

A command that outlives its timeout (or floods past the hard output limit) takes its
container down with it: killing the container is the one kill that reaches every descendant
of the command, whatever the image holds. The next command starts the container again.

A container the engine could not remove (it stopped answering mid-cycle), or may have created
without our hearing of it, is a leftover of this runtime: every container carries the
runtime's label and a per-sandbox key, so once the engine answers again (a ping, the next
sandbox, :meth:`DockerRuntime.tidy`) the runtime removes its own containers no probe uses,
and :meth:`DockerRuntime.close` removes every container it started.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import docker
from docker.models.containers import Container, _create_container_args

from envcheck.core.errors import EngineUnreachable, EnvcheckError, SandboxStartFailed
from envcheck.sandbox.base import SandboxSpec
from envcheck.sandbox.compose import bring_up
from envcheck.sandbox.compose_project import ComposeProject
from envcheck.sandbox.container import DockerSandbox
from envcheck.sandbox.engine import engine_call, engine_errors, preflight
from envcheck.sandbox.hardening import create_args, sandbox_labels
from envcheck.sandbox.reaping import Reaper, this_process

__all__ = ["DockerRuntime"]

log = logging.getLogger(__name__)

API_VERSION = os.environ.get("ENVCHECK_DOCKER_API_VERSION", "1.41")
FLOOD_LIMIT = 256 * 1024 * 1024


class DockerRuntime:
    def __init__(self, client: docker.DockerClient, *, flood_limit: int = FLOOD_LIMIT,
                 host: str = "") -> None:
        self._client = client
        self._host = host  # where the engine listens, to try before the SDK does
        self._flood_limit = flood_limit
        self._owner = this_process()
        self._tag = os.environ.get("ENVCHECK_CONTAINER_TAG", "")
        self._id = uuid.uuid4().hex
        self._reaper = Reaper(client, self._id, self._preflight)
        self._closed = False

    @classmethod
    def from_env(cls, timeout_s: float = 30.0) -> DockerRuntime:
        """Connect as the docker CLI would (DOCKER_HOST, contexts); fail fast if down."""
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        preflight(host, timeout_s)
        with engine_errors():
            # A pinned API version: the SDK's auto-detection leaks a socket when the
            # engine is down. 1.41 (Docker 20.10) is served by every current engine.
            client = docker.from_env(timeout=int(timeout_s), version=API_VERSION)
        try:
            with engine_errors():
                client.ping()
        except EngineUnreachable:
            client.close()
            raise
        return cls(client, host=host)

    def close(self) -> None:
        """The runtime's end: remove every container it started (bounded by the client's
        timeout), then close the client. Nothing may use the runtime afterwards, so this
        includes a container a probe still held past a shutdown's grace period."""
        if self._closed:
            return
        self._closed = True
        try:
            self._reaper.sweep(keep_live=False)
        except EnvcheckError as exc:
            log.error("could not remove this runtime's containers; the next start reaps "
                      "them: %s", exc)
        finally:
            self._client.close()

    @property
    def client(self) -> docker.DockerClient:
        """The engine client, for work beside sandboxes (image builds)."""
        return self._client

    @property
    def host(self) -> str:
        """Where the engine listens (``unix://...``), to try before the SDK does."""
        return self._host

    def ping(self) -> None:
        with engine_call(self._preflight):
            self._client.ping()
        self.tidy()

    def _preflight(self) -> None:
        """Raise ``EngineUnreachable`` if the engine's socket refuses us, before the SDK
        tries (and leaks its socket): for the calls made while the engine may be down."""
        if self._host:
            preflight(self._host, float(self._client.api.timeout))

    def tidy(self) -> int:
        """If a container of ours may be left behind, remove our containers no probe uses
        now; how many (:meth:`.reaping.Reaper.tidy`)."""
        return self._reaper.tidy()

    def image_digest(self, image: str) -> str:
        with engine_call(self._preflight, image):
            return str(self._client.images.get(image).id)

    @contextmanager
    def sandbox(self, spec: SandboxSpec) -> Iterator[DockerSandbox]:
        key = uuid.uuid4().hex
        self._reaper.claim(key)
        container = None
        try:
            with engine_call(self._preflight, spec.image):
                container = self._create(spec, key)
            self.tidy()  # the engine answers: the leftovers of an outage can go now
            started = time.monotonic()
            with engine_call(self._preflight, spec.image):
                container.start()
                container.reload()
            duration = time.monotonic() - started
            if container.status != "running":
                logs = container.logs(tail=20).decode("utf-8", "replace")
                raise SandboxStartFailed(f"container exited at once: {logs.strip()}", duration)
            yield DockerSandbox(self._client, container, duration, self._flood_limit,
                                self._preflight)
        except SandboxStartFailed as exc:
            if not exc.duration_s and container is not None:
                exc.duration_s = 0.0
            raise
        finally:
            removed = container is not None and self._reaper.remove(container.id)
            self._reaper.release(key, removed)

    @contextmanager
    def compose(self, project: ComposeProject, spec: SandboxSpec, *, images: dict[str, str],
                up_timeout_s: float) -> Iterator[DockerSandbox]:
        """A compose task's project up for one run (:mod:`.compose`); the agent's container
        is the sandbox. Everything of the project is removed on exit, whatever happens."""
        key = uuid.uuid4().hex
        self._reaper.claim(key)
        labels = sandbox_labels(spec, key, owner=self._owner, runtime=self._id, tag=self._tag)
        try:
            with bring_up(self._client, project, spec, name=f"envcheck-{key[:16]}",
                          images=images, labels=labels, up_timeout_s=up_timeout_s,
                          host=self._host, preflight=self._preflight) as (agent, took):
                container = self._client.containers.prepare_model({"Id": agent})
                yield DockerSandbox(self._client, container, took, self._flood_limit,
                                    self._preflight)
        finally:
            self._reaper.release(key, self._reaper.remove_sandbox(key))

    def _create(self, spec: SandboxSpec, key: str) -> Container:
        """Create the container: the SDK's ``containers.create`` less its inspect of the new
        container (one engine round trip per sandbox; the inspect after the start fills in
        what that one would have)."""
        kwargs = {**self._create_args(spec, key), "version": self._client.api._version}
        created = self._client.api.create_container(**_create_container_args(kwargs))
        return self._client.containers.prepare_model({"Id": created["Id"]})

    def _create_args(self, spec: SandboxSpec, key: str = "") -> dict[str, Any]:
        return create_args(spec, key, owner=self._owner, runtime=self._id, tag=self._tag)

    def reap(self) -> int:
        """Remove envcheck containers whose owning process is gone (crashed or killed)."""
        return self._reaper.reap()

    def containers(self, tag: str | None = None) -> list[str]:
        """Ids of envcheck-managed containers on the engine, optionally of one tag."""
        return self._reaper.containers(tag)
