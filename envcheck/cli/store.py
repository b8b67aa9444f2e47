"""``envcheck store``: the store's own upkeep (copying it to another backend)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_FAILED,
    Database,
    err,
    exit_on_store_error,
    open_store_or_exit,
    out,
)

store_app = typer.Typer(help="Look after the result store: copy it to PostgreSQL.",
                        no_args_is_help=True)


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
