"""Exposition text for families too large to rebuild per scrape: kept in chunks of keys, a
chunk's text written again when a value in it changes, joined under the family's header.

Written as ``prometheus_client.generate_latest`` writes it (labels sorted by name, values as
Go formats floats), so a scrape reads the same whichever way a family was rendered.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from prometheus_client.utils import floatToGoString

_go_float: Callable[[float], str] = floatToGoString  # the library's own, typed here

__all__ = ["FamilyText", "sample_line"]

V = TypeVar("V", bound=Hashable)  # what a key shows: its lines are rendered from it


def _label_value(value: str) -> str:
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value  # the usual case: ids and names need no escaping
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def sample_line(name: str, labels: Mapping[str, str], value: float) -> str:
    """One sample of the text format, with its newline."""
    inner = ",".join(f'{key}="{_label_value(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{inner}}} {_go_float(value)}\n"


class FamilyText(Generic[V]):
    """A family's lines by key (an environment id), kept in key order in chunks: a changed
    value renders its chunk again, an added or removed key all of them.

    Per key only its value is held (small, and often one object shared by many keys): a
    chunk's lines are cheap to write again, while 100,000 lines held as strings beside the
    chunks' text cost ~20 MB per family."""

    CHUNK = 1_000  # keys per chunk

    def __init__(self, name: str, kind: str, documentation: str,
                 render: Callable[[str, V], str]) -> None:
        help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.name = name
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n".encode()
        self._render = render
        self._values: dict[str, V] = {}
        self._chunks: list[list[str]] | None = []  # keys, in order; None: keys added or removed
        self._firsts: list[str] = []  # each chunk's first key
        self._texts: list[bytes | None] = []  # None: a value of the chunk changed since

    def set(self, key: str, value: V) -> None:
        if key in self._values:
            if self._values[key] == value:
                return
            if self._chunks is not None:
                self._texts[bisect_right(self._firsts, key) - 1] = None
        else:
            self._chunks = None
        self._values[key] = value

    def held(self) -> list[str]:
        """The keys that have lines."""
        return list(self._values)

    def drop(self, keys: Iterable[str]) -> None:
        for key in keys:
            if self._values.pop(key, self) is not self:
                self._chunks = None

    def parts(self) -> list[bytes]:
        """The family's text, in pieces to join: its header and its chunks of lines."""
        if self._chunks is None:
            order = sorted(self._values)
            self._chunks = [order[i:i + self.CHUNK] for i in range(0, len(order), self.CHUNK)]
            self._firsts = [keys[0] for keys in self._chunks]
            self._texts = [None] * len(self._chunks)
        values, render = self._values, self._render
        for i, text in enumerate(self._texts):
            if text is None:
                self._texts[i] = "".join([render(key, values[key])
                                          for key in self._chunks[i]]).encode()
        return [self._header, *(text for text in self._texts if text is not None)]
