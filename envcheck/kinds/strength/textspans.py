"""Where an output file can be changed without changing its format: the numbers in a text,
the records of a CSV file, the numbers and the elements and members of a JSON document.

Spans are character offsets ``(start, end)`` into the text, so a mutant is one splice and
the rest of the file, formatting included, stays as the oracle wrote it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

__all__ = ["JsonSpans", "bumped", "csv_records", "json_spans", "line_spans", "text_numbers",
           "without_member"]

Span = tuple[int, int]
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_MAX_DEPTH = 200  # deeper JSON is kept whole: its inner members are not candidates
_WS = " \t\n\r"
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # as csv and universal newlines


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def bumped(token: str) -> str:
    """A number written one more (1 -> 2, 0.5 -> 1.5, 007 -> 008), as wide as it was."""
    try:
        value = Decimal(token) + 1
    except InvalidOperation:
        return token + "1"
    text = str(value)
    digits = token.lstrip("-")
    if digits.isdigit() and len(digits) > 1 and digits.startswith("0"):
        text = text.zfill(len(token))
    return text


def text_numbers(text: str) -> list[Span]:
    """Numbers standing alone in a text (not inside a word, a version or an address)."""
    return [m.span() for m in _NUMBER.finditer(text)]


def line_spans(text: str) -> list[Span]:
    """Each non-blank line, with its newline."""
    spans, pos = [], 0
    for line in _lines(text):
        if line.strip():
            spans.append((pos, pos + len(line)))
        pos += len(line)
    return spans


def csv_records(text: str) -> list[Span]:
    """Each CSV record but the first (the header, when there is one to keep) as spans of
    whole lines, a quoted newline included; [] if the text is not CSV."""
    lines = _lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        ends = [reader.line_num for _ in reader]
    except csv.Error:
        return []
    spans, first = [], 0
    for last in ends:
        span = (starts[min(first, len(lines))], starts[min(last, len(lines))])
        if text[span[0]:span[1]].strip():
            spans.append(span)
        first = last
    return spans[1:] if len(spans) > 1 else spans


@dataclass
class JsonSpans:
    numbers: list[Span] = field(default_factory=list)
    containers: list[list[Span]] = field(default_factory=list)  # each one's members


def json_spans(text: str) -> JsonSpans | None:
    """The numbers and the members of each array and object of a JSON document, or None if
    it is not one."""
    found = JsonSpans()
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in _WS:
            i += 1
        return i

    def value(i: int, depth: int) -> int:
        i = skip(i)
        if i < len(text) and text[i] in "[{" and depth < _MAX_DEPTH:
            return container(i, depth)
        obj, end = decoder.raw_decode(text, i)
        if isinstance(obj, int | float) and not isinstance(obj, bool):
            found.numbers.append((i, end))
        return int(end)

    def container(i: int, depth: int) -> int:
        close = "]" if text[i] == "[" else "}"
        members: list[Span] = []
        i = skip(i + 1)
        if i < len(text) and text[i] == close:
            return i + 1
        while True:
            start = i
            if close == "}":
                key, i = decoder.raw_decode(text, i)
                if not isinstance(key, str):
                    raise ValueError("object key is not a string")
                i = skip(i)
                if text[i:i + 1] != ":":
                    raise ValueError("':' expected")
                i += 1
            i = value(i, depth + 1)
            members.append((start, i))
            i = skip(i)
            if text[i:i + 1] == ",":
                i = skip(i + 1)
                continue
            if text[i:i + 1] != close:
                raise ValueError(f"{close!r} expected")
            found.containers.append(members)
            return i + 1

    try:
        end = value(0, 0)
    except (ValueError, IndexError, RecursionError):
        return None
    return found if not text[skip(end):] else None


def without_member(text: str, members: list[Span], k: int) -> str:
    """``text`` with member ``k`` of a container (and the comma that joined it) taken out."""
    start, end = members[k]
    if len(members) == 1:
        return text[:start] + text[end:]
    if k < len(members) - 1:
        return text[:start] + text[members[k + 1][0]:]
    return text[:members[k - 1][1]] + text[end:]
