"""The effective policy document's shape, as typed dictionaries (``schemas/policy.schema.json``).

The effective policy is a JSON document, and it stays one: its canonical JSON is hashed into the config hash that
trust is given for, it is bound into a run's journal and compared key by key with a proposed one. So it is not
turned into records; its shape is declared here instead, once, so that every reader is type-checked against the
schema instead of reading ``Any``. The schema validates the document where it is read
(:func:`git_agentops.policy.load.check_text`); :func:`git_agentops.model.policy.effective` fills the defaults in,
so in an *effective* document the tables below are all present (a key marked ``NotRequired`` is one the user may
leave out and that no default fills).
"""

from __future__ import annotations

from typing import NotRequired, TypeAlias, TypedDict

Argv: TypeAlias = list[str] | str
"""An argv list, or one string for ``/bin/sh -c`` (with ``shell = true``)."""


class CommandDoc(TypedDict):
    """A verification command or acceptance runner (``[[verify.commands]]``, ``[[verify.runners]]``)."""

    id: str
    argv: Argv
    shell: NotRequired[bool]
    timeout: NotRequired[float]
    required: NotRequired[bool]
    parser: NotRequired[str]
    env: NotRequired[dict[str, str]]
    description: NotRequired[str]


class StepDoc(TypedDict):
    """A setup step (``[[worktree.setup]]``): what runs in a checkout before the commands."""

    argv: Argv
    shell: NotRequired[bool]
    timeout: NotRequired[float]
    env: NotRequired[dict[str, str]]
    description: NotRequired[str]


class HostDoc(TypedDict):
    """A host an agent runs on (``[hosts.NAME]``); its kind's defaults fill what the user left out."""

    kind: str
    argv: NotRequired[Argv]
    shell: NotRequired[bool]
    env: NotRequired[dict[str, str]]
    recipe: NotRequired[str]
    resume: NotRequired[bool]
    resume_argv: NotRequired[Argv]
    version: NotRequired[str]
    home_files: NotRequired[list[str]]
    network: NotRequired[bool]
    writable: NotRequired[list[str]]
    pass_env: NotRequired[list[str]]


class RunDoc(TypedDict):
    """``[run]``: the run's target, budget and limits."""

    target: NotRequired[str]
    budget: NotRequired[str]
    max_workers: NotRequired[int]
    worktree_root: NotRequired[str]
    default_host: NotRequired[str]
    finalize: NotRequired[str]
    remote: NotRequired[str]
    remote_patience: NotRequired[str]
    policy_changes: NotRequired[str]
    max_cost_usd: NotRequired[float]
    max_tokens: NotRequired[int]
    turn_grace: NotRequired[float]
    max_verifications: NotRequired[int]
    squash: NotRequired[bool]


class VerifyDoc(TypedDict):
    """``[verify]``: the commands every verification runs and the runners tasks' criteria name."""

    commands: list[CommandDoc]
    runners: list[CommandDoc]


class ServiceDoc(TypedDict):
    """A ``[[worktree.services]]`` entry (:class:`~git_agentops.model.workspace.ServiceSpec`)."""

    name: str
    start: list[str]
    ready: list[str]
    scope: NotRequired[str]
    init: NotRequired[list[str]]
    stop: NotRequired[list[str]]
    attach: NotRequired[list[str]]
    detach: NotRequired[list[str]]
    env: NotRequired[dict[str, str]]
    ready_timeout: NotRequired[float]
    stop_timeout: NotRequired[float]


class WorktreeDoc(TypedDict):
    """``[worktree]``: the setup steps, and what each workspace gets (absent keys: none of it, no hash change)."""

    setup: list[StepDoc]
    ports: NotRequired[int]
    include: NotRequired[list[str]]
    include_in_verify: NotRequired[bool]
    services: NotRequired[list[ServiceDoc]]


class ReviewDoc(TypedDict):
    """``[review]``: how many reviews an integration waits for, and from which hosts."""

    required: int
    reviewers: NotRequired[list[str]]
    people: NotRequired[int]


class ReceiptsDoc(TypedDict):
    """``[receipts]``: whether receipts are signed, by whom, and whether plain commits may reach the target."""

    allowed_signers: NotRequired[str]
    require_signature: NotRequired[bool]
    plain_commits: NotRequired[str]


class SandboxDoc(TypedDict):
    """``[sandbox]``: how agents are confined (absent from an effective document that does not set it)."""

    mode: NotRequired[str]
    level: NotRequired[str]
    required: NotRequired[bool]
    writable: NotRequired[list[str]]
    deny_read: NotRequired[list[str]]


class QueueDoc(TypedDict):
    """``[queue]``."""

    enabled: NotRequired[bool]
    parallel: NotRequired[int]


class ControlsDoc(TypedDict):
    """``[controls]``: who may answer, approve, refuse and review from another machine, and where controls come from."""

    remote: NotRequired[str]
    interval: NotRequired[float]
    allowed_signers: NotRequired[str]
    answer: NotRequired[list[str]]
    approve: NotRequired[list[str]]
    review: NotRequired[list[str]]


class GuardrailsDoc(TypedDict):
    """``[guardrails]``: secret scanning and the patterns and paths a delivery is checked against."""

    secret_scanning: NotRequired[bool]
    deny_patterns: NotRequired[list[str]]
    secret_paths: NotRequired[list[str]]
    protected_paths: NotRequired[list[str]]


class PolicyDoc(TypedDict):
    """An effective policy document: every table present, the defaults filled in."""

    version: int
    run: RunDoc
    verify: VerifyDoc
    worktree: WorktreeDoc
    hosts: dict[str, HostDoc]
    review: ReviewDoc
    receipts: ReceiptsDoc
    guardrails: GuardrailsDoc
    sandbox: NotRequired[SandboxDoc]
    queue: NotRequired[QueueDoc]
    controls: NotRequired[ControlsDoc]
