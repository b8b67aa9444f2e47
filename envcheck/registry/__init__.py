"""The registry stage: envcheck follows the registries a training cluster pulls from.

It fetches images and what names them, and never judges an environment: below the probe
kinds (a probe asks it for an image), beside the sandbox, above ``net``.

- ``reference``: an image reference as the engine reads it (``ImageReference``).
- ``credentials``: credentials as the Docker CLI reads them, or per registry from the
  catalogue (``RegistryCredentials``, ``Credentials``, ``CredentialSource``).
- ``transport`` and ``auth``: HTTP with timeouts and a deadline per look, the engine's CA
  files, proxies; the Basic and Bearer token flows, tokens cached for their lifetime.
- ``watch``: the tag watch, one ``HEAD`` per unchanged tag (``TagWatcher.look`` gives a
  ``TagLook`` or a ``RegistryFailure``, ``outcomes``); ``manifests``: media types and an
  index's entry for the engine's platform.
- ``failures``: what each answer or silence means (``registry_unreachable``,
  ``registry_auth_failed``, ``registry_rate_limited``, ``image_not_found``).
- ``state``: what a watch keeps between looks (``TagWatchState``: a missing tag confirmed on
  a second look a watch interval later; ``RegistryBackoff``: one registry's 429 backoff).
"""

from __future__ import annotations

from envcheck.registry.credentials import (
    ANONYMOUS,
    Credentials,
    CredentialSource,
    RegistryCredentials,
)
from envcheck.registry.outcomes import RegistryFailure, TagLook
from envcheck.registry.reference import ImageReference, InvalidReference
from envcheck.registry.state import Backoff, Change, RegistryBackoff, TagWatchState, WatchUpdate
from envcheck.registry.watch import TagWatcher, WatchSettings

__all__ = [
    "ANONYMOUS",
    "Backoff",
    "Change",
    "CredentialSource",
    "Credentials",
    "ImageReference",
    "InvalidReference",
    "RegistryBackoff",
    "RegistryCredentials",
    "RegistryFailure",
    "TagLook",
    "TagWatchState",
    "TagWatcher",
    "WatchSettings",
    "WatchUpdate",
]
