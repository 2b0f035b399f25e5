"""The sandbox of one agent launch: its level, its rules, its namespaces, and the launcher command that applies them.

Every agent starts under the launcher (:mod:`.launcher`, a standalone script run as ``python3 -I -S``): a per-agent
reaper (``PR_SET_CHILD_SUBREAPER``) that forks the agent, puts the child in namespaces of its own and applies
Landlock to it, and stops every descendant -- ``setsid`` and double-forked daemons included -- when the agent ends or
the worker is stopped. The **level** an agent runs at is one of:

* ``namespace`` (the default) -- its own user, mount and IPC namespaces (:mod:`.namespace`: private ``/tmp`` and
  ``/dev/shm``, the person's sockets and ``~/.ssh`` out of reach, no capability) with Landlock inside them;
* ``landlock`` -- Landlock alone: only where the machine cannot give namespaces and the policy says ``[sandbox]
  level = "landlock"``; the person's pathname sockets are then within reach, and ``run start``, ``run status`` and
  the receipt say so;
* ``none`` -- no wall (``[sandbox] mode = "none"``, or a kernel without Landlock when the policy allows it); the
  launcher still reaps.

At ``namespace`` and ``landlock``, an agent gets a private ``HOME`` (in its worktree's admin dir, kept across its
generations; the host's credential files the policy names are copied in, the person's own are never writable), its
own ``TMPDIR`` and XDG directories, and an object quarantine (:mod:`git_agentops.gitstore.quarantine`): the shared
object store is read-only to it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from ..gitstore.quarantine import agent_environment as quarantine_environment
from ..gitstore.quarantine import prepare as prepare_quarantine
from ..model.hosts import kind_of
from ..model.sandbox import LEVELS, Level
from .home import prepare_home
from .rules import Places, agent_rules, expand
from .spec import LAUNCHER, Mode, Namespace, Rule, SandboxSpec, launcher_command, write_spec

__all__ = [
    "GRACE",
    "LAUNCHER",
    "LEVELS",
    "Sandbox",
    "choose_mode",
    "for_reviewer",
    "for_worker",
    "kernel_abi",
    "namespace_problem",
]

GRACE: Final = 0.5
"""Seconds the launcher gives the agent's descendants between SIGTERM and SIGKILL (the supervisor gives it 3)."""


NAMESPACE_SCRIPT: Final = Path(__file__).with_name("namespace.py")

DROPPED_ENV: Final = (
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "WAYLAND_DISPLAY",
    "DISPLAY",
    "GNUPGHOME",
    "DOCKER_HOST",
    "KRB5CCNAME",
)
"""Variables naming the person's servers and sessions: a sandboxed agent is not told where they are (the key
agents' sockets are never passed at all: :data:`git_agentops.hosts.launch.KEY_AGENTS`)."""


def kernel_abi() -> int:
    """The Landlock ABI of this kernel (0: none)."""
    from .landlock import abi

    return abi()


@functools.cache
def namespace_problem() -> str | None:
    """Why agents cannot get their own namespaces here (None: they can), asked once of a child that tries: a fork
    of this process when it runs one thread (``run status``, ``doctor``), a new interpreter otherwise."""
    if threading.active_count() == 1:
        from .namespace import probe_forked

        return probe_forked()
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(NAMESPACE_SCRIPT), "probe"],
            capture_output=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the namespace probe could not run: {exc}"
    if done.returncode == 0:
        return None
    return done.stderr.decode(errors="replace").strip() or f"the namespace probe exited {done.returncode}"


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What one launch runs under: its level (``namespace``, ``landlock`` or ``none``), what is missing and why,
    its rules, namespaces, TMPDIR, private HOME and object quarantine (``(quarantine, shared objects)``)."""

    mode: str
    reason: str | None = None
    rules: tuple[Rule, ...] = ()
    tmpdir: Path | None = None
    grace: float = GRACE
    namespace: Namespace | None = None
    home: Path | None = None
    objects: tuple[Path, Path] | None = None
    person: tuple[tuple[str, str], ...] = ()  # the person's configuration, by the variables that name it
    config_env: tuple[tuple[str, str], ...] = ()  # where its host reads its settings: in the agent's own HOME

    def spec(self, argv: Sequence[str], cwd: Path) -> SandboxSpec:
        """The launcher's spec of running ``argv`` in ``cwd`` under this sandbox; a file ``argv`` names by its
        absolute path (the host's program, a script the policy names) stays visible in the agent's namespace."""
        mode = Mode.NONE if self.mode == Level.NONE else Mode.LANDLOCK
        namespace = self.namespace
        if namespace is not None:
            named = tuple(a for a in argv if a.startswith("/") and "\0" not in a and os.path.isfile(a))
            namespace = replace(namespace, keep=tuple(sorted({*namespace.keep, *named})))
        return SandboxSpec(tuple(argv), str(cwd), self.rules, mode=mode, grace=self.grace, namespace=namespace)

    def wrap(self, argv: Sequence[str], cwd: Path, spec_path: Path) -> list[str]:
        """Write the spec to ``spec_path`` (0600) and return the argv that starts the agent under the launcher."""
        write_spec(spec_path, self.spec(argv, cwd))
        return launcher_command(spec_path)

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """``environ`` as the agent gets it under this sandbox: its object quarantine; and when sandboxed, its
        private HOME, XDG directories and TMPDIR, without the variables that name the person's servers."""
        env = dict(environ)
        if self.objects is not None:
            env.update(quarantine_environment(self.objects[0].parent, self.objects[1].parent))
        env.update(self.config_env)
        if self.mode == Level.NONE:
            return env
        for name in DROPPED_ENV:
            env.pop(name, None)
        if self.home is not None:
            env.update({name: value for name, value in self.person if not env.get(name)})
            env.update(home_environment(self.home))
        if self.tmpdir is not None:
            env["TMPDIR"] = str(self.tmpdir)
        return env


PERSON_CONFIG: Final = (
    ("GIT_CONFIG_GLOBAL", (".gitconfig", ".config/git/config")),
    ("NPM_CONFIG_USERCONFIG", (".npmrc",)),
    ("PIP_CONFIG_FILE", (".config/pip/pip.conf", ".pip/pip.conf")),
    ("PYENV_ROOT", (".pyenv",)),
    ("NVM_DIR", (".nvm",)),
    ("VOLTA_HOME", (".volta",)),
    ("ASDF_DATA_DIR", (".asdf",)),
    ("RUSTUP_HOME", (".rustup",)),
)
"""The person's configuration and tool managers that tools find through HOME: with a private HOME, each variable
(unless already set) names the person's own, read-only -- their git identity, their npm registry and pip mirror, the
toolchains pyenv, nvm, volta, asdf and rustup installed."""


def person_config(environ: Mapping[str, str]) -> dict[str, str]:
    """:data:`PERSON_CONFIG` for ``environ``: each unset variable whose file or directory exists in the person's
    HOME, pointing at it."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    found = {}
    for name, candidates in PERSON_CONFIG:
        if environ.get(name):
            continue
        for rel in candidates:
            if os.path.exists(home / rel):
                found[name] = str(home / rel)
                break
    return found


def home_environment(home: Path) -> dict[str, str]:
    """HOME and the XDG base directories, all inside ``home``."""
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }


def choose_mode(mode: str, required: bool, level: str = Level.NAMESPACE) -> tuple[str, str | None]:
    """(``namespace``, ``landlock`` or ``none``; which walls are missing and why). ``RUN_SANDBOX_UNAVAILABLE`` when
    the policy asks for more than this machine gives: Landlock when ``required``, namespaces unless ``level =
    "landlock"``."""
    if mode == Mode.NONE:  # [sandbox] mode: the launcher's modes
        if required:
            raise AgentOpsError(
                "RUN_SANDBOX_UNAVAILABLE", 'the policy says [sandbox] required = true but also mode = "none"'
            )
        return Level.NONE, 'the policy says [sandbox] mode = "none"'
    abi = kernel_abi()
    if abi < 1:
        why = "this kernel has no Landlock (needs Linux 5.13+ with landlock in the LSM list)"
        if required:
            raise AgentOpsError("RUN_SANDBOX_UNAVAILABLE", f"the policy requires the sandbox, but {why}")
        return Level.NONE, why
    problem = namespace_problem()
    if problem is None:
        return Level.NAMESPACE, None
    why = (
        f"agents cannot get their own namespaces on this machine ({problem}): the person's unix sockets "
        "(tmux, ssh-agent, D-Bus...), /tmp and /dev/shm are within their reach"
    )
    if level == Level.LANDLOCK:
        return Level.LANDLOCK, why
    raise AgentOpsError(
        "RUN_SANDBOX_UNAVAILABLE",
        f"{why}; allow user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, "
        f'or the AppArmor restriction lifted), or accept Landlock alone with [sandbox] level = "landlock"',
    )


def for_worker(
    *,
    mode: str,
    reason: str | None,
    worktree: Path,
    admin_dir: Path,
    common_dir: Path,
    environ: Mapping[str, str],
    signing_key: str | None,
    host_writable: Sequence[str],
    policy_writable: Sequence[str],
    deny_read: Sequence[str],
    recipe: Path | None,
    home_files: Sequence[str] = (),
    network: bool = True,
    kind: str = "command",
    hook_command: str = "",
) -> Sandbox:
    """The sandbox of one worker generation: it writes its worktree, its admin dir (with its object quarantine,
    private HOME and TMPDIR) and its host's paths; it reads the shared object store; its rules are computed from
    where its things are (:mod:`.rules`)."""
    tmpdir = admin_dir / "agentops-tmp"
    return _sandbox(
        mode,
        reason,
        Places(worktree, admin_dir, common_dir, tmpdir, *_private(common_dir, environ, signing_key)),
        own=(worktree, admin_dir, tmpdir),
        home=admin_dir / "agentops-home",
        objects=(prepare_quarantine(admin_dir), common_dir / "objects"),
        environ=environ,
        writable=(*host_writable, *policy_writable),
        deny_read=deny_read,
        recipe=recipe,
        home_files=home_files,
        network=network,
        kind=kind,
        hook=hook_command,
    )


def for_reviewer(
    *,
    mode: str,
    reason: str | None,
    checkout: Path,
    scratch: Path,
    common_dir: Path,
    environ: Mapping[str, str],
    signing_key: str | None,
    host_writable: Sequence[str],
    policy_writable: Sequence[str],
    deny_read: Sequence[str],
    recipe: Path | None,
    home_files: Sequence[str] = (),
    network: bool = True,
    kind: str = "command",
    hook_command: str = "",
) -> Sandbox:
    """The sandbox of one reviewer: it reads the candidate ``checkout`` but writes only its ``scratch`` dir (its
    input, prompt, report, HOME and TMPDIR) -- a reviewer cannot change what it reviews, nor write any object."""
    tmpdir = scratch / "tmp"
    return _sandbox(
        mode,
        reason,
        Places(checkout, scratch, common_dir, tmpdir, *_private(common_dir, environ, signing_key)),
        own=(scratch, tmpdir),
        home=scratch / "home",
        objects=None,
        environ=environ,
        writable=(*host_writable, *policy_writable),
        deny_read=deny_read,
        recipe=recipe,
        home_files=home_files,
        network=network,
        kind=kind,
        hook=hook_command,
    )


def _private(
    common_dir: Path, environ: Mapping[str, str], signing_key: str | None
) -> tuple[Path, Path, Path, Path | None, tuple[Path, ...]]:
    """The supervisor's places an agent must not touch: private dir, clean checkouts, trust store, signing key --
    and the parts of the private dir it may read (the shared environments, the hooks' policy cache)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    state = environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    private = common_dir / "agentops"
    return (
        private,
        Path(cache) / "git-agentops",
        Path(state) / "git-agentops",
        expand(signing_key, environ) if signing_key else None,
        (private / "envs", private / "cache"),
    )


def _keep(places: Places, home: Path, extra: Sequence[Path], environ: Mapping[str, str]) -> tuple[str, ...]:
    """What the agent needs from beneath a directory its namespace covers: its own places, the repository, the
    interpreter and its packages, and every directory on its ``PATH``."""
    paths: list[str | Path] = [
        places.worktree,
        places.admin_dir,
        places.common_dir,
        places.tmpdir,
        home,
        *extra,
        *places.readable_private,
        *places.readable_files,
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        Path(__file__).resolve().parents[2],  # the package's own source root (an editable install, a checkout)
        *(p for p in sys.path if p.startswith("/")),
    ]
    for entry in environ.get("PATH", "").split(os.pathsep):
        if entry.startswith("/"):  # a bin dir comes with its prefix: npm's .bin links into ../<package>, a venv's
            name = os.path.basename(entry.rstrip("/"))  # bin into its lib
            paths.append(os.path.dirname(entry.rstrip("/")) if name in ("bin", ".bin") else entry)
    return tuple(sorted({str(p) for p in paths}))


HIDDEN_HOME: Final = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".password-store",
    ".config/gh",
    ".config/gcloud",
    ".config/hub",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".cargo/credentials.toml",
    ".config/git/credentials",
)
"""The person's credential stores in HOME, out of an agent's sight in its namespace: directories covered by an
empty tmpfs, files by ``/dev/null`` (Landlock alone lets agents read the rest of HOME)."""


def _hidden(environ: Mapping[str, str]) -> tuple[str, ...]:
    """What an agent's namespace covers (those that exist): the shared temporary and runtime directories, and the
    person's credential stores (:data:`HIDDEN_HOME`)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    shared = ("/tmp", "/var/tmp", "/dev/shm", f"/run/user/{os.getuid()}")  # noqa: S108
    candidates = (*shared, *(os.path.join(home, rel) for rel in HIDDEN_HOME))
    return tuple(path for path in candidates if os.path.exists(path) and not os.path.islink(path))


def _sandbox(
    mode: str,
    reason: str | None,
    places: Places,
    *,
    own: Sequence[Path],
    home: Path,
    objects: tuple[Path, Path] | None,
    environ: Mapping[str, str],
    writable: Sequence[str],
    deny_read: Sequence[str],
    recipe: Path | None,
    home_files: Sequence[str],
    network: bool,
    kind: str,
    hook: str,
) -> Sandbox:
    places.tmpdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config_env = tuple(kind_of(kind).config_env(str(home)).items())
    if mode == Level.NONE:  # no wall: the agent may write refs too, which must never name an object only it holds
        if config_env:  # a host reading its settings from a directory of its own gets one: never the person's
            prepare_home(
                home, kind=kind, home_files=home_files, environ=environ, worktree=places.worktree, hook_command=hook
            )
        return Sandbox(Level.NONE, reason, (), places.tmpdir, config_env=config_env)
    prepare_home(home, kind=kind, home_files=home_files, environ=environ, worktree=places.worktree, hook_command=hook)
    if recipe is not None:
        places = replace(places, readable_files=(recipe,))
    person = person_config(environ)
    agent_env = {**environ, **person, **home_environment(home)}  # a host's "~/.claude" is in its private HOME
    extra = []
    for text in writable:
        path = expand(text, agent_env)
        if not path.exists() and not path.suffix:  # a directory the host will want: make it, or it cannot
            path.mkdir(parents=True, exist_ok=True)
        extra.append(path)
    rules = agent_rules(places, own=(*own, home), writable=extra, deny_read=[expand(p, environ) for p in deny_read])
    namespace = None
    if mode == Level.NAMESPACE:
        namespace = Namespace(
            hide=_hidden(environ),
            keep=(*_keep(places, home, extra, agent_env), *person.values(), *_named_paths(environ)),
            own=tuple(str(p) for p in (*own, home)),
            network=network,
        )
    return Sandbox(
        mode,
        reason,
        tuple(rules),
        places.tmpdir,
        namespace=namespace,
        home=home,
        objects=objects,
        person=tuple(sorted(person.items())),
        config_env=config_env,
    )


def _named_paths(environ: Mapping[str, str]) -> list[str]:
    """Files the environment already names for the tools (``GIT_CONFIG_GLOBAL``...): visible in the namespace."""
    return [environ[name] for name, _ in PERSON_CONFIG if environ.get(name, "").startswith("/")]
