"""What every command shares: consoles, exit codes, loading a catalogue or exiting 2."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from envcheck.catalogue import Catalogue, load_catalogue
from envcheck.errors import CatalogueError, StoreError

if TYPE_CHECKING:
    from envcheck.store import Store

__all__ = ["EXIT_FAILED", "EXIT_INFRA", "EXIT_OK", "EXIT_USAGE", "err", "load_or_exit",
           "open_store_or_exit", "out"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

err = Console(stderr=True)
out = Console()


def load_or_exit(paths: Sequence[Path]) -> Catalogue:
    try:
        return load_catalogue(paths)
    except CatalogueError as exc:
        for issue in exc.issues:
            err.print(f"[red]error[/red] {escape(str(issue))}", highlight=False, soft_wrap=True)
        err.print(f"{len(exc.issues)} problem(s) in the catalogue")
        raise typer.Exit(EXIT_USAGE) from None


def open_store_or_exit(url: str | None) -> Store:
    from envcheck.store import open_store

    try:
        return open_store(url)
    except StoreError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_INFRA) from None
