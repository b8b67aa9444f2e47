"""The ``envcheck`` command line. Exit codes: 0 ok, 1 an environment failed, 2 bad input,
3 envcheck could not check (its own or its infrastructure's failure) or could not record.

"Could not record" outranks an environment failure: when the store refuses results (a full
disk) and they are still unwritten at the end of ``check``, the exit is 3 even if some
environment failed. The summary still shows every failure, but the feed schedulers read does
not reflect the run, and that needs an operator before anything else. Exit 1 never means a
store failure.

Only typer, rich and small modules are imported at the top (see :mod:`envcheck.cli.common`):
each command imports the catalogue, the store, the executors or the engine client it uses.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_USAGE,
    KEEP,
    CataloguePaths,
    Database,
    KeepDaily,
    KeepFailures,
    KeepHourly,
    KeepPasses,
    config_error_exit,
    err,
    load_or_exit,
    open_store_or_exit,
    out,
    retention_or_exit,
    store_url_or_exit,
)
from envcheck.cli.dashboard import dashboard
from envcheck.cli.feed import gate, quarantine_app
from envcheck.cli.history import incidents, retired
from envcheck.cli.store import store_app
from envcheck.core.errors import ConfigError, StoreError
from envcheck.core.results import Previous, ProbeKind, ProbeResult, Status
from envcheck.executors.kind import ExecutorKind

if TYPE_CHECKING:
    from rich.table import Table

    from envcheck.catalogue.models import Catalogue, Environment
    from envcheck.executors.base import ExecutorConfig
    from envcheck.executors.cycle import ResultSink, Services
    from envcheck.store import Store
    from envcheck.store.pending import PendingWrites

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="envcheck: which sandbox environments can your RL runs trust?")

Executor = Annotated[ExecutorKind, typer.Option(
    envvar="ENVCHECK_EXECUTOR", help="where checks run: this host's engine, or Ray tasks on "
    "nodes declaring the 'docker' resource (pip install envcheck[ray])")]
RayAddress = Annotated[str | None, typer.Option(
    envvar="ENVCHECK_RAY_ADDRESS", help="with --executor ray: the cluster's host:port "
    "(default: RAY_ADDRESS, else the cluster started on this host)")]

# At the end of `check`, how long held results wait for the store to take writes again.
FINAL_FLUSH_S = 10.0

STATUS_STYLE = {Status.PASS: "green", Status.FAIL: "red", Status.FLAKY: "yellow",
                Status.ERROR: "magenta", Status.SKIP: "dim"}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"envcheck {version('envcheck')}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="print the version and exit")
        ] = False) -> None:
    """envcheck: which sandbox environments can your RL runs trust?"""


def _load(paths: Sequence[Path]) -> Catalogue:
    return load_or_exit(paths)


@app.command()
def validate(paths: CataloguePaths) -> None:
    """Check catalogue files; exit 2 with file:line and key for every problem."""
    catalogue = _load(paths)
    out.print(f"ok: {len(catalogue.suites)} suite(s), {len(catalogue.environments)} "
              f"environment(s), {len(catalogue.data_sources)} data source(s) "
              f"in {len(catalogue.files)} file(s)" + (
                  f" and {len(catalogue.dataset_files)} dataset file(s)"
                  if catalogue.dataset_files else ""))


@app.command()
def schema() -> None:
    """Print the JSON Schema of a catalogue file (for editors)."""
    from envcheck.catalogue.document import CatalogueFile

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


@app.command()
def check(
    paths: CataloguePaths,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="environment id")] = None,
    probe: Annotated[list[str] | None, typer.Option("--probe", "-p", help="probe kind")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64)] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per result")] = False,
    database: Database = None,
    executor: Executor = ExecutorKind.LOCAL,
    ray_address: RayAddress = None,
) -> None:
    """Run one check cycle now, store the results and print them.

    Exit 0 all passed, 1 an environment failed, 2 bad input, 3 envcheck could not check or
    could not record. If the store stops taking writes mid-run (a full disk), probing goes
    on, results are held and written when it takes writes again; if some still cannot be
    written at the end, the summary is printed and the exit is 3 even when an environment
    failed: the feed schedulers read does not show this run, which needs an operator first.
    """
    from envcheck.executors.base import ExecutorConfig
    from envcheck.feed.assess import previous_statuses
    from envcheck.feed.depth import StoreDepth
    from envcheck.kinds.collaborators import build_services
    from envcheck.store.database import redact
    from envcheck.store.pending import PendingWrites, store_reason

    config = ExecutorConfig.parse(executor, concurrency=concurrency, ray_address=ray_address)
    catalogue = _load(paths)
    envs, kinds = _select(catalogue, env), _kinds(probe)
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

        try:
            results = _run(envs, kinds, run_id, record, config, as_json,
                           build_services(catalogue, store, StoreDepth(store).advice), store)
        except KeyboardInterrupt:
            writes.interrupt_run(run_id)
            writes.flush()  # once: the user asked to stop, not to wait
            err.print("interrupted: in-flight probes finished, their containers removed")
            if writes.held:
                err.print(f"[red]error[/red] {escape(_unrecorded(writes, None))}",
                          highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None
        problem = _settle(writes, run_id, envs, results, before)
    _print_summary(err if as_json else out, results)
    if problem is not None:
        _fail(problem)
    raise typer.Exit(exit_code(results))


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


@app.command()
def snapshot(
    paths: Annotated[Path, typer.Argument(metavar="CATALOGUE", help="catalogue file or folder")],
    env_id: Annotated[str, typer.Argument(metavar="ENV", help="environment id")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="lock file to write (default: the lock the environment "
                               "declares, else <catalogue dir>/locks/<env>.txt)")] = None,
) -> None:
    """Record an environment's installed Python packages as a pip-freeze lock file."""

    from envcheck.core.errors import EngineUnreachable, InfraError, SandboxStartFailed
    from envcheck.core.files import atomic_write_text
    from envcheck.executors.cycle import new_run_id
    from envcheck.kinds.dependencies.lock import format_lock
    from envcheck.kinds.dependencies.probe import SnapshotFailed, take_snapshot
    from envcheck.sandbox.base import SandboxSpec
    from envcheck.sandbox.docker import DockerRuntime

    catalogue = _load([paths])
    [env] = _select(catalogue, [env_id])
    deps = env.dependencies
    if output is None:
        output = (Path(deps.lock_path) if deps is not None and deps.lock_path else
                  Path(catalogue.suite(env.suite).file).parent / "locks" / f"{env.id}.txt")
    try:
        runtime = DockerRuntime.from_env()
    except EngineUnreachable as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_INFRA) from None
    try:
        runtime.reap()
        digest = runtime.image_digest(env.image)
        spec = SandboxSpec(env_id=env.id, image=env.image, run_id=new_run_id(),
                           limits=env.limits, start_timeout_s=env.timeouts.start_s)
        with runtime.sandbox(spec) as sandbox:
            snap = take_snapshot(sandbox, env)
    except InfraError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))} (envcheck could not snapshot {env.id})")
        raise typer.Exit(EXIT_INFRA) from None
    except (SandboxStartFailed, SnapshotFailed) as exc:
        err.print(f"[red]error[/red] {env.id}: {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    finally:
        runtime.close()
    text = format_lock(snap.packages, [
        f"envcheck snapshot of {env.id}: {env.image} ({digest})",
        f"python {snap.python_version}, {len(snap.packages)} packages, as user {env.user}",
    ])
    atomic_write_text(output, text)  # a reader never sees half a lock
    err.print(f"{len(snap.packages)} packages of {env.id} (python {snap.python_version})")
    out.print(str(output), highlight=False, soft_wrap=True)


@app.command("accept-schema")
def accept_schema(
    paths: Annotated[Path, typer.Argument(metavar="CATALOGUE", help="catalogue file or folder")],
    source_id: Annotated[str, typer.Argument(metavar="SOURCE", help="data source id")],
    actor: Annotated[str | None, typer.Option(help="who accepts (default: your user)")] = None,
    database: Database = None,
) -> None:
    """Accept the latest observed response shape of a data source (ends its schema_drift)."""
    import getpass

    from envcheck.kinds.datasource.fingerprint import changes

    catalogue = _load([paths])
    if source_id not in {s.id for s in catalogue.data_sources}:
        err.print(f"[red]error[/red] unknown data source {source_id!r}")
        raise typer.Exit(EXIT_USAGE)
    with open_store_or_exit(database) as store:
        before, latest = store.accepted_shape(source_id), store.latest_shape(source_id)
        if latest is None:
            err.print(f"[red]error[/red] no answer of {source_id} observed yet: run "
                      "`envcheck check --probe datasource` first")
            raise typer.Exit(EXIT_USAGE)
        if before is not None and before.fingerprint == latest.fingerprint:
            out.print(f"{source_id}: shape {latest.fingerprint} is already accepted "
                      f"(by {before.accepted_by})", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_OK)
        row = store.accept_shape(source_id, actor or getpass.getuser(), latest.fingerprint)
    for change in changes(before.shape, row.shape) if before is not None else []:
        out.print(f"  {change}", highlight=False, soft_wrap=True)
    at = row.accepted_at.isoformat(timespec="seconds") if row.accepted_at else "?"
    out.print(f"{source_id}: accepted shape {row.fingerprint} (last seen "
              f"{row.last_seen.isoformat(timespec='seconds')}) by {row.accepted_by} at {at}",
              highlight=False, soft_wrap=True)


@app.command()
def daemon(
    paths: CataloguePaths,
    # Every option has a variable too: a container or a service unit configures the daemon
    # by its environment (images/envcheck/, README "Deploy").
    host: Annotated[str, typer.Option(envvar="ENVCHECK_HOST",
                                      help="listen address of the HTTP port")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="ENVCHECK_PORT",
                                      help="API, /metrics, /healthz, /readyz")] = 8787,
    concurrency: Annotated[int, typer.Option(min=1, max=256, envvar="ENVCHECK_CONCURRENCY",
                                             help="sandboxes at once, in all")] = 2,
    executor: Executor = ExecutorKind.LOCAL,
    ray_address: RayAddress = None,
    per_image: Annotated[int | None, typer.Option(min=1, envvar="ENVCHECK_PER_IMAGE",
                                                  help="sandboxes at once per image")] = None,
    window: Annotated[float, typer.Option(min=1.0, envvar="ENVCHECK_WINDOW",
                                          help="seconds per assessed window")] = 60.0,
    database: Database = None,
    log_level: Annotated[str, typer.Option(envvar="ENVCHECK_LOG_LEVEL")] = "info",
    webhooks_file: Annotated[Path | None, typer.Option(
        envvar="ENVCHECK_WEBHOOKS_FILE",
        help="YAML list of webhooks for alerts; URLs from env vars or secret files")] = None,
    webhook: Annotated[list[str] | None, typer.Option(
        envvar="ENVCHECK_WEBHOOK", help="also alert this URL (repeatable); command lines are "
        "visible to all users: put URLs with tokens in --webhooks-file")] = None,
    webhook_format: Annotated[Literal["alertmanager", "slack"], typer.Option(
        envvar="ENVCHECK_WEBHOOK_FORMAT",
        help="payload of the --webhook URLs")] = "alertmanager",
    external_url: Annotated[str | None, typer.Option(
        envvar="ENVCHECK_EXTERNAL_URL",
        help="this daemon's URL in alert links (default: http://HOST:PORT)")] = None,
    prune_every: Annotated[float, typer.Option(
        envvar="ENVCHECK_PRUNE_EVERY", min=0.0, metavar="SECONDS",
        help="prune the store this often (0: never; see envcheck store prune)")] = 3600.0,
    keep_passes: KeepPasses = KEEP.passes_days,
    keep_failures: KeepFailures = KEEP.others_days,
    keep_hourly: KeepHourly = KEEP.hourly_days,
    keep_daily: KeepDaily = KEEP.daily_days,
    metrics_series: Annotated[Literal["environment", "suite"], typer.Option(
        envvar="ENVCHECK_METRICS_SERIES", help="/metrics series per environment and per "
        "suite, or per suite alone (a large fleet: alerts.yaml has per-suite variants)")
    ] = "environment",
    budget: Annotated[float | None, typer.Option(
        envvar="ENVCHECK_BUDGET", min=1.0, metavar="SECONDS",
        help="sandbox-seconds per hour for the whole fleet: the probes worth most run first "
        "(new, stale, suspect), the rest wait (default: no budget)")] = None,
    suite_budget: Annotated[list[str] | None, typer.Option(
        envvar="ENVCHECK_SUITE_BUDGET", metavar="SUITE=SECONDS",
        help="sandbox-seconds per hour for one suite (repeatable)")] = None,
) -> None:
    """Probe the catalogue on its schedules, serve the feed and metrics, until stopped."""
    import gc
    import os

    from envcheck.core.logs import configure
    from envcheck.daemon import DaemonConfig, run_daemon
    from envcheck.executors.base import ExecutorConfig
    from envcheck.feed.exports import EXPORT_DIR_ENV
    from envcheck.net.apitoken import load_api_token
    from envcheck.notify.config import WebhookConfigError, load_webhooks
    from envcheck.store.database import data_dir

    # The modules imported by now live as long as the daemon: out of the collector's sight,
    # the collections the catalogue's load triggers need not walk them (the daemon freezes
    # what its start builds likewise).
    gc.freeze()
    configure(log_level)
    # Every setting is checked here, before the engine, the store, the scheduler or the HTTP
    # port is touched: bad input exits 2 with one line each, and nothing has started.
    catalogue = _load(paths)
    suite_budgets = _suite_budgets(suite_budget or [], {s.id for s in catalogue.suites})
    retention = retention_or_exit(keep_passes, keep_failures, keep_hourly, keep_daily)
    try:  # read once, here: a missing secret stops the start, not the first alert
        hooks = load_webhooks(webhooks_file, webhook or [], webhook_format)
    except WebhookConfigError as exc:
        for problem in exc.problems:
            err.print(f"[red]error[/red] {escape(problem)}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None
    try:
        token = load_api_token()
        if not os.environ.get(EXPORT_DIR_ENV):
            data_dir()  # where the exports go, whatever the store
    except ConfigError as exc:
        raise config_error_exit(exc) from None
    config = DaemonConfig(tuple(paths), host=host, port=port, concurrency=concurrency,
                          executor=ExecutorConfig.parse(executor, concurrency=concurrency,
                                                        ray_address=ray_address),
                          per_image=per_image, window_s=window,
                          database=store_url_or_exit(database),
                          webhooks=hooks, external_url=external_url, api_token=token,
                          retention=retention, prune_every_s=prune_every,
                          metrics_series=metrics_series, budget_s=budget,
                          suite_budgets=suite_budgets)
    try:
        code = run_daemon(config, catalogue)
    except StoreError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_INFRA) from None
    raise typer.Exit(code)


def _suite_budgets(given: list[str], suites: set[str]) -> tuple[tuple[str, float], ...]:
    """``SUITE=SECONDS`` pairs, each naming a suite of the catalogue; one line and exit 2
    for each that does not."""
    out: dict[str, float] = {}
    problems: list[str] = []
    for item in given:
        suite, sep, raw = item.partition("=")
        try:
            seconds = float(raw)
        except ValueError:
            seconds = float("nan")
        if not sep or not suite or not seconds > 0 or seconds == float("inf"):
            problems.append(f"--suite-budget {item!r}: write SUITE=SECONDS, sandbox-seconds "
                            f"per hour above 0 (e.g. train=36000)")
        elif suite not in suites:
            problems.append(f"--suite-budget {item!r}: the catalogue has no suite {suite!r}")
        else:
            out[suite] = seconds
    for problem in problems:
        err.print(f"[red]error[/red] {escape(problem)}", highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(EXIT_USAGE)
    return tuple(sorted(out.items()))


app.command()(gate)
app.command()(incidents)
app.command()(retired)
app.command()(dashboard)
app.add_typer(quarantine_app, name="quarantine")
app.add_typer(store_app, name="store")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except ConfigError as exc:  # a setting met past the up-front checks: still one line
        raise SystemExit(config_error_exit(exc).exit_code) from None


if __name__ == "__main__":
    main()
