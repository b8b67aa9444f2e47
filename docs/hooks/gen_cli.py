"""The command line's reference: every command of the typer app, its arguments and options
with their help, environment variables and defaults, as ``--help`` has them."""

from __future__ import annotations

import enum
import typing
from collections.abc import Iterator
from typing import Any

from docs.hooks.tables import cell, code, prose, table

__all__ = ["cli_reference", "commands"]


def _click() -> Any:
    """typer's own click (typer 0.29 vendors one; older typers use click itself)."""
    try:
        from typer import _click as vendored

        return vendored
    except ImportError:  # pragma: no cover - typer before it vendored click
        import click

        return click


def commands() -> Iterator[tuple[list[str], Any, Any]]:
    """``(path, command, context)`` for the app and every command under it, in help order."""
    import typer

    from envcheck.cli.app import app

    click = _click()
    root = typer.main.get_command(app)

    def walk(command: Any, path: list[str], parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
        ctx = click.Context(command, info_name=path[-1], parent=parent)
        yield path, command, ctx
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                yield from walk(command.get_command(ctx, name), [*path, name], ctx)

    yield from walk(root, ["envcheck"], None)


def _choices(param: Any) -> list[str]:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return [str(value) for value in typing.get_args(annotation)]
    return []


def _value(param: Any) -> str:
    """What an option takes, or an argument is called: its metavar, its choices, its name."""
    choices = _choices(param)
    name = param.metavar or ("|".join(choices) if choices else param.name.upper())
    if param.param_type_name == "argument" and param.nargs == -1:
        name += "..."
    return str(name)


def _option(param: Any) -> str:
    names = ", ".join(sorted(param.opts, key=len, reverse=True))
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    return names if getattr(param, "is_flag", False) else f"{names} {_value(param)}"


def _param_row(param: Any, ctx: Any) -> list[str] | None:
    if getattr(param, "hidden", False):
        return None
    if param.param_type_name == "argument":
        help_text = getattr(param, "help", None) or ""
        if param.required:
            help_text += " (required)"
        return [code(_value(param)), cell(help_text)]
    record = param.get_help_record(ctx)
    if record is None:
        return None
    repeat = " (repeatable)" if param.multiple else ""
    return [code(_option(param)), cell(record[1] + repeat)]


def _usage(path: list[str], command: Any) -> str:
    words = list(path)
    if any(p.param_type_name == "option" for p in command.params):
        words.append("[OPTIONS]")
    for param in command.params:
        if param.param_type_name == "argument":
            value = _value(param)
            optional = not param.required and not value.startswith("[")
            words.append(f"[{value}]" if optional else value)
    if hasattr(command, "list_commands"):
        words.append("COMMAND [ARGS]...")
    return " ".join(words)


def _help(command: Any) -> str:
    return str(command.help or "").replace("\b\n", "").strip()


def cli_reference() -> str:
    """The whole reference page's generated part, in Markdown."""
    out: list[str] = []
    for path, command, ctx in commands():
        if len(path) > 1:
            depth = "#" * min(len(path), 4)
            out.append(f"{depth} `{' '.join(path)}`\n")
        out.append(prose(_help(command)) + "\n")
        out.append("```text\n" + _usage(path, command) + "\n```\n")
        rows = [row for p in command.params if (row := _param_row(p, ctx)) is not None]
        if rows:
            out.append(table(["argument or option", "what it does"], rows))
        if hasattr(command, "list_commands"):
            out.append("Commands: " + ", ".join(
                f"[`{name}`](#{'-'.join([*path, name])})"
                for name in command.list_commands(ctx)) + ".\n")
    return "\n".join(out)
