"""The kinds of agent host, one module each in this package (:mod:`.base` says what a kind is), and what each needs
to run unattended.

Adding a host is adding a module here that defines ``KIND``: it is found by name, the policy schema's ``kind``
enum lists it (a test keeps the two equal), and ``init``/``doctor`` look for its ``binary`` on PATH.

Every agent here runs one-shot: it gets a prompt, works, and ends its turn (exits). Headless CLIs cannot ask a
person for a permission, so each default argv grants, up front, the least that lets an agent do its job -- edit
files in its worktree, run the repository's verification commands, ``git add``/``git commit``/``git merge``, and
call ``git agentops-request`` and ``git agentops-verify`` -- and nothing it would need ``--dangerously-*`` for,
save what its own sandbox needs to step aside for ours (:mod:`git_agentops.model.hosts.codex`). Each kind's module
documents its argv, resume, guard and output; ``command`` is any argv the policy gives, ``scripted`` the built-in
recipe player.

Each kind also names the variables of the person's environment it needs to reach its model (``pass_env``): agents
start with the person's environment *scrubbed* of credentials (:mod:`git_agentops.verify.credentials`), and only
the variables a host's ``pass_env`` names come through although they look like credentials -- an API key, an auth
token. ``git agentops-init`` writes them out, so ``policy trust`` shows which of the person's secrets each host is
given.

Placeholders in an argv element or an ``env`` value: ``{prompt}``, ``{prompt_file}``, ``{mailbox}``,
``{worktree}``, ``{git_common_dir}``, ``{session}`` (resume only), ``{input}`` (what the agent reads: a worker's
``instructions.json``, a reviewer's review input), and for reviewers ``{report}``. Only these exact names are
replaced; any other brace is left as it is.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from functools import cache

from .base import GIT_SUBCOMMANDS, TOOLKIT_COMMANDS, HostKind, VerifyArgvs, allowed_commands
from .claude import allowed_tools as claude_allowed_tools
from .opencode import config as opencode_config

__all__ = [
    "GIT_SUBCOMMANDS",
    "TOOLKIT_COMMANDS",
    "HostKind",
    "agent_clis",
    "allowed_commands",
    "builtin_hosts",
    "claude_allowed_tools",
    "default_argv",
    "default_env",
    "default_home_files",
    "default_pass_env",
    "default_resume_argv",
    "default_writable",
    "kind_of",
    "kinds",
    "model_hosts",
    "opencode_config",
    "registry",
]


@cache
def registry() -> dict[str, HostKind]:
    """Every kind by name, in order of preference (the first agent CLI found becomes a new policy's default)."""
    found: list[HostKind] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base" or module.name.startswith("_"):
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(kind, HostKind):
            found.append(kind)
    return {kind.name: kind for kind in sorted(found, key=lambda k: (k.order, k.name))}


def kind_of(name: str) -> HostKind:
    """The kind called ``name``; an unknown one (a policy the schema already refused) behaves as ``command``."""
    return registry().get(name) or registry()["command"]


def agent_clis() -> tuple[HostKind, ...]:
    """The kinds that are agent CLIs (they have a program to look for), in order of preference."""
    return tuple(kind for kind in registry().values() if kind.binary is not None)


def builtin_hosts() -> tuple[HostKind, ...]:
    """The built-in agents (:attr:`HostKind.builtin_module`): hosts under their kind's name that no policy defines."""
    return tuple(kind for kind in registry().values() if kind.builtin_module is not None)


def kinds() -> tuple[str, ...]:
    """Every kind of host, in order of preference."""
    return tuple(registry())


def model_hosts() -> tuple[str, ...]:
    """The kinds that are agent CLIs talking to a model."""
    return tuple(kind.name for kind in agent_clis())


def default_argv(kind: str, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
    """The argv a host of ``kind`` gets when the policy names none (``()`` for kinds without a default)."""
    return kind_of(kind).default_argv(verify_argvs)


def default_resume_argv(kind: str, argv: Sequence[str]) -> tuple[str, ...]:
    """How to resume a session with the host's own ``argv`` (``()`` when the kind cannot resume)."""
    return kind_of(kind).resume_argv(argv)


def default_env(kind: str, verify_argvs: VerifyArgvs) -> dict[str, str]:
    """Environment a host of ``kind`` needs besides the user's (opencode takes its permissions this way)."""
    return kind_of(kind).default_env(verify_argvs)


def default_writable(kind: str) -> tuple[str, ...]:
    """The paths (``~`` unexpanded) a host of ``kind`` writes outside its worktree: its session state, its config
    and ``~/.cache``. ``git agentops-init`` writes them out, so ``policy trust`` shows them."""
    return kind_of(kind).writable


def default_pass_env(kind: str) -> tuple[str, ...]:
    """The person's credential variables a host of ``kind`` is given (``[hosts.<name>] pass_env`` when the policy
    names none). Variables that do not look like credentials (``ANTHROPIC_BASE_URL``) come through anyway."""
    return kind_of(kind).pass_env


def default_home_files(kind: str) -> tuple[str, ...]:
    """The person's files (``~`` unexpanded) a host of ``kind`` gets a copy of in its private HOME at every start;
    the originals are never writable to an agent."""
    return kind_of(kind).home_files
