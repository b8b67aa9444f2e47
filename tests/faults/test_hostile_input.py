"""Hostile input: every bad catalogue, path or setting gets one clear line and exit 2, never a
traceback, and the daemon checks its whole configuration before it starts anything.

Each input is a real file (or directory entry) made here; the CLI runs as a real subprocess.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envcheck.catalogue.fields import MIN_SCHEDULE_ENV, MIN_SCHEDULE_S
from envcheck.catalogue.sourcelimits import (
    MAX_BYTES,
    MAX_BYTES_ENV,
    MAX_DEPTH,
    MAX_DEPTH_ENV,
    MAX_NODES_ENV,
)
from tests.conftest import envcheck_cmd
from tests.test_daemon import Daemons

VALID = """\
version: 1
suites:
  s:
    defaults: {workdir: /workspace, user: agent, shell: /bin/bash%(extra)s}
    environments:
      - {id: e1, image: 'envcheck-demo/healthy:latest'}
data_sources:
  - {id: src, url: 'http://127.0.0.1:9/x'}
"""
NO_SCHEDULES = ", schedules: {terminal: null, dependencies: null, tests: null, datasource: null}"
REFUSED = "catalogue refused, the old one keeps running"


def catalogue(path: Path, extra: str = "") -> Path:
    path.write_text(VALID % {"extra": extra}, encoding="utf-8")
    return path


def tools(n: int) -> str:
    return ", tools: [" + ", ".join(f"tool{i}" for i in range(n)) + "]"


def nested(path: Path, depth: int = 500) -> Path:
    path.write_text("version: 1\nsuites:\n  s:\n    description: " + "[" * depth + "]" * depth
                    + "\n", encoding="utf-8")
    return path


def run(args: list[str | Path], env: dict[str, str],
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def refused(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, and every needle in stderr; returns stderr."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)
    return proc.stderr


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    hermetic = {k: v for k, v in cli_env.items() if not k.startswith("ENVCHECK_")
                or k in ("ENVCHECK_DATA_DIR", "ENVCHECK_CONTAINER_TAG")}
    return {**hermetic, "NO_COLOR": "1", "TERM": "dumb"}


# --- limits up front ----------------------------------------------------------------------


def test_a_catalogue_nested_500_levels_is_refused_with_the_depth_limit(
        tmp_path: Path, env: dict[str, str]) -> None:
    err = refused(run(["validate", nested(tmp_path / "deep.yaml")], env),
                  f"deep.yaml:4: nested deeper than {MAX_DEPTH} levels", MAX_DEPTH_ENV)
    assert "RecursionError" not in err


def test_a_sparse_50mb_catalogue_is_refused_by_its_size_before_it_is_read(
        tmp_path: Path, env: dict[str, str]) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse: 50 MiB of NUL, no disk used
    # Read, it would be refused for its first NUL character; refused by size, it was not read.
    err = refused(run(["validate", big], env),
                  f"big.yaml: the file is 50 MiB, more than {MAX_BYTES // (1 << 20)} MiB "
                  f"(the limit; raise it with {MAX_BYTES_ENV}")
    assert "U+0000" not in err


def test_the_size_limit_is_configurable_and_names_its_knob(tmp_path: Path,
                                                           env: dict[str, str]) -> None:
    path = catalogue(tmp_path / "fleet.yaml", extra=tools(300))
    assert path.stat().st_size > 2048
    refused(run(["validate", path], {**env, MAX_BYTES_ENV: "2KiB"}),
            "fleet.yaml: the file is", "more than 2 KiB", f"{MAX_BYTES_ENV}=")
    ok = run(["validate", path], {**env, MAX_BYTES_ENV: "1MiB"})
    assert ok.returncode == 0, ok.stderr
    refused(run(["validate", path], {**env, MAX_BYTES_ENV: "lots"}),
            f"{MAX_BYTES_ENV}='lots' is not a valid limit")


def test_more_nodes_than_the_limit_without_aliases_is_not_called_an_alias_bomb(
        tmp_path: Path, env: dict[str, str]) -> None:
    # A valid catalogue: 2,000 tools, no anchor or alias anywhere.
    path = catalogue(tmp_path / "many.yaml", extra=tools(2000))
    assert "&" not in path.read_text(encoding="utf-8")
    err = refused(run(["validate", path], {**env, MAX_NODES_ENV: "1000"}),
                  "the document has more than 1000 nodes (the limit; raise it with "
                  f"{MAX_NODES_ENV}=")
    assert "alias" not in err


# --- entries that are not regular files ---------------------------------------------------


def _symlink_loop(path: Path) -> None:
    path.symlink_to(path.name)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _device(path: Path) -> None:
    path.symlink_to("/dev/null")


def _directory(path: Path) -> None:
    path.mkdir()
    catalogue(path / "inner.yaml")


@pytest.mark.parametrize(("name", "make", "what"), [
    ("x.yaml", _symlink_loop, "a symlink loop"),
    ("f.yaml", _fifo, "a named pipe (FIFO)"),
    ("d.yaml", _device, "a device"),
    ("dir.yaml", _directory, "a directory"),
])
def test_a_yaml_entry_that_is_not_a_regular_file_is_reported(
        tmp_path: Path, env: dict[str, str], name: str, make: Callable[[Path], None],
        what: str) -> None:
    folder = tmp_path / "probes"
    folder.mkdir()
    catalogue(folder / "fleet.yaml")
    make(folder / name)
    # A FIFO is never opened: reading one would block until a writer came (timeout: fail).
    refused(run(["validate", folder], env, timeout=60), f"{folder / name}: {what}")
    if name != "dir.yaml":  # named on the command line: the same words (a dir is expanded)
        refused(run(["validate", folder / name], env, timeout=60), f"{folder / name}: {what}")


# --- settings -------------------------------------------------------------------------------


def test_a_schedule_below_the_floor_is_refused_with_the_floor_and_its_knob(
        tmp_path: Path, env: dict[str, str]) -> None:
    path = catalogue(tmp_path / "busy.yaml", extra=", schedules: {terminal: 1ms}")
    refused(run(["validate", path], env),
            "busy.yaml:4: suites.s.defaults.schedules.terminal: 0.001 s is more often than "
            f"the schedule floor of {MIN_SCHEDULE_S:g} s", f"{MIN_SCHEDULE_ENV}=")
    fast = catalogue(tmp_path / "fast.yaml", extra=", schedules: {terminal: 2s}")
    assert run(["validate", fast], {**env, MIN_SCHEDULE_ENV: "1s"}).returncode == 0


@pytest.mark.parametrize("command", ["check", "daemon", "gate", "quarantine", "accept-schema"])
def test_a_data_dir_that_cannot_be_created_is_one_line_and_exit_2(
        tmp_path: Path, env: dict[str, str], command: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n", encoding="utf-8")
    data = blocker / "data"
    path = catalogue(tmp_path / "fleet.yaml")
    args: dict[str, list[str | Path]] = {
        "check": ["check", path], "daemon": ["daemon", path, "--port", "9"],
        "gate": ["gate", "--suite", "s"], "quarantine": ["quarantine", "list"],
        "accept-schema": ["accept-schema", path, "src"]}
    proc = run(args[command], {**env, "ENVCHECK_DATA_DIR": str(data)})
    err = refused(proc, f"cannot create the data directory {data}: Not a directory",
                  "ENVCHECK_DATA_DIR")
    assert len(lines(err)) == 1, err


@contextlib.contextmanager
def engine_trap() -> Iterator[tuple[str, socket.socket]]:
    """A Unix socket posing as the Docker engine: it listens and never answers, so a client
    that connects is seen in the backlog (and would hang)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = os.path.join(d, "engine.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(16)
        sock.setblocking(False)
        try:
            yield f"unix://{path}", sock
        finally:
            sock.close()


def test_the_daemon_refuses_a_short_api_token_before_it_starts_anything(
        tmp_path: Path, env: dict[str, str]) -> None:
    path = catalogue(tmp_path / "fleet.yaml")
    data = tmp_path / "daemon-data"
    with engine_trap() as (docker_host, trap):
        proc = run(["daemon", path, "--port", "9"],
                   {**env, "ENVCHECK_DATA_DIR": str(data), "DOCKER_HOST": docker_host,
                    "ENVCHECK_API_TOKEN": "short", "ENVCHECK_LOG_LEVEL": "info"}, timeout=60)
        with pytest.raises(BlockingIOError):  # nobody knocked at the engine's door
            trap.accept()
    err = refused(proc, "the API token must have at least 16 characters")
    assert len(lines(err)) == 1, err
    assert "short" not in err  # the token itself is never shown
    for started in ("daemon starting", "scheduler", "Uvicorn"):
        assert started not in err
    assert not data.exists()  # the store was not opened either


@pytest.mark.docker
@pytest.mark.slow
def test_a_reload_of_a_500_level_catalogue_is_refused_and_the_daemon_runs_on(
        tmp_path: Path) -> None:
    path = catalogue(tmp_path / "fleet.yaml", extra=NO_SCHEDULES)
    daemons = Daemons(tmp_path)
    try:
        d = daemons.start(path)
        nested(path)
        d.proc.send_signal(signal.SIGHUP)
        d.wait("the refusal", lambda: len(d.events(REFUSED)) == 1)
        [event] = d.events(REFUSED)
        assert event["level"] == "error"
        assert any(f"fleet.yaml:4: nested deeper than {MAX_DEPTH} levels" in issue
                   for issue in event["issues"]), event
        assert d.get("/healthz").status_code == 200
        assert d.get("/readyz").status_code == 200
        assert d.stop() == 0
        assert "Traceback" not in d.log.read_text(encoding="utf-8", errors="replace")
    finally:
        daemons.close()
