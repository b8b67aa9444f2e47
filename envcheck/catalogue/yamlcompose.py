"""PyYAML's node tree composed within the limits, and its errors in words.

A limit reached raises :class:`TooLargeError`, whose message says which limit and how to raise
it; the reader with lines (:mod:`.yamlsrc`) turns it, and PyYAML's errors, into issues.
"""

from __future__ import annotations

from typing import Any

import yaml

from envcheck.catalogue.sourcelimits import MAX_DEPTH_ENV, MAX_NODES_ENV, SourceLimits
from envcheck.core.errors import CatalogueIssue

__all__ = ["LimitedLoader", "TooLargeError", "reader_issue", "too_deep", "yaml_message"]


class TooLargeError(Exception):
    """A limit was reached: the message says which, and how to raise it."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def too_deep(limits: SourceLimits, aliases: str = "") -> str:
    return (f"nested deeper than {limits.max_depth} levels{aliases} (the limit; raise it with "
            f"{MAX_DEPTH_ENV}=<levels>)")


class LimitedLoader(yaml.SafeLoader):
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
            raise TooLargeError(f"the document has more than {self.limits.max_nodes} nodes "
                                f"(the limit; raise it with {MAX_NODES_ENV}=<nodes>)", line)
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth:
                raise TooLargeError(too_deep(self.limits), line)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def reader_issue(file: str, text: str, exc: yaml.reader.ReaderError) -> CatalogueIssue:
    char = exc.character if isinstance(exc.character, int) else ord(exc.character)
    line = text.count("\n", 0, exc.position) + 1
    return CatalogueIssue(file, line, "", f"invalid YAML: character U+{char:04X} is not "
                                          f"allowed ({exc.reason})")


def yaml_message(exc: yaml.MarkedYAMLError) -> str:
    problem = exc.problem or exc.context or "syntax error"
    if exc.problem and exc.context and exc.context_mark is not None:
        where = exc.context_mark.line + 1
        return f"{problem} ({exc.context} at line {where})"
    return str(problem)
