"""Where each environment of one load is written: the file and line of its ``id:`` in a
catalogue file, of its record in a dataset's instance file (JSONL), or its Harbor task's
``task.toml``. For reports that point at the source (CI annotations, JUnit); a load fills one
only when asked (:func:`envcheck.catalogue.loader.load_catalogue`'s ``origins``).

Lines are looked up when asked for, as a duplicate id's are: a catalogue file's lines are
read again then, once per file (:attr:`~envcheck.catalogue.yamlsrc.SourceDoc.lines`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envcheck.catalogue.yamlsrc import SourceDoc

__all__ = ["Origin", "Origins"]


@dataclass(frozen=True, slots=True)
class Origin:
    file: str
    line: int | None = None


@dataclass
class Origins:
    """Filled by one load: environments defined in catalogue files by (file, suite, index),
    those a dataset expanded into by (file, line)."""

    defined: dict[str, tuple[SourceDoc, str, int]] = field(default_factory=dict)
    expanded: dict[str, tuple[str, int | None]] = field(default_factory=dict)

    def where(self, env_id: str) -> Origin | None:
        """The source of ``env_id``, or None for an id this load did not hold."""
        found = self.expanded.get(env_id)
        if found is not None:
            file, line = found
            if Path(file, "task.toml").is_file():  # a Harbor task: its folder's task.toml
                return Origin(str(Path(file, "task.toml")))
            return Origin(file, line)
        defined = self.defined.get(env_id)
        if defined is None:
            return None
        doc, suite_id, index = defined
        return Origin(doc.file, doc.line_of(("suites", suite_id, "environments", index, "id")))
