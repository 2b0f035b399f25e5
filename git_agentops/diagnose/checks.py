"""Health checks: is this machine and this repository ready for git-agentops?

Each check has a status: ``ok``; ``warn`` (works, but something a user should know: no repository here, hooks
not installed, no ssh-keygen so receipts cannot be signed); ``fail`` (the toolkit cannot work: a missing or too
old dependency, an unreadable schema). The report is healthy when nothing failed.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from .. import __version__


class CheckStatus(StrEnum):
    """How a check came out; its value is what ``doctor --json`` prints as ``status``."""

    OK = "ok"
    WARN = "warn"  # works, but a user should know
    FAIL = "fail"  # the toolkit cannot work: the report is not healthy


MIN_GIT = (2, 30)  # reference-transaction hook, --path-format
MERGE_TREE_GIT = (2, 38)  # git merge-tree --write-tree (differential tests, benchmarks)
MIN_LIBGIT2 = (1, 7)


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    status: CheckStatus
    detail: str
    value: Any = None
    remedy: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.id, "status": self.status, "detail": self.detail}
        if self.value is not None:
            doc["value"] = self.value
        if self.remedy:
            doc["remedy"] = self.remedy
        return doc


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(check.status != CheckStatus.FAIL for check in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "toolkitVersion": __version__,
            "checks": [check.to_json() for check in self.checks],
        }


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _python() -> Check:
    version = platform.python_version()
    return Check("python", CheckStatus.OK, f"Python {version} ({sys.executable})", version)


def _pygit2() -> Check:
    try:
        import pygit2
    except ImportError as exc:
        return Check("pygit2", CheckStatus.FAIL, f"pygit2 cannot be imported: {exc}", remedy="pip install pygit2")
    libgit2 = pygit2.LIBGIT2_VERSION
    pygit2_version = getattr(pygit2, "__version__", "?")
    features = [name for name in ("THREADS", "HTTPS", "SSH") if pygit2.features & getattr(pygit2.enums.Feature, name)]
    value = {"pygit2": pygit2_version, "libgit2": libgit2, "features": features}
    detail = f"pygit2 {pygit2_version}, libgit2 {libgit2} ({', '.join(features) or 'no optional features'})"
    if _version_tuple(libgit2) < MIN_LIBGIT2:
        return Check("pygit2", CheckStatus.FAIL, detail + " -- libgit2 too old", value, "pip install --upgrade pygit2")
    return Check("pygit2", CheckStatus.OK, detail, value)


def _module(name: str, dist: str, *, optional: str | None = None) -> Check:
    """Whether ``dist`` is installed; ``optional`` says what it is for when the toolkit runs without it."""
    from importlib import import_module
    from importlib.metadata import PackageNotFoundError, version

    try:
        import_module(name)
        found = version(dist)
    except (ImportError, PackageNotFoundError) as exc:
        if optional is not None:
            return Check(
                dist, CheckStatus.OK, f"{dist} is not installed (optional: {optional})", None, f"pip install {dist}"
            )
        return Check(dist, CheckStatus.FAIL, f"{dist} is not installed: {exc}", remedy=f"pip install {dist}")
    return Check(dist, CheckStatus.OK, f"{dist} {found}" + (f" (optional: {optional})" if optional else ""), found)


def _schemas() -> Check:
    from ..errors import AgentOpsError
    from ..schema import documents

    try:
        import jsonschema  # noqa: F401 -- the reference validator, from the test extra
    except ImportError:
        try:
            count = len(documents.schema_names())
        except (OSError, ValueError, RuntimeError, AgentOpsError) as exc:
            return Check(
                "schemas", CheckStatus.FAIL, f"the JSON Schemas do not load: {exc}", remedy="reinstall git-agentops"
            )
        return Check(
            "schemas", CheckStatus.OK, f"{count} JSON Schemas load (jsonschema absent: not meta-validated)", count
        )
    try:
        count = documents.check_schemas()
    except (OSError, ValueError, RuntimeError, AgentOpsError) as exc:
        return Check(
            "schemas", CheckStatus.FAIL, f"the JSON Schemas do not load: {exc}", remedy="reinstall git-agentops"
        )
    except Exception as exc:  # noqa: BLE001 -- jsonschema raises its own SchemaError hierarchy
        return Check("schemas", CheckStatus.FAIL, f"a JSON Schema is invalid: {exc}", remedy="reinstall git-agentops")
    return Check("schemas", CheckStatus.OK, f"{count} JSON Schemas load and are valid draft 2020-12", count)


def _git(path: str | None) -> Check:
    git = shutil.which("git", path=path)
    if git is None:
        return Check("git", CheckStatus.FAIL, "git is not on PATH", remedy="install git 2.38 or newer")
    try:
        out = subprocess.run([git, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("git", CheckStatus.FAIL, f"'git --version' failed: {exc}")
    version = _version_tuple(out)
    shown = ".".join(map(str, version))
    if version < MIN_GIT:
        return Check("git", CheckStatus.FAIL, f"git {shown} is older than 2.30", shown, "install git 2.38 or newer")
    if version < MERGE_TREE_GIT:
        return Check("git", CheckStatus.WARN, f"git {shown}: 'merge-tree --write-tree' needs 2.38", shown)
    return Check("git", CheckStatus.OK, f"git {shown} ({git})", shown)


def _ssh_keygen(path: str | None) -> Check:
    found = shutil.which("ssh-keygen", path=path)
    if found is None:
        return Check(
            "ssh-keygen",
            CheckStatus.WARN,
            "ssh-keygen is not on PATH: receipts can be neither signed nor verified",
            remedy="install OpenSSH 8.2 or newer",
        )
    return Check("ssh-keygen", CheckStatus.OK, f"ssh-keygen at {found}", found)


def _repository(start: Path) -> tuple[list[Check], Any]:
    import pygit2

    from ..clock import SystemClock
    from ..errors import AgentOpsError
    from ..gitstore.repo import open_store

    try:
        store = open_store(start, clock=SystemClock())
    except AgentOpsError as exc:
        return [Check("repository", CheckStatus.WARN, exc.message, remedy="run inside a Git repository")], None
    kind = "bare repository" if store.is_bare else f"worktree {store.workdir}"
    checks = [
        Check("repository", CheckStatus.OK, f"{kind}", str(store.workdir or store.git_dir)),
        Check("common-dir", CheckStatus.OK, str(store.common_dir), str(store.common_dir)),
        Check(
            "fsync",
            CheckStatus.OK,
            "agentops.fsync=true: objects and refs are fsynced (~3x slower writes)"
            if store.fsync
            else "agentops.fsync is off: fast, but a power loss can lose the last writes (git's default too)",
            store.fsync,
        ),
    ]
    stale = []
    now = time.time()
    for namespace in ("refs/agentops", "refs/notes/agentops"):
        root = store.common_dir / namespace
        if root.is_dir():
            stale += [p for p in root.rglob("*.lock") if now - p.stat().st_mtime > 60]
    if stale:
        checks.append(
            Check(
                "stale-locks",
                CheckStatus.WARN,
                f"{len(stale)} ref lock file(s) older than a minute: {stale[0]}",
                [str(p) for p in stale],
                "if no git-agentops or git process is running, delete them",
            )
        )
    del pygit2
    return checks, store


def _hooks(start: Path, path: str | None) -> Check:
    """Installed, missing and foreign hooks where git looks for them (``core.hooksPath`` included)."""
    from ..errors import AgentOpsError
    from ..hooks import HOOK_NAMES
    from ..hooks.install import SERVER_HOOKS, HookState, inspect, locate

    git = shutil.which("git", path=path)
    if git is None:
        return Check("hooks", CheckStatus.WARN, "git is not on PATH: hooks not checked")
    try:
        target = locate(start, git=git)
    except AgentOpsError as exc:
        return Check("hooks", CheckStatus.WARN, f"hooks not checked: {exc.message}")
    names = SERVER_HOOKS if target.bare else HOOK_NAMES
    found = inspect(target.directory, names)
    states = {h.name: h.state for h in found}
    installed = [h.name for h in found if h.state == HookState.INSTALLED]
    parts = [f"{len(installed)}/{len(names)} installed in {target.describe()}"]
    groups = {
        "foreign": [h.name for h in found if h.state == HookState.FOREIGN and not h.behind],
        "missing": [h.name for h in found if h.state == HookState.MISSING],
        "chained (their .legacy runs first)": [h.name for h in found if h.chained],
        "behind another tool's hook (ours runs as its .legacy)": [h.name for h in found if h.behind],
        "outdated (reinstall)": [h.name for h in found if h.outdated],
        "in the way": [f"{h.name}: {h.problem}" for h in found if h.problem],
    }
    parts += [f"{label}: {', '.join(hooks)}" for label, hooks in groups.items() if hooks]
    value = {
        **target.to_json(),
        "hooks": states,
        "chained": [h.name for h in found if h.chained],
        "behind": [h.name for h in found if h.behind],
        "outdated": [h.name for h in found if h.outdated],
    }
    working = all(h.state == HookState.INSTALLED or h.behind for h in found)
    if working and not any(h.outdated for h in found):
        return Check("hooks", CheckStatus.OK, "; ".join(parts), value)
    remedy = "git agentops-init --server" if target.bare else "git agentops-init --hooks"
    return Check("hooks", CheckStatus.WARN, "; ".join(parts), value, remedy + " (hooks are advisory)")


def _agents(path: str | None) -> Check:
    """The agent CLIs a policy's hosts can run, with their versions (none is fine: the scripted host is built in)."""
    from ..policy.starter import detect_agents

    found = detect_agents(path)
    value = [{"kind": a.kind, "path": a.path, "version": a.version} for a in found]
    if not found:
        return Check(
            "agents",
            CheckStatus.OK,
            "no agent CLI (claude, codex, opencode, gemini, aider) on PATH; the scripted host is built in",
            [],
        )
    return Check("agents", CheckStatus.OK, "; ".join(f"{a.kind} {a.version} ({a.path})" for a in found), value)


def _sandbox(store: Any, environ: Mapping[str, str]) -> Check:
    """The walls agents get here: Landlock's ABI, their own namespaces, the policy's mode and level; what they could
    reach without them (the signing key, the trust store, ssh-agent's socket); whether they would run as root."""
    from ..errors import AgentOpsError
    from ..sandbox.plan import choose_mode, kernel_abi, namespace_problem

    abi = kernel_abi()
    problem = namespace_problem()
    value: dict[str, Any] = {"landlockAbi": abi, "userNamespaces": problem is None, "root": os.getuid() == 0}
    exposed = []
    key = store.config_value("agentops.signingKey") if store is not None else None
    if key:
        exposed.append(f"the signing key {key}")
    state = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".local" / "state")
    exposed.append(f"the trust store {Path(state) / 'git-agentops'}")
    mode, level = _policy_sandbox(store)
    try:
        chosen, why = choose_mode(mode, False, level)
    except AgentOpsError as exc:
        chosen, why = "unavailable", exc.message
    value.update({"mode": mode, "level": chosen})
    detail = f"Landlock ABI {abi}" + (" (signals and abstract sockets scoped)" if abi >= 6 else "")
    detail += "; agents' own namespaces " + ("available" if problem is None else f"unavailable ({problem})")
    root = (
        "; agents would run as root (in their own user namespace they hold no capability; run as a user if you can)"
        if os.getuid() == 0
        else ""
    )
    if chosen in ("none", "unavailable"):
        return Check(
            "sandbox",
            CheckStatus.WARN,
            f"{detail}; agents run unconfined ({why}): they can read {' and '.join(exposed)}{root}",
            value,
            'use a kernel with Landlock (5.13+) and user namespaces, keep [sandbox] mode = "landlock"',
        )
    if chosen == "landlock":
        sock = environ.get("SSH_AUTH_SOCK")
        reach = f"; ssh-agent's socket {sock} is within their reach: a key in it signs for them" if sock else ""
        return Check(
            "sandbox",
            CheckStatus.WARN,
            f"{detail}; agents run under Landlock alone: the person's unix sockets (tmux, D-Bus...){reach}{root}",
            value,
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 / "
            "kernel.apparmor_restrict_unprivileged_userns=0)",
        )
    if abi < 6:
        return Check(
            "sandbox", CheckStatus.WARN, detail + "; agents may signal processes outside their sandbox" + root, value
        )
    if key and store is not None and store.workdir is not None:
        folder = Path(key).expanduser().resolve().parent
        if folder == Path(store.workdir).resolve() or folder in Path(store.workdir).resolve().parents:
            return Check(
                "sandbox",
                CheckStatus.WARN,
                f"{detail}; the signing key's directory {folder} holds the repository, so agents are denied only the"
                " key file, not the rest of that directory" + root,
                value,
                "keep the signing key in a directory of its own (e.g. ~/.config/git-agentops/keys/)",
            )
    if root:
        return Check("sandbox", CheckStatus.WARN, f"{detail}; agents cannot read {' or '.join(exposed)}{root}", value)
    return Check(
        "sandbox",
        CheckStatus.OK,
        f"{detail}; agents cannot read {' or '.join(exposed)}, nor reach the sockets of your session",
        value,
    )


def _policy_sandbox(store: Any) -> tuple[str, str]:
    """The policy's ``[sandbox] mode`` and ``level`` (the defaults without a readable policy)."""
    from ..errors import AgentOpsError
    from ..policy.load import cache_dir_for, load_policy

    if store is None or store.workdir is None:
        return "landlock", "namespace"
    try:
        policy = load_policy(store.workdir, cache_dir=cache_dir_for(store.common_dir))
    except AgentOpsError:  # a missing or broken policy is the policy check's business
        return "landlock", "namespace"
    return policy.sandbox_mode, policy.sandbox_level


def _signing(store: Any, environ: Mapping[str, str]) -> Check:
    """Where receipts are signed from: a private key file (readable by any process you run outside the sandbox)
    or ``ssh-agent`` (``agentops.signingKey`` naming the public key, as git's ``user.signingKey`` may)."""
    key = store.config_value("agentops.signingKey")
    if not key:
        return Check("signing", CheckStatus.OK, "receipts are unsigned (no agentops.signingKey)", None)
    path = Path(key).expanduser()
    text = path.read_text("utf-8", errors="replace")[:200] if path.is_file() else ""
    if not text:
        return Check(
            "signing", CheckStatus.WARN, f"agentops.signingKey {key} is not a readable file", key, "fix the path"
        )
    if "PRIVATE KEY" in text:
        return Check(
            "signing",
            CheckStatus.WARN,
            f"receipts are signed with the private key file {key}: the sandbox keeps it from agents, but any process"
            " you start outside one (a build tool, an unsandboxed run) can read it",
            key,
            f"ssh-add {key} and set agentops.signingKey to {key}.pub (receipts are then signed through ssh-agent)",
        )
    detail = f"receipts are signed through ssh-agent with {key}"
    if environ.get("SSH_AUTH_SOCK"):
        return Check("signing", CheckStatus.OK, detail + "; the agent is running", key)
    return Check(
        "signing",
        CheckStatus.WARN,
        detail + "; no agent found (SSH_AUTH_SOCK is unset)",
        key,
        f"ssh-add the key of {key}",
    )


def _service(environ: Mapping[str, str]) -> Check:
    """Which service manager keeps detached supervisors alive (``run start --detach``, ``resume``)."""
    from ..errors import AgentOpsError
    from ..service.manager import SWITCH, Manager, detect, linger

    try:
        found = detect(environ)
    except AgentOpsError as exc:
        return Check("service", CheckStatus.WARN, exc.message, None, f"unset {SWITCH} or set it to auto")
    value = {"manager": str(found.manager), "forced": found.forced}
    if found.manager is Manager.PROCESS:
        detail = f"detached supervisors are plain processes ({found.reason}): after a crash, 'run resume' restarts one"
        return Check("service", CheckStatus.OK, detail, value)
    detail = f"detached supervisors run as {found.reason}"
    if found.manager is Manager.SYSTEMD and linger(environ) is False:
        detail += "; without lingering your user manager, and runs with it, stop when you log out"
        return Check("service", CheckStatus.OK, detail, value, "loginctl enable-linger")
    return Check("service", CheckStatus.OK, detail, value)


def diagnose(start: Path, *, path: str | None, environ: Mapping[str, str] | None = None) -> Report:
    """Run every check. ``path`` is the PATH to search for git and ssh-keygen."""
    report = Report()
    report.checks.append(_python())
    pygit2_check = _pygit2()
    report.checks.append(pygit2_check)
    report.checks += [
        _module("tomli_w", "tomli-w"),
        _module("dulwich", "dulwich", optional="the tests cross-check our store against it"),
        _module("jsonschema", "jsonschema", optional="the doctor meta-validates the schemas with it"),
    ]
    report.checks.append(_schemas())
    report.checks += [_git(path), _ssh_keygen(path), _agents(path)]
    if pygit2_check.status != CheckStatus.FAIL:
        repo_checks, store = _repository(start)
        report.checks += repo_checks
        if store is not None:
            report.checks.append(_hooks(start, path))
            report.checks.append(_signing(store, environ or {}))
        report.checks.append(_sandbox(store, environ or {}))
    report.checks.append(_service(environ or {}))
    return report
