"""Exposition text for families too large to rebuild per scrape: one line per sample, written
when its value changes and kept, joined under the family's header when any line changed.

Written as ``prometheus_client.generate_latest`` writes it (labels sorted by name, values as
Go formats floats), so a scrape reads the same whichever way a family was rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.utils import floatToGoString

_go_float: Callable[[float], str] = floatToGoString  # the library's own, typed here

__all__ = ["FamilyText", "sample_line"]


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def sample_line(name: str, labels: Mapping[str, str], value: float) -> str:
    """One sample of the text format, with its newline."""
    inner = ",".join(f'{key}="{_label_value(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{inner}}} {_go_float(value)}\n"


class FamilyText:
    """A family's lines by key (an environment id), rendered once, joined in key order."""

    def __init__(self, name: str, kind: str, documentation: str) -> None:
        help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.name = name
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
        self._lines: dict[str, str] = {}
        self._order: list[str] | None = []  # None: keys were added or removed since
        self._text: bytes | None = None  # None: a line changed since it was joined

    def set(self, key: str, line: str) -> None:
        old = self._lines.get(key)
        if old == line:
            return
        if old is None:
            self._order = None
        self._lines[key] = line
        self._text = None

    def held(self) -> list[str]:
        """The keys that have lines."""
        return list(self._lines)

    def drop(self, keys: Iterable[str]) -> None:
        for key in keys:
            if self._lines.pop(key, None) is not None:
                self._order, self._text = None, None

    def text(self) -> bytes:
        if self._text is None:
            if self._order is None:
                self._order = sorted(self._lines)
            lines = self._lines
            self._text = (self._header + "".join([lines[k] for k in self._order])).encode()
        return self._text
