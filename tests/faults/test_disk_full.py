"""The disk fills mid-run: no result is lost, and envcheck says what it could not record.

Real parts only: a small tmpfs mounted as the data directory holds the SQLite store, the
real engine runs the demo images, ``envcheck check`` and ``envcheck daemon`` run as
subprocesses. The disk is filled for real, by a filler file kept growing while the test
holds it full, when the first result arrives; freeing it is deleting the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envcheck.core.outages import AVAILABLE_AGAIN, UNAVAILABLE
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.store import open_store
from envcheck.store.pending import PendingWrites
from tests.conftest import DEMO, envcheck_cmd
from tests.test_daemon import HEALTHY, READONLY, TOOL_MISSING, Daemons, write_catalogue

pytestmark = pytest.mark.docker

DEMO_ENVS = 9  # in probes/demo.yaml


class DiskFiller:
    """Fills a filesystem and keeps it full (space freed by anyone is taken again) until
    released; releasing deletes the filler file."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "filler"
        self._release = threading.Event()
        self._full = threading.Event()
        self._thread: threading.Thread | None = None

    def fill(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._keep_full, daemon=True)
        self._thread.start()
        assert self._full.wait(timeout), "the disk did not fill"

    def _keep_full(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while not self._release.is_set():
                wrote = False
                for size in (1 << 20, 1 << 12, 1):
                    try:
                        while os.write(fd, b"\0" * size):
                            wrote = True
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                self._full.set()
                if not wrote:
                    self._release.wait(0.02)
        finally:
            os.close(fd)

    def release(self) -> None:
        self._release.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.path.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs (needs root): the data directory."""
    directory = tmp_path / "data"
    directory.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(directory)],
                   check=True, capture_output=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)


@pytest.fixture
def filler(small_disk: Path) -> Iterator[DiskFiller]:
    f = DiskFiller(small_disk)
    yield f
    f.release()


def _ro(db: Path) -> sqlite3.Connection:
    """Reads the store without writing anything, even a migration check."""
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)


def _stored(db: Path) -> tuple[Counter[tuple[str, str]], dict[str, str]]:
    """Results per (environment, kind) and every run's state."""
    with _ro(db) as conn:
        results = Counter(conn.execute("SELECT env_id, kind FROM probe_result").fetchall())
        runs = dict(conn.execute("SELECT id, state FROM check_run").fetchall())
    return Counter({(str(e), str(k)): n for (e, k), n in results.items()}), runs


# --- the held writes themselves ----------------------------------------------------------

def test_held_results_are_bounded_and_written_in_order(small_disk: Path,
                                                       filler: DiskFiller) -> None:
    def result(n: int) -> ProbeResult:
        return ProbeResult(env_id=f"env-{n}", kind=ProbeKind.TERMINAL, status=Status.PASS,
                           reason=Reason.OK, summary="x" * 4000, duration_s=0.1,
                           image_digest=None, spec_hash="spec",
                           started_at=datetime.now(UTC))

    with open_store(f"sqlite:///{small_disk / 'envcheck.db'}") as store:
        writes = PendingWrites(store, limit=3)
        run_id = writes.start_run("test", [])
        assert writes.record(run_id, result(0)) is not None
        filler.fill()
        late_run = writes.start_run("test", [])  # held: its id is ours already
        assert [writes.record(late_run, result(n)) for n in range(1, 6)] == [None] * 5
        writes.finish_run(late_run)
        assert (writes.held, writes.dropped) == (3, 2), "the oldest two made room"
        assert writes.holds(late_run) and not writes.holds(run_id)
        status = writes.status()
        assert status is not None and "3 results held" in status and "disk is full" in status
        assert not writes.flush_within(0.5)
        filler.release()
        assert writes.flush_within(10)
        assert (writes.held, writes.status(), writes.holds(late_run)) == (0, None, False)
        assert [r.env_id for r in store.results_for_run(late_run)] == ["env-3", "env-4",
                                                                        "env-5"]
        assert store.run(late_run).state == "finished"  # type: ignore[union-attr]


# --- envcheck check ------------------------------------------------------------------------

def _check_filling_disk(env: dict[str, str], filler: DiskFiller, *, free_after: int | None
                        ) -> tuple[int, list[dict[str, Any]], str]:
    """``envcheck check --json`` on the demo catalogue; the disk fills when the first result
    arrives, and is freed after ``free_after`` more results (never if None)."""
    lines: list[dict[str, Any]] = []
    stderr: list[str] = []
    with subprocess.Popen([*envcheck_cmd(), "check", str(DEMO), "--probe", "terminal",
                           "--json", "--concurrency", "2"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        reader = threading.Thread(target=stderr.extend, args=(proc.stderr,), daemon=True)
        reader.start()
        try:
            for line in proc.stdout:
                if not line.strip():
                    continue
                lines.append(json.loads(line))
                if len(lines) == 1:
                    filler.fill()
                elif free_after is not None and len(lines) == 1 + free_after:
                    filler.release()
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)
    return code, lines, "".join(stderr)


def test_check_with_the_disk_full_exits_3_with_one_line(cli_env: dict[str, str],
                                                        small_disk: Path,
                                                        filler: DiskFiller) -> None:
    env = {**cli_env, "ENVCHECK_DATA_DIR": str(small_disk)}
    code, lines, stderr = _check_filling_disk(env, filler, free_after=None)
    assert "Traceback" not in stderr, stderr
    assert len(lines) == DEMO_ENVS, "probing went on with the store refusing writes"
    assert code == 3, stderr
    summary = [row for row in stderr.splitlines() if "terminal" in row]  # a row per result
    assert all(any(str(ln["env"]) in row for row in summary) for ln in lines), \
        "the summary is printed anyway"
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1, stderr
    match = re.fullmatch(r"error could not record (\d+) of 9 results: the store at "
                         r"sqlite:///\S+ is not writable \(database or disk is full\)",
                         errors[0])
    assert match, errors[0]
    unrecorded = int(match.group(1))
    assert 1 <= unrecorded < DEMO_ENVS
    filler.release()
    stored, _ = _stored(small_disk / "envcheck.db")
    assert sum(stored.values()) == DEMO_ENVS - unrecorded, "the line counts what was lost"


def test_check_disk_freed_before_the_end_records_everything(cli_env: dict[str, str],
                                                           small_disk: Path,
                                                           filler: DiskFiller) -> None:
    env = {**cli_env, "ENVCHECK_DATA_DIR": str(small_disk)}
    code, lines, stderr = _check_filling_disk(env, filler, free_after=3)
    assert "Traceback" not in stderr, stderr
    assert [ln for ln in stderr.splitlines() if ln.startswith("error")] == [], stderr
    assert code == 1, stderr  # the demo has broken environments; the store recovered
    assert len(lines) == DEMO_ENVS
    stored, runs = _stored(small_disk / "envcheck.db")
    assert stored == Counter((str(ln["env"]), str(ln["probe"])) for ln in lines), \
        "every result is in the store"
    assert list(runs.values()) == ["finished"]
    with _ro(small_disk / "envcheck.db") as conn:
        assessed = {row[0] for row in conn.execute("SELECT env_id FROM env_state")}
    assert assessed == {str(ln["env"]) for ln in lines}, \
        "the run was assessed once its results were written"


# --- envcheck daemon -----------------------------------------------------------------------

@pytest.fixture
def daemons(tmp_path: Path, small_disk: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)  # its data directory "data" is the small disk
    yield d
    d.close()


def _readyz(d: Any) -> tuple[int, dict[str, Any]]:
    response = d.get("/readyz")
    return response.status_code, response.json()


@pytest.mark.slow
def test_daemon_holds_results_while_the_disk_is_full(daemons: Daemons, tmp_path: Path,
                                                     small_disk: Path,
                                                     filler: DiskFiller) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING, READONLY])
    d = daemons.start(catalogue, window=2.0)
    db = small_disk / "envcheck.db"

    def logged() -> list[dict[str, Any]]:
        return d.events("probe result")

    d.wait("the first results", lambda: len(logged()) >= 1)
    filler.fill()
    d.wait("/readyz to report the store", lambda: _readyz(d)[0] == 503, timeout=30)
    _, body = _readyz(d)
    assert body["checks"]["engine"] == "ok"
    assert re.fullmatch(r"error: \d+ results held, store not writable: database or disk is "
                        r"full \(sqlite:///\S+\)", body["checks"]["store"]), body
    d.wait("results held", lambda: sum(1 for e in logged() if e.get("held")) >= 3, timeout=30)
    d.wait("a window tick finding the store full",
           lambda: any(e["part"] == "writing results" for e in d.events(UNAVAILABLE)),
           timeout=30)
    held = [e for e in logged() if e.get("held")]
    stored, _ = _stored(db)
    assert sum(stored.values()) < len(logged()), "held results are not in the store yet"
    held_runs = {e["run"] for e in held}

    filler.release()
    d.wait("/readyz ready again", lambda: _readyz(d)[0] == 200, timeout=30)
    assert _readyz(d)[1]["checks"] == {"store": "ok", "engine": "ok"}
    d.wait("the held results written",
           lambda: any(e["part"] == "writing results" and e["written"] >= 1
                       for e in d.events(AVAILABLE_AGAIN)))

    def assessed() -> bool:
        _, runs = _stored(db)
        return all(runs.get(run) == "finished" for run in held_runs)

    d.wait("the windows of held results assessed", assessed, timeout=30)

    def parts(event: str) -> list[str]:
        return sorted(e["part"] for e in d.events(event))

    d.wait("every part that could not run to run again",
           lambda: set(parts(AVAILABLE_AGAIN)) >= set(parts(UNAVAILABLE)), timeout=30)
    assert d.stop() == 0

    log = d.log.read_text()
    assert "Traceback" not in log
    stored, runs = _stored(db)
    assert stored == Counter((e["env"], e["kind"]) for e in logged()), "no result lost"
    assert set(runs.values()) == {"finished"}, "every window assessed"
    assert {e["level"] for e in d.events() if e["level"] in ("warning", "error")} <= {"error"}
    # the full disk said once per part that could not run, and once when each ran again
    unavailable = [e for e in d.events() if e["level"] == "error"]
    assert {e["event"] for e in unavailable} == {UNAVAILABLE}, unavailable
    assert all("database or disk is full" in e["error"] for e in unavailable), unavailable
    assert len(set(parts(UNAVAILABLE))) == len(parts(UNAVAILABLE)), parts(UNAVAILABLE)
    assert parts(AVAILABLE_AGAIN) == parts(UNAVAILABLE)


def test_daemon_shutdown_with_the_disk_full_says_what_it_lost(daemons: Daemons,
                                                             tmp_path: Path,
                                                             small_disk: Path,
                                                             filler: DiskFiller) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING])
    d = daemons.start(catalogue, window=2.0)
    d.wait("the first results", lambda: len(d.events("probe result")) >= 1)
    filler.fill()
    d.wait("results held", lambda: any(e.get("held") for e in d.events("probe result")),
           timeout=30)
    assert d.stop() == 0
    [lost] = d.events("results not written at shutdown: the store refuses writes")
    assert lost["level"] == "error"
    assert lost["held"] >= 1
    assert "Traceback" not in d.log.read_text()
