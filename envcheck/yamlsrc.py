"""YAML to plain Python, remembering the line of every key path and refusing duplicate keys.

PyYAML's safe loader silently keeps the last of two equal keys; a catalogue must not, so
mappings are built here from the composed node tree. Keys are kept as the text written
(``on:`` stays ``"on"``, ``1:`` stays ``"1"``), so two keys are equal only if they read the
same. Merge keys (``<<: *anchor``) work as in PyYAML: explicit keys win over merged ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from envcheck.errors import CatalogueIssue

__all__ = ["KeyPath", "SourceDoc", "format_path", "load_yaml"]

KeyPath = tuple[str | int, ...]

MAX_NODES = 1_000_000  # per file; aliases expand: a "billion laughs" must not hang the loader
_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass
class SourceDoc:
    file: str
    data: Any = None
    lines: dict[KeyPath, int] = field(default_factory=dict)
    issues: list[CatalogueIssue] = field(default_factory=list)
    parsed: bool = False
    """True once the YAML was read into ``data``: issues so far do not hide the rest."""

    def line_of(self, path: KeyPath) -> int | None:
        """Line of the longest prefix of ``path`` present in the file (1-based)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def issue(self, path: KeyPath, message: str) -> CatalogueIssue:
        return CatalogueIssue(self.file, self.line_of(path), format_path(path), message)


class _TooLargeError(Exception):
    pass


@dataclass
class _Builder:
    loader: yaml.SafeLoader
    doc: SourceDoc
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
        if self.count > MAX_NODES:
            raise _TooLargeError
        if id(node) in self.active:
            doc.issues.append(doc.issue(path, "an alias refers to a node that contains it"))
            return None
        if isinstance(node, yaml.ScalarNode):
            return self.loader.construct_object(node, deep=True)
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
            scratch = _Builder(self.loader, SourceDoc(self.doc.file), self.active, self.built,
                               self.count)
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


def load_yaml(file: str, text: str) -> SourceDoc:
    """Read one YAML document; syntax errors become issues, never exceptions."""
    doc = SourceDoc(file)
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        doc.issues.append(_reader_issue(file, text, exc))
        return doc
    try:
        node = loader.get_single_node()
        doc.data = _Builder(loader, doc).build(node, ()) if node is not None else None
        doc.parsed = True
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        doc.issues.append(CatalogueIssue(file, line, "", f"invalid YAML: {_yaml_message(exc)}"))
    except yaml.reader.ReaderError as exc:
        doc.issues.append(_reader_issue(file, text, exc))
    except yaml.YAMLError as exc:
        doc.issues.append(CatalogueIssue(file, None, "", f"invalid YAML: {exc}"))
    except _TooLargeError:
        doc.issues.append(CatalogueIssue(file, None, "", f"the document expands to more "
                                                         f"than {MAX_NODES} nodes (aliases?)"))
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
