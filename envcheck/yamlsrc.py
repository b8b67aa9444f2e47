"""YAML to plain Python, remembering the line of every key path and refusing duplicate keys.

PyYAML's safe loader silently keeps the last of two equal keys; a catalogue must not, so
mappings are built here from the composed node tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from envcheck.errors import CatalogueIssue

__all__ = ["KeyPath", "SourceDoc", "format_path", "load_yaml"]

KeyPath = tuple[str | int, ...]


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

    def line_of(self, path: KeyPath) -> int | None:
        """Line of the longest prefix of ``path`` present in the file (1-based)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def issue(self, path: KeyPath, message: str) -> CatalogueIssue:
        return CatalogueIssue(self.file, self.line_of(path), format_path(path), message)


def load_yaml(file: str, text: str) -> SourceDoc:
    doc = SourceDoc(file)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        doc.data = _build(loader, node, (), doc) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        doc.issues.append(CatalogueIssue(file, line, "", f"invalid YAML: {exc.problem or exc}"))
    except yaml.YAMLError as exc:
        doc.issues.append(CatalogueIssue(file, None, "", f"invalid YAML: {exc}"))
    finally:
        loader.dispose()
    return doc


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, doc: SourceDoc) -> Any:
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                doc.issues.append(doc.issue(path, "mapping keys must be scalars"))
                continue
            child = (*path, str(key))
            if key in out:
                line = key_node.start_mark.line + 1
                doc.issues.append(
                    CatalogueIssue(doc.file, line, format_path(child), "duplicate key")
                )
                continue
            doc.lines[child] = key_node.start_mark.line + 1
            out[key] = _build(loader, value_node, child, doc)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), doc) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
