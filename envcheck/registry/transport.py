"""HTTP to registries: explicit (connect, read) timeouts on every request, and a deadline over
a whole look, which no single request may outlive (a registry that accepts and never answers
costs a look its deadline, never more: the engine itself would wait on it for minutes).

TLS trusts what the engine trusts for that registry: the CA files in
``/etc/docker/certs.d/<host[:port]>/`` (``*.crt``; a ``*.cert`` with its ``*.key`` is the
client's certificate), else the system's. A registry on loopback (the engine trusts
127.0.0.0/8 as insecure by default) or named insecure is spoken to in plain HTTP.
``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` are honoured per host; nothing else of the
environment is (requests' ``trust_env`` would also send ``~/.netrc`` passwords to registries).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import requests
from requests.utils import get_environ_proxies

from envcheck.core.clock import Clock

__all__ = ["DEFAULT_CERTS_DIR", "Answer", "Deadline", "DeadlinePassed", "Timeouts", "Transport"]

DEFAULT_CERTS_DIR = Path("/etc/docker/certs.d")
_CHUNK = 64 * 1024


class DeadlinePassed(Exception):
    """The look's deadline passed before the registry answered."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = 5.0
    read_s: float = 10.0


class Deadline:
    """The time left for one look, on an injected clock."""

    def __init__(self, seconds: float, clock: Clock) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock.monotonic() + seconds

    def remaining(self) -> float:
        return self._at - self._clock.monotonic()

    def clip(self, timeouts: Timeouts) -> tuple[float, float]:
        """(connect, read) timeouts for the next request, none past the deadline."""
        left = self.remaining()
        if left <= 0:
            raise DeadlinePassed
        return min(timeouts.connect_s, left), min(timeouts.read_s, left)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # case-insensitive (requests' own mapping)
    body: bytes


class Transport:
    """Thread-safe: each thread gets its own ``requests.Session`` (and connection pool)."""

    def __init__(self, *, timeouts: Timeouts = Timeouts(), certs_dir: Path = DEFAULT_CERTS_DIR,
                 insecure: Collection[str] = (), clock: Clock) -> None:
        self.timeouts = timeouts
        self._certs_dir = Path(certs_dir)
        self._insecure = frozenset(insecure)
        self._clock = clock
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self._tls: dict[str, tuple[bool | str, tuple[str, str] | None]] = {}
        self._proxies: dict[str, dict[str, str]] = {}
        self._bundles: Path | None = None

    def base_url(self, api_host: str, *, loopback: bool) -> str:
        """Plain HTTP for a registry on loopback or named insecure, unless the engine holds
        CA files for it (then it serves TLS, as the engine would find trying HTTPS first)."""
        plain = (loopback or api_host in self._insecure) \
            and not (self._certs_dir / api_host).is_dir()
        return f"{'http' if plain else 'https'}://{api_host}"

    def request(self, method: str, url: str, deadline: Deadline, *,
                headers: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None,
                data: Mapping[str, str] | None = None, max_body: int = 1024 * 1024) -> Answer:
        """One request; requests' exceptions and ``DeadlinePassed`` propagate to the caller,
        which classifies them (``failures.from_exception``)."""
        connect_s, read_s = deadline.clip(self.timeouts)
        host = url.split("://", 1)[-1].split("/", 1)[0]
        verify, cert = self._tls_for(host)
        response = self._session().request(
            method, url, headers=dict(headers or {}), auth=auth, data=data,
            timeout=(connect_s, read_s), stream=True, allow_redirects=True,
            verify=verify, cert=cert, proxies=self._proxies_for(url, host))
        whole = False
        try:
            body = bytearray()
            if method != "HEAD":
                # read1: one socket read per call, so the deadline is checked between them and
                # a registry trickling its answer cannot hold the look past it
                while chunk := response.raw.read1(_CHUNK):
                    body += chunk
                    if len(body) > max_body:
                        break
                    if deadline.remaining() <= 0:
                        raise DeadlinePassed
                else:
                    whole = True
            else:
                whole = True
            return Answer(response.status_code, response.headers, bytes(body[:max_body]))
        finally:
            if whole:  # the connection goes back to the pool: the next look reuses it
                response.raw.release_conn()
            else:  # unread bytes on it: dropped
                response.close()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False  # proxies are set per request below; no .netrc
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _proxies_for(self, url: str, host: str) -> dict[str, str]:
        found = self._proxies.get(host)
        if found is None:
            found = dict(get_environ_proxies(url))
            self._proxies[host] = found
        return found

    def _tls_for(self, host: str) -> tuple[bool | str, tuple[str, str] | None]:
        """The engine's CA files and client certificate for ``host`` (certs.d)."""
        found = self._tls.get(host)
        if found is not None:
            return found
        folder = self._certs_dir / host
        verify: bool | str = True
        cert = None
        try:
            cas = sorted(folder.glob("*.crt")) if folder.is_dir() else []
            if len(cas) == 1:
                verify = str(cas[0])
            elif cas:
                verify = str(self._bundle(host, cas))
            for client in sorted(folder.glob("*.cert")) if folder.is_dir() else []:
                key = client.with_suffix(".key")
                if key.is_file():
                    cert = (str(client), str(key))
                    break
        except OSError:
            verify, cert = True, None  # unreadable: the system's CAs, as with no folder
        self._tls[host] = (verify, cert)
        return verify, cert

    def _bundle(self, host: str, cas: list[Path]) -> Path:
        """Several CA files as one bundle (requests takes one path)."""
        with self._lock:
            if self._bundles is None:
                self._bundles = Path(tempfile.mkdtemp(prefix="envcheck-registry-cas-"))
        path = self._bundles / f"{host.replace(':', '_')}.pem"
        path.write_bytes(b"\n".join(ca.read_bytes() for ca in cas))
        return path

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        if self._bundles is not None:
            shutil.rmtree(self._bundles, ignore_errors=True)
