"""Launching an agent host for a worker, and knowing later whether it is the same process.

Every agent runs in its worker's worktree, in its own session and process group (so a stop reaches every
process it spawned), with stdin closed, its output appended to a private log in the worktree's git dir, and with
``AGENTOPS_RUN_ID``, ``AGENTOPS_WORKER_ID``, ``AGENTOPS_GENERATION``, ``AGENTOPS_MAILBOX``, ``AGENTOPS_PROMPT``
(and ``AGENTOPS_RECIPE`` for the scripted agent) set. Its identity is pid + start time, so a reused pid is never
mistaken for the agent.

Kinds and their default argv are described in :mod:`git_agentops.model.hosts` (the policy's effective form holds
them, so ``policy trust`` shows exactly what runs). A launch that names a ``session`` uses the host's
``resume_argv`` with ``{session}`` filled in. Placeholders are replaced by exact name only, in argv elements and in
``env`` values; in an ``env`` value holding JSON they are replaced inside its strings, JSON-escaped; in a
``shell = true`` string they are replaced shell-quoted (and ``{prompt}``, free text, is refused there by the policy).

Agents get the user's environment (their CLIs need its configuration) *scrubbed*: without any ``AGENTOPS_*``
variable of the supervisor, the key agents' sockets, and every credential (:func:`git_agentops.verify.credentials.
is_credential`: ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, anything named like a token or password or holding a
secret-shaped value) except the ones the host's ``pass_env`` names (its model's API key); plus the host's ``env``
from the policy, as written. Verification commands get far less (an allowlist). ``policy trust`` lists every
host's argv, env and pass_env as capabilities for that reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from ..model.hosts import builtin_hosts, default_pass_env, kind_of
from ..model.policy import Policy
from ..process.groups import ProcessIdentity, process_identity
from ..sandbox.plan import Sandbox
from ..verify.credentials import HeldSecrets, scrub
from ..verify.held import redact_held

HEADER = "\n=== generation "
"""Each generation's output in a host log starts after a line beginning with this."""


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One host of the policy, effective (defaults filled in)."""

    name: str
    kind: str
    argv: tuple[str, ...] | str
    shell: bool
    env: Mapping[str, str]
    resume_argv: tuple[str, ...] | str = ()  # a string only for a shell host, like argv
    resume: bool = False
    writable: tuple[str, ...] = ()  # what its agents may write outside their worktree, in the sandbox
    home_files: tuple[str, ...] = ()  # the person's files copied into its agents' private HOME
    network: bool = True  # False: its agents run in a network namespace of their own, with nothing in it
    pass_env: tuple[str, ...] | None = None  # the person's credential variables it gets (None: its kind's defaults)

    @property
    def binary(self) -> str | None:
        """The program a list argv starts (None for a built-in agent and shell strings)."""
        if kind_of(self.kind).builtin_module is not None or isinstance(self.argv, str) or not self.argv:
            return None
        return self.argv[0]


def host_spec(policy: Policy, name: str) -> HostSpec:
    """The host called ``name`` in the policy, or a built-in agent (``scripted``, :func:`builtin_hosts`).
    ``RUN_HOST_UNKNOWN``."""
    hosts = policy.doc["hosts"]
    if name not in hosts:
        builtin = {kind.name: kind for kind in builtin_hosts()}
        if name in builtin:
            return HostSpec(name, name, (), False, {}, network=builtin[name].network)
        known = ", ".join([*builtin, *hosts])
        raise AgentOpsError("RUN_HOST_UNKNOWN", f"no host {name!r} in the policy (known: {known})")
    host = hosts[name]
    argv = host.get("argv") or ()
    resume = host.get("resume_argv") or ()
    return HostSpec(
        name,
        host["kind"],
        argv if isinstance(argv, str) else tuple(argv),
        bool(host.get("shell")),
        dict(host.get("env", {})),
        resume if isinstance(resume, str) else tuple(resume),  # a string is one shell command, not its characters
        bool(host.get("resume")) and bool(resume),
        tuple(host.get("writable", ())),
        tuple(host.get("home_files", ())),
        bool(host.get("network", True)),
        passed_variables(policy, name),
    )


def check_available(spec: HostSpec, environ: Mapping[str, str]) -> None:
    """``RUN_HOST_FAILED`` when the host's program is not on ``PATH`` (checked before a run starts, not later)."""
    binary = spec.binary
    if binary is None or os.sep in binary:
        if binary is not None and not os.access(binary, os.X_OK):
            raise AgentOpsError("RUN_HOST_FAILED", f"host {spec.name!r}: {binary} is not an executable file")
        return
    if shutil.which(binary, path=environ.get("PATH")) is None:
        raise AgentOpsError(
            "RUN_HOST_FAILED",
            f"host {spec.name!r} ({spec.kind}) runs {binary!r}, which is not on PATH; install it, or name another "
            "host with --host (git agentops-doctor lists the agent CLIs it finds)",
        )


@dataclass(frozen=True, slots=True)
class Launch:
    """One generation to start: where, talking through which mailbox, with which prompt, logging where."""

    worktree: Path
    mailbox: Path
    prompt_file: Path
    log_file: Path
    run_id: str
    worker_id: str
    generation: int
    recipe: Path | None
    git_common_dir: Path | None = None
    session: str | None = None  # resume this host session instead of starting a fresh one
    extra: Mapping[str, str] = field(default_factory=dict)  # more placeholders (reviewers: input, report)
    workspace_env: Mapping[str, str] = field(default_factory=dict)  # AGENTOPS_PORT(S), services' ports


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` of ``values`` replaced, in one pass (exact names only; other braces stay).

    One pass, so a value that itself contains ``{worktree}`` -- a prompt can hold any text -- is never expanded.
    """
    if not values:
        return text
    pattern = re.compile("\\{(" + "|".join(re.escape(name) for name in values) + ")\\}")
    return pattern.sub(lambda match: values[match.group(1)], text)


def _fill_json(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return fill(value, values)
    if isinstance(value, list):
        return [_fill_json(v, values) for v in value]
    if isinstance(value, dict):
        return {fill(k, values): _fill_json(v, values) for k, v in value.items()}
    return value


def fill_env_value(text: str, values: Mapping[str, str]) -> str:
    """An ``env`` value with placeholders filled; a JSON value keeps being valid JSON (values are escaped)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except ValueError:
            return fill(text, values)
        return json.dumps(_fill_json(doc, values))
    return fill(text, values)


def placeholders(launch: Launch) -> dict[str, str]:
    """The values of every placeholder for this launch."""
    prompt = launch.prompt_file.read_text("utf-8") if launch.prompt_file.exists() else ""
    values = {
        "prompt_file": str(launch.prompt_file),
        "prompt": prompt,
        "mailbox": str(launch.mailbox),
        "worktree": str(launch.worktree),
        "git_common_dir": str(launch.git_common_dir or ""),
        "session": launch.session or "",
        "input": str(launch.mailbox / "instructions.json"),  # what the agent reads: a reviewer's is its review input
    }
    values.update(launch.extra)
    return values


def command_for(spec: HostSpec, launch: Launch) -> tuple[list[str], bool]:
    """The argv (or, for ``shell = true``, the one shell string) this launch runs.

    In a list each placeholder fills (part of) one argv element, verbatim: no shell ever parses it. In a shell
    string every value is substituted ``shlex.quote``-d, so a worktree path with a space or a quote, or a session id
    a host reported, stays one word and runs nothing; the policy refuses ``{prompt}`` there anyway
    (:func:`git_agentops.policy.load.shell_host_problems`), and quoting keeps an older cached policy safe too.
    """
    if (module := kind_of(spec.kind).builtin_module) is not None:  # our own agent, run by our own interpreter
        return [sys.executable, "-m", module], False
    template = spec.resume_argv if launch.session and spec.resume_argv else spec.argv
    if not template:
        raise AgentOpsError("RUN_HOST_FAILED", f"host {spec.name!r} ({spec.kind}) has no argv")
    values = placeholders(launch)
    if isinstance(template, str):
        return [fill(template, {name: shlex.quote(value) for name, value in values.items()})], True
    return [fill(arg, values) for arg in template], False


AGENT_GIT_CONFIG: Final = (("gc.auto", "0"), ("maintenance.auto", "false"))
"""Given to every agent's git through ``GIT_CONFIG_COUNT``: an automatic gc would try to pack refs, which a sandboxed
agent may not write (and an unsandboxed one has no business doing)."""


KEY_AGENTS: Final = frozenset({"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO"})
"""The user's key agents: the receipt signing key may be in ``ssh-agent``, and an agent told where its socket is
could have receipts signed (Landlock does not guard connecting to a named socket). A host that needs one (to
fetch over ssh) names it in its ``pass_env`` or sets it in its ``env``."""


def passed_variables(policy: Policy, host: str) -> tuple[str, ...]:
    """The credential variables of the person's environment ``[hosts.<host>] pass_env`` gives its agents (the
    kind's defaults, :func:`git_agentops.model.hosts.default_pass_env`, for a built-in agent like ``scripted``)."""
    hosts = policy.doc["hosts"]
    if host not in hosts:
        return default_pass_env(host)
    return tuple(hosts[host].get("pass_env", default_pass_env(hosts[host]["kind"])))


def agent_environment(
    environ: Mapping[str, str], spec: HostSpec, launch: Launch, *, pass_env: Collection[str] | None = None
) -> dict[str, str]:
    """The user's environment scrubbed, plus the host's env and the worker's ids.

    Scrubbed: without the supervisor's ``AGENTOPS_*``, the key agents' sockets (:data:`KEY_AGENTS`) and every
    credential variable (:func:`git_agentops.verify.credentials.scrub`), except the ones ``pass_env`` names (the
    host's ``pass_env`` from the policy, :func:`passed_variables`; None: its kind's defaults). The host's ``env``
    is the person's own writing and is kept as it is.
    """
    passed = frozenset(default_pass_env(spec.kind) if pass_env is None else pass_env)
    kept = scrub(environ, passed)
    env = {k: v for k, v in kept.items() if not k.startswith("AGENTOPS_") and (k not in KEY_AGENTS or k in passed)}
    env.pop("OLDPWD", None)
    env["PWD"] = str(launch.worktree)  # opencode works in $PWD, not its cwd: the person's PWD is their checkout
    scripts = os.path.dirname(sys.executable)  # where git-agentops-request lives next to this interpreter
    env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")]) if env.get("PATH") else scripts
    values = placeholders(launch)
    values.pop("prompt")  # free text never goes into the environment through a placeholder
    env.update({name: fill_env_value(value, values) for name, value in spec.env.items()})
    env.update(
        {
            "AGENTOPS_RUN_ID": launch.run_id,
            "AGENTOPS_WORKER_ID": launch.worker_id,
            "AGENTOPS_GENERATION": str(launch.generation),
            "AGENTOPS_MAILBOX": str(launch.mailbox),
            "AGENTOPS_PROMPT": str(launch.prompt_file),
        }
    )
    env.update(launch.workspace_env)
    if launch.recipe is not None:
        env["AGENTOPS_RECIPE"] = str(launch.recipe)
    count = int(env.get("GIT_CONFIG_COUNT", "0") or 0) if env.get("GIT_CONFIG_COUNT", "0").isdigit() else 0
    for offset, (key, value) in enumerate(AGENT_GIT_CONFIG):  # the agent's git never packs refs on its own
        env[f"GIT_CONFIG_KEY_{count + offset}"], env[f"GIT_CONFIG_VALUE_{count + offset}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(count + len(AGENT_GIT_CONFIG))
    return env


def header(spec: HostSpec, launch: Launch, argv: list[str]) -> str:
    """The log line that opens a generation's output: who, how, never the prompt itself."""
    prompt = placeholders(launch)["prompt"]
    shown = [a if a != prompt or not prompt else f"<prompt: {len(prompt)} chars>" for a in argv]
    if len(shown) > 12:
        shown = [*shown[:12], f"... {len(shown) - 12} more"]
    how = f"resuming session {launch.session}" if launch.session and spec.resume_argv else "fresh session"
    return f"{HEADER.lstrip(chr(10))}{launch.generation} of {launch.worker_id} ({spec.name}, {how}): {shown!r}\n"


def unnest(spec: HostSpec, argv: list[str]) -> tuple[list[str], str]:
    """Inside our sandbox, the argv of a host whose own sandbox cannot nest in ours, with it turned off (ours is the
    wall: :meth:`git_agentops.model.hosts.base.HostKind.unnest`); and the log line that says so ("" if unchanged)."""
    return kind_of(spec.kind).unnest(argv)


def start(
    spec: HostSpec,
    launch: Launch,
    *,
    environ: Mapping[str, str],
    sandbox: Sandbox | None = None,
    spec_path: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessIdentity]:
    """Start the agent -- under the launcher (reaper and, in ``landlock`` mode, the kernel sandbox) when ``sandbox``
    is given, its spec written to ``spec_path``; ``RUN_HOST_FAILED`` when it cannot be started."""
    argv, shell = command_for(spec, launch)
    env = agent_environment(environ, spec, launch, pass_env=spec.pass_env)
    note = ""
    if sandbox is not None and sandbox.mode != "none" and not shell:
        argv, note = unnest(spec, argv)
    run_argv: list[str] | str = argv if not shell else argv[0]
    if sandbox is not None and spec_path is not None:
        env = sandbox.environment(env)  # its object quarantine, private HOME and TMPDIR; none of the person's servers
        run_argv = sandbox.wrap(argv if not shell else ["/bin/sh", "-c", argv[0]], launch.worktree, spec_path)
        shell = False
    launch.log_file.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(launch.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.write(log, ("\n" + header(spec, launch, argv) + note).encode())
        proc = subprocess.Popen(
            run_argv,
            shell=shell,
            cwd=launch.worktree,
            env=env,
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


def generation_output(log_file: Path, generation: int, *, limit: int = 4 * 1024 * 1024) -> str:
    """What the current (last) generation wrote to the host log, up to ``limit`` bytes from its end."""
    try:
        with log_file.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    marker = f"{HEADER}{generation} "
    at = data.rfind(marker)
    if at < 0:
        return data
    body = data[at + 1 :]
    return body.split("\n", 1)[1] if "\n" in body else ""


def generation_tail(log_file: Path, generation: int, lines: int, held: HeldSecrets) -> str:
    """The last ``lines`` non-blank lines the current generation wrote (its own words, not the header naming its
    argv), each cut at 400 characters, with every held secret in any textual form redacted: what an agent printed
    goes into the run's state, which a shared remote gives to every clone."""
    output = generation_output(log_file, generation, limit=64 * 1024)
    kept = [line for line in output.splitlines() if line.strip()][-lines:]
    return redact_held("\n".join(line[:400] for line in kept), held) or "(it wrote nothing)"
