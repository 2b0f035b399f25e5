"""Signed controls: a person answers, approves, refuses or reviews a run from another machine, through the remote.

A control is a small JSON document signed with the person's SSH key (``ssh-keygen -Y sign``, namespace
``git-agentops-control``) and stored as a parentless commit on its own create-only ref,
``refs/agentops/runs/<run>/controls/<control>``, pushed to the shared remote. The supervising machine fetches them,
checks each signature against the allowed signers committed at the run's base and the ``[controls]`` rules of the
run's bound policy, and applies each exactly once, in the order of its id, recording the outcome in the run's own
(authenticated) state. Nothing rides on a relay: the Git server is the channel, as it is for everything else.
"""
