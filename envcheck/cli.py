"""The ``envcheck`` command line. Exit codes: 0 ok, 1 an environment failed, 2 bad input,
3 envcheck could not check (its own or its infrastructure's failure)."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envcheck.catalogue import Catalogue, CatalogueFile, Environment, load_catalogue
from envcheck.errors import CatalogueError, EngineUnreachable, StoreError
from envcheck.kinds import available_kinds
from envcheck.results import ProbeKind, ProbeResult, Status
from envcheck.runner import ResultSink, run_cycle, unchecked
from envcheck.sandbox.docker import DockerRuntime

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="envcheck: which sandbox environments can your RL runs trust?")
err = Console(stderr=True)
out = Console()

STATUS_STYLE = {Status.PASS: "green", Status.FAIL: "red", Status.FLAKY: "yellow",
                Status.ERROR: "magenta", Status.SKIP: "dim"}


def _load(paths: Sequence[Path]) -> Catalogue:
    try:
        return load_catalogue(paths)
    except CatalogueError as exc:
        for issue in exc.issues:
            err.print(f"[red]error[/red] {escape(str(issue))}", highlight=False, soft_wrap=True)
        err.print(f"{len(exc.issues)} problem(s) in the catalogue")
        raise typer.Exit(EXIT_USAGE) from None


@app.command()
def validate(paths: Annotated[list[Path], typer.Argument(help="catalogue files or folders")]
             ) -> None:
    """Check catalogue files; exit 2 with file:line and key for every problem."""
    catalogue = _load(paths)
    out.print(f"ok: {len(catalogue.suites)} suite(s), {len(catalogue.environments)} "
              f"environment(s), {len(catalogue.data_sources)} data source(s) "
              f"in {len(catalogue.files)} file(s)")


@app.command()
def schema() -> None:
    """Print the JSON Schema of a catalogue file (for editors)."""
    doc = CatalogueFile.model_json_schema(by_alias=True)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "envcheck catalogue"
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _select(catalogue: Catalogue, env_ids: list[str] | None) -> list[Environment]:
    if not env_ids:
        return list(catalogue.environments)
    known = {env.id: env for env in catalogue.environments}
    unknown = [e for e in env_ids if e not in known]
    if unknown:
        err.print(f"[red]error[/red] unknown environment(s): {', '.join(unknown)}")
        raise typer.Exit(EXIT_USAGE)
    return [known[e] for e in env_ids]


def _kinds(names: list[str] | None) -> list[ProbeKind]:
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


def _summary(results: Sequence[ProbeResult]) -> Table:
    table = Table(title="envcheck results", title_justify="left")
    for col in ("environment", "probe", "status", "reason", "seconds"):
        table.add_column(col, no_wrap=True)
    table.add_column("summary", overflow="fold", min_width=20)
    for r in results:
        style = STATUS_STYLE[r.status]
        table.add_row(r.env_id, str(r.kind), f"[{style}]{r.status}[/{style}]", str(r.reason),
                      f"{r.duration_s:.2f}", r.summary)
    return table


def _raise_on_term(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@app.command()
def check(
    paths: Annotated[list[Path], typer.Argument(help="catalogue files or folders")],
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="environment id")] = None,
    probe: Annotated[list[str] | None, typer.Option("--probe", "-p", help="probe kind")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64)] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per result")] = False,
    database: Annotated[str | None, typer.Option("--database", envvar="ENVCHECK_DATABASE_URL",
                                                 help="store URL (default: SQLite)")] = None,
) -> None:
    """Run one check cycle now, store the results and print them."""
    from envcheck.store import open_store

    catalogue = _load(paths)
    envs, kinds = _select(catalogue, env), _kinds(probe)
    try:
        store = open_store(database)
    except StoreError as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(EXIT_INFRA) from None
    signal.signal(signal.SIGTERM, _raise_on_term)
    with store:
        store.interrupt_stale_runs()
        store.sync_environments(envs)
        run_id = store.start_run("cli", list(catalogue.files))

        def record(result: ProbeResult) -> None:
            store.record(run_id, result)

        try:
            results = _run(envs, kinds, run_id, record, concurrency, as_json)
        except KeyboardInterrupt:
            store.interrupt_run(run_id)
            err.print("interrupted: in-flight probes finished, their containers removed")
            raise typer.Exit(130) from None
        store.finish_run(run_id)
    if as_json:
        err.print(_summary(results))
    else:
        out.print(_summary(results))
    raise typer.Exit(exit_code(results))


def _run(envs: list[Environment], kinds: list[ProbeKind], run_id: str,
         record: ResultSink | None, concurrency: int, as_json: bool) -> list[ProbeResult]:
    progress = Progress(TextColumn("checking"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.description}"),
                        console=err, transient=True)
    task = progress.add_task("", total=len(envs) * len(kinds))

    def sink(result: ProbeResult) -> None:
        if record is not None:
            record(result)
        if as_json:
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
            sys.stdout.flush()
        progress.update(task, advance=1, description=f"{result.env_id} {result.status}")

    try:
        runtime = DockerRuntime.from_env()
    except EngineUnreachable as exc:
        logging.getLogger("envcheck").error("%s", exc)
        results = unchecked(envs, kinds, exc)
        for result in results:
            sink(result)
        return results
    with progress:
        try:
            runtime.reap()
            return run_cycle(envs, kinds, runtime, run_id, sink, concurrency)
        finally:
            runtime.close()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
