"""Registry credentials, read the way the Docker CLI reads them, or per registry from the
catalogue; never logged, never in a repr or an exception message.

- The Docker CLI's config (``--docker-config``, else ``$DOCKER_CONFIG/config.json``, else
  ``~/.docker/config.json``): ``auths``, ``credsStore`` and ``credHelpers``, read by the docker
  SDK's own code (``docker.auth.load_config``, ``AuthConfig.resolve_authconfig``), which runs a
  ``docker-credential-<name>`` helper through ``docker.credentials.Store``. The SDK waits on a
  helper for ever: here a helper gets ``helper_timeout_s``.
- A source the catalogue names for one registry (``CredentialSource``: an environment variable
  or a secret file holding ``user:password``), read by ``envcheck.net.secrets`` as data-source
  secrets are. It wins over the Docker config for that registry.

What a helper answers is kept ``ttl_s`` (default 5 min): a watch of thousands of tags runs it
once per registry per ttl, and a short-lived credential (ECR's 12 h) is still asked for again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from docker import credentials as docker_credentials
from docker.auth import INDEX_NAME, AuthConfig
from docker.credentials.utils import create_environment_dict
from docker.errors import DockerException
from docker.utils.config import find_config_file

from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.errors import RegistryFailed, SecretUnavailable
from envcheck.core.results import Reason
from envcheck.net.secrets import read_secret_from

__all__ = ["ANONYMOUS", "CredentialSource", "Credentials", "RegistryCredentials"]


@dataclass(frozen=True, slots=True)
class Credentials:
    """What to show a registry: a user and password, or an identity (refresh) token, or
    nothing. ``source`` says where they came from, for messages; the secrets never print."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    identity_token: str | None = field(default=None, repr=False)
    source: str = "none"

    @property
    def anonymous(self) -> bool:
        return self.password is None and self.identity_token is None

    def secrets(self) -> tuple[str, ...]:
        """Every secret value, for redaction."""
        return tuple(s for s in (self.password, self.identity_token) if s)

    @property
    def key(self) -> str:
        """Tells credentials apart (tokens are cached per credentials) without holding them."""
        if self.anonymous:
            return "anonymous"
        material = "\0".join((self.username or "", self.password or "",
                              self.identity_token or ""))
        return hashlib.sha256(material.encode()).hexdigest()[:32]

    def __repr__(self) -> str:
        held = "password" if self.password else "identity token" if self.identity_token else ""
        return (f"Credentials(username={self.username!r}, source={self.source!r}"
                + (f", {held}=***" if held else "") + ")")

    __str__ = __repr__


ANONYMOUS = Credentials()


@dataclass(frozen=True, slots=True)
class CredentialSource:
    """One registry's credentials named by the catalogue: an environment variable or a secret
    file (exactly one) holding the password of ``username``, or ``user:password`` when the
    catalogue names no user."""

    env: str | None = None
    file: str | None = None
    username: str | None = None

    def __post_init__(self) -> None:
        if (self.env is None) == (self.file is None):
            raise ValueError("set exactly one of env or file (a secret is never written in "
                             "the catalogue)")

    def describe(self) -> str:
        return f"environment variable {self.env}" if self.env else f"secret file {self.file}"

    def problem(self) -> str | None:
        """What stops this source from being read, checked without reading it (for an offline
        ``validate``): a secret file that does not exist or cannot be read. None if fine."""
        if self.file is None:
            return None
        if not os.path.isfile(self.file):
            return f"secret file {self.file} does not exist"
        if not os.access(self.file, os.R_OK):
            return f"secret file {self.file} cannot be read"
        return None

    def read(self) -> Credentials:
        """Raises ``SecretUnavailable`` (unset, empty, unreadable) or ValueError (not
        ``user:password``); neither message holds the value."""
        value = read_secret_from(self.env, self.file)
        if self.username is not None:
            return Credentials(self.username, value, source=self.describe())
        user, sep, password = value.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"{self.describe()} must hold user:password")
        return Credentials(user, password, source=self.describe())


class _TimedStore(docker_credentials.Store):  # type: ignore[misc]
    """The SDK's credential-helper client with a deadline: a helper that hangs (a keychain
    waiting for a prompt) must not hang a look."""

    timeout_s = 10.0

    def _execute(self, subcmd: str, data_input: bytes | None) -> bytes:
        if self.exe is None:
            raise docker_credentials.StoreError(f"{self.program} is not on PATH")
        try:
            done = subprocess.run([self.exe, subcmd], input=data_input, capture_output=True,
                                  env=create_environment_dict(self.environment),
                                  timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise docker_credentials.StoreError(
                f"{self.program} did not answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise docker_credentials.StoreError(f"{self.program} could not run: "
                                                f"{exc.strerror}") from None
        if done.returncode != 0:
            if b"credentials not found" in done.stdout.lower():
                raise docker_credentials.CredentialsNotFound(self.program)
            # what the helper said may hold what it was asked to keep: not repeated
            raise docker_credentials.StoreError(f"{self.program} exited with status "
                                                f"{done.returncode}")
        return bytes(done.stdout)


class _AuthConfig(AuthConfig):  # type: ignore[misc]
    """The SDK's resolution order (credHelpers, credsStore, auths), its helpers timed."""

    helper_timeout_s = 10.0

    def _get_store_instance(self, name: str) -> docker_credentials.Store:
        if name not in self._stores:
            store = _TimedStore(name, environment=self._credstore_env)
            store.timeout_s = self.helper_timeout_s
            self._stores[name] = store
        return self._stores[name]


class RegistryCredentials:
    """Credentials per registry (as the engine names it: ``docker.io``, ``127.0.0.1:5000``):
    the catalogue's source for it first, else the Docker config, else anonymous. Raises
    ``RegistryFailed`` (``registry_auth_failed``, naming the registry) when a source exists
    and cannot be read: a deployment problem, never the environment's."""

    def __init__(self, sources: Mapping[str, CredentialSource] | None = None, *,
                 docker_config: str | None = None, helper_timeout_s: float = 10.0,
                 ttl_s: float = 300.0, clock: Clock = SYSTEM_CLOCK) -> None:
        self._sources = dict(sources or {})
        self._docker_config = docker_config  # a config.json path; None: the CLI's lookup
        self._helper_timeout_s = helper_timeout_s
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, Credentials | RegistryFailed]] = {}
        self._lock = threading.Lock()

    def for_registry(self, registry: str) -> Credentials:
        now = self._clock.monotonic()
        with self._lock:
            cached = self._cache.get(registry)
        if cached is not None and now - cached[0] < self._ttl_s:
            if isinstance(cached[1], RegistryFailed):
                raise cached[1]
            return cached[1]
        try:
            found = self._resolve(registry)
        except RegistryFailed as exc:
            # a failing helper is not run again for every tag of its registry: the failure
            # stands for a minute (at most the ttl), then the source is read again
            with self._lock:
                self._cache[registry] = (now - self._ttl_s + min(self._ttl_s, 60.0), exc)
            raise
        with self._lock:
            self._cache[registry] = (now, found)
        return found

    @property
    def sources(self) -> dict[str, CredentialSource]:
        """The catalogue's sources per registry (where a secret is, never the secret)."""
        with self._lock:
            return dict(self._sources)

    def replace_sources(self, sources: Mapping[str, CredentialSource]) -> None:
        """The catalogue's sources after a reload; what was read from the old ones is dropped."""
        with self._lock:
            self._sources = dict(sources)
            self._cache.clear()

    def forget(self, registry: str) -> None:
        """Read them again at the next look (after the registry refused them)."""
        with self._lock:
            self._cache.pop(registry, None)

    def _resolve(self, registry: str) -> Credentials:
        source = self._sources.get(registry)
        if source is not None:
            try:
                return source.read()
            except (SecretUnavailable, ValueError) as exc:
                raise _auth_failed(registry, f"credentials for {registry}: {exc}") from None
        return self._from_docker_config(registry)

    def _from_docker_config(self, registry: str) -> Credentials:
        path = find_config_file(self._docker_config)
        if path is None:
            return ANONYMOUS
        try:
            with open(path, encoding="utf-8") as f:
                doc: Any = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not a JSON document"
            raise _auth_failed(registry, f"credentials for {registry}: cannot read the "
                                         f"Docker config {path}: {why}") from None
        if not isinstance(doc, dict):
            raise _auth_failed(registry, f"credentials for {registry}: the Docker config "
                                         f"{path} is not a JSON object")
        if not doc:
            return ANONYMOUS
        try:
            timed = _AuthConfig.load_config(None, doc)
            timed.helper_timeout_s = self._helper_timeout_s
            entry = timed.resolve_authconfig(None if registry == INDEX_NAME else registry)
        except (DockerException, docker_credentials.StoreError, ValueError) as exc:
            raise _auth_failed(registry, f"credentials for {registry} from the Docker config "
                                         f"{path}: {_store_problem(exc)}") from None
        if not entry:
            return ANONYMOUS
        where = _where(timed, registry, path)
        token = entry.get("IdentityToken") or entry.get("identitytoken")
        if token:
            return Credentials(entry.get("Username") or entry.get("username"),
                               identity_token=token, source=where)
        user = entry.get("Username") or entry.get("username")
        password = entry.get("Password") or entry.get("password")
        if not user or not password:
            return ANONYMOUS  # an empty auths entry: a credsStore that knew nothing
        return Credentials(user, password, source=where)


def _where(config: AuthConfig, registry: str, path: str) -> str:
    helper = config.get_credential_store(None if registry == INDEX_NAME else registry)
    if helper:
        return f"docker-credential-{helper} (Docker config {path})"
    return f"auths of the Docker config {path}"


def _store_problem(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc, DockerException) and exc.__cause__ else exc
    if isinstance(cause, docker_credentials.StoreError):
        return str(cause) or "the credential helper failed"
    return type(exc).__name__ if not str(exc) else str(exc).splitlines()[0][:200]


def _auth_failed(registry: str, message: str) -> RegistryFailed:
    return RegistryFailed(message, reason=Reason.REGISTRY_AUTH_FAILED, registry=registry)
