"""``python -m git_agentops.cli.keepalive supervise RUN``: the program of a run's launchd agent.

It is ``git agentops-run supervise RUN`` whose deliberate ends (complete, blocked, paused, stopped, refused,
SIGTERM) all exit 0, because launchd restarts a ``KeepAlive = {SuccessfulExit = false}`` job after any other exit
and has no list of statuses to leave alone (systemd's ``RestartPreventExitStatus=``). Only a crash -- an internal
error, death by a signal -- is restarted. See :mod:`git_agentops.service.manager`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..errors import EXIT_USAGE
from ..service.manager import launchd_exit


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "supervise":
        print("usage: python -m git_agentops.cli.keepalive supervise RUN", file=sys.stderr)
        return launchd_exit(EXIT_USAGE)  # a usage error would only be repeated
    from .run import main as run_main

    return launchd_exit(run_main(["supervise", args[1]]))


if __name__ == "__main__":
    sys.exit(main())
