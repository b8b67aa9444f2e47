"""How large a catalogue file may be, each limit raised by an environment variable.

A file is hostile until measured: its size is checked by ``stat`` before a byte is read (and
only regular files are opened, never blocking on a FIFO: :mod:`.sourcefile`), and the node
count and nesting depth while it is composed (:mod:`.yamlcompose`), so that a huge or deeply
nested file is refused early with a message naming the limit and the environment variable that
raises it (:class:`SourceLimits`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MAX_BYTES", "MAX_BYTES_ENV", "MAX_DEPTH", "MAX_DEPTH_ENV", "MAX_NODES",
           "MAX_NODES_ENV", "SourceLimits"]

MAX_BYTES_ENV = "ENVCHECK_CATALOGUE_MAX_BYTES"
MAX_NODES_ENV = "ENVCHECK_CATALOGUE_MAX_NODES"
MAX_DEPTH_ENV = "ENVCHECK_CATALOGUE_MAX_DEPTH"
# A 10,000-environment catalogue is about 4 MB and 300,000 nodes; its schema nests 8 levels.
MAX_BYTES = 32 * 1024 * 1024
MAX_NODES = 1_000_000  # per file, aliases expanded: a "billion laughs" must not hang the loader
MAX_DEPTH = 64


_SIZE = re.compile(r"^\s*(\d+)\s*(k|kib|m|mib|g|gib)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gib": 1 << 30}


def _show_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}" if n % size == 0 else f"{n / size:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True, slots=True)
class SourceLimits:
    """How large a catalogue file may be; each limit is raised by an environment variable."""

    max_bytes: int = MAX_BYTES
    max_nodes: int = MAX_NODES
    max_depth: int = MAX_DEPTH

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SourceLimits:
        """The limits, with ``$ENVCHECK_CATALOGUE_MAX_{BYTES,NODES,DEPTH}`` applied; raises
        ValueError (one line naming the variable) for a value that is not a positive number."""
        environ = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for name, attr, sizes in ((MAX_BYTES_ENV, "max_bytes", True),
                                  (MAX_NODES_ENV, "max_nodes", False),
                                  (MAX_DEPTH_ENV, "max_depth", False)):
            raw = environ.get(name, "").strip()
            if not raw:
                continue
            match = _SIZE.match(raw) if sizes else re.match(r"^\s*(\d+)\s*()$", raw)
            value = int(match.group(1)) * _UNITS[match.group(2).lower()] if match else 0
            if value <= 0:
                what = "a size in bytes (e.g. 67108864 or 64MiB)" if sizes else "a whole number"
                raise ValueError(f"{name}={raw!r} is not a valid limit: use {what} above 0")
            values[attr] = value
        return cls(**values)

    def too_large(self, size: int) -> str:
        enough = -(-size // (1 << 20))  # MiB, rounded up
        return (f"the file is {_show_bytes(size)}, more than {_show_bytes(self.max_bytes)} "
                f"(the limit; raise it with {MAX_BYTES_ENV}, e.g. "
                f"{MAX_BYTES_ENV}={enough}MiB)")
