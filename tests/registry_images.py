"""Images in the test registry: tiny ones pushed through the real engine, and the registry's
own API for what the engine cannot do (put a manifest under another tag, an index of several
platforms, delete a manifest by digest).

``push_tiny`` imports a tar of one small file as an image (no build, no base image), pushes it
with docker-py (``images.push(..., auth_config=...)``), reads the digest from the last event's
``aux.Digest`` and removes the local copy: the registry holds it, the engine does not.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from typing import Any

import docker
import requests

from tests.registryd import Registry

__all__ = ["INDEX_TYPES", "MANIFEST_TYPES", "RegistryApi", "build_context", "new_repository",
           "push", "push_built", "push_tiny"]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEX_TYPES = (DOCKER_LIST, OCI_INDEX)
ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))


def new_repository(prefix: str = "envcheck-test") -> str:
    """A repository name of its own, so that tests sharing a registry never meet."""
    return f"{prefix}/t{uuid.uuid4().hex[:12]}"


def _tiny_tar(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("payload.txt")
        info.size = len(payload)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def push_tiny(client: docker.DockerClient, registry: Registry, repository: str, tag: str,
              payload: bytes | None = None, *, keep_local: bool = False) -> str:
    """Push an image of one file holding ``payload`` (unique when None) as
    ``repository:tag``; the manifest digest the registry gave it."""
    ref = f"{registry.host}/{repository}"
    content = payload if payload is not None else uuid.uuid4().bytes
    client.api.import_image_from_data(_tiny_tar(content), repository=ref, tag=tag)
    return push(client, registry, ref, tag, keep_local=keep_local)


def push(client: docker.DockerClient, registry: Registry, ref: str, tag: str, *,
         keep_local: bool = False) -> str:
    """Push the engine's ``ref:tag`` to ``registry`` (its credentials, if any) and, unless
    ``keep_local``, remove it from the engine: the registry holds it, the engine does not.
    The manifest digest the registry gave it, from the last event's ``aux.Digest``."""
    try:
        digest = None
        events: list[dict[str, Any]] = []
        for event in client.images.push(ref, tag=tag, stream=True, decode=True,
                                        auth_config=registry.auth_config):
            events.append(event)
            if "error" in event:
                raise RuntimeError(f"push of {ref}:{tag} failed: {event['error']}")
            digest = (event.get("aux") or {}).get("Digest", digest)
        if digest is None:
            raise RuntimeError(f"push of {ref}:{tag} gave no digest: {events[-3:]}")
        return str(digest)
    finally:
        if not keep_local:
            client.images.remove(f"{ref}:{tag}", force=True)


def build_context(dockerfile: str, files: dict[str, bytes]) -> io.BytesIO:
    """A build context in memory: the Dockerfile and ``files`` (name -> bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def push_built(client: docker.DockerClient, registry: Registry, repository: str, tag: str,
               dockerfile: str, files: dict[str, bytes] | None = None) -> str:
    """``dockerfile`` built offline (its base on the engine already) with ``files`` beside
    it, pushed as ``repository:tag`` and removed from the engine: the registry's digest."""
    ref = f"{registry.host}/{repository}"
    client.images.build(fileobj=build_context(dockerfile, files or {}), custom_context=True,
                        tag=f"{ref}:{tag}", pull=False, rm=True, forcerm=True,
                        network_mode="none")
    return push(client, registry, ref, tag)


class RegistryApi:
    """The registry's HTTP API as its administrator (basic credentials, or a token the
    issuer mints directly, past its counters)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.session = requests.Session()

    def _headers(self, repository: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        if self.registry.issuer is not None:
            token = self.registry.issuer.mint(
                [{"type": "repository", "name": repository, "actions": ["pull", "push",
                                                                          "delete"]}])
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _auth(self) -> tuple[str, str] | None:
        if self.registry.mode == "htpasswd":
            assert self.registry.user and self.registry.password
            return (self.registry.user, self.registry.password)
        return None

    def _call(self, method: str, repository: str, path: str, *, ok: tuple[int, ...],
              headers: dict[str, str] | None = None, data: bytes | None = None
              ) -> requests.Response:
        url = f"{self.registry.url}/v2/{repository}/{path}"
        resp = self.session.request(method, url, headers=self._headers(repository, headers),
                                    auth=self._auth(), data=data, timeout=30)
        if resp.status_code not in ok:
            raise RuntimeError(f"{method} {url}: {resp.status_code} {resp.text[:300]}")
        return resp

    def manifest(self, repository: str, reference: str) -> tuple[bytes, str, str]:
        """A manifest's bytes, media type and digest."""
        resp = self._call("GET", repository, f"manifests/{reference}", ok=(200,),
                          headers={"Accept": ACCEPT})
        return (resp.content, resp.headers["Content-Type"].split(";")[0],
                resp.headers["Docker-Content-Digest"])

    def put_manifest(self, repository: str, reference: str, body: bytes, media_type: str
                     ) -> str:
        """Put ``body`` as ``repository:reference``; its digest."""
        self._call("PUT", repository, f"manifests/{reference}", ok=(201,), data=body,
                   headers={"Content-Type": media_type})
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def tag(self, repository: str, source: str, tag: str) -> str:
        """Point ``tag`` at the manifest ``source`` (a tag or digest) names; its digest."""
        body, media_type, _ = self.manifest(repository, source)
        return self.put_manifest(repository, tag, body, media_type)

    def put_index(self, repository: str, tag: str, platforms: dict[str, str],
                  media_type: str = DOCKER_LIST) -> str:
        """An index (manifest list) under ``tag`` whose entries are ``{"os/arch": digest}``
        of manifests already in ``repository``; the index's digest."""
        entries = []
        for platform, digest in platforms.items():
            body, manifest_type, _ = self.manifest(repository, digest)
            os_, arch = platform.split("/", 1)
            entry_platform: dict[str, str] = {"architecture": arch.split("/")[0], "os": os_}
            if "/" in arch:
                entry_platform["variant"] = arch.split("/", 1)[1]
            entries.append({"mediaType": manifest_type, "digest": digest, "size": len(body),
                            "platform": entry_platform})
        index = {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
        return self.put_manifest(repository, tag, json.dumps(index).encode(), media_type)

    def digest(self, repository: str, reference: str) -> str | None:
        """The digest ``reference`` names now, None when the registry knows none."""
        resp = self._call("HEAD", repository, f"manifests/{reference}", ok=(200, 404),
                          headers={"Accept": ACCEPT})
        return resp.headers.get("Docker-Content-Digest") if resp.status_code == 200 else None

    def delete(self, repository: str, digest: str) -> None:
        """Delete a manifest by digest: every tag pointing at it is gone with it."""
        self._call("DELETE", repository, f"manifests/{digest}", ok=(202,))

    def close(self) -> None:
        self.session.close()
