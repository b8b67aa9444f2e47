"""The executor names (``local``, ``ray``) alone: the command line builds its ``--executor``
option from this enum without importing the executors, the catalogue or the probe kinds."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ExecutorKind"]


class ExecutorKind(StrEnum):
    LOCAL = "local"
    RAY = "ray"
