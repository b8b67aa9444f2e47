"""YAML to plain Python straight from the parser's events, without source lines: the fast path.

The line-tracking reader (:mod:`.yamlsrc`) composes PyYAML's node tree to remember the line of
every key; for a 10,000-environment catalogue that costs seconds and hundreds of MB, though a
line is needed only to report a problem. This reader builds the same values from libyaml's
event stream (PyYAML's pure-Python parser when libyaml is missing), with the same rules: keys
kept as the text written, duplicate keys refused, merge keys applied after explicit keys, the
node count (aliases expanded) and nesting depth bounded.

It gives up (returns None) at the first thing the line-tracking reader would report: a syntax
or reader error, a duplicate or non-scalar key, an explicit tag, a bad merge, an alias that is
undefined or refers to a node containing it, a limit reached. The caller then reads the text
again with lines, so every message stays word for word what it was.

libyaml reads a little more than PyYAML's own scanner (a tab after a value, after a block
scalar's header): such a file now loads. A file both read, they read alike
(``tests/test_yaml_reading.py`` holds them to it, on generated documents too).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode

from envcheck.catalogue.sourcetext import SourceText

__all__ = ["FAST_PARSER", "Take", "read_values"]

# libyaml's parser when PyYAML was built with it (the wheels are), else the pure-Python one.
FAST_PARSER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"
# Left to PyYAML's own reader: characters it refuses (it says where), and the line breaks of
# YAML 1.1 beyond \n and \r (NEL, LS, PS), which libyaml folds differently inside scalars.
_LEAVE_TO_PYYAML = re.compile(
    "[^\x09\x0A\x0D\x20-\x7E\xA0-\u2027\u202A-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
_NO_KEY: Any = object()
_MERGE: Any = object()

Take = Callable[[str, list[Any], dict[str, Any]], None]
"""Called with (suite id, the list, the suite's mapping so far) each time an item is added to
a list ``suites.<id>.environments``: the callee may replace that item, then or later (the
reader never reads it again)."""


class _GiveUp(Exception):
    """Something the line-tracking reader reports (with its line): let it."""


@dataclass(slots=True)
class _Open:
    """A mapping or sequence being read."""

    value: dict[str, Any] | list[Any]
    anchor: str | None
    start: int  # nodes read before it: its size is the count at its end minus this
    height: int = 1  # levels below it, itself included (aliases expanded)
    key: Any = _NO_KEY  # of a mapping: the key read, waiting for its value
    merges: list[Any] = field(default_factory=list)  # values of its '<<' keys
    path: tuple[str | int, ...] = ()  # where it is, when lines are recorded
    # an environments list whose items are handed over: its suite's id and mapping
    suite: tuple[str, dict[str, Any]] | None = None


def read_values(text: str | SourceText, max_nodes: int, max_depth: int, *,
                lines: dict[tuple[str | int, ...], int] | None = None,
                aliases: set[str] | None = None, take: Take | None = None,
                parser: type[yaml.SafeLoader] = FAST_PARSER) -> tuple[Any] | None:
    """``(value,)`` of the one YAML document in ``text`` (``(None,)`` if it is empty), or None
    if the line-tracking reader must read it to say what is wrong.

    ``lines``, if given, is filled with the 1-based line of every key path, as the
    line-tracking reader records it: a mapping's item at its key, a list's item where it
    starts. A document with aliases or merge keys then gives up too: where their items are
    is that reader's own rule.

    ``aliases``, if given, is filled with the anchors the document's aliases use: a value
    they name is shared by every place that uses it.

    ``take``, if given, is handed each environment of a catalogue's suites as soon as it is
    read (:data:`Take`), so that its raw value need not outlive it; never an item of a list
    that an alias could name (the list, its suite or ``suites`` has an anchor), nor when
    ``lines`` are wanted. It may be called before the reader gives up.
    """
    if isinstance(text, SourceText):
        if any(_LEAVE_TO_PYYAML.search(piece) for piece in text.pieces()):
            return None
        loader = parser(_Pieces(text.pieces()))
    elif _LEAVE_TO_PYYAML.search(text):
        return None
    else:
        loader = parser(_Pieces(text))
    try:
        take = None if lines is not None else take
        return (_Reader(loader, max_nodes, max_depth, lines, aliases, take).document(),)
    except (_GiveUp, yaml.YAMLError):
        return None
    finally:
        loader.dispose()


class _Pieces:
    """``text`` handed to the parser a piece at a time: given the whole string, libyaml's
    binding copies all of it to UTF-8 first, a second copy of the file (38 MB for a fleet's)
    alive for the whole read. Pieces already made (a compressed text's) are handed as they
    come, whatever size is asked for: both parsers take what they are given."""

    def __init__(self, text: str | Iterator[str]) -> None:
        self._text, self._at = text, 0

    def read(self, size: int = -1, /) -> str:
        if not isinstance(self._text, str):
            return next(self._text, "")
        piece = self._text[self._at:self._at + size] if size >= 0 else self._text[self._at:]
        self._at += len(piece)
        return piece


class _Reader:
    def __init__(self, loader: yaml.SafeLoader, max_nodes: int, max_depth: int,
                 lines: dict[tuple[str | int, ...], int] | None,
                 aliases: set[str] | None = None, take: Take | None = None) -> None:
        self.loader: Any = loader  # PyYAML's stubs leave the parser's methods untyped
        self.lines = lines
        self.aliases = aliases
        self.take = take
        self.max_nodes = max_nodes
        self.max_depth = max_depth
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # closed: value, size, height
        self.named: set[str] = set()  # every anchor seen, open ones included
        self.plain: dict[str, Any] = {}  # a plain scalar's text -> its value (resolved once)
        # Keys and quoted strings, each text held once: the parser makes a new string per
        # event, and a fleet repeats the same keys in every environment (at 100,000
        # environments, ~60 MB of the tree's ~190 MB).
        self.strings: dict[str, str] = {}

    def document(self) -> Any:
        # One flat loop over the events (no recursion, no call per value): it runs once per
        # node of a catalogue, hundreds of thousands of times.
        get, plain, lines = self.loader.get_event, self.plain, self.lines
        strings, take = self.strings, self.take
        max_nodes, max_depth = self.max_nodes, self.max_depth
        stack: list[_Open] = []
        top: _Open | None = None
        root: Any = None
        value: Any
        count = documents = 0
        while True:
            event = get()
            kind = type(event)
            if kind is ScalarEvent:
                count += 1
                if event.tag is not None or count > max_nodes or len(stack) >= max_depth:
                    raise _GiveUp
                if top is not None and top.key is _NO_KEY and type(top.value) is dict:
                    self._key(top, event)
                    continue
                if lines is not None:
                    self._line(top, event)
                if not event.implicit[0]:  # quoted: a string
                    value = strings.setdefault(event.value, event.value)
                elif event.value in plain:
                    value = plain[event.value]
                else:
                    value = self._plain(event.value)
                height = 1
                if event.anchor is not None:
                    self._name(event.anchor)
                    self.anchors[event.anchor] = (value, 1, 1)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                count += 1
                if event.tag is not None or count > max_nodes or len(stack) >= max_depth:
                    raise _GiveUp
                if event.anchor is not None:
                    self._name(event.anchor)
                opened = _Open({} if kind is MappingStartEvent else [], event.anchor, count - 1)
                if lines is not None:
                    opened.path = self._line(top, event)
                elif take is not None and len(stack) == 3 and kind is SequenceStartEvent:
                    opened.suite = _environments_of(stack, opened)
                stack.append(opened)
                top = opened
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                done = stack.pop()
                top = stack[-1] if stack else None
                value, height = done.value, done.height
                if done.merges:
                    _merge(value, done.merges)
                if done.anchor is not None:
                    self.anchors[done.anchor] = (value, count - done.start, height)
            elif kind is AliasEvent:
                if event.anchor not in self.anchors or lines is not None:
                    raise _GiveUp  # undefined, or it contains the alias; or lines wanted
                value, size, height = self.anchors[event.anchor]
                if self.aliases is not None:
                    self.aliases.add(event.anchor)
                count += size
                if count > max_nodes or len(stack) + height > max_depth:
                    raise _GiveUp
            elif kind is DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise _GiveUp
                continue
            elif kind is StreamEndEvent:
                return root
            elif kind is DocumentEndEvent or kind is StreamStartEvent:
                continue
            else:
                raise _GiveUp
            if top is None:
                root = value
                continue
            if height >= top.height:
                top.height = height + 1
            if type(top.value) is list:
                top.value.append(value)
                if top.suite is not None:
                    assert take is not None
                    take(top.suite[0], top.value, top.suite[1])
            elif top.key is _NO_KEY:  # a mapping or an alias as a key
                raise _GiveUp
            else:
                if top.key is _MERGE:
                    top.merges.append(value)
                else:
                    top.value[top.key] = value
                top.key = _NO_KEY

    def _name(self, anchor: str) -> None:
        if anchor in self.named:  # a duplicate anchor
            raise _GiveUp
        self.named.add(anchor)

    def _key(self, top: _Open, event: Any) -> None:
        """The key as written (``on`` stays ``"on"``); a plain ``<<`` merges."""
        if event.anchor is not None:
            raise _GiveUp
        key = self.strings.setdefault(event.value, event.value)
        if event.implicit[0] and key == "<<":
            if self.lines is not None:
                raise _GiveUp
            top.key = _MERGE
        elif key in top.value:
            raise _GiveUp
        else:
            top.key = key
            if self.lines is not None:
                self.lines[(*top.path, key)] = event.start_mark.line + 1

    def _line(self, top: _Open | None, event: Any) -> tuple[str | int, ...]:
        """The path of the node ``event`` starts; an item of a list is where it starts."""
        if top is not None and type(top.value) is not list:
            return (*top.path, top.key)  # recorded at its key
        if type(event) is ScalarEvent and event.implicit[0] and not event.value:
            raise _GiveUp  # an empty item: where it is, PyYAML and libyaml do not agree
        path: tuple[str | int, ...] = () if top is None else (*top.path, len(top.value))
        assert self.lines is not None
        self.lines[path] = event.start_mark.line + 1
        return path

    def _plain(self, text: str) -> Any:
        """A plain scalar's value, as PyYAML's safe loader resolves it; remembered, since
        scalars are immutable and one value serves every use of the same text."""
        tag = self.loader.resolve(ScalarNode, text, (True, False))
        try:
            value = text if tag == _STR_TAG else self.loader.construct_object(
                ScalarNode(tag, text))
        except ValueError:  # e.g. a timestamp of February 30th
            raise _GiveUp from None
        self.plain[text] = value
        return value


def _environments_of(stack: list[_Open], opened: _Open) -> tuple[str, dict[str, Any]] | None:
    """The suite (id, mapping) if ``opened`` (a list, the fourth level) is
    ``suites.<id>.environments`` of a catalogue and nothing an alias could name holds it."""
    root, suites, suite = stack
    if (root.key == "suites" and type(root.value) is dict and type(suites.value) is dict
            and type(suites.key) is str and type(suite.value) is dict
            and suite.key == "environments"
            and suites.anchor is None and suite.anchor is None and opened.anchor is None):
        return suites.key, suite.value
    return None


def _merge(out: dict[str, Any], merges: list[Any]) -> None:
    """``<<: *a`` or ``<<: [*a, *b]``: keys not already present come from the sources."""
    for merged in merges:
        for source in merged if isinstance(merged, list) else [merged]:
            if not isinstance(source, dict):
                raise _GiveUp
            for key, value in source.items():
                out.setdefault(key, value)
