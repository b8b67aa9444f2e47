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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from envcheck.cli.check import check, select_envs
from envcheck.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_USAGE,
    Database,
    config_error_exit,
    err,
    load_or_exit,
    open_store_or_exit,
    out,
)
from envcheck.cli.daemon import daemon
from envcheck.cli.dashboard import dashboard
from envcheck.cli.feed import gate, quarantine_app
from envcheck.cli.history import incidents, retired
from envcheck.cli.reports import Annotate, annotations_on
from envcheck.cli.store import store_app
from envcheck.cli.taint import taint
from envcheck.core.errors import ConfigError

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="envcheck: which sandbox environments can your RL runs trust?")

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


def validate(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="catalogue files or folders (with --discover: where to look)")] = None,
    discover: Annotated[bool, typer.Option(
        "--discover", help="validate, as one catalogue, every file under PATHS (default: "
        "here) that holds a catalogue's keys: what git lists in a repository")] = False,
    annotations: Annotate = None,
) -> None:
    """Check catalogue files; exit 2 with file:line and key for every problem."""
    if discover:
        paths = _discovered(paths or [])
    if not paths:
        err.print("[red]error[/red] Missing argument 'PATHS...': name the catalogue's files "
                  "or folders, or look for them with --discover", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(EXIT_USAGE)
    catalogue = load_or_exit(paths, annotate=annotations_on(annotations))
    out.print(f"ok: {len(catalogue.suites)} suite(s), {len(catalogue.environments)} "
              f"environment(s), {len(catalogue.data_sources)} data source(s) "
              f"in {len(catalogue.files)} file(s){_datasets(catalogue)}", highlight=False)


def _discovered(roots: list[Path]) -> list[Path]:
    from envcheck.catalogue.sourcelimits import SourceLimits
    from envcheck.cli.discover import discover_catalogues

    try:
        limits = SourceLimits.from_env()
    except ValueError:  # the load reports it, with the other problems
        limits = SourceLimits()
    found = discover_catalogues(roots, limits.max_bytes)
    if not found:
        where = ", ".join(map(str, roots)) or "here"
        err.print(f"[red]error[/red] --discover: no catalogue file under {escape(where)} (a "
                  "*.yaml or *.yml with 'version:' and 'suites:', 'datasets:' or "
                  "'data_sources:')", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE)
    return found


def _datasets(catalogue: Catalogue) -> str:
    """The dataset entries and what they read: a Harbor dataset's task folders apart from
    instance files (both are what ``dataset_files`` holds)."""
    if not catalogue.datasets:
        return ""
    folders = sum(Path(f).is_dir() for f in catalogue.dataset_files)
    read = [f"{n} {what}" for n, what in ((len(catalogue.dataset_files) - folders,
                                           "instance file(s)"), (folders, "task folder(s)"))
            if n]
    return f"; {len(catalogue.datasets)} dataset(s) from {' and '.join(read) or 'no file'}"


def schema() -> None:
    """Print the JSON Schema of a catalogue file (for editors)."""
    from envcheck.catalogue.document import CatalogueFile

    doc = CatalogueFile.model_json_schema(by_alias=True)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "envcheck catalogue"
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


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
    [env] = select_envs(catalogue, [env_id])
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


# in the order --help lists them
app.command()(validate)
app.command()(schema)
app.command()(check)
app.command()(snapshot)
app.command("accept-schema")(accept_schema)
app.command()(daemon)
app.command()(gate)
app.command()(incidents)
app.command()(taint)
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
