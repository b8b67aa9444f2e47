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
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value  # the usual case: ids and names need no escaping
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def sample_line(name: str, labels: Mapping[str, str], value: float) -> str:
    """One sample of the text format, with its newline."""
    inner = ",".join(f'{key}="{_label_value(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{inner}}} {_go_float(value)}\n"


class FamilyText:
    """A family's lines by key (an environment id), rendered once, kept in key order in
    chunks: a changed line re-joins its chunk, an added or removed key all of them."""

    CHUNK = 1_000  # keys per chunk

    def __init__(self, name: str, kind: str, documentation: str) -> None:
        help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.name = name
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n".encode()
        self._lines: dict[str, str] = {}
        self._chunk_of: dict[str, int] | None = {}  # None: keys were added or removed since
        self._chunks: list[list[str]] = []  # keys, in order
        self._texts: list[bytes | None] = []  # None: a line of the chunk changed since

    def set(self, key: str, line: str) -> None:
        old = self._lines.get(key)
        if old == line:
            return
        self._lines[key] = line
        if old is None:
            self._chunk_of = None
        elif self._chunk_of is not None:
            self._texts[self._chunk_of[key]] = None

    def held(self) -> list[str]:
        """The keys that have lines."""
        return list(self._lines)

    def drop(self, keys: Iterable[str]) -> None:
        for key in keys:
            if self._lines.pop(key, None) is not None:
                self._chunk_of = None

    def parts(self) -> list[bytes]:
        """The family's text, in pieces to join: its header and its chunks of lines."""
        if self._chunk_of is None:
            order = sorted(self._lines)
            self._chunks = [order[i:i + self.CHUNK] for i in range(0, len(order), self.CHUNK)]
            self._chunk_of = {key: i for i, keys in enumerate(self._chunks) for key in keys}
            self._texts = [None] * len(self._chunks)
        lines = self._lines
        for i, text in enumerate(self._texts):
            if text is None:
                self._texts[i] = "".join([lines[key] for key in self._chunks[i]]).encode()
        return [self._header, *(text for text in self._texts if text is not None)]
