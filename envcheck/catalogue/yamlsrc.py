"""YAML to plain Python, remembering the line of every key path and refusing duplicate keys.

PyYAML's safe loader silently keeps the last of two equal keys; a catalogue must not, so
mappings are built here from the composed node tree. Keys are kept as the text written
(``on:`` stays ``"on"``, ``1:`` stays ``"1"``), so two keys are equal only if they read the
same. Merge keys (``<<: *anchor``) work as in PyYAML: explicit keys win over merged ones.

Lines cost: reading a 10,000-environment catalogue with them takes seconds, so
:func:`load_yaml` reads the values first from the parser's events (:mod:`.yamlvalues`, which
gives up on anything reported here) and finds the lines only when a problem asks for one.

The limits (:mod:`.sourcelimits`) bound a file's size when it is read (:mod:`.sourcefile`),
its nodes and depth as written while it is composed (:mod:`.yamlcompose`), and here what its
aliases expand it to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from envcheck.catalogue.keypaths import KeyPath, format_path
from envcheck.catalogue.sourcelimits import MAX_DEPTH_ENV, SourceLimits
from envcheck.catalogue.sourcetext import SourceText
from envcheck.catalogue.yamlcompose import (
    LimitedLoader,
    TooLargeError,
    reader_issue,
    too_deep,
    yaml_message,
)
from envcheck.catalogue.yamlvalues import Take, read_values
from envcheck.core.errors import CatalogueIssue

__all__ = ["SourceDoc", "load_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


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
            raise TooLargeError(f"aliases expand the document to more than "
                                f"{self.limits.max_nodes} nodes (an alias bomb?)",
                                doc.lines.get(path))
        if len(path) >= self.limits.max_depth:
            raise TooLargeError(too_deep(self.limits, " once aliases are expanded"),
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
        loader = LimitedLoader(text, limits)
    except yaml.reader.ReaderError as exc:
        doc.issues.append(reader_issue(file, text, exc))
        return doc
    try:
        node = loader.get_single_node()
        doc.data = _Builder(loader, doc, limits).build(node, ()) if node is not None else None
        doc.parsed = True
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        doc.issues.append(CatalogueIssue(file, line, "", f"invalid YAML: {yaml_message(exc)}"))
    except yaml.reader.ReaderError as exc:
        doc.issues.append(reader_issue(file, text, exc))
    except yaml.YAMLError as exc:
        doc.issues.append(CatalogueIssue(file, None, "", f"invalid YAML: {exc}"))
    except TooLargeError as exc:
        doc.data, doc.lines = None, {}
        doc.issues.append(CatalogueIssue(file, exc.line, "", str(exc)))
    except RecursionError:  # only if a raised depth limit outgrows Python's stack
        doc.data, doc.lines = None, {}
        doc.issues.append(CatalogueIssue(file, None, "", f"nested too deeply for this Python "
                                                         f"to read (lower {MAX_DEPTH_ENV})"))
    finally:
        loader.dispose()
    return doc
