"""git-agentops: run several coding agents on one repository safely.

Each agent works in its own worktree; its work counts only as a frozen delivery commit that passed the
repository's verification; deliveries are merged in dependency order in memory; the target branch moves only by
compare-and-swap; each integration leaves a sealed, signed receipt. All state lives in Git.

This module stays import-light: hooks and ``--help`` must not pay for pygit2 or jsonschema.
"""

__version__ = "0.1.0"
