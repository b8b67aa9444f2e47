"""A token issuer on 127.0.0.1 for a registry run with ``auth: token`` (registry 2.8 ships none).

It answers the distribution token protocol: ``GET /token?service=...&scope=...`` with basic
credentials or none, and the OAuth2 ``POST /token`` (``grant_type=password`` or
``refresh_token``) that engines use. A token is a JWT signed RS256 by a key whose self-signed
certificate the registry trusts as its ``rootcertbundle``; its header carries the certificate
(``x5c``), which is how the registry finds the key. Each request is counted, so tests assert
how often a client fetched a token.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

__all__ = ["IssuerKey", "TokenIssuer", "TokenRequest", "server_certificate"]

ISSUER = "envcheck-test-issuer"
SERVICE = "envcheck-test-registry"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class IssuerKey:
    """The issuer's RSA key and its self-signed certificate (the registry's root bundle)."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @classmethod
    def generate(cls) -> IssuerKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    def write_bundle(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path

    def sign(self, claims: dict[str, Any]) -> str:
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        signing_input = ".".join(_b64url(json.dumps(part, separators=(",", ":")).encode())
                                 for part in (header, claims))
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"


def server_certificate(ca: IssuerKey, folder: Path, ip: str = "127.0.0.1") -> tuple[Path, Path]:
    """A TLS certificate for ``ip`` signed by ``ca``, and its key, written into ``folder``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)]))
            .issuer_name(ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(
                ip))]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    cert_path, key_path = folder / "server.crt", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass(frozen=True)
class TokenRequest:
    """One request the issuer answered: how, for what, as whom, and what it said."""

    method: str
    scope: str
    user: str | None
    status: int


@dataclass
class _Policy:
    users: dict[str, str]
    anonymous_pull: bool
    expires_in: int | None
    requests: list[TokenRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class TokenIssuer:
    """``realm`` is the URL the registry's challenge names. ``expires_in`` (seconds, None to
    leave it out of the answer) and the users may be changed while it runs."""

    def __init__(self, key: IssuerKey, users: dict[str, str], *, anonymous_pull: bool = False,
                 expires_in: int | None = 300) -> None:
        self.key = key
        self.policy = _Policy(dict(users), anonymous_pull, expires_in)
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # the tests read the counts instead
                pass

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                user, password = _basic(self.headers.get("Authorization", ""))
                self._answer(issuer.grant("GET", query, user, password))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                user = form.get("username", [None])[0]
                password = form.get("password", [None])[0]
                if form.get("grant_type", [""])[0] == "refresh_token":
                    user, password = _refresh_tokens.get(form.get("refresh_token", [""])[0],
                                                         (None, None))
                self._answer(issuer.grant("POST", form, user, password, oauth=True))

            def _answer(self, reply: tuple[int, dict[str, Any]]) -> None:
                status, doc = reply
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.realm = f"http://127.0.0.1:{self._server.server_address[1]}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="token-issuer")
        self._thread.start()

    def grant(self, method: str, query: dict[str, list[str]], user: str | None,
              password: str | None, *, oauth: bool = False) -> tuple[int, dict[str, Any]]:
        scopes = [s for value in query.get("scope", []) for s in value.split(" ") if s]
        policy = self.policy
        if user is not None and policy.users.get(user) != password:
            return self._record(method, scopes, user, 401, {"details": "bad credentials"})
        if user is None and not policy.anonymous_pull and scopes:
            return self._record(method, scopes, None, 401, {"details": "credentials needed"})
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            allowed = actions.split(",") if user is not None else ["pull"]
            access.append({"type": kind, "name": name,
                           "actions": [a for a in actions.split(",") if a in allowed]})
        doc: dict[str, Any] = {"token": self.mint(access, user or "")}
        doc["access_token"] = doc["token"]
        if policy.expires_in is not None:
            doc["expires_in"] = policy.expires_in
        doc["issued_at"] = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
        if oauth and user is not None:
            refresh = secrets.token_urlsafe(16)
            _refresh_tokens[refresh] = (user, password)
            doc["refresh_token"] = refresh
        return self._record(method, scopes, user, 200, doc)

    def mint(self, access: list[dict[str, Any]], subject: str = "admin",
             lifetime_s: int = 3600) -> str:
        now = int(time.time())
        return self.key.sign({"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now +
                              lifetime_s, "nbf": now - 10, "iat": now,
                              "jti": secrets.token_hex(8), "access": access})

    def _record(self, method: str, scopes: list[str], user: str | None, status: int,
                doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.policy.lock:
            self.policy.requests.append(TokenRequest(method, " ".join(scopes), user, status))
        return status, doc

    @property
    def requests(self) -> list[TokenRequest]:
        with self.policy.lock:
            return list(self.policy.requests)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# refresh tokens the OAuth flow handed out, to the credentials they stand for
_refresh_tokens: dict[str, tuple[str | None, str | None]] = {}


def _basic(header: str) -> tuple[str | None, str | None]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None, None
    user, _, password = base64.b64decode(value).decode().partition(":")
    return user, password
