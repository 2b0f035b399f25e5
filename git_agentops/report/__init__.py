"""The run report (``git agentops-run report``) in one room: what a run did, from its refs and notes, as text.

``record`` holds the facts as frozen values with their ``--json`` form; ``collect`` gathers them from the store
(state, journal, evidence and receipt notes), reading only; ``markdown`` and ``html`` render them (the HTML page's
task graph is laid out by ``graph``). The command itself -- arguments, printing, writing the page -- stays in
:mod:`git_agentops.cli.report`.
"""
