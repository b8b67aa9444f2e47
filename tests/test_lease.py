"""The store's lease in one process, on real stores: the SQLite lock file (flock is per open
file, so two leases of one process exclude each other as two processes do), the fence, the
standby's wait, and which runs a new holder marks interrupted. The daemons themselves, on
both backends, are in ``tests/faults/test_two_daemons.py``."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envcheck.core.errors import LeaseHeld, StoreError
from envcheck.store import Store, open_store
from envcheck.store.holder import Holder
from envcheck.store.lease import FENCED, StoreLease
from envcheck.store.pglease import application_name, holder_of
from envcheck.store.store import new_run
from envcheck.store.tables.runs import CheckRun
from tests.polling import wait_for


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'envcheck.db'}"


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    with open_store(sqlite_url) as opened:
        yield opened


def taken(url: str) -> StoreLease:
    lease = StoreLease.of(url)
    assert lease.take(standby=False, stop=threading.Event()) == 0.0
    return lease


def test_a_held_lease_is_refused_naming_its_holder_and_free_once_released(
        sqlite_url: str, tmp_path: Path) -> None:
    first = taken(sqlite_url)
    with pytest.raises(LeaseHeld) as refused:
        StoreLease.of(sqlite_url).take(standby=False, stop=threading.Event())
    me = Holder.me()
    assert f"host {me.host}, pid {me.pid}, since " in str(refused.value)
    assert str(tmp_path / "envcheck.db.lock") in str(refused.value)
    first.release()
    second = taken(sqlite_url)
    assert second.previous is not None and second.previous.pid == me.pid  # the file said
    second.release()


def test_a_standby_waits_until_the_holder_goes_or_it_is_stopped(sqlite_url: str) -> None:
    holder = taken(sqlite_url)
    stop, got = threading.Event(), []
    waiting = threading.Thread(target=lambda: got.append(StoreLease.of(sqlite_url).take(
        standby=True, stop=stop, poll_s=0.05)))
    waiting.start()
    stop.set()
    waiting.join(timeout=30)
    assert got == [None], "a stopped wait takes nothing"

    standby = StoreLease.of(sqlite_url)
    waiting = threading.Thread(target=lambda: got.append(standby.take(
        standby=True, stop=threading.Event(), poll_s=0.05)))
    waiting.start()
    holder.release()
    waiting.join(timeout=30)
    assert got[1] is not None and got[1] >= 0.0
    with pytest.raises(LeaseHeld):
        StoreLease.of(sqlite_url).take(standby=False, stop=threading.Event())
    standby.release()


def test_a_lost_lease_fences_writes_and_names_who_took_it(
        sqlite_url: str, store: Store, tmp_path: Path) -> None:
    lease = taken(sqlite_url)
    lease.guard(store.engine)
    run_id = store.start_run("daemon", [])
    (tmp_path / "envcheck.db.lock").unlink()  # a new file, which another daemon locks
    other = taken(sqlite_url)
    stop, told = threading.Event(), []
    lease.watch(stop, told.append, interval_s=0.05)
    wait_for(lambda: told, timeout_s=30, what="the watch to find the lease taken")
    assert told[0] is not None and told[0].pid == Holder.me().pid
    assert lease.fenced
    with pytest.raises(StoreError, match=FENCED):
        store.start_run("daemon", [])
    with pytest.raises(StoreError, match=FENCED):
        store.finish_run(run_id)
    assert store.run(run_id) is not None and store.generation() == 0, "reads go on"
    stop.set()
    other.release()
    lease.release()


def test_a_lost_lease_nobody_took_is_taken_back_and_writes_resume(
        sqlite_url: str, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
        ) -> None:
    lease = taken(sqlite_url)
    lease.guard(store.engine)
    stop = threading.Event()
    with caplog.at_level(logging.INFO, logger="envcheck.store.lease"):
        (tmp_path / "envcheck.db.lock").unlink()
        lease.watch(stop, lambda holder: pytest.fail(f"taken by {holder}"), interval_s=0.05)
        wait_for(lambda: "store lease taken back: writes resume" in caplog.messages,
                 timeout_s=30, what="the lease taken back")
    stop.set()
    assert caplog.messages.index("store lease lost: writes stop until it is taken back") < \
        caplog.messages.index("store lease taken back: writes resume")
    assert not lease.fenced
    store.start_run("daemon", [])
    with pytest.raises(LeaseHeld):  # the new file is locked again, by the lease
        StoreLease.of(sqlite_url).take(standby=False, stop=threading.Event())
    lease.release()


def test_an_in_memory_store_needs_no_lease() -> None:
    for url in ("sqlite://", "sqlite:///:memory:"):
        taken(url).release()
        taken(url).release()


def test_the_new_holder_interrupts_every_other_daemon_run_and_only_those(
        store_url: str) -> None:
    here = socket.gethostname()
    with open_store(store_url) as store:

        def run(trigger: str, host: str, pid: int) -> str:
            return store.add_run(CheckRun(id=new_run(trigger, []).id, trigger=trigger,
                                          host=host, pid=pid))

        mine = store.start_run("daemon", [])
        elsewhere = run("daemon", "another-host", 4242)
        here_alive = run("daemon", here, 1)  # pid 1 lives: a daemon's run nonetheless
        cli_elsewhere = run("cli", "another-host", 4242)
        cli_alive = run("cli", here, 1)
        assert store.interrupt_stale_runs() == []  # without the lease: this host's dead
        assert sorted(store.interrupt_stale_runs(daemon_runs=True)) == sorted(
            [elsewhere, here_alive])
        states = {r.id: r.state for r in store.runs(limit=10)}
    assert states[mine] == states[cli_elsewhere] == states[cli_alive] == "running"


def test_a_postgresql_holder_is_read_back_from_its_session_name() -> None:
    holder = Holder("h" * 80, 123456, datetime(2026, 12, 4, 3, 4, 5, tzinfo=UTC))
    name = application_name(holder)
    assert len(name) == 63  # PostgreSQL's limit: the host name is cut, nothing else
    read = holder_of(name, "10.0.0.7", 99, datetime.now(UTC))
    assert (read.pid, read.since) == (holder.pid, holder.since)
    assert holder.host.startswith(read.host)
    other = holder_of("psql", "10.0.0.7", 99, holder.since)
    assert (other.pid, "10.0.0.7" in other.host, "'psql'" in other.host) == (99, True, True)
