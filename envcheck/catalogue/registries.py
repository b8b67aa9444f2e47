"""Registries the catalogue names credentials for, and the image references it checks.

Credentials here are the catalogue's way; without an entry, the registry stage reads them as
the Docker CLI does (``DOCKER_CONFIG`` / ``~/.docker/config.json``). Either way the catalogue
holds where a secret is, never the secret. Checked at load, offline (``envcheck validate`` runs
in pre-commit hooks and pull-request CI): a reference the engine would refuse, a secret file
that does not exist or cannot be read, with file, line and key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from envcheck.catalogue.datasources import SecretRef
from envcheck.catalogue.fields import CatalogueModel
from envcheck.core.imageref import DOCKER_HUB, DOCKER_HUB_API, ImageRefError, parse_image_ref

__all__ = ["ImageReference", "RegistryCredentials", "RegistrySecret", "registry_host"]

_HUB_ALIASES = {"index.docker.io": DOCKER_HUB, DOCKER_HUB_API: DOCKER_HUB,
                "https://index.docker.io/v1/": DOCKER_HUB}


def _reference(value: str) -> str:
    try:
        parse_image_ref(value)
    except ImageRefError as exc:
        raise ValueError(str(exc)) from None
    return value


# An image reference as the engine reads it (validated, kept as written).
ImageReference = Annotated[str, Field(min_length=1), AfterValidator(_reference)]


def registry_host(value: str) -> str:
    """A registry's host as image references name it (Docker Hub's aliases as ``docker.io``)."""
    return _HUB_ALIASES.get(value, value)


class RegistrySecret(SecretRef):
    """The password (or access token) for a registry, from an environment variable or a file.
    A file is checked at load: it must exist and be readable by envcheck."""

    @field_validator("file")
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        if value is None:
            return value
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"secret file {value} does not exist (or is not a file)")
        if not os.access(path, os.R_OK):
            raise ValueError(f"secret file {value} is not readable by envcheck")
        return value


class RegistryCredentials(CatalogueModel):
    """Credentials for one registry, used for its tag checks and pulls instead of the Docker
    CLI's configuration."""

    host: str = Field(pattern=r"^[A-Za-z0-9.-]+(:[0-9]+)?$", description=(
        "the registry as image references name it: 'ghcr.io', '127.0.0.1:5000', 'docker.io'"))
    username: str = Field(min_length=1, description="the account name (not a secret)")
    password: RegistrySecret = Field(description=(
        "where the password or access token is read: {env: VAR} or {file: /run/secrets/x}"))

    @field_validator("host")
    @classmethod
    def _normalised(cls, value: str) -> str:
        return registry_host(value)
