"""Lock files in pip-freeze format: ``name==version`` a line, ``#`` comments.

``envcheck snapshot`` writes them (sorted by canonical name, like ``pip freeze --all``: pip,
setuptools and wheel included, their drift matters too); the dependencies probe reads them.
``name @ url`` pins (direct URL installs) are read as "installed, any version".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

__all__ = ["LockError", "Pin", "format_lock", "parse_lock", "read_lock"]

_COMMENT = re.compile(r"\s+#.*$")  # a '#' inside a URL (git+https://...#egg=) is not one


class LockError(ValueError):
    """The lock file cannot be read or has a line that is not a pin."""


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    version: str | None  # None: pinned by URL, only presence is checked
    line: int

    @property
    def want(self) -> str:
        return f"=={self.version}" if self.version is not None else "@ url"


def _pin(line: str) -> tuple[str, str | None] | None:
    """(name, version) of ``name==version`` (or ``===``), (name, None) of ``name @ url``;
    None for anything else (ranges, extras, markers, options such as ``-e``)."""
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    if req.extras or req.marker is not None:
        return None
    if req.url is not None:
        return (req.name, None) if not req.specifier else None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "==="):
        return None
    return req.name, specs[0].version


def parse_lock(text: str, source: str = "<lock>") -> dict[str, Pin]:
    """Canonical name -> pin; raises :class:`LockError` naming the first bad line."""
    pins: dict[str, Pin] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pin = _pin(_COMMENT.sub("", line))
        if pin is None:
            raise LockError(f"{source}:{number}: not a 'name==version' pin: {line[:80]!r}")
        name, version = pin
        key = canonicalize_name(name)
        if key in pins:
            raise LockError(f"{source}:{number}: {name} is pinned twice "
                            f"(first on line {pins[key].line})")
        pins[key] = Pin(name, version, number)
    return pins


def read_lock(path: str | Path) -> dict[str, Pin]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(f"lock file {path} does not exist (write it with "
                        f"'envcheck snapshot CATALOGUE ENV')") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"cannot read lock file {path}: {exc}") from None
    return parse_lock(text, str(path))


def format_lock(packages: Iterable[tuple[str, str]], header: Iterable[str] = ()) -> str:
    """A lock file's text: ``# header`` lines, then ``name==version`` sorted by canonical name."""
    lines = [f"# {h}" for h in header]
    lines += [f"{name}=={version}"
              for name, version in sorted(packages, key=lambda p: canonicalize_name(p[0]))]
    return "\n".join(lines) + "\n"
