"""The image's HEALTHCHECK: healthy while the daemon's /readyz answers 200 (store and engine
usable), within the check's own timeout. Standard library only."""

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
try:
    with urllib.request.urlopen(url, timeout=4) as response:  # noqa: S310 (a fixed http URL)
        sys.exit(0 if response.status == 200 else 1)
except urllib.error.HTTPError as exc:
    print(f"{url}: {exc.code} {exc.read(500).decode(errors='replace')}")
except OSError as exc:
    print(f"{url}: {exc}")
sys.exit(1)
