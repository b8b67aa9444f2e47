"""``envcheck store``: the store's own upkeep by hand: copying it to another backend, pruning
it (the daemon also prunes on its own).

``envcheck store prune`` exits 0 when done (or, ``--dry-run``, when it has counted), 2 for a bad
option, 3 when the store fails.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    KEEP,
    Database,
    KeepDaily,
    KeepFailures,
    KeepHourly,
    KeepPasses,
    err,
    exit_on_store_error,
    open_store_or_exit,
    out,
    retention_or_exit,
)

if TYPE_CHECKING:
    from envcheck.store.retention import PruneReport

store_app = typer.Typer(help="Look after the result store: copy it to PostgreSQL, prune old "
                        "results.", no_args_is_help=True)


@store_app.command("copy")
def copy(
    to: Annotated[str, typer.Option("--to", help="the target store's URL, e.g. "
                                    "postgresql://user:pass@host/envcheck")],
    database: Database = None,
    batch_rows: Annotated[int, typer.Option(min=1, help="rows per transaction")] = 2000,
) -> None:
    """Copy the store (default: the embedded SQLite store) into the store at ``--to``, then
    verify it: each table's row count and a checksum of the environments' states. Resumable:
    run it again after an interruption and it continues. Stop the daemon first, or copy again
    once it is stopped. Exit 0 verified, 1 the copy differs, 2 bad input, 3 a store failed."""
    from envcheck.store.copy import copy_store

    source = open_store_or_exit(database)
    target = open_store_or_exit(to)
    try:
        if source.engine.url == target.engine.url:
            err.print("[red]error[/red] --to names the store being copied")
            raise typer.Exit(2)
        with exit_on_store_error():
            report = copy_store(source, target, batch_rows=batch_rows)
    finally:
        source.close()
        target.close()
    out.print(f"copied {escape(report.source)} -> {escape(report.target)}", highlight=False)
    for table in report.tables:
        out.print(f"  {table.name:<20} {table.target_rows:>10} row(s)  ({table.copied} written, "
                  f"{table.skipped} already there)", highlight=False)
    if not report.verified:
        for problem in report.problems():
            err.print(f"[red]error[/red] {escape(problem)}", highlight=False)
        raise typer.Exit(EXIT_FAILED)
    out.print(f"verified: row counts equal, states checksum {report.target_states[:16]}")


VACUUM_ADVICE = ("this SQLite file does not give freed pages back to the file system: run "
                 "`envcheck store prune --vacuum` once (it rewrites the file and holds its "
                 "write lock meanwhile: best with the daemon stopped)")


@store_app.command()
def prune(
    dry_run: Annotated[bool, typer.Option("--dry-run",
                                          help="count what would go; change nothing")] = False,
    vacuum: Annotated[bool, typer.Option(
        "--vacuum", help="then VACUUM: once on a SQLite store made before envcheck gave "
        "pages back (rewrites the file); on PostgreSQL a plain VACUUM ANALYZE")] = False,
    give_back_all: Annotated[bool, typer.Option(
        "--give-back-all", help="SQLite: give every free page back to the file system, not "
        "only those beyond the reserve the next inserts reuse")] = False,
    keep_passes: KeepPasses = KEEP.passes_days,
    keep_failures: KeepFailures = KEEP.others_days,
    keep_hourly: KeepHourly = KEEP.hourly_days,
    keep_daily: KeepDaily = KEEP.daily_days,
    as_json: Annotated[bool, typer.Option("--json", help="print the counts as JSON")] = False,
    database: Database = None,
) -> None:
    """Fold raw results past their retention into hourly and daily rollups and delete them,
    never the health model's window nor a transition's evidence; delete rollups past theirs;
    fold the rollout counters' hour rows into day rows, and delete those past theirs.
    Exit 0 done, 2 bad option, 3 the store failed."""
    retention = retention_or_exit(keep_passes, keep_failures, keep_hourly, keep_daily)
    if dry_run and vacuum:
        err.print("[red]error[/red] --vacuum rewrites the store: not with --dry-run")
        raise typer.Exit(EXIT_USAGE)
    with open_store_or_exit(database) as store, exit_on_store_error():
        report = store.prune(retention, dry_run=dry_run, give_back_all=give_back_all)
        if vacuum:
            store.vacuum()
            report.incremental_vacuum = True if report.incremental_vacuum is not None else None
    if as_json:
        sys.stdout.write(json.dumps(report.as_dict()) + "\n")
    else:
        _print(report)
    if report.incremental_vacuum is False:
        err.print(f"[yellow]note[/yellow] {VACUUM_ADVICE}", highlight=False, soft_wrap=True)


def _print(report: PruneReport) -> None:
    from rich.table import Table

    table = Table(title=f"envcheck store prune ({'dry run' if report.dry_run else 'done'})",
                  title_justify="left")
    for name in ("table", "what", "rows"):
        table.add_column(name, justify="right" if name == "rows" else "left")
    written = report.rollups_written
    for row in (
        ("probe_result", "clean passes and skips folded and deleted", report.passes_deleted),
        ("probe_result", "failures, flaky, errors, degraded folded and deleted",
         report.others_deleted),
        ("probe_result", "past retention, kept as a transition's evidence",
         report.kept_as_evidence),
        ("result_rollup", "hour rows written", written.get("hour", 0)),
        ("result_rollup", "day rows written", written.get("day", 0)),
        ("result_rollup", "total rows written", written.get("total", 0)),
        ("result_rollup", "hour rows past --keep-hourly deleted", report.hourly_deleted),
        ("result_rollup", "day rows past --keep-daily deleted", report.daily_deleted),
        ("check_run", "runs left without results deleted", report.runs_deleted),
        ("rollout_rollup", "hour rows past --keep-hourly folded into days",
         report.rollout_hours_folded),
        ("rollout_rollup", "day rows past --keep-daily deleted", report.rollout_days_deleted),
        ("rollout_unknown", "hours past --keep-hourly deleted", report.rollout_unknown_deleted),
        ("rollout_held", "held hours past --keep-hourly deleted", report.rollout_held_deleted),
        ("rollout_producer", "producers silent past --keep-hourly deleted",
         report.rollout_producers_deleted),
    ):
        table.add_row(row[0], row[1], str(row[2]))
    if report.incremental_vacuum:
        table.add_row("(file)", "pages given back to the file system", str(report.pages_freed))
        table.add_row("(file)", "free pages kept for the next inserts",
                      str(report.pages_kept_free))
    out.print(table)
