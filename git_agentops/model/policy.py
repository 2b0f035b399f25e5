"""The policy as values: the effective document (defaults filled in), its hash, and typed views of its parts.

A policy is code that will run on the user's machine, so it is identified by its **config hash**: the SHA-256 of
the canonical JSON of the *effective* policy (every default made explicit). Two files that mean the same thing
hash alike; any change to what would run changes the hash and therefore needs fresh trust.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from ..canonical import JsonObject, JsonValue, canonical_json, digest
from .globs import literal, normalise
from .policydoc import CommandDoc, PolicyDoc, StepDoc
from .workspace import WorkspaceSpec


class Finalize(enum.StrEnum):
    """``[run] finalize``: who integrates once every child is delivered -- the coordinator, woken, or the loop."""

    COORDINATOR = "coordinator"
    AUTO = "auto"


DEFAULT_TARGET: Final = "main"
DEFAULT_BUDGET: Final = "90m"
DEFAULT_TIMEOUT: Final = 600.0
DEFAULT_WORKTREE_ROOT: Final = ".agentops/worktrees"
POLICY_PATH: Final = ".agentops/policy.toml"
DEFAULT_SECRET_PATHS: Final = ("id_*", "!*.pub", "*.pem", "*.key", "*.p12", "*.pfx")
"""File names a delivery may not add (``[guardrails] secret_paths``): private SSH keys but not their public
halves, PEM files, private keys, PKCS#12 bundles. Like the built-in secret rules they are the toolkit's, not part
of the effective policy, so they change no config hash."""

DEFAULT_PROTECTED_PATHS: Final = (
    ".agentops/**",
    # CI configuration: what decides whether the target's checks pass
    ".github/workflows/**",
    ".github/actions/**",
    ".gitlab-ci.yml",
    ".gitlab/ci/**",
    ".circleci/**",
    ".ci/**",
    "Jenkinsfile",
    "azure-pipelines.yml",
    ".buildkite/**",
    ".woodpecker.yml",
    ".woodpecker.yaml",
    ".woodpecker/**",
    ".drone.yml",
    # hooks: what runs on a person's next commit, merge or push
    ".githooks/**",
    ".husky/**",
    ".pre-commit-config.yaml",
)
"""Paths a delivery may not change (``[guardrails] protected_paths``), as ``.gitignore``-like patterns
(:mod:`.globs`): the toolkit's own directory, CI configuration and hook directories. A worker runs as the person
does, so without them a delivery could rewrite the checks that judge it -- a test command replaced by ``print``,
``require_signature = false``, a workflow that no longer runs the tests -- and integrate under a valid receipt.
Like :data:`DEFAULT_SECRET_PATHS` they are the toolkit's, not part of the effective policy: no config hash
changes. :data:`ALWAYS_PROTECTED` and the ``[receipts] allowed_signers`` file are added to any list."""
ALWAYS_PROTECTED: Final = (".agentops/**",)
"""Protected whatever ``protected_paths`` says, and after it, so no ``!`` pattern re-includes them."""

_DURATION_PART: Final = re.compile(r"([0-9]+)([smhd])")
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int:
    """``"1h30m"`` -> 5400. The schema has already checked the shape."""
    return sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


_MONEY: Final = re.compile(r"\$?([0-9]{1,7}(?:\.[0-9]{1,4})?)\s*(?:usd|\$)?", re.IGNORECASE)
_TOKENS: Final = re.compile(r"([0-9]{1,12})\s*([km]?)\s*-?\s*tokens?", re.IGNORECASE)
_DURATION: Final = re.compile(r"(?:[0-9]{1,6}[smhd]){1,4}")


def budget_amount(text: str) -> tuple[int, float, int]:
    """``--add-budget`` text as (seconds, dollars, tokens): ``30m``, ``$2.50`` / ``2.5usd``, ``50k tokens``.

    Raises ValueError for anything else (the CLI reports it as a usage error).
    """
    value = text.strip()
    if _DURATION.fullmatch(value):
        return duration_seconds(value), 0.0, 0
    tokens = _TOKENS.fullmatch(value)
    if tokens:
        scale = {"": 1, "k": 1000, "m": 1_000_000}[tokens.group(2).lower()]
        return 0, 0.0, int(tokens.group(1)) * scale
    money = _MONEY.fullmatch(value)
    if money and (value.startswith("$") or value.lower().endswith(("usd", "$"))):
        return 0, float(money.group(1)), 0
    raise ValueError(
        f"{text!r} is not a budget: give a duration (30m), dollars ($2.50 or 2.5usd) or tokens (50k tokens)"
    )


def _command_defaults(command: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    out = dict(command)
    out.setdefault("shell", False)
    out.setdefault("timeout", DEFAULT_TIMEOUT)
    out.setdefault("env", {})
    if "id" in command:  # verify commands and runners, not setup steps
        out.setdefault("required", True)
        out.setdefault("parser", "none")
        out.setdefault("description", "")
    return out


def _host_defaults(host: Mapping[str, Any], verify_argvs: list[Any]) -> dict[str, Any]:
    """A host with its kind's default argv, resume argv, environment, writable paths and passed credential
    variables (``pass_env``) filled in (:mod:`.hosts`), so that the config hash -- and what ``policy trust`` shows --
    covers exactly what will run and which of the person's secrets it gets."""
    from . import hosts  # every kind's module: only for a policy that has hosts, never a person's verify of none

    kind = host["kind"]
    argv = host.get("argv") or list(hosts.default_argv(kind, verify_argvs))
    shell = bool(host.get("shell", False))
    resume_argv = host.get("resume_argv")
    if resume_argv is None:
        resume_argv = [] if shell or isinstance(argv, str) else list(hosts.default_resume_argv(kind, argv))
    out = {
        **host,
        "argv": argv,
        "shell": shell,
        "env": {**hosts.default_env(kind, verify_argvs), **host.get("env", {})},
        "resume_argv": resume_argv,
        "writable": list(host.get("writable", hosts.default_writable(kind))),
        "pass_env": list(host.get("pass_env", hosts.default_pass_env(kind))),
        "home_files": list(host.get("home_files", hosts.default_home_files(kind))),
        "network": bool(host.get("network", True)),
    }
    out.setdefault("resume", bool(resume_argv))
    return out


def effective(doc: Mapping[str, Any]) -> PolicyDoc:
    """The policy with every default explicit (the document whose hash is the config hash), from a document its
    schema accepted (:func:`git_agentops.policy.load.check_text`) -- the one place the TOML's shape becomes the
    declared :class:`~.policydoc.PolicyDoc`."""
    run = dict(doc.get("run", {}))
    run.setdefault("target", DEFAULT_TARGET)
    run.setdefault("budget", DEFAULT_BUDGET)
    run.setdefault("max_workers", 3)
    run.setdefault("worktree_root", DEFAULT_WORKTREE_ROOT)
    run.setdefault("default_host", "scripted")
    run.setdefault("finalize", Finalize.COORDINATOR)
    verify = doc.get("verify", {})
    verify_argvs = [c["argv"] for c in (*verify.get("commands", []), *verify.get("runners", []))]
    hosts = {name: _host_defaults(host, verify_argvs) for name, host in doc.get("hosts", {}).items()}
    review = {"required": 0, "reviewers": [], **doc.get("review", {})}
    receipts = {"require_signature": False, **doc.get("receipts", {})}
    guardrails = {"secret_scanning": True, "deny_patterns": [], **doc.get("guardrails", {})}
    effective_doc = {
        "version": doc.get("version", 1),
        "run": run,
        "verify": {
            "commands": [_command_defaults(c) for c in verify.get("commands", [])],
            "runners": [_command_defaults(c) for c in verify.get("runners", [])],
        },
        "worktree": {
            # the workspace keys only when set: a policy without them keeps its config hash
            **{k: v for k, v in doc.get("worktree", {}).items() if k != "setup"},
            "setup": [_command_defaults(s) for s in doc.get("worktree", {}).get("setup", [])],
        },
        "hosts": hosts,
        "review": review,
        "receipts": receipts,
        "guardrails": guardrails,
        **({"sandbox": dict(doc["sandbox"])} if "sandbox" in doc else {}),  # absent: the defaults, no hash change
        **({"queue": {"enabled": False, "parallel": 2, **doc["queue"]}} if "queue" in doc else {}),
        **({"controls": dict(doc["controls"])} if "controls" in doc else {}),  # absent: the defaults, same hash
    }
    return cast(PolicyDoc, effective_doc)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """A verification command, an acceptance runner or a setup step."""

    id: str
    argv: tuple[str, ...] | str
    shell: bool
    timeout: float
    required: bool = True
    parser: str = "none"
    env: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    @classmethod
    def from_json(cls, doc: CommandDoc | StepDoc, default_id: str = "") -> CommandSpec:
        """A command from a table of the effective policy; absent fields take :func:`effective`'s defaults.

        ``default_id`` names a command that has no ``id`` of its own (a setup step).
        """
        argv = doc["argv"]
        return cls(
            id=str(doc.get("id", default_id)),
            argv=argv if isinstance(argv, str) else tuple(argv),
            shell=bool(doc.get("shell", False)),
            timeout=float(doc.get("timeout", DEFAULT_TIMEOUT)),
            required=bool(doc.get("required", True)),
            parser=str(doc.get("parser", "none")),
            env=dict(doc.get("env", {})),
            description=str(doc.get("description", "")),
        )

    def to_json(self) -> JsonObject:
        """The fields that decide what runs and how it is judged (``description`` is left out).

        :func:`~git_agentops.verify.workspaces.setup_hash` digests it, so a worktree's setup is redone when it changes.
        """
        return {
            "id": self.id,
            "argv": self.argv if isinstance(self.argv, str) else list(self.argv),
            "shell": self.shell,
            "timeout": self.timeout,
            "required": self.required,
            "parser": self.parser,
            "env": dict(self.env),
        }

    @property
    def argv_digest(self) -> str:
        """What exactly runs: argv (or the shell string) and whether a shell interprets it."""
        return digest({"argv": self.argv if isinstance(self.argv, str) else list(self.argv), "shell": self.shell})


@dataclass(frozen=True, slots=True)
class Policy:
    """A validated, effective policy and its config hash."""

    doc: PolicyDoc
    config_hash: str
    source: str = POLICY_PATH

    @classmethod
    def from_effective(cls, doc: PolicyDoc, source: str = POLICY_PATH) -> Policy:
        """Wrap a document that is already effective and valid, hashing it for ``config_hash``.

        Nothing is checked here: :func:`~git_agentops.policy.load.policy_from_bytes` validates.
        """
        return cls(doc=doc, config_hash=digest(doc), source=source)

    @property
    def commands(self) -> tuple[CommandSpec, ...]:
        """The ``[[verify.commands]]`` every verification runs, in policy order."""
        return tuple(CommandSpec.from_json(c) for c in self.doc["verify"]["commands"])

    @property
    def runners(self) -> tuple[CommandSpec, ...]:
        """The acceptance runners (``[[verify.runners]]``) that task criteria may name."""
        return tuple(CommandSpec.from_json(c) for c in self.doc["verify"]["runners"])

    def runner(self, runner_id: str) -> CommandSpec | None:
        """The runner with id ``runner_id``, or None when the policy defines none."""
        return next((r for r in self.runners if r.id == runner_id), None)

    @property
    def setup(self) -> tuple[CommandSpec, ...]:
        """The ``[[worktree.setup]]`` steps in order, as ``setup-0``, ``setup-1``... (the schema gives a step no id)."""
        return tuple(CommandSpec.from_json(s, f"setup-{i}") for i, s in enumerate(self.doc["worktree"]["setup"]))

    @property
    def workspace(self) -> WorkspaceSpec:
        """What each workspace gets besides its checkout: ports, services, local files (``[worktree]``)."""
        return WorkspaceSpec.from_doc(self.doc["worktree"])

    @property
    def target(self) -> str:
        """The branch a run integrates into unless started with ``--target`` (``run.target``, default ``main``)."""
        return str(self.doc["run"]["target"])

    @property
    def budget_seconds(self) -> int:
        """A run's active-time budget in seconds unless started with its own (``run.budget``, default ``90m``)."""
        return duration_seconds(self.doc["run"]["budget"])

    @property
    def max_workers(self) -> int:
        """How many child workers may be active at once (``run.max_workers``, default 3), the coordinator aside."""
        return int(self.doc["run"]["max_workers"])

    @property
    def max_verifications(self) -> int | None:
        """How many clean-checkout verifications may run at once (``run.max_verifications``); None when the policy
        leaves it to the machine: its cores, counted where the verifications run (:mod:`git_agentops.verify.slots`)."""
        value = self.doc["run"].get("max_verifications")
        return int(value) if value else None

    @property
    def queue_enabled(self) -> bool:
        """Whether finalized runs go through the target's merge queue (``queue.enabled``, default false)."""
        return bool(self.doc.get("queue", {}).get("enabled", False))

    @property
    def queue_parallel(self) -> int:
        """How many queue candidates are verified at once (``queue.parallel``, default 2)."""
        return int(self.doc.get("queue", {}).get("parallel", 2))

    @property
    def squash(self) -> bool:
        """Whether a task is delivered as one commit on its base (``run.squash``, default false)."""
        return bool(self.doc["run"].get("squash", False))

    @property
    def worktree_root(self) -> str:
        """Where worker worktrees are created, relative to the repository (``run.worktree_root``)."""
        return str(self.doc["run"]["worktree_root"])

    @property
    def remote(self) -> str | None:
        """``run.remote``: the remote whose target a run builds on and publishes to (None: the local branch)."""
        value = self.doc["run"].get("remote")
        return str(value) if value else None

    @property
    def deny_patterns(self) -> tuple[str, ...]:
        """Extra regular expressions treated as secrets (``guardrails.deny_patterns``).

        The pre-commit hook refuses staged additions that match them (``HOOK_SECRET``), and verification redacts
        their matches from the command output it records.
        """
        return tuple(self.doc["guardrails"]["deny_patterns"])

    @property
    def secret_scanning(self) -> bool:
        """Whether staged additions (pre-commit) and deliveries (at handoff) are scanned for secrets
        (``guardrails.secret_scanning``, true by default)."""
        return bool(self.doc["guardrails"]["secret_scanning"])

    @property
    def secret_paths(self) -> tuple[str, ...]:
        """File-name patterns a delivery may not add (``guardrails.secret_paths``, :data:`DEFAULT_SECRET_PATHS`
        when the policy names none); ``!`` negates and the last matching pattern decides."""
        return tuple(self.doc["guardrails"].get("secret_paths", DEFAULT_SECRET_PATHS))

    @property
    def allowed_signers(self) -> str | None:
        """The signer list receipts are checked against (``receipts.allowed_signers``, relative to the top), if any."""
        where = self.doc["receipts"].get("allowed_signers")
        return str(where) if where else None

    @property
    def people(self) -> int:
        """How many approvals by people an integration waits for before publishing (``review.people``, default 0)."""
        return int(self.doc["review"].get("people", 0))

    @property
    def controls_remote(self) -> str | None:
        """The remote the supervisor fetches signed controls from (``controls.remote``, else ``run.remote``)."""
        value = self.doc.get("controls", {}).get("remote")
        return str(value) if value else self.remote

    @property
    def controls_interval(self) -> float:
        """Seconds between two fetches of the remote's controls (``controls.interval``, default 5)."""
        return float(self.doc.get("controls", {}).get("interval", 5))

    @property
    def controls_signers(self) -> str | None:
        """The allowed signers file controls are checked against (``controls.allowed_signers``, else the receipts'
        one), relative to the top; it is read as committed at the run's base."""
        value = self.doc.get("controls", {}).get("allowed_signers")
        return str(value) if value else self.allowed_signers

    def controls_allowed(self, rule: str) -> tuple[str, ...]:
        """The principals (OpenSSH patterns) who may send a control under ``rule`` (``answer``, ``approve`` --
        approve and refuse -- or ``review``); default everyone the allowed signers file lists."""
        controls: Mapping[str, Any] = self.doc.get("controls", {})
        return tuple(str(p) for p in controls.get(rule, ["*"]))

    @property
    def sandbox_mode(self) -> str:
        """``sandbox.mode``: ``landlock`` (the default) or ``none``."""
        return str(self.doc.get("sandbox", {}).get("mode", "landlock"))

    @property
    def sandbox_level(self) -> str:
        """``sandbox.level``: the least an agent may run at where Landlock exists -- ``namespace`` (the default:
        refuse to run agents without their own namespaces) or ``landlock`` (Landlock alone is accepted)."""
        return str(self.doc.get("sandbox", {}).get("level", "namespace"))

    @property
    def sandbox_required(self) -> bool:
        """``sandbox.required``: refuse to start a run without the sandbox (false by default)."""
        return bool(self.doc.get("sandbox", {}).get("required", False))

    @property
    def sandbox_writable(self) -> tuple[str, ...]:
        """``sandbox.writable``: more paths every agent may write (unexpanded)."""
        return tuple(self.doc.get("sandbox", {}).get("writable", ()))

    @property
    def sandbox_deny_read(self) -> tuple[str, ...]:
        """``sandbox.deny_read``: more paths agents may not read (unexpanded)."""
        return tuple(self.doc.get("sandbox", {}).get("deny_read", ()))

    @property
    def protected_paths(self) -> tuple[str, ...]:
        """The patterns of paths a delivery may not change, in the order they are judged (the last match decides):
        ``guardrails.protected_paths`` (:data:`DEFAULT_PROTECTED_PATHS` when the policy names none), then -- always,
        even when that list leaves them out or negates them -- :data:`ALWAYS_PROTECTED` and the ``allowed_signers``
        files (receipts', controls'). A guard the policy's own list could drop would be one edit of the policy away from
        gone."""
        listed = tuple(self.doc["guardrails"].get("protected_paths", DEFAULT_PROTECTED_PATHS))
        files = dict.fromkeys(f for f in (self.allowed_signers, self.controls_signers) if f and normalise(f))
        return (*listed, *ALWAYS_PROTECTED, *(literal(f) for f in files))


def diff_paths(old: Any, new: Any, path: str = "$") -> Iterator[str]:
    """JSON paths at which two documents differ (the deepest differing node of each branch)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                yield f"{path}.{key}"
            else:
                yield from diff_paths(old[key], new[key], f"{path}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from diff_paths(a, b, f"{path}[{index}]")
    elif canonical_json(old) != canonical_json(new):  # 600 and 600.0 are the same value
        yield path
