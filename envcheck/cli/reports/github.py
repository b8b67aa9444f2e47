"""GitHub Actions' own reports of a check: workflow annotations (``::error file=…,line=…::``)
on the catalogue line, dataset record or Harbor ``task.toml`` of each environment that failed,
and a Markdown job summary.

GitHub shows at most 10 error and 10 warning annotations of a step: the first
:data:`ANNOTATIONS_MAX` of each are written, then one notice counts the rest; the job summary
and the JUnit report hold every result. Paths are relative to the workspace
(``$GITHUB_WORKSPACE``, else the working directory: :func:`workspace_path`), as annotations
need them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from envcheck.catalogue.origins import Origin
from envcheck.core.errors import CatalogueIssue
from envcheck.core.results import ProbeResult, Status

__all__ = [
    "ANNOTATIONS_MAX",
    "SUMMARY_ROWS",
    "issue_annotations",
    "markdown_summary",
    "result_annotations",
    "workspace_path",
]

ANNOTATIONS_MAX = 10  # of each level: what GitHub shows of one step
SUMMARY_ROWS = 300  # a job summary holds at most 1 MiB
_CELL_CHARS = 300


def workspace_path(file: str) -> str:
    """``file`` relative to the workspace when it is inside it, else as given."""
    base = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    try:
        return str(Path(file).resolve().relative_to(base))
    except ValueError:
        return file


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, title: str, origin: Origin | None = None) -> str:
    props = []
    if origin is not None:
        props.append(f"file={_property(origin.file)}")
        if origin.line is not None:
            props.append(f"line={origin.line}")
    props.append(f"title={_property(title)}")
    return f"::{level} {','.join(props)}::{_data(message)}"


def _capped(lines: Iterable[tuple[str, str]], what: str) -> list[str]:
    """The first ANNOTATIONS_MAX lines of each level, then a notice counting the rest."""
    shown: dict[str, int] = {}
    more = 0
    out = []
    for level, line in lines:
        if shown.get(level, 0) < ANNOTATIONS_MAX:
            shown[level] = shown.get(level, 0) + 1
            out.append(line)
        else:
            more += 1
    if more:
        out.append(f"::notice title=envcheck::{more} more {what} not annotated: see the job "
                   "summary or the JUnit report")
    return out


def result_annotations(results: Sequence[ProbeResult],
                where: Callable[[str], Origin | None]) -> list[str]:
    """One workflow command per result that is not a clean pass or a skip: ``error`` at the
    environment's source for a failure or a flaky result, ``warning`` there for a degraded
    pass, ``error`` with no file for envcheck's own error (it is not the environment's)."""
    def lines() -> Iterable[tuple[str, str]]:
        for r in results:
            head = f"{r.env_id} {r.kind}"
            if r.status in (Status.FAIL, Status.FLAKY):
                yield "error", _command("error", r.summary, f"{head}: {r.status} {r.reason}",
                                        where(r.env_id))
            elif r.degraded:
                yield "warning", _command("warning", r.summary, f"{head}: degraded {r.reason}",
                                          where(r.env_id))
            elif r.status is Status.ERROR:
                yield "error", _command("error", r.summary, f"envcheck could not check {head}: "
                                        f"{r.reason}")
    return _capped(lines(), "result(s)")


def issue_annotations(issues: Sequence[CatalogueIssue]) -> list[str]:
    """A catalogue's problems as ``error`` annotations at their file and line."""
    return _capped((("error", _command(
        "error", f"{i.key}: {i.message}" if i.key else i.message, "envcheck: catalogue",
        Origin(workspace_path(i.file), i.line) if i.file != "environment" else None))
        for i in issues),
        "catalogue problem(s)")


def _cell(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _CELL_CHARS:
        flat = flat[:_CELL_CHARS] + "…"
    return (flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|"))


def _where(origin: Origin | None) -> str:
    if origin is None:
        return ""
    return _cell(f"{origin.file}:{origin.line}" if origin.line is not None else origin.file)


def markdown_summary(results: Sequence[ProbeResult], where: Callable[[str], Origin | None],
                     preface: Sequence[str] = ()) -> str:
    """The job summary: counts, then every result that is not a clean pass or skip (the
    first SUMMARY_ROWS), then the clean ones folded away."""
    counts = {s: sum(r.status is s for r in results) for s in Status}
    degraded = sum(r.degraded for r in results)
    head = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines = ["## envcheck check", "", *preface, *([""] if preface else []),
             f"**{len(results)} result(s)**: {head or 'none'}"
             + (f" ({degraded} degraded pass(es))" if degraded else ""), ""]
    notable: list[ProbeResult] = []
    rest: list[ProbeResult] = []
    for r in results:
        clean = r.status in (Status.PASS, Status.SKIP) and not r.degraded
        (rest if clean else notable).append(r)
    columns = ("| environment | probe | status | reason | summary | where |\n"
               "|---|---|---|---|---|---|")

    def row(r: ProbeResult) -> str:
        status = f"degraded {r.status}" if r.degraded else str(r.status)
        return (f"| {_cell(r.env_id)} | {r.kind} | **{status}** | `{r.reason}` | "
                f"{_cell(r.summary)} | {_where(where(r.env_id))} |")

    if notable:
        lines += [columns, *(row(r) for r in notable[:SUMMARY_ROWS])]
        if len(notable) > SUMMARY_ROWS:
            lines.append(f"\n{len(notable) - SUMMARY_ROWS} more: see the JUnit report")
        lines.append("")
    if rest:
        shown = rest[:SUMMARY_ROWS]
        lines += [f"<details><summary>{len(rest)} passed or skipped</summary>", "", columns,
                  *(row(r) for r in shown), "", "</details>", ""]
    return "\n".join(lines) + "\n"
