"""``envcheck check``: one cycle now, its results stored, summarised, and its exit code (see
:mod:`envcheck.cli.app`: 3 for "could not record" outranks 1)."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from envcheck.cli.changed import ChangedSince
from envcheck.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_USAGE,
    CataloguePaths,
    Database,
    Executor,
    ImageCache,
    Prefetch,
    RayAddress,
    config_error_exit,
    err,
    exit_on_store_error,
    image_cache_or_exit,
    load_or_exit,
    open_store_or_exit,
    out,
)
from envcheck.cli.pulls import track_pulls, with_pipeline
from envcheck.cli.reports import Annotate, CiReports, JunitFile, SummaryFile
from envcheck.core.clock import SYSTEM_CLOCK
from envcheck.core.errors import ConfigError, StoreError
from envcheck.core.results import Previous, ProbeKind, ProbeResult, Status
from envcheck.executors.kind import ExecutorKind

if TYPE_CHECKING:
    from rich.table import Table

    from envcheck.catalogue.models import Catalogue, Environment
    from envcheck.catalogue.origins import Origins
    from envcheck.executors.base import ExecutorConfig
    from envcheck.executors.cycle import ResultSink, Services
    from envcheck.registry.fleet import RegistryImages
    from envcheck.store import Store
    from envcheck.store.pending import PendingWrites

__all__ = ["check", "exit_code", "plain_summary", "select_envs"]

# At the end of `check`, how long held results wait for the store to take writes again.
FINAL_FLUSH_S = 10.0

STATUS_STYLE = {Status.PASS: "green", Status.FAIL: "red", Status.FLAKY: "yellow",
                Status.ERROR: "magenta", Status.SKIP: "dim"}


def select_envs(catalogue: Catalogue, env_ids: list[str] | None) -> list[Environment]:
    if not env_ids:
        return list(catalogue.environments)
    known = {env.id: env for env in catalogue.environments}
    unknown = [e for e in env_ids if e not in known]
    if unknown:
        err.print(f"[red]error[/red] unknown environment(s): {', '.join(unknown)}")
        raise typer.Exit(EXIT_USAGE)
    return [known[e] for e in env_ids]


def _kinds(names: list[str] | None) -> list[ProbeKind]:
    from envcheck.kinds import available_kinds

    available = available_kinds()
    if not names:
        return available
    chosen: list[ProbeKind] = []
    for name in names:
        if name not in {str(k) for k in available}:
            err.print(f"[red]error[/red] probe kind {name!r} is not available "
                      f"(available: {', '.join(available)})")
            raise typer.Exit(EXIT_USAGE)
        chosen.append(ProbeKind(name))
    return chosen


def exit_code(results: Sequence[ProbeResult]) -> int:
    """A definite environment failure outranks not being able to check the rest."""
    statuses = {r.status for r in results}
    if statuses & {Status.FAIL, Status.FLAKY}:
        return EXIT_FAILED
    if Status.ERROR in statuses:
        return EXIT_INFRA
    return EXIT_OK


SUMMARY_COLUMNS = ("environment", "probe", "status", "reason", "seconds", "summary")


def _summary(results: Sequence[ProbeResult]) -> Table:
    from rich.table import Table

    table = Table(title="envcheck results", title_justify="left")
    for column in SUMMARY_COLUMNS[:-1]:
        table.add_column(column, no_wrap=True)
    table.add_column(SUMMARY_COLUMNS[-1], overflow="fold", min_width=20)
    for r in results:
        style = STATUS_STYLE[r.status]
        table.add_row(r.env_id, str(r.kind), f"[{style}]{r.status}[/{style}]", str(r.reason),
                      f"{r.duration_s:.2f}", r.summary)
    return table


def plain_summary(results: Sequence[ProbeResult]) -> str:
    """The summary for logs and pipes: one line per result, aligned, never wrapped or cut,
    so launch scripts that ``| tee`` a check keep every reason readable."""
    rows = [SUMMARY_COLUMNS] + [
        (r.env_id, str(r.kind), str(r.status), str(r.reason), f"{r.duration_s:.2f}",
         " ".join(r.summary.split()))  # one line, whatever the probe wrote
        for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(SUMMARY_COLUMNS) - 1)]
    return "".join("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)),
                              row[-1]]).rstrip() + "\n" for row in rows)


def _print_summary(console: Console, results: Sequence[ProbeResult]) -> None:
    if console.is_terminal:
        console.print(_summary(results))
    else:
        console.file.write(plain_summary(results))
        console.file.flush()



def _raise_on_term(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def check(
    paths: CataloguePaths,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="environment id")] = None,
    probe: Annotated[list[str] | None, typer.Option("--probe", "-p", help="probe kind")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64)] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per result")] = False,
    junit: JunitFile = None,
    summary: SummaryFile = None,
    annotations: Annotate = None,
    changed_since: ChangedSince = None,
    database: Database = None,
    executor: Executor = ExecutorKind.LOCAL,
    ray_address: RayAddress = None,
    image_cache: ImageCache = None,
    prefetch: Prefetch = 4,
) -> None:
    """Run one check cycle now, store the results and print them.

    Exit 0 all passed, 1 an environment failed, 2 bad input, 3 envcheck could not check or
    could not record. If the store stops taking writes mid-run (a full disk), probing goes
    on, results are held and written when it takes writes again; if some still cannot be
    written at the end, the summary is printed and the exit is 3 even when an environment
    failed: the feed schedulers read does not show this run, which needs an operator first.

    For CI: --junit, --summary (or $GITHUB_STEP_SUMMARY) and GitHub annotations report the
    same results; --changed-since REF checks only what changed since a git ref (nothing
    changed: exit 0).
    """
    from envcheck.catalogue.origins import Origins
    from envcheck.executors.base import ExecutorConfig
    from envcheck.feed.assess import previous_statuses
    from envcheck.feed.depth import StoreDepth
    from envcheck.kinds.collaborators import build_services
    from envcheck.store.database import redact
    from envcheck.store.pending import PendingWrites, store_reason

    config = ExecutorConfig.parse(executor, concurrency=concurrency, ray_address=ray_address)
    budget = image_cache_or_exit(image_cache)
    reports = CiReports.from_options(junit, summary, annotations)
    origins, started = Origins(), SYSTEM_CLOCK.now()
    catalogue = load_or_exit(paths, origins, annotate=reports.annotate)
    envs, kinds = select_envs(catalogue, env), _kinds(probe)
    preface: list[str] = []
    if changed_since is not None:
        envs, preface = _changed(paths, catalogue, changed_since, envs)
        if not envs:
            _report(reports, [], envs, origins, started, preface, as_json)
            raise typer.Exit(EXIT_OK)
    store = open_store_or_exit(database)
    signal.signal(signal.SIGTERM, _raise_on_term)
    with store:
        try:
            store.interrupt_stale_runs()
            store.sync_suites(catalogue.suites)
            store.sync_environments(envs)
            before = previous_statuses(store.latest_results([e.id for e in envs]))
        except StoreError as exc:
            _fail(f"nothing checked: the store at {redact(store.engine.url)} is not "
                  f"writable ({store_reason(exc)})")
        writes = PendingWrites(store)
        run_id = writes.start_run("cli", list(catalogue.files))

        def record(result: ProbeResult) -> None:
            writes.record(run_id, result)

        registry = _registry(catalogue, budget, prefetch)
        if registry is not None:
            with exit_on_store_error():
                registry.seed(catalogue, store.latest_results([e.id for e in envs],
                                                              [ProbeKind.IMAGE]))
        services = build_services(catalogue, store, StoreDepth(store).advice,
                                  registry=registry)
        if registry is not None and config.kind is ExecutorKind.LOCAL:
            services = with_pipeline(services, registry, envs, kinds)
        try:
            results = _run(envs, kinds, run_id, record, config, as_json, services, store)
        except KeyboardInterrupt:
            writes.interrupt_run(run_id)
            writes.flush()  # once: the user asked to stop, not to wait
            err.print("interrupted: in-flight probes finished, their containers removed")
            if writes.held:
                err.print(f"[red]error[/red] {escape(_unrecorded(writes, None))}",
                          highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None
        finally:
            if registry is not None:
                registry.close()
        problem = _settle(writes, run_id, envs, results, before)
    _print_summary(err if as_json else out, results)
    _report(reports, results, envs, origins, started, preface, as_json)
    if problem is not None:
        _fail(problem)
    raise typer.Exit(exit_code(results))


def _registry(catalogue: Catalogue, budget: str | None, prefetch: int
              ) -> RegistryImages | None:
    """The registry stage, if the catalogue has images envcheck pulls (``pull: watch``)."""
    from docker.errors import DockerException

    from envcheck.registry.fleet import CHECK_PREFETCH_BYTES, RegistryImages, RegistrySettings
    from envcheck.store.urls import data_dir

    try:
        # the whole budget may be pulled ahead: a check releases each image once its
        # probes are done, so nothing in the cache is worth more than the next probes' images
        # (each pull still reserves its room within the budget)
        return RegistryImages.for_catalogue(catalogue, RegistrySettings(
            data_dir(), budget, prefetch_count=prefetch, prefetch_bytes=CHECK_PREFETCH_BYTES))
    except ConfigError as exc:
        raise config_error_exit(exc) from None
    except DockerException as exc:
        _fail(f"the Docker engine did not answer: {exc}")


def _changed(paths: Sequence[Path], catalogue: Catalogue, ref: str,
             envs: list[Environment]) -> tuple[list[Environment], list[str]]:
    """``envs`` less those unchanged since ``ref``, and the selection's lines (printed)."""
    from envcheck.cli.changed import select_changed

    selection = select_changed(paths, catalogue, ref)
    chosen = {e.id for e in selection.selected}
    lines = [selection.heading(), *(f"  {line}" for line in selection.lines)]
    for line in lines:
        err.print(escape(line), highlight=False, soft_wrap=True)
    return [e for e in envs if e.id in chosen], lines


def _report(reports: CiReports, results: Sequence[ProbeResult], envs: list[Environment],
            origins: Origins, started: datetime, preface: list[str], as_json: bool) -> None:
    """The CI reports asked for; one that cannot be written is envcheck's failure."""
    try:
        reports.write(results, envs, origins, started, preface,
                      stream=sys.stderr if as_json else sys.stdout)
    except OSError as exc:
        _fail(f"could not write a report: {exc}")


def _fail(message: str) -> NoReturn:
    """envcheck's own failure: one line, exit 3."""
    err.print(f"[red]error[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_INFRA)


def _unrecorded(writes: PendingWrites, total: int | None) -> str:
    from envcheck.store.database import redact

    of = f" of {total}" if total is not None else ""
    return (f"could not record {writes.held}{of} results: the store at "
            f"{redact(writes.store.engine.url)} is not writable ({writes.error})")


def _settle(writes: PendingWrites, run_id: str, envs: list[Environment],
            results: list[ProbeResult], before: Previous) -> str | None:
    """Write what is held, assess the run, mark it finished; what could not be done, or None.

    The run is assessed only once all its results are written, and finished only once
    assessed: a run left running or interrupted is assessed by the daemon's next start.
    """
    from envcheck.store.database import redact
    from envcheck.store.pending import store_reason

    if not writes.flush_within(FINAL_FLUSH_S):
        return _unrecorded(writes, len(results))
    try:
        _assess(writes.store, run_id, envs, results, before)
    except (StoreError, OSError) as exc:
        writes.interrupt_run(run_id)
        writes.flush()
        reason = store_reason(exc) if isinstance(exc, StoreError) else str(exc)
        return (f"results recorded, but could not assess them ({reason}); the daemon's next "
                "start assesses them")
    writes.finish_run(run_id)
    if not writes.flush_within(FINAL_FLUSH_S):
        return (f"results recorded and assessed, but could not mark run {run_id} finished: "
                f"the store at {redact(writes.store.engine.url)} is not writable "
                f"({writes.error})")
    return None


def _assess(store: Store, run_id: str, envs: list[Environment],
            results: list[ProbeResult], before: Previous) -> None:
    """Turn the cycle into states and quarantine, unless it was an infrastructure incident."""
    from envcheck.feed.assess import assess_cycle

    outcome = assess_cycle(store, run_id, envs, results, before)
    if outcome.incident is not None:
        err.print(f"[yellow]incident[/yellow] {escape(outcome.incident[3])}: no state changes")
    for transition in outcome.transitions:
        err.print(f"{transition.env_id}: {transition.old_state} -> {transition.new_state}"
                  f"{' (quarantined)' if transition.quarantined else ''}", highlight=False)


def _run(envs: list[Environment], kinds: list[ProbeKind], run_id: str,
         record: ResultSink | None, config: ExecutorConfig, as_json: bool,
         services: Services | None = None, store: Store | None = None) -> list[ProbeResult]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from envcheck.core.errors import InfraError
    from envcheck.executors.cycle import unchecked
    from envcheck.executors.registry import open_executor

    progress = Progress(TextColumn("{task.fields[what]}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.description}"),
                        console=err, transient=True)
    task = progress.add_task("", total=len(envs) * len(kinds), what="checking")
    track_pulls(progress, services)  # the images envcheck pulls, beside the probes

    def sink(result: ProbeResult) -> None:
        if record is not None:
            record(result)
        if as_json:
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
            sys.stdout.flush()
        progress.update(task, advance=1, description=f"{result.env_id} {result.status}")

    try:
        executor = open_executor(config, shapes=store)  # local: connects and reaps
    except InfraError as exc:
        logging.getLogger("envcheck").error("%s", exc)
        results = unchecked(envs, kinds, exc)
        for result in results:
            sink(result)
        return results
    with progress:
        try:
            return executor.run_cycle(envs, kinds, run_id, sink, services)
        finally:
            executor.close()
