"""What ``git agentops-run watch`` shows of a run: a frame of its state and the selected worker's log, laid out as
plain lines or as a ``rich`` screen, with everything an agent or a person wrote cleaned of control characters.

The layout is a pure function of the status document and the time it is given, so it ranks with the values; the
command (:mod:`git_agentops.cli.watch`) reads the run and draws the screen.
"""
