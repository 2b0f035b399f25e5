"""Service managers that keep a detached supervisor alive: a transient systemd user unit, a launchd agent, or a
plain process -- which one is available here, the unit or job a supervisor runs as, and starting, watching and
removing it.

Ranked just above the store and the values it reads (the run directory's private record, the supervisor's restart
storm limits); the supervisor's spawning (:mod:`git_agentops.supervisor.spawn`) and ``doctor`` use it.
"""
