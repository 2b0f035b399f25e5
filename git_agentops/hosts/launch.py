"""Launching an agent host for a worker, and knowing later whether it is the same process.

Every agent runs in its worker's worktree, in its own session and process group (so a stop reaches every
process it spawned), with its output appended to a private log in the worktree's git dir, and with
``AGENTOPS_RUN_ID``, ``AGENTOPS_WORKER_ID``, ``AGENTOPS_GENERATION``, ``AGENTOPS_MAILBOX``, ``AGENTOPS_PROMPT``
(and ``AGENTOPS_RECIPE`` for the scripted agent) set. Its identity is pid + start time, so a reused pid is never
mistaken for the agent.

Kinds:

* ``scripted`` (built in, always available): the deterministic recipe-following agent,
  ``python -m git_agentops.cli.agent``;
* ``command``: any argv from the policy; ``{prompt_file}``, ``{prompt}``, ``{mailbox}``, ``{worktree}`` in an
  argument are replaced;
* ``claude``, ``codex``, ``opencode``: command hosts with a default argv when the policy gives none.

Agents get the user's environment (they need their own credentials and configuration), minus any
``AGENTOPS_*`` variable of the supervisor, plus the host's ``env`` from the policy -- unlike verification
commands, which get a scrubbed environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from ..model.policy import Policy
from ..process.groups import ProcessIdentity, process_identity

DEFAULT_ARGV: Final = {
    "claude": ("claude", "-p", "{prompt}", "--permission-mode", "acceptEdits"),
    "codex": ("codex", "exec", "--full-auto", "{prompt}"),
    "opencode": ("opencode", "run", "{prompt}"),
}


@dataclass(frozen=True, slots=True)
class HostSpec:
    name: str
    kind: str
    argv: tuple[str, ...] | str
    shell: bool
    env: Mapping[str, str]


def host_spec(policy: Policy, name: str) -> HostSpec:
    """The host called ``name`` in the policy (``scripted`` is built in). ``RUN_HOST_UNKNOWN``."""
    hosts = policy.doc["hosts"]
    if name not in hosts:
        if name == "scripted":
            return HostSpec("scripted", "scripted", (), False, {})
        raise AgentOpsError("RUN_HOST_UNKNOWN", f"no host {name!r} in the policy (known: scripted, {', '.join(hosts)})")
    host = hosts[name]
    argv = host.get("argv") or DEFAULT_ARGV.get(host["kind"], ())
    return HostSpec(
        name,
        host["kind"],
        argv if isinstance(argv, str) else tuple(argv),
        bool(host.get("shell")),
        dict(host.get("env", {})),
    )


@dataclass(frozen=True, slots=True)
class Launch:
    worktree: Path
    mailbox: Path
    prompt_file: Path
    log_file: Path
    run_id: str
    worker_id: str
    generation: int
    recipe: Path | None


def command_for(spec: HostSpec, launch: Launch) -> tuple[list[str], bool]:
    if spec.kind == "scripted":
        return [sys.executable, "-m", "git_agentops.cli.agent"], False
    if not spec.argv:
        raise AgentOpsError("RUN_HOST_FAILED", f"host {spec.name!r} ({spec.kind}) has no argv")
    prompt = launch.prompt_file.read_text("utf-8") if launch.prompt_file.exists() else ""
    values = {
        "prompt_file": str(launch.prompt_file),
        "prompt": prompt,
        "mailbox": str(launch.mailbox),
        "worktree": str(launch.worktree),
    }
    if isinstance(spec.argv, str):
        return [spec.argv.format_map(_Safe(values))], True
    return [arg.format_map(_Safe(values)) for arg in spec.argv], False


class _Safe(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def agent_environment(environ: Mapping[str, str], spec: HostSpec, launch: Launch) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if not k.startswith("AGENTOPS_")}
    scripts = os.path.dirname(sys.executable)  # where git-agentops-request lives next to this interpreter
    env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")]) if env.get("PATH") else scripts
    env.update(spec.env)
    env.update(
        {
            "AGENTOPS_RUN_ID": launch.run_id,
            "AGENTOPS_WORKER_ID": launch.worker_id,
            "AGENTOPS_GENERATION": str(launch.generation),
            "AGENTOPS_MAILBOX": str(launch.mailbox),
            "AGENTOPS_PROMPT": str(launch.prompt_file),
        }
    )
    if launch.recipe is not None:
        env["AGENTOPS_RECIPE"] = str(launch.recipe)
    return env


def start(
    spec: HostSpec, launch: Launch, *, environ: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], ProcessIdentity]:
    """Start the agent; ``RUN_HOST_FAILED`` when it cannot be started."""
    argv, shell = command_for(spec, launch)
    launch.log_file.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(launch.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.write(log, f"\n=== generation {launch.generation} of {launch.worker_id}: {argv!r}\n".encode())
        proc = subprocess.Popen(
            argv if not shell else argv[0],
            shell=shell,
            cwd=launch.worktree,
            env=agent_environment(environ, spec, launch),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise AgentOpsError("RUN_HOST_FAILED", f"could not start host {spec.name!r}: {exc}") from exc
    finally:
        os.close(log)
    identity = process_identity(proc.pid)
    if identity is None:  # it already exited: still report its pid so the supervisor reaps and records it
        identity = ProcessIdentity(proc.pid, 0)
    return proc, identity
