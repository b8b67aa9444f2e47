"""Where a value is in a YAML document: its key path, and the path as messages write it."""

from __future__ import annotations

__all__ = ["KeyPath", "format_path"]

KeyPath = tuple[str | int, ...]


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
