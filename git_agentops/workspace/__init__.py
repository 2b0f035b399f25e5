"""Workspaces: what each worker (and each verification of its work) gets besides a checkout, and what is kept.

A private block of loopback ports allocated race-free across every run on the machine (:mod:`.ports`), its own
service instances -- a database server, Redis, a dev server -- started before it and stopped with it
(:mod:`.services`), the person's untracked local files it needs (:mod:`.localfiles`), what making it cost
(:mod:`.cost`), and the salvage of an agent's unhanded-off work before any worktree is removed (:mod:`.salvage`).
"""
