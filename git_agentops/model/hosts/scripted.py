"""The built-in scripted agent (:mod:`git_agentops.hosts.scripted`), which plays a recipe: no model, no network,
nothing written outside its worktree."""

from __future__ import annotations

from typing import Final

from .base import HostKind


class Scripted(HostKind):
    name = "scripted"
    writable = ()


KIND: Final = Scripted()
