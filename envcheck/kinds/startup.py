"""Why a command a probe ran in the sandbox could not start at all: the engine's own words for
a user missing from the image, or a shell that is not executable there. Every kind that runs a
script reads the failure here, so they name it alike."""

from __future__ import annotations

from envcheck.core.results import Reason
from envcheck.sandbox.base import ExecResult

__all__ = ["READY", "command_start_failure"]

# Printed by a probe's script as its first line: past it, the shell did start.
READY = "envcheck:ready"
_NOT_STARTED = ("no such file", "not found", "permission denied")


def command_start_failure(result: ExecResult, user: str | None, shell: str, *,
                          ready: str | None = READY) -> tuple[Reason, str] | None:
    """USER_MISSING or SHELL_MISSING with a sentence, or None if the command did start.

    With ``ready`` (the marker the script prints first), exit 126/127 means a missing shell
    only if the marker is absent and the engine says why; ``ready=None`` is for callers that
    already know the script printed nothing of its own.
    """
    text = result.text.lower()
    if "unable to find user" in text or "no matching entries in passwd" in text:
        return Reason.USER_MISSING, f"user {user!r} does not exist in the image"
    if result.exit_code in (126, 127) and (
            ready is None
            or (ready not in result.text and any(words in text for words in _NOT_STARTED))):
        return Reason.SHELL_MISSING, f"shell {shell} is not executable in the image"
    return None
