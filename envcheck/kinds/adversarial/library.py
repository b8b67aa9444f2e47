"""The trick library: each trick one script, ``tricks/NAME.py`` or ``tricks/NAME.sh``, and its
name in the catalogue's vocabulary (``catalogue.probe_specs.TRICK_NAMES``: a catalogue names
tricks, so it validates them at load).

A trick is what a do-nothing agent does instead of a fix. Its script is package data: it is
copied into the sandbox and run there, as the sandbox user, in the workdir, as the agent's only
action; envcheck never runs it on the host. What a trick needs comes in environment variables
and, for what grows with the task, files they name (:class:`~.play.Target` lists them). A
trick exits 0 when it did what the sandbox let it do (a write the sandbox refuses is its
defence: the trick says so and exits 0), non-zero only when it failed on its own. The first
paragraph of a script's docstring (a ``.py``) or header comment (a ``.sh``) says what it
does, the paragraph starting "Stands for:" which real-world behaviour it stands for.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from functools import cached_property
from importlib.resources import files

from envcheck.catalogue.probe_specs import TRICK_NAMES

__all__ = ["TRICKS", "Trick", "select"]


_FOLDER = files(__package__).joinpath("tricks")


@dataclass(frozen=True)
class Trick:
    name: str

    @cached_property
    def script(self) -> str:
        """The script's file name under tricks/."""
        found = [f"{self.name}{s}" for s in (".py", ".sh") if _FOLDER.joinpath(
            f"{self.name}{s}").is_file()]
        if len(found) != 1:
            raise LookupError(f"trick {self.name}: want one of tricks/{self.name}.py or .sh, "
                              f"found {found or 'none'}")
        return found[0]

    @cached_property
    def text(self) -> str:
        return _FOLDER.joinpath(self.script).read_text(encoding="utf-8")

    @property
    def runner(self) -> str:
        """How the sandbox runs the script: python3 for ``.py``, sh otherwise."""
        return "python3" if self.script.endswith(".py") else "sh"

    def command(self, path: str) -> str:
        return f"{self.runner} {shlex.quote(path)}"

    @cached_property
    def stands_for(self) -> str:
        """The docstring's "Stands for:" paragraph, on one line."""
        if self.script.endswith(".py"):
            doc = ast.get_docstring(ast.parse(self.text)) or ""
        else:
            doc = "\n".join(line.removeprefix("#").strip() for line in self.text.splitlines()
                            if line.startswith("#") and not line.startswith("#!"))
        for paragraph in doc.split("\n\n"):
            if paragraph.strip().startswith("Stands for:"):
                return " ".join(paragraph.split()).removeprefix("Stands for: ")
        return ""


# In the order they are played and reported in.
TRICKS: dict[str, Trick] = {name: Trick(name) for name in TRICK_NAMES}


def select(names: list[str]) -> list[Trick]:
    """The tricks named, in library order."""
    return [t for n, t in TRICKS.items() if n in names]
