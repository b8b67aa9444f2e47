"""A real OCI registry for the tests: Debian's ``docker-registry`` (the CNCF distribution
registry 2.8) run as ``docker-registry serve CFG`` on 127.0.0.1, with its own config and
filesystem storage in a temporary folder, deletes enabled, in one of three modes:

- ``anonymous``: no auth;
- ``htpasswd``: basic auth, the password hashed with bcrypt at cost 4 (cost 12 would make every
  request ~300 ms: the registry checks the hash on each one);
- ``token``: ``auth: token`` with a small issuer the tests run (``tests.token_issuer``).

The registry writes one access-log line per request (combined log format, on its stdout, into
``access.log``); ``Registry.counts`` reads it back by the kind of request, so tests assert what
a look cost the registry. The engine trusts 127.0.0.0/8 over plain HTTP, so pushes through
the engine need no TLS.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import bcrypt
import requests

from scripts.registry_config import BINARY, find_binary, registry_config
from tests.polling import stop, wait_for
from tests.ports import free_port
from tests.token_issuer import ISSUER, SERVICE, IssuerKey, TokenIssuer, server_certificate

__all__ = ["AccessEntry", "Mark", "Mode", "Registry", "request_kind"]

Mode = Literal["anonymous", "htpasswd", "token"]
USER = "envcheck"
# long enough that a test asserting it never shows up in a log or an error cannot match by chance
PASSWORD = "s3cret-registry-password-7f1d2c"

# 127.0.0.1 - user [07/Dec/2026:09:38:09 +0000] "HEAD /v2/a/b/manifests/x HTTP/1.1" 404 91 ...
_LINE = re.compile(r'^\S+ \S+ (?P<user>\S+) \[[^]]+\] "(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" '
                   r"(?P<status>\d{3}) ")


@dataclass(frozen=True)
class AccessEntry:
    """One request the registry logged."""

    method: str
    path: str
    status: int

    @property
    def kind(self) -> str:
        return request_kind(self.method, self.path)

    @property
    def repository(self) -> str | None:
        m = re.match(r"^/v2/(?P<name>.+)/(manifests|blobs|tags)/", self.path.partition("?")[0])
        return m.group("name") if m else None


def request_kind(method: str, path: str) -> str:
    """``head_manifest``, ``get_manifest``, ``get_blob``, ``ping``... from a request line."""
    bare = path.partition("?")[0]
    if bare in ("/v2", "/v2/"):
        return "ping"
    for part in ("manifests", "blobs", "tags"):
        if f"/{part}/" in bare:
            return f"{method.lower()}_{part.rstrip('s')}"
    return f"{method.lower()}_other"


@dataclass(frozen=True)
class Mark:
    """Where the registry's access log and the issuer's grants stood at one moment."""

    log_offset: int = 0
    tokens: int = 0


class Registry:
    """The registry process, its config and storage under one temporary folder."""

    def __init__(self, mode: Mode, *, issuer_key: IssuerKey | None = None,
                 tls: bool = False) -> None:
        self.mode = mode
        self.dir = Path(tempfile.mkdtemp(prefix=f"envcheck-registry-{mode}-"))
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"{'https' if tls else 'http'}://{self.host}"
        # with tls: a certificate for 127.0.0.1 signed by a test CA (``ca_file``), as an
        # engine's certs.d would hold it
        self.ca_file: Path | None = None
        self._tls: tuple[Path, Path] | None = None
        if tls:
            ca = IssuerKey.generate()
            self.ca_file = ca.write_bundle(self.dir / "ca.crt")
            self._tls = server_certificate(ca, self.dir)
        self.user = USER if mode != "anonymous" else None
        self.password = PASSWORD if mode != "anonymous" else None
        self.issuer: TokenIssuer | None = None
        if mode == "token":
            self.issuer = TokenIssuer(issuer_key or IssuerKey.generate(), {USER: PASSWORD})
        self.access_log = self.dir / "access.log"
        self.error_log = self.dir / "registry.log"
        self.config = self._write_config()
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    def _write_config(self) -> Path:
        auth = ""
        if self.mode == "htpasswd":
            hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
            (self.dir / "htpasswd").write_text(f"{USER}:{hashed}\n")
            auth = (f"auth:\n  htpasswd:\n    realm: envcheck-test\n"
                    f"    path: {self.dir / 'htpasswd'}\n")
        elif self.mode == "token":
            assert self.issuer is not None
            bundle = self.issuer.key.write_bundle(self.dir / "issuer.crt")
            auth = (f"auth:\n  token:\n    realm: {self.issuer.realm}\n    service: {SERVICE}\n"
                    f"    issuer: {ISSUER}\n    rootcertbundle: {bundle}\n")
        config = self.dir / "config.yml"
        tls = (f"  tls:\n    certificate: {self._tls[0]}\n    key: {self._tls[1]}\n"
              if self._tls else "")
        config.write_text(registry_config(self.host, self.dir / "data",
                                          secret="envcheck-test-http-secret",
                                          extra=tls + auth))
        return config

    # --- the process ------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or start again, same port and storage) and wait until ``/v2/`` answers."""
        if self.running:
            return
        binary = find_binary()
        if binary is None:
            raise RuntimeError(f"{BINARY} not found: scripts/setup.sh installs it "
                               "(apt-get install docker-registry)")
        with open(self.access_log, "ab") as out, open(self.error_log, "ab") as err:
            self._proc = subprocess.Popen([binary, "serve", str(self.config)], stdout=out,
                                          stderr=err, stdin=subprocess.DEVNULL)
        verify = str(self.ca_file) if self.ca_file else True
        wait_for(lambda: requests.get(f"{self.url}/v2/", timeout=2,
                                      verify=verify).status_code in (200, 401),
                 timeout_s=30, what=f"the registry on {self.host}", proc=self._proc,
                 details=lambda: self.error_log.read_text()[-2000:])

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            stop(self._proc, timeout_s=10)
        self._proc = None

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """The registry down (connections refused) inside the block, back up after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def close(self) -> None:
        self.stop()
        if self.issuer is not None:
            self.issuer.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- what it was asked ------------------------------------------------------------------
    def entries(self, since: Mark = Mark()) -> list[AccessEntry]:
        """The requests logged after ``since`` (a ``mark()``), oldest first."""
        with open(self.access_log, "rb") as f:
            f.seek(since.log_offset)
            text = f.read().decode(errors="replace")
        found = []
        for line in text.splitlines():
            m = _LINE.match(line)
            if m:
                found.append(AccessEntry(m["method"], m["path"], int(m["status"])))
        return found

    def mark(self) -> Mark:
        """Now: ``counts(since=mark)`` sees only what follows."""
        tokens = len(self.issuer.requests) if self.issuer is not None else 0
        return Mark(self.access_log.stat().st_size, tokens)

    def counts(self, since: Mark = Mark(), repository: str | None = None) -> Counter[str]:
        """Requests by kind (``request_kind``) after ``since``, for one repository when given
        (pings name none and are counted only without one). With a token issuer, its answers
        (for that repository's scope when given) are counted as ``token``."""
        counted: Counter[str] = Counter()
        for entry in self.entries(since):
            if repository is None or entry.repository == repository:
                counted[entry.kind] += 1
        if self.issuer is not None:
            grants = self.issuer.requests[since.tokens:]
            if repository is not None:
                grants = [g for g in grants if f":{repository}:" in g.scope]
            if grants:
                counted["token"] = len(grants)
        return counted

    @property
    def auth_config(self) -> dict[str, str] | None:
        """What docker-py's ``auth_config=`` takes for this registry."""
        if self.user is None or self.password is None:
            return None
        return {"username": self.user, "password": self.password}

    def __repr__(self) -> str:
        return f"Registry({self.mode!r}, {self.host})"
