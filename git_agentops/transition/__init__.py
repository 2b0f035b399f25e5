"""A policy transition while a run goes on, in one room: the record, its journal, the proposal and the drive.

``record`` (layer 3) holds the values -- what a proposed policy changes, its approvals, the stages -- and does no
I/O; ``journal`` (layer 8) keeps each transition in its own journal ref and binds the new policy by compare-and-swap;
``propose`` (layer 10) answers a coordinator's ``policy`` request; ``drive`` (layer 10) is what the supervisor's loop
runs each tick while a transition is pending, from ``prepared`` to ``complete`` or ``refused``. The CLI's
``git agentops-transition`` (``cli/transition.py``) shows and decides them.
"""
