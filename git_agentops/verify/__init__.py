"""Verification in a clean checkout: a run's proof of a commit in a checkout of the supervisor's own, the setup
steps run confined there and in a worker's worktree, the policy's commands with their counted output, the evidence
recorded as notes, and the secret scans of what a delivery holds.

Each module is ranked at the layer of what it does (:data:`git_agentops.layers.FEATURES`): a worker's worktree
(``workspaces``) and the confined setup (``confined_setup``) with the environments and walls they stand on; the
commands (``core``, ``parsers``, ``made``, ``slots``, ``worker``), the evidence (``evidence``, ``failing``) and the
secret scans (``redact``, ``credentials``, ``held``) above policy; the proof (``proof``) -- which reads a run's state
and runs as one of its jobs -- with the runs. The clean checkout itself stays in the Git store
(:mod:`git_agentops.gitstore.clean`): it moves ``HEAD`` of its private repository with ``git update-ref``, and only
the store writes refs.
"""
