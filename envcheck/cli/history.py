"""``envcheck incidents`` and ``envcheck retired``: what happened to the fleet, read from the
store alone (no catalogue needed)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_USAGE,
    Database,
    err,
    exit_on_store_error,
    open_store_or_exit,
    out,
)

AsJson = Annotated[bool, typer.Option("--json", help="print JSON")]


def incidents(
    since: Annotated[str | None, typer.Option(
        "--since", help="only incidents since: an age (24h, 7d) or an ISO date/time")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="at most this many")] = 50,
    as_json: AsJson = False, database: Database = None,
) -> None:
    """Infrastructure incidents, newest first: what failed, in which cycle, what was held back
    (a cycle judged an incident moves no state). Exit 0, or 2 for a bad --since."""
    from envcheck.core.clock import since as parse_since

    start = None
    if since is not None:
        try:
            start = parse_since(since, datetime.now(UTC))
        except ValueError as exc:
            err.print(f"[red]error[/red] --since: {escape(str(exc))}", highlight=False)
            raise typer.Exit(EXIT_USAGE) from None
    with open_store_or_exit(database) as store, exit_on_store_error():
        rows = store.incidents(limit, since=start)
        runs = {r.run_id: store.run(r.run_id) for r in rows}
    if as_json:
        sys.stdout.write(json.dumps([{
            "id": r.id, "at": r.at.isoformat(), "run_id": r.run_id,
            "trigger": getattr(runs[r.run_id], "trigger", None),
            "kind": r.kind, "failing": r.failing, "total": r.total, "detail": r.detail,
            "held_back": r.held_back, "held_back_failures": r.held_back_failures}
            for r in rows]) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"incidents: {len(rows)}", title_justify="left")
    for column in ("at", "cycle", "kind", "failed", "held back"):
        table.add_column(column, no_wrap=True)
    table.add_column("what failed", overflow="fold")
    for r in rows:
        named = ", ".join(f"{f['env_id']} {f['kind']} {f['status']}/{f['reason']}"
                          for f in r.held_back_failures[:5])
        more = len(r.held_back_failures) - 5
        named += f" (+{more} more)" if more > 0 else ""
        table.add_row(r.at.strftime("%Y-%m-%d %H:%M:%S"), r.run_id, r.kind,
                      f"{r.failing}/{r.total}", f"{r.held_back} result(s)",
                      escape(r.detail + (f"; {named}" if named else "")))
    out.print(table)


def retired(as_json: AsJson = False, database: Database = None) -> None:
    """Environments that left the daemon's catalogue, most recent first: out of allowlists,
    counts and metrics, their history kept; they come back with it if they return."""
    with open_store_or_exit(database) as store, exit_on_store_error():
        rows = store.retired()
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in rows]) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"retired: {len(rows)}", title_justify="left")
    for column in ("environment", "suite", "retired", "state then", "quarantined"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        table.add_row(r.env_id, r.suite, r.retired_at.strftime("%Y-%m-%d %H:%M"), r.state,
                      "yes" if r.quarantined else "")
    out.print(table)
