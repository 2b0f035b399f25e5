"""Per-agent sandboxes: Landlock confinement, and a launcher that reaps everything an agent starts.

An agent runs as the same OS user as the supervisor, so without a sandbox it can read the supervisor's state,
write other workers' checkouts and signal any process of that user; and a daemon it ``setsid``-s away outlives
it. :mod:`.landlock` confines a process to the paths it is given and keeps its signals inside; the launcher
(``python3 -I -S launcher.py SPEC``, :mod:`.launcher`) applies that to the agent and, as a child subreaper,
stops the agent's whole tree when the agent or the launcher is stopped (:mod:`.reaper`). :mod:`.spec` writes the
spec and builds the command line. The launcher and the modules it loads use only the standard library: it must
start in a few milliseconds and must not depend on this package being importable.
"""
