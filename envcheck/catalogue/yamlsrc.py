"""YAML to plain Python, remembering the line of every key path and refusing duplicate keys.

PyYAML's safe loader silently keeps the last of two equal keys; a catalogue must not, so
mappings are built here from the composed node tree. Keys are kept as the text written
(``on:`` stays ``"on"``, ``1:`` stays ``"1"``), so two keys are equal only if they read the
same. Merge keys (``<<: *anchor``) work as in PyYAML: explicit keys win over merged ones.

Lines cost: reading a 10,000-environment catalogue with them takes seconds, so
:func:`load_yaml` reads the values first from the parser's events (:mod:`.yamlvalues`, which
gives up on anything reported here) and finds the lines only when a problem asks for one.

A file is hostile until measured: its size is checked by ``stat`` before a byte is read (and
only regular files are opened, never blocking on a FIFO), and the node count and nesting depth
while it is composed, so that a huge or deeply nested file is refused early with a message
naming the limit and the environment variable that raises it (:class:`SourceLimits`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envcheck.catalogue.sourcetext import PACK_ABOVE, SourceText
from envcheck.catalogue.yamlvalues import Take, read_values
from envcheck.core.errors import CatalogueIssue

__all__ = ["KeyPath", "SourceDoc", "SourceLimits", "file_kind", "format_path", "load_yaml",
           "read_source"]

KeyPath = tuple[str | int, ...]

MAX_BYTES_ENV = "ENVCHECK_CATALOGUE_MAX_BYTES"
MAX_NODES_ENV = "ENVCHECK_CATALOGUE_MAX_NODES"
MAX_DEPTH_ENV = "ENVCHECK_CATALOGUE_MAX_DEPTH"
# A 10,000-environment catalogue is about 4 MB and 300,000 nodes; its schema nests 8 levels.
MAX_BYTES = 32 * 1024 * 1024
MAX_NODES = 1_000_000  # per file, aliases expanded: a "billion laughs" must not hang the loader
MAX_DEPTH = 64
_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


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


def read_source(path: Path, limits: SourceLimits
                ) -> tuple[str | SourceText | None, str | None]:
    """The text of a catalogue file, or why it cannot be read: (text, None) or (None, reason).
    A large file's text is held compressed (:mod:`.sourcetext`).

    Only a regular file is read, and only after ``fstat`` says it is within
    ``limits.max_bytes``; it is opened non-blocking, so a FIFO (even one swapped in after the
    directory was listed) never blocks the loader.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return None, describe_os_error(exc)
    try:
        info = os.fstat(fd)
        kind = _not_regular(info.st_mode)
        if kind is not None:
            return None, f"{kind}, not a regular file: envcheck reads only regular files"
        if info.st_size > limits.max_bytes:
            return None, limits.too_large(info.st_size)
        with os.fdopen(os.dup(fd), "rb") as f:
            # the file may have grown since fstat: a byte more than the limit is read
            packed = SourceText.read(f, limits.max_bytes + 1) \
                if info.st_size > PACK_ABOVE else None
            if packed is None:  # small, or not UTF-8 (where: the whole text's decoding)
                data = f.read(limits.max_bytes + 1)
    except OSError as exc:
        return None, describe_os_error(exc)
    finally:
        os.close(fd)
    if packed is not None:
        text, size = packed
        return (None, limits.too_large(size)) if size > limits.max_bytes else (text, None)
    if len(data) > limits.max_bytes:
        return None, limits.too_large(len(data))
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return None, f"cannot read: not UTF-8 text (byte 0x{data[exc.start]:02X} on line {line})"


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def describe_os_error(exc: OSError) -> str:
    """An OS error on a catalogue path in words (without repeating the path)."""
    if exc.errno == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    return f"cannot read: {exc.strerror or exc}"


def file_kind(path: Path) -> str | None:
    """None if ``path`` (followed through symlinks) is a regular file, else what it is (or
    why it cannot be examined), in words; never opens it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ENOENT and path.is_symlink():
            return f"a broken symlink (to {os.readlink(path)!r})"
        return describe_os_error(exc)
    kind = _not_regular(mode)
    return None if kind is None else f"{kind}, not a regular file"


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass
class SourceDoc:
    file: str
    data: Any = None
    issues: list[CatalogueIssue] = field(default_factory=list)
    parsed: bool = False
    """True once the YAML was read into ``data``: issues so far do not hide the rest."""
    shared: bool = True
    """Some value of ``data`` may be in it twice (an alias): none may be changed in place."""
    _lines: dict[KeyPath, int] | None = field(default_factory=dict, repr=False)
    _source: tuple[str | SourceText, SourceLimits] | None = field(default=None, repr=False)

    @property
    def lines(self) -> dict[KeyPath, int]:
        """The line of every key path; for a document read without lines, read again the
        first time one is asked for (a problem to report)."""
        if self._lines is None:
            text, limits = self._source or ("", SourceLimits())
            lines: dict[KeyPath, int] = {}
            if read_values(text, limits.max_nodes, limits.max_depth, lines=lines) is None:
                # aliases, merges: where their items are is the node tree's rule
                lines = _load_with_lines(self.file, _whole(text), limits).lines
            self._lines, self._source = lines, None
        return self._lines

    @lines.setter
    def lines(self, value: dict[KeyPath, int]) -> None:
        self._lines, self._source = value, None

    def line_of(self, path: KeyPath) -> int | None:
        """Line of the longest prefix of ``path`` present in the file (1-based)."""
        lines = self.lines
        for end in range(len(path), -1, -1):
            line = lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def issue(self, path: KeyPath, message: str) -> CatalogueIssue:
        return CatalogueIssue(self.file, self.line_of(path), format_path(path), message)


class _TooLargeError(Exception):
    """A limit was reached: the message says which, and how to raise it."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def _too_deep(limits: SourceLimits, aliases: str = "") -> str:
    return (f"nested deeper than {limits.max_depth} levels{aliases} (the limit; raise it with "
            f"{MAX_DEPTH_ENV}=<levels>)")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader counting nodes and depth while it composes: the limits stop a
    huge or deeply nested file before it is all in memory, or before Python's recursion
    limit is reached."""

    def __init__(self, text: str, limits: SourceLimits) -> None:
        super().__init__(text)
        self.limits = limits
        self.nodes = 0
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):  # no new node: the anchor's, counted once
            return super().compose_node(parent, index)
        line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise _TooLargeError(f"the document has more than {self.limits.max_nodes} nodes "
                                 f"(the limit; raise it with {MAX_NODES_ENV}=<nodes>)", line)
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth:
                raise _TooLargeError(_too_deep(self.limits), line)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


@dataclass
class _Builder:
    loader: yaml.SafeLoader
    doc: SourceDoc
    limits: SourceLimits
    active: set[int] = field(default_factory=set)  # nodes being built: a cycle guard
    built: set[int] = field(default_factory=set)  # nodes built once: the next use is an alias
    count: int = 0

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        doc = self.doc
        if id(node) in self.built and path[:-1] in doc.lines:
            # An alias: its node starts at the anchor; the item is where the alias is used.
            doc.lines.setdefault(path, doc.lines[path[:-1]])
        doc.lines.setdefault(path, node.start_mark.line + 1)
        self.built.add(id(node))
        self.count += 1
        # The composer counted every node once and bounded the depth as written: going past
        # a limit here means aliases expand the document.
        if self.count > self.limits.max_nodes:
            raise _TooLargeError(f"aliases expand the document to more than "
                                 f"{self.limits.max_nodes} nodes (an alias bomb?)",
                                 doc.lines.get(path))
        if len(path) >= self.limits.max_depth:
            raise _TooLargeError(_too_deep(self.limits, " once aliases are expanded"),
                                 doc.lines.get(path))
        if id(node) in self.active:
            doc.issues.append(doc.issue(path, "an alias refers to a node that contains it"))
            return None
        if isinstance(node, yaml.ScalarNode):
            try:
                return self.loader.construct_object(node, deep=True)
            except ValueError as exc:  # a timestamp that matches the pattern, not the calendar
                doc.issues.append(doc.issue(path, f"cannot read {node.value!r}: {exc}"))
                return None
        if node.tag not in _PLAIN_TAGS:
            doc.issues.append(doc.issue(path, f"unsupported YAML tag {node.tag!r}"))
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            raise yaml.YAMLError(f"unexpected YAML node {type(node).__name__}")
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        doc = self.doc
        out: dict[str, Any] = {}
        merges: list[tuple[yaml.Node, KeyPath]] = []
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                merges.append((value_node, path))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                doc.issues.append(CatalogueIssue(doc.file, line, format_path(path),
                                                 "a key must be a plain string, not a "
                                                 "list or mapping"))
                continue
            key = str(key_node.value)
            child = (*path, key)
            if key in out:
                first = doc.lines.get(child)
                doc.issues.append(CatalogueIssue(doc.file, line, format_path(child),
                                                 f"duplicate key (first at line {first})"))
                continue
            doc.lines[child] = line
            out[key] = self.build(value_node, child)
        for value_node, at in merges:
            self._merge(out, value_node, at)
        return out

    def _merge(self, out: dict[str, Any], node: yaml.Node, path: KeyPath) -> None:
        """``<<: *a`` or ``<<: [*a, *b]``: keys not already present come from the sources."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                self.doc.issues.append(self.doc.issue(path, "'<<' must merge a mapping "
                                                            "(or a list of mappings)"))
                continue
            # Built into a scratch document: an anchored mapping's own issues are reported
            # where it is defined; an inline one is defined here.
            inline = id(source) not in self.built
            scratch = _Builder(self.loader, SourceDoc(self.doc.file), self.limits, self.active,
                               self.built, self.count)
            data = scratch.build(source, path)
            self.count = scratch.count
            if inline:
                self.doc.issues.extend(scratch.doc.issues)
            if not isinstance(data, dict):
                self.doc.issues.append(self.doc.issue(path, "'<<' merges a mapping that "
                                                            "contains it"))
                continue
            for key, value in data.items():
                if key in out:
                    continue
                out[key] = value
                child = (*path, key)
                for sub, line in scratch.doc.lines.items():
                    if sub[: len(child)] == child:
                        self.doc.lines.setdefault(sub, line)


def _whole(text: str | SourceText) -> str:
    return text.text() if isinstance(text, SourceText) else text


def load_yaml(file: str, text: str | SourceText, limits: SourceLimits | None = None, *,
              lines: bool = False, take: Take | None = None) -> SourceDoc:
    """Read one YAML document; syntax errors and limits reached become issues, never
    exceptions.

    The values are read first without lines, at C speed (:mod:`.yamlvalues`); the lines of
    a document read so are found when a problem asks for one. A document that reader gives
    up on, or ``lines=True``, is read with its lines at once. ``take``: a catalogue's
    environments handed over as they are read (:func:`.yamlvalues.read_values`); what it
    made is dropped if the document is then read with lines.
    """
    limits = limits or SourceLimits()
    if not lines:
        aliases: set[str] = set()
        values = read_values(text, limits.max_nodes, limits.max_depth, aliases=aliases,
                             take=take)
        if values is not None:
            return SourceDoc(file, values[0], parsed=True, shared=bool(aliases), _lines=None,
                             _source=(text, limits))
    return _load_with_lines(file, _whole(text), limits)


def _load_with_lines(file: str, text: str, limits: SourceLimits) -> SourceDoc:
    doc = SourceDoc(file)
    try:
        loader = _Loader(text, limits)
    except yaml.reader.ReaderError as exc:
        doc.issues.append(_reader_issue(file, text, exc))
        return doc
    try:
        node = loader.get_single_node()
        doc.data = _Builder(loader, doc, limits).build(node, ()) if node is not None else None
        doc.parsed = True
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        doc.issues.append(CatalogueIssue(file, line, "", f"invalid YAML: {_yaml_message(exc)}"))
    except yaml.reader.ReaderError as exc:
        doc.issues.append(_reader_issue(file, text, exc))
    except yaml.YAMLError as exc:
        doc.issues.append(CatalogueIssue(file, None, "", f"invalid YAML: {exc}"))
    except _TooLargeError as exc:
        doc.data, doc.lines = None, {}
        doc.issues.append(CatalogueIssue(file, exc.line, "", str(exc)))
    except RecursionError:  # only if a raised depth limit outgrows Python's stack
        doc.data, doc.lines = None, {}
        doc.issues.append(CatalogueIssue(file, None, "", f"nested too deeply for this Python "
                                                         f"to read (lower {MAX_DEPTH_ENV})"))
    finally:
        loader.dispose()
    return doc


def _reader_issue(file: str, text: str, exc: yaml.reader.ReaderError) -> CatalogueIssue:
    char = exc.character if isinstance(exc.character, int) else ord(exc.character)
    line = text.count("\n", 0, exc.position) + 1
    return CatalogueIssue(file, line, "", f"invalid YAML: character U+{char:04X} is not "
                                          f"allowed ({exc.reason})")


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    problem = exc.problem or exc.context or "syntax error"
    if exc.problem and exc.context and exc.context_mark is not None:
        where = exc.context_mark.line + 1
        return f"{problem} ({exc.context} at line {where})"
    return str(problem)
