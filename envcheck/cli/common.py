"""What every command shares: consoles, exit codes, the ``--database`` option, loading a
catalogue or exiting 2, opening the store (a data directory that cannot be created is bad
input: exit 2; a store that does not answer is envcheck's infrastructure: exit 3).

Light on purpose, like every module of the command tree: typer, rich and small modules at the
top; the catalogue, the store and the rest inside the functions that use them, so that
``envcheck --help`` and ``envcheck gate`` do not pay for what they never run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from envcheck.core.errors import CatalogueError, ConfigError, StoreError
from envcheck.executors.kind import ExecutorKind
from envcheck.store.retention import Retention

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue
    from envcheck.catalogue.origins import Origins
    from envcheck.store import Store
    from envcheck.store.direct import DirectReader

__all__ = [
    "EXIT_FAILED",
    "EXIT_INFRA",
    "EXIT_OK",
    "EXIT_USAGE",
    "KEEP",
    "CataloguePaths",
    "Database",
    "Executor",
    "ImageCache",
    "KeepDaily",
    "KeepFailures",
    "KeepHourly",
    "KeepPasses",
    "Prefetch",
    "RayAddress",
    "config_error_exit",
    "err",
    "exit_on_store_error",
    "image_cache_or_exit",
    "load_or_exit",
    "open_feed_or_exit",
    "open_store_or_exit",
    "out",
    "retention_or_exit",
    "store_url_or_exit",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

# Options several commands take. The variable is envcheck.store.database.URL_ENV, spelled out
# so that parsing a command line does not import the store.
Database = Annotated[str | None, typer.Option("--database", envvar="ENVCHECK_DATABASE_URL",
                                              help="store URL (default: SQLite)")]
CataloguePaths = Annotated[list[Path], typer.Argument(help="catalogue files or folders")]
# Where checks run (envcheck check, envcheck daemon).
Executor = Annotated[ExecutorKind, typer.Option(
    envvar="ENVCHECK_EXECUTOR", help="where checks run: this host's engine, or Ray tasks on "
    "nodes declaring the 'docker' resource (pip install envcheck[ray])")]
RayAddress = Annotated[str | None, typer.Option(
    envvar="ENVCHECK_RAY_ADDRESS", help="with --executor ray: the cluster's host:port "
    "(default: RAY_ADDRESS, else the cluster started on this host)")]
# The budget of the images envcheck pulls (pull: watch): envcheck.registry.cache.BUDGET_ENV.
ImageCache = Annotated[str | None, typer.Option(
    "--image-cache", envvar="ENVCHECK_IMAGE_CACHE", metavar="SIZE",
    help="bytes the images envcheck pulls may take on the engine's disk: 20GiB, 500MB, or a "
    "share of the disk, 30%; its least recently used pulls are removed to stay under it "
    "(default: no budget)")]
# How many images are pulled ahead of their probes (pull: watch); their bytes: half the budget
# in the daemon (which probes them again), all of it in a check.
Prefetch = Annotated[int, typer.Option(
    "--prefetch", envvar="ENVCHECK_PREFETCH", min=0, max=64, metavar="N",
    help="images envcheck pulls ahead of the probes that will need them, at most N waiting "
    "unused and within the --image-cache (the daemon: half of it) (0: pull only when a probe "
    "needs one)")]

# How long the store keeps what (envcheck store prune, and the daemon's hourly prune).
KEEP = Retention()  # the defaults
KeepPasses = Annotated[float, typer.Option(
    "--keep-passes", envvar="ENVCHECK_KEEP_PASSES", metavar="DAYS",
    help="days clean passes stay as raw results")]
KeepFailures = Annotated[float, typer.Option(
    "--keep-failures", envvar="ENVCHECK_KEEP_FAILURES", metavar="DAYS",
    help="days failures, flaky, errors and degraded passes stay as raw results, with their "
         "evidence")]
KeepHourly = Annotated[float, typer.Option(
    "--keep-hourly", envvar="ENVCHECK_KEEP_HOURLY", metavar="DAYS",
    help="days hour rollups (results and rollout counters) are kept")]
KeepDaily = Annotated[float, typer.Option(
    "--keep-daily", envvar="ENVCHECK_KEEP_DAILY", metavar="DAYS",
    help="days day rollups (results and rollout counters) are kept")]

err = Console(stderr=True)
out = Console()
# Piped or redirected, a console is 80 columns wide: its lines are written whole, for logs
# and scripts to read (tables keep their own wrapping).
err.soft_wrap, out.soft_wrap = not err.is_terminal, not out.is_terminal


def load_or_exit(paths: Sequence[Path], origins: Origins | None = None,
                 annotate: bool = False) -> Catalogue:
    """The catalogue, or every problem as one line and exit 2 (``annotate``: each also as a
    GitHub workflow annotation on stdout); ``origins`` is filled as the loader fills it."""
    from envcheck.catalogue.loader import load_catalogue

    try:
        return load_catalogue(paths, origins=origins)
    except CatalogueError as exc:
        for issue in exc.issues:
            err.print(f"[red]error[/red] {escape(str(issue))}", highlight=False, soft_wrap=True)
        err.print(f"{len(exc.issues)} problem(s) in the catalogue")
        if annotate:
            import sys

            from envcheck.cli.reports import print_issue_annotations

            print_issue_annotations(exc.issues, sys.stdout)
        raise typer.Exit(EXIT_USAGE) from None


def config_error_exit(exc: ConfigError) -> typer.Exit:
    """Print a configuration error as one line; the exit (2) for the caller to raise."""
    err.print(f"[red]error[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


def retention_or_exit(passes: float, failures: float, hourly: float, daily: float
                      ) -> Retention:
    """The retention these ``--keep-*`` options ask for, or one line and exit 2."""
    try:
        return Retention(passes, failures, hourly, daily)
    except ValueError as exc:
        err.print(f"[red]error[/red] retention: {escape(str(exc))}", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None


def store_url_or_exit(url: str | None) -> str:
    """The store URL: ``url``, else the default (which creates the data directory)."""
    from envcheck.store.urls import default_database_url

    try:
        return url or default_database_url()
    except ConfigError as exc:
        raise config_error_exit(exc) from None


def image_cache_or_exit(budget: str | None) -> str | None:
    """``budget`` checked now: bad input exits 2 before anything starts."""
    if budget is None:
        return None
    from envcheck.registry.cache import parse_budget

    try:
        parse_budget(budget)
    except ConfigError as exc:
        raise config_error_exit(exc) from None
    return budget


@contextlib.contextmanager
def exit_on_store_error() -> Iterator[None]:
    """A store that fails inside the block is envcheck's infrastructure: one line, exit 3."""
    try:
        yield
    except StoreError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INFRA) from None


def open_store_or_exit(url: str | None) -> Store:
    from envcheck.store import open_store

    resolved = store_url_or_exit(url)
    with exit_on_store_error():
        return open_store(resolved)


def open_feed_or_exit(url: str | None) -> DirectReader | Store:
    """What reads the feed fast: the store's direct reader (no SQLAlchemy) when the store can
    be read as it is, else the Store, which migrates a new or older store first."""
    from envcheck.store.direct import open_direct

    resolved = store_url_or_exit(url)
    with exit_on_store_error():
        reader = open_direct(resolved)
    return reader if reader is not None else open_store_or_exit(resolved)
