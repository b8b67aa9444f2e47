"""``envcheck daemon``: the composition root of the long-running process (:mod:`.root`) and
its periodic upkeep (:mod:`.upkeep`)."""

from envcheck.daemon.root import DaemonConfig, build_app, run_daemon

__all__ = ["DaemonConfig", "build_app", "run_daemon"]
