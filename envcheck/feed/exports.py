"""Files for schedulers that read a path: written atomically after every transition.

``quarantine.json`` (versioned, with the feed generation), ``quarantine.txt`` (ids, one per
line), per suite ``allowlist-<suite>.txt`` and ``allowlist-<suite>.json``, and for trainers
``taint.jsonl`` (the tainted intervals, :mod:`envcheck.feed.taint`, which also follows every
window). A reader never sees a half-written file: each is written beside its target and
renamed over it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envcheck.core.files import atomic_write_text
from envcheck.feed.allowlist import allowlist
from envcheck.feed.taint import refresh_taint, write_taint
from envcheck.store import Store

__all__ = ["EXPORT_VERSION", "default_export_dir", "write_exports"]

EXPORT_VERSION = 1


EXPORT_DIR_ENV = "ENVCHECK_EXPORT_DIR"


def default_export_dir() -> Path:
    env = os.environ.get(EXPORT_DIR_ENV)
    if env:
        return Path(env)
    from envcheck.store.database import data_dir

    return data_dir() / "exports"




def write_exports(store: Store, directory: Path | None = None,
                  taint_of: Collection[str] | None = None) -> Path:
    """Write every export file for the current feed generation; returns the directory.
    ``taint_of``: the only environments whose taint may have changed (a window's), whose
    lines alone are brought up to date (None: the whole file)."""
    directory = directory or default_export_dir()
    generation = store.generation()
    now = datetime.now(UTC).isoformat()
    entries: list[dict[str, Any]] = [q.to_json() for q in store.quarantined()]
    doc = {"version": EXPORT_VERSION, "generation": generation, "generated_at": now,
           "quarantined": entries}
    for suite in store.suites():
        listing = allowlist(store, suite.id, generation)
        atomic_write_text(directory / f"allowlist-{suite.id}.txt",
                      "".join(f"{env_id}\n" for env_id in listing.allowed))
        atomic_write_text(directory / f"allowlist-{suite.id}.json", json.dumps({
            "version": EXPORT_VERSION, "generation": generation, "generated_at": now,
            "suite": suite.id, "allowed": listing.allowed, "excluded": listing.excluded,
            "healthy_fraction": round(listing.healthy_fraction, 4)}, indent=2) + "\n")
    atomic_write_text(directory / "quarantine.txt", "".join(f"{e['env_id']}\n" for e in entries))
    if taint_of is None:
        write_taint(store, directory)
    else:
        refresh_taint(store, directory, taint_of)
    # the versioned document last: a reader keyed on its generation sees the rest done
    atomic_write_text(directory / "quarantine.json", json.dumps(doc, indent=2) + "\n")
    return directory
