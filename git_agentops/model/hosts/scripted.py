"""The built-in scripted agent (:mod:`git_agentops.hosts.scripted`), which plays a recipe: no model, no network,
nothing written outside its worktree."""

from __future__ import annotations

from typing import Final

from .base import HostKind


class Scripted(HostKind):
    name = "scripted"
    writable = ()
    builtin_module = "git_agentops.cli.agent"
    network = False  # the recipe player talks to its supervisor through files
    follows_recipe = True


KIND: Final = Scripted()
