"""Hostile commands are contained by the real engine: hangs, floods, fork bombs, memory hogs."""

from __future__ import annotations

import dataclasses
import glob
import io
import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import docker
import pytest

from envcheck.catalogue.models import Limits
from envcheck.core.errors import EngineUnreachable, ImageMissing
from envcheck.sandbox.base import (
    ENGINE_DEFAULT_CAPABILITIES,
    CappedOutput,
    SandboxSpec,
    Section,
)
from envcheck.sandbox.container import DockerSandbox
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_ENV, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN
from envcheck.sandbox.reaping import leftover
from envcheck.sandbox.streams import Sections, hijacked_stream

pytestmark = pytest.mark.docker

IMAGE = "envcheck-demo/healthy:latest"


@pytest.fixture
def sandbox(runtime: DockerRuntime) -> Iterator[DockerSandbox]:
    spec = SandboxSpec("test-env", IMAGE, "test-run", Limits(memory_mb=256, pids=64))
    with runtime.sandbox(spec) as sb:
        yield sb


def test_container_is_hardened_and_labelled(sandbox: DockerSandbox) -> None:
    client = docker.from_env(timeout=10)
    try:
        attrs = client.api.inspect_container(sandbox.container_id)
    finally:
        client.close()
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["PidsLimit"] == 64
    assert host["Memory"] == 256 * 1024 * 1024
    assert host["MemorySwap"] == host["Memory"], "no swap beyond the memory limit"
    assert host["NanoCpus"] == 1_000_000_000
    assert "/tmp" in host["Tmpfs"]
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL_MANAGED] == "true"
    assert labels[LABEL_RUN] == "test-run"
    assert labels[LABEL_ENV] == "test-env"


def _root_overwrites_a_read_only_file(sandbox: DockerSandbox) -> int | None:
    script = ("mkdir -p /tmp/d && echo 1 > /tmp/d/f && chmod 0444 /tmp/d/f && chmod a-w /tmp/d"
              " && echo 0 > /tmp/d/f && rm /tmp/d/f")
    return sandbox.exec(["sh", "-c", script], user="root", timeout_s=10).exit_code


def test_capabilities_are_added_back_only_when_asked(runtime: DockerRuntime) -> None:
    """No capability by default: even root cannot write a file it made read-only. With the
    engine's defaults (what Harbor's tasks run with) it can, as root can there."""
    spec = SandboxSpec("test-env", IMAGE, "test-run", Limits(memory_mb=256, pids=64))
    with runtime.sandbox(spec) as bare:
        assert _root_overwrites_a_read_only_file(bare) != 0
    with runtime.sandbox(dataclasses.replace(
            spec, capabilities=ENGINE_DEFAULT_CAPABILITIES)) as granted:
        assert _root_overwrites_a_read_only_file(granted) == 0
        client = docker.from_env(timeout=10)
        try:
            host = client.api.inspect_container(granted.container_id)["HostConfig"]
        finally:
            client.close()
        assert host["CapDrop"] == ["ALL"]
        assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"]) == sorted(
            ENGINE_DEFAULT_CAPABILITIES)


def test_the_sdk_exec_stream_still_has_the_private_attributes_we_read(
        sandbox: DockerSandbox) -> None:
    """envcheck.sandbox.streams.hijacked_stream reads two private attributes of the docker
    SDK's exec stream (no public way exists): this fails if an SDK release moves them."""
    client = docker.from_env(timeout=10)
    try:
        exec_id = client.api.exec_create(sandbox.container_id, ["printf", "hello"])["Id"]
        sock = client.api.exec_start(exec_id, socket=True)
        try:
            assert isinstance(sock, socket.SocketIO)
            assert isinstance(sock._sock, socket.socket)
            assert isinstance(sock._response.raw._fp.fp, io.BufferedReader)
            raw, buffered = hijacked_stream(sock)
            assert raw is sock._sock and isinstance(buffered, bytes)
            # what was buffered and what the socket still holds make the whole output
            raw.settimeout(10)
            data = buffered
            while chunk := raw.recv(65536):
                data += chunk
        finally:
            with suppress(AttributeError, OSError):
                sock._sock.close()
            sock.close()
    finally:
        client.close()
    size = int.from_bytes(data[4:8], "big")
    assert (data[0], data[8:8 + size]) == (1, b"hello")  # one stdout frame


def test_sandbox_has_no_network(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1"], timeout_s=10)
    assert result.exit_code == 0
    assert [line.strip() for line in result.text.split()] == ["lo"]


def test_exit_code_and_output(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 7"], timeout_s=10)
    assert result.exit_code == 7
    assert "out" in result.text
    assert "err" in result.text
    assert not result.timed_out
    assert result.first_output_s is not None


def test_hang_is_killed_at_timeout(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["sh", "-c", "sleep 1000 & sleep 1000; wait"], timeout_s=1.5)
    assert result.timed_out  # ended by its deadline: the command itself never ends
    assert result.exit_code is None
    # the sandbox comes back for the next command, with no trace of the hung processes
    after = sandbox.exec(["sh", "-c", "ps -eo comm | grep -c '^sleep$' || true"], timeout_s=10)
    assert after.exit_code == 0
    assert after.text.strip() == "1", "only the keep-alive sleep remains"


def test_output_flood_is_capped_with_bounded_memory(sandbox: DockerSandbox) -> None:
    tracemalloc.start()
    try:
        result = sandbox.exec(["sh", "-c", "head -c 200000000 /dev/zero | tr '\\0' x"],
                              timeout_s=120, output_limit=64 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0
    assert result.output.total == 200_000_000
    assert result.output.truncated
    assert len(result.output.head) + len(result.output.tail) <= 64 * 1024
    assert peak < 8 * 1024 * 1024, f"checker memory grew to {peak} bytes"
    evidence = result.evidence()
    assert evidence.output_bytes == 200_000_000
    assert evidence.truncated


def test_endless_flood_hits_the_hard_limit(runtime: DockerRuntime) -> None:
    rt = DockerRuntime(docker.from_env(timeout=30), flood_limit=50 * 1024 * 1024)
    try:
        with rt.sandbox(SandboxSpec("flood", IMAGE, "test-run")) as sb:
            result = sb.exec(["yes"], timeout_s=60)
            assert result.flooded
            assert not result.timed_out, "ended by the flood limit, not by the timeout"
            assert sb.exec(["true"], timeout_s=10).exit_code == 0
    finally:
        rt.close()


def _cgroup_pids(container_id: str) -> int | None:
    """The container's pid count, or None once its cgroup is gone (a command killed at its
    timeout takes its whole container with it, possibly between the glob and the read)."""
    patterns = (f"/sys/fs/cgroup/pids/**/{container_id}*/pids.current",
                f"/sys/fs/cgroup/**/*{container_id}*/pids.current")
    for pattern in patterns:
        for path in glob.glob(pattern, recursive=True):
            try:
                with open(path) as f:
                    return int(f.read())
            except (FileNotFoundError, ValueError):
                return None
    return None


def test_fork_bomb_stops_at_pids_limit(sandbox: DockerSandbox) -> None:
    peak: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            count = _cgroup_pids(sandbox.container_id)
            if count is not None:
                peak.append(count)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = sandbox.exec(["bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 4"],
                              timeout_s=6)
    finally:
        done.set()
        watcher.join()
    assert result.timed_out or result.exit_code is not None
    assert peak, "could not read the container's pids cgroup"
    assert max(peak) <= 64
    assert max(peak) >= 32, "the bomb should have reached the ceiling"
    assert sandbox.exec(["true"], timeout_s=20).exit_code == 0


def test_memory_hog_is_killed_not_the_checker(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["python3", "-c", "a = bytearray(1024 ** 3); print(len(a))"],
                          timeout_s=60)
    assert result.exit_code == 137, result.text


def test_tty_round_trip(sandbox: DockerSandbox) -> None:
    with sandbox.tty(["bash", "-i"], env={"TERM": "xterm"}) as tty:
        tty.send(b"echo $((6*7))-round-trip\n")
        assert tty.read_until(b"42-round-trip", 10)
        assert b"$((6*7))-round-trip" in tty.seen()


def test_put_file(sandbox: DockerSandbox) -> None:
    sandbox.put_file("/var/tmp/envcheck-put.sh", b"echo put-ok\n", mode=0o755)
    result = sandbox.exec(["sh", "/var/tmp/envcheck-put.sh"], timeout_s=10)
    assert result.text.strip() == "put-ok"
    with pytest.raises(ValueError, match="tmpfs"):
        sandbox.put_file("/tmp/x", b"")


def test_missing_image_is_envchecks_error(runtime: DockerRuntime) -> None:
    with pytest.raises(ImageMissing):
        runtime.image_digest("envcheck-demo/never-built:latest")
    with pytest.raises(ImageMissing), runtime.sandbox(
        SandboxSpec("x", "envcheck-demo/never-built:latest", "test-run")
    ):
        pass


def test_unreachable_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnreachable):
        DockerRuntime.from_env(timeout_s=3)


def test_stopped_engine_with_stale_socket(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    """A dead engine leaves its socket file behind: connecting is refused."""
    path = tmp_path / "docker.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    with pytest.raises(EngineUnreachable, match="unreachable"):
        DockerRuntime.from_env(timeout_s=3)


def test_container_removed_even_when_the_body_raises(runtime: DockerRuntime) -> None:
    seen: list[str] = []
    with pytest.raises(RuntimeError), runtime.sandbox(SandboxSpec("x", IMAGE, "raise-run")) as sb:
        seen.append(sb.container_id)
        raise RuntimeError("boom")
    assert seen
    assert seen[0] not in runtime.containers()


def _namespace() -> str:
    return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").rstrip("]")


def test_a_leftover_is_judged_only_where_its_owner_can_be_seen() -> None:
    host, me = socket.gethostname(), os.getpid()
    with open(f"/proc/{me}/stat", encoding="ascii") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    here = f"{host}@{_namespace()}"
    assert not leftover(f"{here}:{me}:{start}", 10)  # this process: in flight
    assert leftover(f"{here}:{me}:{int(start) + 1}", 10)  # its pid, another process: gone
    assert leftover(f"{here}:999999999:1", 10)
    assert not leftover(f"{host}:{me}:{start}", 10)  # an older label, the host alone
    # another PID namespace of this host (envcheck in its own container): alive or not is
    # unknowable from here, so only once it has outlived any probe
    assert not leftover(f"{host}@4026000000:1:1", 3600)
    assert leftover(f"{host}@4026000000:1:1", 2 * 24 * 3600)
    assert not leftover("another-host@1:1:1", 10 * 24 * 3600)  # that host's to judge


def test_reap_leaves_a_sandbox_of_another_namespace_and_removes_a_dead_owners(
        runtime: DockerRuntime) -> None:
    client = docker.from_env(timeout=10)
    host = socket.gethostname()
    owners = {"foreign": f"{host}@4026000000:1:1", "dead": f"{host}@{_namespace()}:999999999:1"}
    made = {}
    try:
        for name, owner in owners.items():
            made[name] = client.containers.create(
                IMAGE, ["sleep", "60"], labels={LABEL_MANAGED: "true", LABEL_OWNER: owner,
                                                LABEL_RUN: f"reap-{name}"}, network_mode="none")
        runtime.reap()
        left = set(runtime.containers())
        assert made["foreign"].id in left
        assert made["dead"].id not in left
    finally:
        for container in made.values():
            with suppress(docker.errors.NotFound):
                container.remove(force=True)
        client.close()


def test_capped_output_keeps_head_and_tail() -> None:
    out = CappedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        out.feed(chunk)
    assert out.total == 26
    assert out.head == b"abcde"
    assert out.tail == b"vwxyz"
    assert out.truncated
    assert "[... 16 bytes dropped ...]" in out.text()


def test_sections_split_an_exec_at_marker_lines_whatever_the_reads() -> None:
    sections = [Section(b"\n@@m:1 ", 10.0, 6), Section(b"\n@@m:2 ", 10.0)]
    stream = b"main out\n@@m:1 0\nfirst section, capped\n@@m:2 7\nlast"
    for size in (1, 3, len(stream)):  # a marker or a header split across reads
        main = CappedOutput(1024)
        parts = Sections(main, sections)
        for i in range(0, len(stream), size):
            parts.feed(stream[i:i + size])
        reached = parts.finish(0.0)
        assert main.text() == "main out"
        assert [s.header for s in reached] == ["0", "7"]
        assert reached[0].output.total == len(b"first section, capped")
        assert reached[0].output.head == b"fir" and reached[0].output.truncated
        assert reached[1].output.text() == "last"
        assert parts.total == len(stream)
    early = Sections(CappedOutput(64), sections)
    early.feed(b"only main\n@@m:")  # could begin a marker: held back, then given to main
    assert early.opened == 0
    assert early.finish(0.0) == ()


def test_each_section_has_its_own_deadline(sandbox: DockerSandbox) -> None:
    script = ("echo one; printf '\\n@@s:1 %s\\n' 0; sleep 4; echo two; "
              "printf '\\n@@s:2 %s\\n' 3; echo three; sleep 1000")
    # the first section outlives the main part's deadline, within its own; the second hangs
    result = sandbox.exec(["sh", "-c", script], timeout_s=3.0,
                          sections=[Section(b"\n@@s:1 ", 30.0), Section(b"\n@@s:2 ", 1.0)])
    assert result.timed_out and result.exit_code is None
    assert result.output.text() == "one\n"  # the marker line's own newline is not output
    assert [(s.header, s.output.text()) for s in result.sections] == [("0", "two\n"),
                                                                     ("3", "three\n")]
