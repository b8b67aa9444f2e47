"""``envcheck dashboard``: serve the Streamlit dashboard on 127.0.0.1.

The app lives in the repository's ``dashboards/`` folder (next to ``probes/`` and ``images/``)
and ships in the wheel as the package ``envcheck.dashboards`` (the editable install maps it
to the folder): its ``app.py`` is found through the import system, so the command works from
an installed wheel as from a checkout; ``--app`` / ``$ENVCHECK_DASHBOARD_APP`` name another.
Streamlit runs in a child process (``python -m streamlit run``), headless, without usage
statistics, bound to 127.0.0.1 only; this command never imports streamlit itself. It runs the
package's ``serve.py``, which serves the chosen app (named in ``$ENVCHECK_DASHBOARD_SCRIPT``)
with every page carrying the recovery script of :mod:`envcheck.dashboard.page_recovery`. The
store URL and the API URL travel to it in its environment, not on its command line, where
``ps`` would show a password.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from envcheck.cli.common import (
    EXIT_INFRA,
    EXIT_USAGE,
    Database,
    err,
    open_store_or_exit,
    out,
    store_url_or_exit,
)
from envcheck.store.urls import URL_ENV

__all__ = ["APP_ENV", "dashboard", "dashboard_app", "dashboard_server", "streamlit_command"]

APP_ENV = "ENVCHECK_DASHBOARD_APP"
APP_PACKAGE = "envcheck.dashboards"  # the top-level dashboards/ folder, as installed
SCRIPT_ENV = "ENVCHECK_DASHBOARD_SCRIPT"  # read by envcheck.dashboards.serve
API_URL_ENV = "ENVCHECK_API_URL"  # read by envcheck.dashboard.quarantine
DEFAULT_PORT = 8501
HOST = "127.0.0.1"


def dashboard_app(explicit: Path | None = None) -> Path | None:
    """The app's entry script: ``explicit``, ``$ENVCHECK_DASHBOARD_APP``, or ``app.py`` of the
    installed package ``envcheck.dashboards``; None if there is none."""
    chosen = explicit or (Path(os.environ[APP_ENV]) if os.environ.get(APP_ENV) else None)
    if chosen is not None:
        return chosen.resolve() if chosen.is_file() else None
    return _packaged("app.py")


def dashboard_server() -> Path | None:
    """``serve.py`` of the installed package ``envcheck.dashboards``: the ASGI app that serves
    the chosen app script with the page-recovery script; None if there is none."""
    return _packaged("serve.py")


def _packaged(name: str) -> Path | None:
    spec = importlib.util.find_spec(APP_PACKAGE)  # finds it without importing streamlit
    if spec is None or spec.origin is None:
        return None
    candidate = Path(spec.origin).resolve().parent / name
    return candidate if candidate.is_file() else None


def streamlit_command(app: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(app),
            "--server.address", HOST, "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer",
            "--global.developmentMode", "false"]


def dashboard(
    port: Annotated[int, typer.Option(min=1, max=65535, help="port on 127.0.0.1")
                    ] = DEFAULT_PORT,
    database: Database = None,
    api_url: Annotated[str | None, typer.Option(
        "--api-url", envvar=API_URL_ENV, help="envcheck's HTTP API (the daemon's port), for "
        "quarantine changes with ENVCHECK_API_TOKEN[_FILE]; without it the dashboard is "
        "read-only")] = None,
    app_path: Annotated[Path | None, typer.Option(
        "--app", help=f"the app's entry script (default: ${APP_ENV}, else the installed "
        f"{APP_PACKAGE}/app.py)")] = None,
) -> None:
    """Serve the dashboard (fleet, environments, quarantine, data sources) on 127.0.0.1."""
    from envcheck.store.database import redact

    if importlib.util.find_spec("streamlit") is None:
        err.print("[red]error[/red] streamlit is not installed: pip install -e '.[dashboard]'")
        raise typer.Exit(EXIT_USAGE)
    app = dashboard_app(app_path)
    server = dashboard_server()
    if app is None or server is None:
        err.print(f"[red]error[/red] the dashboard app is not found: {APP_PACKAGE} is not "
                  "installed (pip install 'envcheck[dashboard]', or pip install -e "
                  f"'.[dashboard]' in a checkout); or pass --app (or ${APP_ENV})")
        raise typer.Exit(EXIT_USAGE)
    url = store_url_or_exit(database)
    open_store_or_exit(url).close()  # a wrong URL fails here, not in the browser
    env = dict(os.environ)
    env[URL_ENV] = url
    env[SCRIPT_ENV] = str(app)
    if api_url:
        env[API_URL_ENV] = api_url
    out.print(f"envcheck dashboard on http://{HOST}:{port} (store {escape(redact(url))}; "
              f"{'changes through ' + escape(api_url) if api_url else 'read-only'})",
              highlight=False, soft_wrap=True)
    child = subprocess.Popen(streamlit_command(server, port), env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        code = child.wait()
    except KeyboardInterrupt:  # Ctrl-C reached both; let streamlit finish its shutdown
        try:
            code = child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code not in (0, -signal.SIGTERM, -signal.SIGINT, 130):
        err.print(f"[red]error[/red] streamlit exited with status {code}")
        raise typer.Exit(EXIT_INFRA)
