"""Where a validated policy is cached: keyed by the policy file's bytes and the toolkit version.

Shared by :mod:`.load` and the hooks' fast path (:mod:`git_agentops.hooks.fast`), which reads the cache without
importing the loader, so this module imports nothing heavy.
"""

from __future__ import annotations

import hashlib

from .. import __version__

CACHE_DIR = ("agentops", "cache", "policy")  # under $GIT_COMMON_DIR


def cache_key(data: bytes) -> str:
    """The cache entry name (without ``.json``) of a policy file's bytes."""
    return hashlib.sha256(data + b"\0" + __version__.encode()).hexdigest()
