"""``envcheck gate`` and ``envcheck quarantine``: the feed at the command line.

Both read the store alone (no catalogue needed), so a launch script can gate on the same
answer the API and the exported files give.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Database,
    err,
    exit_on_store_error,
    open_feed_or_exit,
    open_store_or_exit,
    out,
)

if TYPE_CHECKING:
    from rich.table import Table

    from envcheck.store import Store

quarantine_app = typer.Typer(help="List, add, release and audit quarantined environments.",
                             no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="print JSON")]


def gate(
    suite: Annotated[str, typer.Option("--suite", "-s", help="suite to gate on")],
    env: Annotated[list[str] | None, typer.Option("--env", "-e",
                                                  help="environment that must be allowed")] = None,
    min_healthy: Annotated[float, typer.Option(min=0.0, max=1.0,
                                               help="minimum allowed fraction")] = 0.0,
    as_json: AsJson = False,
    fmt: Annotated[str, typer.Option("--format", help="text | json")] = "text",
    database: Database = None,
) -> None:
    """Print the suite's allowlist; exit 1 if a named environment is excluded or too few are
    allowed. Made for launch scripts: ``envcheck gate --suite S || exit 1``."""
    from envcheck.feed.allowlist import UnknownSuite, allowlist

    if fmt not in ("text", "json"):
        err.print(f"[red]error[/red] --format must be text or json, not {fmt!r}")
        raise typer.Exit(EXIT_USAGE)
    with open_feed_or_exit(database) as source, exit_on_store_error():
        try:
            listing = allowlist(source, suite)
        except UnknownSuite:
            known = ", ".join(s.id for s in source.suites()) or "none yet: run envcheck check"
            err.print(f"[red]error[/red] unknown suite {suite!r} (known: {known})")
            raise typer.Exit(EXIT_USAGE) from None
    members = {*listing.allowed, *listing.excluded}  # the allowlist lists every member
    unknown = [e for e in env or [] if e not in members]
    if unknown:
        err.print(f"[red]error[/red] not in suite {suite!r}: {', '.join(unknown)}")
        raise typer.Exit(EXIT_USAGE)
    problems = [f"{e} is excluded: {listing.excluded[e]}" for e in env or []
                if e in listing.excluded]
    if not listing.allowed:
        problems.append(f"no environment of {suite} is allowed")
    elif listing.healthy_fraction < min_healthy:
        problems.append(f"only {listing.healthy_fraction:.0%} of {suite} is allowed "
                        f"(minimum {min_healthy:.0%})")
    if as_json or fmt == "json":
        sys.stdout.write(json.dumps({
            "suite": suite, "generation": listing.generation, "allowed": listing.allowed,
            "excluded": listing.excluded, "healthy_fraction": round(listing.healthy_fraction, 4),
            "min_healthy": min_healthy, "ok": not problems, "problems": problems}) + "\n")
    else:
        sys.stdout.write("".join(f"{env_id}\n" for env_id in listing.allowed))
        # Plain lines, one write: Rich's markup and wrapping cost ~0.2 s at 1,000 exclusions,
        # and a launch script's log is better off with one unbroken line per environment.
        sys.stderr.write("".join(f"excluded {env_id}: {why}\n"
                                 for env_id, why in listing.excluded.items()))
        sys.stderr.flush()
        for problem in problems:
            err.print(f"[red]gate failed[/red] {escape(problem)}", highlight=False)
    raise typer.Exit(EXIT_FAILED if problems else EXIT_OK)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    """A table of ``columns`` kept whole and a last ``reason`` column folded to fit."""
    from rich.table import Table  # here, not at the top: gate draws no table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, no_wrap=True)
    table.add_column("reason", overflow="fold")
    return table


@quarantine_app.command("list")
def list_(suite: Annotated[str | None, typer.Option("--suite", "-s")] = None,
          as_json: AsJson = False, database: Database = None) -> None:
    """Quarantined environments, with why and since when."""
    with open_store_or_exit(database) as store:
        rows = store.quarantined(suite)
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in rows]) + "\n")
        return
    table = _table(f"quarantined: {len(rows)}",
                   ("environment", "suite", "state", "source", "since", "actor"))
    for r in rows:
        since = r.since.strftime("%Y-%m-%d %H:%M") if r.since else ""
        table.add_row(r.env_id, r.suite, r.state, r.source, since, r.actor, escape(r.reason))
    out.print(table)


def _change(store: Store, env_id: str, *, add: bool, actor: str | None, reason: str) -> None:
    from envcheck.feed.assess import set_quarantine_by_id
    from envcheck.feed.exports import write_exports

    actor = actor or getpass.getuser()
    try:
        row = set_quarantine_by_id(store, env_id, add=add, actor=actor, reason=reason)
    except LookupError:
        err.print(f"[red]error[/red] unknown environment {env_id!r} (never checked)")
        raise typer.Exit(EXIT_USAGE) from None
    except ValueError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None
    if row is None:
        out.print(f"{env_id}: nothing to change")
        return
    write_exports(store, taint_of=[env_id])
    verb = "quarantined" if add else "released"
    out.print(f"{env_id} {verb} by {actor} (generation {row.id})")


EnvId = Annotated[str, typer.Argument(metavar="ENV")]
Reason = Annotated[str, typer.Option("--reason", "-r", help="why (required)")]
Actor = Annotated[str | None, typer.Option(help="who (default: your user)")]


def _change_command(*, add: bool, doc: str) -> Callable[..., None]:
    """``quarantine add`` and ``quarantine release``: one command, told which way to go."""

    def command(env_id: EnvId, reason: Reason, actor: Actor = None,
                database: Database = None) -> None:
        with open_store_or_exit(database) as store:
            _change(store, env_id, add=add, actor=actor, reason=reason)

    command.__doc__ = doc
    return command


quarantine_app.command("add")(_change_command(
    add=True, doc="Quarantine an environment by hand; only a person releases it."))
quarantine_app.command("release")(_change_command(
    add=False, doc="Release an environment from quarantine."))


@quarantine_app.command()
def history(env_id: Annotated[str | None, typer.Argument(metavar="[ENV]")] = None,
            limit: Annotated[int, typer.Option(min=1, max=10000)] = 50,
            as_json: AsJson = False, database: Database = None) -> None:
    """Every transition (state and quarantine changes), newest first."""
    with open_store_or_exit(database) as store, exit_on_store_error():
        rows = store.transitions(env_id, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([{
            "generation": r.id, "env_id": r.env_id, "at": r.at.isoformat(),
            "old_state": r.old_state, "new_state": r.new_state,
            "was_quarantined": r.was_quarantined, "quarantined": r.quarantined,
            "actor": r.actor, "reason": r.reason, "evidence": r.evidence,
            "image_digest": r.image_digest} for r in rows]) + "\n")
        return
    table = _table("transitions", ("gen", "at", "environment", "state", "quarantine", "actor"))
    for r in rows:
        q = ("-> in" if r.quarantined else "-> out") if r.quarantined != r.was_quarantined \
            else ("in" if r.quarantined else "")
        table.add_row(str(r.id), r.at.strftime("%Y-%m-%d %H:%M:%S"), r.env_id,
                      f"{r.old_state} -> {r.new_state}", q, r.actor, escape(r.reason))
    out.print(table)
