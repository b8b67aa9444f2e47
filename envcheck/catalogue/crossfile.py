"""Checks across catalogue files: environment, suite and data source ids are unique, and
every data source an environment uses is defined in some file.

They run on the raw parsed data, not on the models, so that they are reported even for files
with other problems.
"""

from __future__ import annotations

import re
from typing import Any

from envcheck.catalogue.fields import ID_PATTERN
from envcheck.catalogue.yamlsrc import KeyPath, SourceDoc

__all__ = ["CrossFileChecks"]

def _items(data: Any, key: str) -> list[tuple[int, dict[str, Any]]]:
    """The mappings in the list ``data[key]``, with their index (raw data: anything goes)."""
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]


def _str_id(item: dict[str, Any]) -> str | None:
    value = item.get("id")
    return value if isinstance(value, str) else None


class CrossFileChecks:
    """The ids claimed so far and the data source references found, over the files of one
    load: feed it every file with :meth:`scan`, then call :meth:`check_refs`."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], tuple[SourceDoc, KeyPath]] = {}
        self.refs: dict[tuple[str, KeyPath], tuple[SourceDoc, str]] = {}

    def claim(self, doc: SourceDoc, kind: str, path: KeyPath, ident: str) -> bool:
        """Record the first place an id is defined; report any later one."""
        first_doc, first_path = self.first.setdefault((kind, ident), (doc, path))
        if (first_doc.file, first_path) != (doc.file, path):
            doc.issues.append(doc.issue(path, f"duplicate {kind} id {ident!r} "
                                              f"(first in {self.where(kind, ident)})"))
            return False
        return True

    def where(self, kind: str, ident: str) -> str:
        """``file:line`` of the first definition of a claimed id (its line is looked up only
        now: a document read without lines is read again for it)."""
        doc, path = self.first[(kind, ident)]
        return doc.issue(path, "").location()

    def scan(self, doc: SourceDoc) -> bool:
        """Check one file's ids and collect its references; False if an id is taken."""
        ok = True
        data = doc.data
        for i, source in _items(data, "data_sources"):
            if (sid := _str_id(source)) is not None:
                ok &= self.claim(doc, "data source", ("data_sources", i, "id"), sid)
        for i, dataset in _items(data, "datasets"):
            if (did := _str_id(dataset)) is not None:
                ok &= self.claim(doc, "dataset", ("datasets", i, "id"), did)
        suites = data.get("suites") if isinstance(data, dict) else None
        for suite_id, suite in suites.items() if isinstance(suites, dict) else ():
            spath: KeyPath = ("suites", suite_id)
            ok &= self.claim(doc, "suite", spath, suite_id)
            defaults = suite.get("defaults") if isinstance(suite, dict) else None
            for i, env in _items(suite, "environments"):
                epath: KeyPath = (*spath, "environments", i)
                if (eid := _str_id(env)) is not None:
                    ok &= self.claim(doc, "environment", (*epath, "id"), eid)
                # An environment's own list replaces the defaults' list.
                holder, hpath = (env, epath) if "data_sources" in env else (defaults, (
                    *spath, "defaults"))
                refs = holder.get("data_sources") if isinstance(holder, dict) else None
                for j, ref in enumerate(refs if isinstance(refs, list) else ()):
                    if isinstance(ref, str) and re.match(ID_PATTERN, ref):  # else: invalid id
                        self.refs[(doc.file, (*hpath, "data_sources", j))] = (doc, ref)
        return ok

    def check_refs(self) -> None:
        for (_, path), (doc, ref) in self.refs.items():
            if ("data source", ref) not in self.first:
                doc.issues.append(doc.issue(path, f"unknown data source {ref!r}"))
