"""The reports a CI system reads, beside ``envcheck check``'s summary and ``--json``: a JUnit
file (:mod:`.junit`), GitHub workflow annotations and a Markdown job summary (:mod:`.github`).
They change no exit code; a report that cannot be written is envcheck's failure (exit 3)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

if TYPE_CHECKING:
    from envcheck.catalogue.models import Environment
    from envcheck.catalogue.origins import Origins
    from envcheck.core.errors import CatalogueIssue
    from envcheck.core.results import ProbeResult

__all__ = ["Annotate", "CiReports", "JunitFile", "SummaryFile", "annotations_on",
           "print_issue_annotations"]

JunitFile = Annotated[Path | None, typer.Option(
    "--junit", metavar="FILE", dir_okay=False,
    help="write a JUnit XML report: a test case per environment and probe kind")]
SummaryFile = Annotated[Path | None, typer.Option(
    "--summary", metavar="FILE", dir_okay=False,
    help="write a Markdown summary of the results (default: appended to "
         "$GITHUB_STEP_SUMMARY when it is set)")]
Annotate = Annotated[bool | None, typer.Option(
    "--annotations/--no-annotations",
    help="GitHub workflow annotations at each failing environment's file and line "
         "(default: on when GITHUB_ACTIONS=true)")]


def annotations_on(option: bool | None) -> bool:
    return option if option is not None else os.environ.get("GITHUB_ACTIONS") == "true"


def print_issue_annotations(issues: Sequence[CatalogueIssue], stream: TextIO) -> None:
    from envcheck.cli.reports.github import issue_annotations

    for line in issue_annotations(issues):
        stream.write(line + "\n")
    stream.flush()


@dataclass(frozen=True)
class CiReports:
    junit: Path | None
    summary: Path | None
    append_summary: bool  # $GITHUB_STEP_SUMMARY: other steps write to it too
    annotate: bool

    @classmethod
    def from_options(cls, junit: Path | None, summary: Path | None,
                     annotate: bool | None) -> CiReports:
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary is None and step_summary:
            return cls(junit, Path(step_summary), True, annotations_on(annotate))
        return cls(junit, summary, False, annotations_on(annotate))

    def write(self, results: Sequence[ProbeResult], envs: Sequence[Environment],
              origins: Origins, started: datetime, preface: Sequence[str] = (),
              stream: TextIO | None = None) -> None:
        """Every report asked for; OSError if a file cannot be written."""
        from envcheck.catalogue.origins import Origin
        from envcheck.cli.reports.github import (
            markdown_summary,
            result_annotations,
            workspace_path,
        )
        from envcheck.cli.reports.junit import junit_xml
        from envcheck.core.files import atomic_write_text

        suites = {env.id: env.suite for env in envs}
        found: dict[str, Origin | None] = {}

        def where(env_id: str) -> Origin | None:
            """Where ``env_id`` is written, relative to the workspace as CI systems show it."""
            if env_id not in found:
                origin = origins.where(env_id)
                found[env_id] = (None if origin is None else
                                 Origin(workspace_path(origin.file), origin.line))
            return found[env_id]

        if self.annotate:
            out = stream or sys.stdout
            for line in result_annotations(results, where):
                out.write(line + "\n")
            out.flush()
        if self.junit is not None:
            atomic_write_text(self.junit, junit_xml(results, suites.__getitem__, where,
                                                    started).decode())
        if self.summary is not None:
            text = markdown_summary(results, where, preface)
            if self.append_summary:
                with self.summary.open("a", encoding="utf-8") as f:
                    f.write(text)
            else:
                atomic_write_text(self.summary, text)
