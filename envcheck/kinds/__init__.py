"""Probe kinds: a plain name -> "module:Class" map, imported lazily.

Third parties add kinds through the ``envcheck.kinds`` entry-point group.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points

from envcheck.core.results import ProbeKind
from envcheck.kinds.base import Probe, ProbeContext, Verdict

__all__ = ["KINDS", "Probe", "ProbeContext", "Verdict", "available_kinds", "load_probe"]

KINDS: dict[str, str] = {
    ProbeKind.TERMINAL: "envcheck.kinds.terminal:TerminalProbe",
    ProbeKind.DEPENDENCIES: "envcheck.kinds.dependencies.probe:DependenciesProbe",
    ProbeKind.TESTS: "envcheck.kinds.testvalidity.probe:TestsProbe",
    ProbeKind.DATASOURCE: "envcheck.kinds.datasource.probe:DatasourceProbe",
    ProbeKind.IMAGE: "envcheck.kinds.image:ImageProbe",
}


@cache
def _registry() -> dict[str, str]:
    found = dict(KINDS)
    for ep in entry_points(group="envcheck.kinds"):
        found.setdefault(ep.name, ep.value)
    return found


def available_kinds() -> list[ProbeKind]:
    return [ProbeKind(name) for name in _registry() if name in ProbeKind.__members__.values()]


def load_probe(kind: ProbeKind | str) -> Probe:
    try:
        target = _registry()[str(kind)]
    except KeyError:
        raise LookupError(f"probe kind {kind!r} is not available; "
                          f"available: {', '.join(sorted(_registry()))}") from None
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Probe)):
        raise LookupError(f"{target} is not a Probe")
    return cls()
