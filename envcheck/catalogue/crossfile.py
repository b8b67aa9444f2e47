"""Checks across catalogue files: environment, suite and data source ids (and the registries
credentials are given for) are unique, and
every data source an environment uses is defined in some file.

They run on the raw parsed data, not on the models, so that they are reported even for files
with other problems.
"""

from __future__ import annotations

import re
from typing import Any

from envcheck.catalogue.fields import ID_PATTERN
from envcheck.catalogue.handover import Taken
from envcheck.catalogue.keypaths import KeyPath
from envcheck.catalogue.registries import registry_host
from envcheck.catalogue.yamlsrc import SourceDoc

__all__ = ["CrossFileChecks"]

def _items(data: Any, key: str) -> list[tuple[int, dict[str, Any] | Taken]]:
    """The mappings in the list ``data[key]``, with their index (raw data: anything goes;
    an environment taken as it was read reads as its mapping)."""
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict | Taken)]


def _str_id(item: dict[str, Any] | Taken) -> str | None:
    value = item.get("id")
    return value if isinstance(value, str) else None


def _env_id_path(suite_id: str, index: int) -> KeyPath:
    return ("suites", suite_id, "environments", index, "id")


class CrossFileChecks:
    """The ids claimed so far and the data source references found, over the files of one
    load: feed it every file with :meth:`scan`, then call :meth:`check_refs`."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], tuple[SourceDoc, KeyPath]] = {}
        # Environment ids apart, where each is as (file, suite, index): a fleet's 100,000
        # are held through the load, its key path made only for a duplicate.
        self.environments: dict[str, tuple[SourceDoc, str, int]] = {}
        self.refs: dict[tuple[str, KeyPath], tuple[SourceDoc, str]] = {}

    def claim(self, doc: SourceDoc, kind: str, path: KeyPath, ident: str) -> bool:
        """Record the first place an id is defined; report any later one."""
        first_doc, first_path = self.first.setdefault((kind, ident), (doc, path))
        if (first_doc.file, first_path) != (doc.file, path):
            return self._duplicate(doc, kind, path, ident)
        return True

    def claim_environment(self, doc: SourceDoc, suite_id: str, index: int, ident: str) -> bool:
        """:meth:`claim` of the id of ``suites.<suite_id>.environments[index]``."""
        here = (doc, suite_id, index)
        first = self.environments.setdefault(ident, here)
        if first is not here and (first[0].file, *first[1:]) != (doc.file, suite_id, index):
            return self._duplicate(doc, "environment", _env_id_path(suite_id, index), ident)
        return True

    def _duplicate(self, doc: SourceDoc, kind: str, path: KeyPath, ident: str) -> bool:
        doc.issues.append(doc.issue(path, f"duplicate {kind} id {ident!r} "
                                          f"(first in {self.where(kind, ident)})"))
        return False

    def where(self, kind: str, ident: str) -> str:
        """``file:line`` of the first definition of a claimed id (its line is looked up only
        now: a document read without lines is read again for it)."""
        if kind == "environment":
            doc, suite_id, index = self.environments[ident]
            return doc.issue(_env_id_path(suite_id, index), "").location()
        doc, path = self.first[(kind, ident)]
        return doc.issue(path, "").location()

    def scan(self, doc: SourceDoc) -> bool:
        """Check one file's ids and collect its references; False if an id is taken."""
        ok = True
        data = doc.data
        for i, source in _items(data, "data_sources"):
            if (sid := _str_id(source)) is not None:
                ok &= self.claim(doc, "data source", ("data_sources", i, "id"), sid)
        for i, registry in _items(data, "registries"):
            host = registry.get("host")
            if isinstance(host, str):  # one set of credentials per registry, in every file
                ok &= self.claim(doc, "registry", ("registries", i, "host"), registry_host(host))
        for i, dataset in _items(data, "datasets"):
            if (did := _str_id(dataset)) is not None:
                ok &= self.claim(doc, "dataset", ("datasets", i, "id"), did)
        suites = data.get("suites") if isinstance(data, dict) else None
        for suite_id, suite in suites.items() if isinstance(suites, dict) else ():
            spath: KeyPath = ("suites", suite_id)
            ok &= self.claim(doc, "suite", spath, suite_id)
            defaults = suite.get("defaults") if isinstance(suite, dict) else None
            for i, env in _items(suite, "environments"):
                if (eid := _str_id(env)) is not None:
                    ok &= self.claim_environment(doc, suite_id, i, eid)
                # An environment's own list replaces the defaults' list.
                own = "data_sources" in env
                holder = env if own else defaults
                refs = holder.get("data_sources") if isinstance(holder, dict | Taken) else None
                for j, ref in enumerate(refs if isinstance(refs, list) else ()):
                    # else: an invalid id; or a source already defined (it stays defined):
                    # nothing to check at the end
                    if (isinstance(ref, str) and ("data source", ref) not in self.first
                            and re.match(ID_PATTERN, ref)):
                        hpath = (*spath, "environments", i) if own else (*spath, "defaults")
                        self.refs[(doc.file, (*hpath, "data_sources", j))] = (doc, ref)
        return ok

    def check_refs(self) -> None:
        for (_, path), (doc, ref) in self.refs.items():
            if ("data source", ref) not in self.first:
                doc.issues.append(doc.issue(path, f"unknown data source {ref!r}"))
