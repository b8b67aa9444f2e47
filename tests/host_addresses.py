"""What the kernel announces about the host's links and addresses while a test runs: the
events a browser on the host takes for a network change (Chromium's ``AddressTrackerLinux``
aborts every request in flight, loopback included, when an address comes or goes).

``ip -o monitor link address`` (iproute2) prints them, one a line; :class:`HostAddressWatch`
runs it for the length of a ``with`` block, subscribed before the block starts, and tells
which address changes concern the interfaces of given bridges (the bridge and its ports).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pytest

from tests.polling import stop, wait_for

__all__ = ["HostAddressWatch"]

# "[Deleted ]193: br-82d714154c7d    inet6 fe80::42:eaff:fe7e:c2de/64 scope link ..."
_ADDRESS = re.compile(r"^(?:Deleted )?(\d+): (\S+?)\s+(inet6?) (\S+)")
# "[Deleted ]195: vethe93d951@if194: <BROADCAST,...> mtu 1279 ... master br-82d714154c7d ..."
_LINK = re.compile(r"^(?:Deleted )?(\d+): ([^:@\s]+)(?:@\S+)?: <")
_MASTER = re.compile(r" master (\S+)")


@dataclass
class HostAddressWatch:
    """``ip -o monitor link address`` for the length of a ``with`` block."""

    lines: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[str] | None = None
    _reader: threading.Thread | None = None

    def __enter__(self) -> HostAddressWatch:
        ip = shutil.which("ip")
        if ip is None:
            pytest.fail("iproute2's ip is not installed (apt-get install iproute2)")
        proc = subprocess.Popen([ip, "-o", "monitor", "link", "address"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._proc = proc
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: _subscribed(proc.pid), timeout_s=10, proc=proc,
                 what="ip monitor's netlink socket subscribed")
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            stop(self._proc, 10)
        if self._reader is not None:
            self._reader.join(timeout=10)

    def address_changes_of(self, bridges: set[str]) -> list[str]:
        """The changes to the host's announced addresses (IPv4 or IPv6) on ``bridges`` or on
        any interface that was a port of one of them: an address announced, or one announced
        before and deleted. The deletion of an address never announced (a tentative IPv6
        address whose duplicate address detection never completed, on a link that lost its
        carrier first) changes no listener's view of the host, Chromium's included."""
        indexes = set()
        for line in self.lines:
            link = _LINK.match(line)
            master = _MASTER.search(line)
            if link and (link.group(2) in bridges or (master and master.group(1) in bridges)):
                indexes.add(link.group(1))
        announced: set[tuple[str, str]] = set()
        found = []
        for line in self.lines:
            address = _ADDRESS.match(line)
            if not address or not (address.group(1) in indexes or address.group(2) in bridges):
                continue
            key = (address.group(1), address.group(4))
            if not line.startswith("Deleted "):
                announced.add(key)
                found.append(line)
            elif key in announced:
                announced.discard(key)
                found.append(line)
        return found

def _subscribed(pid: int) -> bool:
    """Whether ``pid`` holds a route netlink socket bound to multicast groups."""
    for row in Path("/proc/net/netlink").read_text().splitlines()[1:]:
        cols = row.split()
        if len(cols) > 3 and cols[1] == "0" and cols[2] == str(pid) and int(cols[3], 16):
            return True
    return False
