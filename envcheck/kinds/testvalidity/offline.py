"""Signs in a failing test's output that it reached for the network (sandboxes have none)."""

from __future__ import annotations

import re

__all__ = ["network_error"]

# What resolvers, sockets and HTTP clients (Python, curl, Node, Go, Java) say offline.
_NETWORK = re.compile(
    r"temporary failure in name resolution|name or service not known|nodename nor servname|"
    r"could not resolve (?:host|proxy)|failed to resolve|gaierror|getaddrinfo \w+|eai_again|"
    r"enotfound|unknownhostexception|no such host|network is unreachable|enetunreach|"
    r"no route to host|ehostunreach|errno 101\b", re.IGNORECASE)
_REFUSED = re.compile(r"connection refused|econnrefused|errno 111\b", re.IGNORECASE)
_HOST = re.compile(r"host=['\"]([^'\"]+)['\"]|://([\w.-]+)|connect to ([\w.-]+) port",
                   re.IGNORECASE)
_LOCAL = re.compile(r"^(localhost|127\.[\d.]+|::1|0\.0\.0\.0|sandbox)$", re.IGNORECASE)


def network_error(text: str) -> str | None:
    """The line of ``text`` showing that a test reached for the network, if one does.

    Refused connections count only towards a named non-local host: a refused localhost
    port is a local service that did not start, not a need for the network.
    """
    for line in text.splitlines():
        if _NETWORK.search(line):
            return line.strip()[:300]
        if _REFUSED.search(line):
            hosts = [h for m in _HOST.finditer(text) for h in m.groups() if h]
            if any(not _LOCAL.match(h) for h in hosts):
                return line.strip()[:300]
    return None
