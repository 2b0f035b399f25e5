"""The Git hooks the toolkit answers, by name: the closed set the shim passes as the hook's first argument.

Its own module because the hook fast path (:mod:`.fast`) compares with it before anything else is imported: this
module imports nothing but :mod:`enum`. The values are Git's hook names, exactly as Git runs them.
"""

from __future__ import annotations

import enum


class HookName(enum.StrEnum):
    """A hook ``git agentops-init`` installs (:data:`git_agentops.hooks.HOOK_NAMES`, and ``pre-receive`` on a
    server), as Git names it."""

    PRE_COMMIT = "pre-commit"
    PRE_MERGE_COMMIT = "pre-merge-commit"
    POST_MERGE = "post-merge"
    PRE_PUSH = "pre-push"
    REFERENCE_TRANSACTION = "reference-transaction"
    PRE_RECEIVE = "pre-receive"
