"""``envcheck taint``: when environments' rewards could not be trusted, read from the store
alone (no catalogue needed), as the API and ``taint.jsonl`` give it."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

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

if TYPE_CHECKING:
    from envcheck.health.taint import TaintInterval

_TIME = "an age (30m, 24h, 7d) or an ISO date/time (UTC unless it names a zone)"


def taint(
    since: Annotated[str, typer.Option("--since", help=f"from: {_TIME}")] = "24h",
    until: Annotated[str | None, typer.Option(
        "--until", help=f"to: {_TIME} (default: now and on)")] = None,
    suite: Annotated[str | None, typer.Option("--suite", "-s", help="only this suite")] = None,
    env: Annotated[str | None, typer.Option("--env", "-e",
                                            help="only this environment")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
    jsonl: Annotated[bool, typer.Option(
        "--jsonl", help="print one JSON interval a line (as taint.jsonl holds them)")] = False,
    database: Database = None,
) -> None:
    """When environments' rewards could not be trusted: the tainted intervals that meet
    [--since, --until], whose samples a trainer drops, relabels or replays. Exit 0 (with or
    without intervals), 2 for a bad time, an unknown suite or environment, 3 when the store
    fails."""
    from envcheck.feed.taint import BadWindow, taint, taint_text, window

    try:
        start, end = window(since, until, datetime.now(UTC))
    except BadWindow as exc:
        err.print(f"[red]error[/red] --{escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None
    with open_store_or_exit(database) as store, exit_on_store_error():
        if suite is not None and store.suite(suite) is None:
            known = ", ".join(s.id for s in store.suites()) or "none yet: run envcheck check"
            err.print(f"[red]error[/red] unknown suite {suite!r} (known: {escape(known)})")
            raise typer.Exit(EXIT_USAGE)
        if env is not None and store.environment_record(env) is None:
            err.print(f"[red]error[/red] unknown environment {env!r} (never synced from a "
                      "catalogue)")
            raise typer.Exit(EXIT_USAGE)
        found = taint(store, since=start, until=end, suite=suite, env_id=env)
    if jsonl:
        sys.stdout.write(taint_text(found))
    elif as_json:
        sys.stdout.write(json.dumps({
            "since": start.isoformat() if start else None,
            "until": end.isoformat() if end else None, "count": len(found),
            "intervals": [i.to_json() for i in found]}) + "\n")
    else:
        _print_table(found, start, end)


def _print_table(found: list[TaintInterval], start: datetime | None,
                 end: datetime | None) -> None:
    from rich.table import Table

    def when(at: datetime | None, open_as: str) -> str:
        return at.strftime("%Y-%m-%d %H:%M:%S") if at is not None else open_as

    table = Table(title=f"tainted intervals: {len(found)} (from {when(start, 'the start')} "
                        f"to {when(end, 'now')})", title_justify="left")
    for column in ("environment", "suite", "start", "end", "basis", "kind", "digest"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", overflow="fold")
    for i in found:
        digest = (i.image_digest or "")[:19]
        table.add_row(i.env_id, i.suite, when(i.start, ""), when(i.end, "open"),
                      str(i.basis), i.kind or "(person)", digest,
                      escape(i.reason + (f" (results {', '.join(map(str, i.evidence[:5]))}"
                                         f"{', ...' if len(i.evidence) > 5 else ''})"
                                         if i.evidence else "")))
    out.print(table)
