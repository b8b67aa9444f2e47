"""Data sources: the data APIs environments call, and how the datasource probe samples them.

A source's secret is named here (an environment variable or a file), never written: the
validators refuse a password in the URL, and an in-sandbox probe must name its network.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import jsonschema
from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from envcheck.catalogue.fields import CatalogueModel, Ident, Schedule, Seconds

__all__ = ["Auth", "DataSource", "Freshness", "InSandbox", "InSandboxOption", "SecretRef"]

_ENV_VAR = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HEADER = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # an HTTP token (RFC 9110)
_NETWORK = re.compile(r"^(container:)?[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Network modes an in-sandbox probe may not use: the probe must never widen what a sandbox
# reaches beyond the network the catalogue names for it.
_RESERVED_NETWORKS = {
    "none": "has no network at all",
    "bridge": "is Docker's default network",
    "default": "is Docker's default network",
    "host": "is the host's own network (no isolation)",
}


class SecretRef(CatalogueModel):
    """Where a secret is read at the moment it is needed: an environment variable or a file
    (exactly one); the catalogue never holds the secret itself."""

    env: str | None = Field(None, pattern=_ENV_VAR,
                            description="environment variable holding the secret")
    file: str | None = Field(None, pattern=r"^/", description="file holding the secret "
                             "(surrounding whitespace dropped), e.g. /run/secrets/weather")

    @model_validator(mode="before")
    @classmethod
    def _not_the_secret(cls, value: Any) -> Any:
        # Said without the value: what was written here may be the secret itself.
        if not isinstance(value, dict):
            raise ValueError("a secret is never written in the catalogue: name where it is "
                             "read, {env: VAR} or {file: /run/secrets/NAME}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("set exactly one of env or file (a secret is never written in "
                             "the catalogue)")
        return self


class Auth(SecretRef):
    """A data source's secret: read at probe time from an environment variable or a file
    (exactly one), sent in a header or a query parameter; never stored, logged or shown."""

    header: str = Field("Authorization", pattern=_HEADER, description="header carrying it")
    scheme: str = Field("Bearer", pattern=r"^[A-Za-z0-9._~+/-]*$", description=(
        "prefix of the header value: 'Bearer', 'Basic' (the secret is 'user:password', "
        "base64-encoded for you) or '' to send the secret as it is"))
    query: str | None = Field(None, min_length=1, description=(
        "send the secret as this query parameter instead of a header"))


class Freshness(CatalogueModel):
    """A timestamp in the JSON body that must be recent: ISO 8601 (without an offset: UTC)
    or seconds since the epoch."""

    field: str = Field(pattern=r"^[^.\s]+(\.[^.\s]+)*$", description=(
        "dotted path to the timestamp, list items by index: 'meta.updated_at', 'items.0.ts'"))
    max_age_s: Seconds = Field(description="older than this is stale_data")


def _in_sandbox(value: Any) -> Any:
    if value is True:  # the short form would leave the network to chance: say what to write
        raise ValueError("in-sandbox probing needs the Docker network to attach its probe "
                         "container to: {network: 'container:NAME'} or {network: USER_NETWORK}")
    return None if value is False else value


class InSandbox(CatalogueModel):
    """Probe from inside a short-lived container of the environment's image, attached to the
    network named here; every other sandbox keeps network ``none``."""

    network: str = Field(description=(
        "Docker network mode of the probe container: 'container:NAME' (share that "
        "container's network namespace, e.g. an egress proxy's) or a user-defined network"))

    @field_validator("network")
    @classmethod
    def _named(cls, value: str) -> str:
        if value in _RESERVED_NETWORKS:
            raise ValueError(f"network {value!r} {_RESERVED_NETWORKS[value]}: name the "
                             "network the sandbox is meant to use ('container:NAME' or a "
                             "user-defined network)")
        if not _NETWORK.match(value):
            raise ValueError(f"network {value!r} is not 'container:NAME' or a network name")
        return value


InSandboxOption = Annotated[InSandbox | None, BeforeValidator(_in_sandbox)]


class DataSource(CatalogueModel):
    """A data API that environments call; the ``datasource`` probe samples it."""

    id: Ident
    description: str = ""
    method: Literal["GET", "POST", "HEAD"] = "GET"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    body: Any = Field(None, description="JSON request body (POST only)")
    auth: Auth | None = None
    expected_status: int = Field(200, ge=100, le=599)
    format: Literal["json", "any"] = Field("json", description=(
        "'json': the body must be JSON (schema, freshness and drift checks need it); "
        "'any': only the status and the latency are checked"))
    json_schema: dict[str, Any] | None = Field(None, alias="schema", description=(
        "JSON Schema the body must validate against (draft 2020-12 unless $schema says "
        "otherwise)"))
    freshness: Freshness | None = None
    latency_budget_ms: float = Field(1000.0, gt=0, description=(
        "the p95 latency of the samples must stay under it, else slow_response"))
    samples: int = Field(5, ge=1, le=1000, description="requests per probe")
    connect_timeout_s: Seconds = 3.0
    read_timeout_s: Seconds = Field(10.0, description=(
        "for the first byte of the answer, and again for the whole body"))
    retries: int = Field(3, ge=0, le=10, description=(
        "retries per sample of a transient failure (timeouts, resets, refused, 5xx, 429)"))
    retry_budget_s: Seconds = Field(10.0, description=(
        "waiting between retries, Retry-After included, one probe of the source may spend"))
    max_body_kb: int = Field(1024, ge=1, le=256 * 1024, description="larger bodies are "
                             "body_too_large (and not read further)")
    verify_tls: bool = True
    ca_bundle: str | None = Field(None, pattern=r"^/", description=(
        "PEM file of the certificate authorities to trust instead of the system's"))
    in_sandbox: InSandboxOption = None
    # Placement, not spec: excluded from dumps, so pinning a source moves no spec hash.
    node: Ident | None = Field(None, exclude=True, description=(
        "with the ray executor: a custom resource that only the worker nodes able to reach "
        "this source declare (e.g. net-inside); the datasource probes of environments using "
        "the source run on such a node. The local executor ignores it"))
    schedule: Schedule | None = 300.0

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.match(_HEADER, name) or any(c in text for c in "\r\n\0"):
                raise ValueError(f"headers: {name!r} is not a valid header (name: a token; "
                                 "value: one line)")
        return value

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str) -> str:
        if urlsplit(value).password is not None:
            raise ValueError("a password in the URL would be written in the catalogue: "
                             "use auth (env or file)")
        return value

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                jsonschema.validators.validator_for(value).check_schema(value)
            except jsonschema.SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "top level"
                raise ValueError(f"not a valid JSON Schema ({where}): {exc.message}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DataSource:
        if (self.method == "HEAD" or self.format == "any") and (
            self.json_schema is not None or self.freshness is not None
        ):
            raise ValueError("schema and freshness need a JSON body (format: json, not HEAD)")
        if self.body is not None and self.method != "POST":
            raise ValueError(f"a request body needs method POST, not {self.method}")
        if self.auth is not None and self.auth.query is not None and (
            self.auth.query in self.query or f"{self.auth.query}=" in self.url
        ):
            raise ValueError(f"query parameter {self.auth.query!r} is both auth.query and "
                             "set in the catalogue")
        if not self.verify_tls and self.ca_bundle is not None:
            raise ValueError("ca_bundle has no effect with verify_tls: false")
        return self
