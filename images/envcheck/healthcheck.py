"""The image's HEALTHCHECK, from the daemon's /readyz, within the check's own timeout.
Standard library only.

Healthy: /readyz answers 200 (this daemon writes the store; store and engine usable), or 503
from a healthy standby: its role is ``standby`` and its one check, the lease, names the daemon
that holds it (docs/how-to/deploy.md). Unhealthy otherwise: an active daemon whose store or engine
fails (a 503 of role ``active``), a standby whose store does not answer its look at the lease
(its lease check an ``error:``), a daemon still starting, or no answer. What it prints is
what ``docker inspect`` shows in the container's health log.
"""

import json
import os
import sys
import urllib.error
import urllib.request

host = os.environ.get("ENVCHECK_HOST", "127.0.0.1")
if host in ("", "0.0.0.0", "::"):  # listening everywhere: ask over loopback
    host = "127.0.0.1"
if ":" in host:
    host = f"[{host}]"
url = f"http://{host}:{os.environ.get('ENVCHECK_PORT', '8787')}/readyz"


def standby(body: str) -> str | None:
    """A healthy standby's lease check (who holds the lease), else None."""
    try:
        doc = json.loads(body)
        checks = doc["checks"]
        lease = checks["lease"]
    except (ValueError, TypeError, KeyError):
        return None
    healthy = doc.get("role") == "standby" and isinstance(lease, str) \
        and lease.startswith("standby:") and all(v == "ok" for k, v in checks.items()
                                                   if k != "lease")
    return lease if healthy else None


try:
    with urllib.request.urlopen(url, timeout=4) as response:  # noqa: S310 (a fixed http URL)
        sys.exit(0 if response.status == 200 else 1)
except urllib.error.HTTPError as exc:
    body = exc.read(4000).decode(errors="replace")
    waiting = standby(body) if exc.code == 503 else None
    if waiting is not None:
        print(f"{url}: {waiting}")
        sys.exit(0)
    print(f"{url}: {exc.code} {body[:500]}")
except OSError as exc:
    print(f"{url}: {exc}")
sys.exit(1)
