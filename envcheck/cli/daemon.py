"""``envcheck daemon``: its options (each with an ``ENVCHECK_*`` variable), all checked before
anything starts, then :func:`envcheck.daemon.run_daemon`.

Exit codes: 0 stopped (SIGTERM, SIGINT), 2 bad input or refused (a setting; the port in
use; another daemon holds the store, named in the one line), 3 the store does not answer, or
the store's lease was lost to another daemon while running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_INFRA,
    EXIT_USAGE,
    KEEP,
    CataloguePaths,
    Database,
    Executor,
    ImageCache,
    KeepDaily,
    KeepFailures,
    KeepHourly,
    KeepPasses,
    Prefetch,
    RayAddress,
    config_error_exit,
    err,
    image_cache_or_exit,
    load_or_exit,
    retention_or_exit,
    store_url_or_exit,
)
from envcheck.core.depth import DEFAULT_HOST_SAMPLE_S
from envcheck.core.errors import ConfigError, LeaseHeld, StoreError
from envcheck.executors.kind import ExecutorKind
from envcheck.health.rollouts import RolloutPolicy

__all__ = ["daemon"]

ROLLOUTS = RolloutPolicy()  # the defaults


def _rollouts(name: str, metavar: str, what: str) -> Any:
    """An option of the rollouts' sequential test (docs/explanation/health.md, "Rollouts as
    evidence"), with its ``ENVCHECK_ROLLOUT_*`` variable."""
    return typer.Option(envvar=f"ENVCHECK_ROLLOUT_{name}", metavar=metavar,
                        help=f"the rollouts' test: {what}")


def daemon(
    paths: CataloguePaths,
    # Every option has a variable too: a container or a service unit configures the daemon
    # by its environment (images/envcheck/, docs/how-to/deploy.md).
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
    host_sample_every: Annotated[float, typer.Option(
        envvar="ENVCHECK_HOST_SAMPLE_EVERY", min=0.0, metavar="SECONDS",
        help="one terminal probe in full this often measures the host's container start and "
        "shell latency while the fleet's terminal evidence is reused (0: never)")
    ] = DEFAULT_HOST_SAMPLE_S,
    image_cache: ImageCache = None,
    prefetch: Prefetch = 4,
    standby: Annotated[bool, typer.Option(
        "--standby", envvar="ENVCHECK_STANDBY", help="another daemon holds the store: wait, "
        "and take over when it stops or dies (default: exit 2 naming it)")] = False,
    rollout_p0: Annotated[float, _rollouts("P0", "RATE", "a healthy environment's failure "
                                           "rate")] = ROLLOUTS.p0,
    rollout_p1: Annotated[float, _rollouts("P1", "RATE", "a failure rate worth flagging")
                          ] = ROLLOUTS.p1,
    rollout_alpha: Annotated[float, _rollouts("ALPHA", "RATE", "the chance of flagging a "
                                              "healthy environment")] = ROLLOUTS.alpha,
    rollout_beta: Annotated[float, _rollouts("BETA", "RATE", "the chance of missing one "
                                             "failing at p1")] = ROLLOUTS.beta,
    rollout_min: Annotated[int, _rollouts("MIN", "N", "failures and passes counted before "
                                          "anything is flagged")] = ROLLOUTS.min_rollouts,
    rollout_fleet_factor: Annotated[float, _rollouts(
        "FLEET_FACTOR", "X", "p0 rises to the fleet's own failure rate, p1 to at least X "
        "times it")] = ROLLOUTS.fleet_factor,
    rollout_window: Annotated[float, _rollouts("WINDOW", "HOURS", "hours of rollouts read")
                              ] = ROLLOUTS.window_h,
    rollout_notes_after: Annotated[int, _rollouts(
        "NOTES_AFTER", "N", "rewards counted before an environment is noted never_solved "
        "(all 0) or always_solved (all 1)")] = ROLLOUTS.notes_after,
    rollout_quarantine: Annotated[bool, typer.Option(
        "--rollout-quarantine", envvar="ENVCHECK_ROLLOUT_QUARANTINE",
        help="an environment its rollouts flag is quarantined (flaky), not only degraded")
    ] = ROLLOUTS.quarantine,
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
    catalogue = load_or_exit(paths)
    suite_budgets = _suite_budgets(suite_budget or [], {s.id for s in catalogue.suites})
    retention = retention_or_exit(keep_passes, keep_failures, keep_hourly, keep_daily)
    try:
        rollouts = RolloutPolicy(rollout_p0, rollout_p1, rollout_alpha, rollout_beta,
                                 rollout_min, rollout_fleet_factor, rollout_window,
                                 rollout_quarantine, rollout_notes_after)
    except ValueError as exc:
        err.print(f"[red]error[/red] --rollout-*: {escape(str(exc))}", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None
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
                          suite_budgets=suite_budgets, standby=standby, rollouts=rollouts,
                          host_sample_s=host_sample_every or None,
                          image_cache=image_cache_or_exit(image_cache), prefetch=prefetch)
    try:
        code = run_daemon(config, catalogue)
    except LeaseHeld as exc:  # refused: another daemon writes this store
        err.print(f"[red]error[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None
    except ConfigError as exc:  # the port: in use, or not an address of this host
        raise config_error_exit(exc) from None
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
