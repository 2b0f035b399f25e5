"""Detached supervisors the OS keeps alive: a transient systemd user unit, a launchd agent, or a plain process.

A supervisor that dies (``kill -9``, the OOM killer, a bug) loses nothing -- the next one adopts what it left --
but somebody had to notice and ``resume``. ``run start --detach`` and ``resume`` therefore hand the supervisor to
the user's service manager where there is one, and it starts the supervisor again after a crash:

* **systemd** (Linux, a reachable user manager): ``systemd-run --user`` starts a transient unit
  ``agentops-<run>-<repo tag>-<n>.service`` (a new ``n`` each start), collected once it ends (``--collect``), so
  nothing outlives the run and a reboot or logout does not bring it back (``supervise``/``resume`` do, as before).
* **launchd** (macOS, a GUI login domain): an agent bootstrapped into ``gui/<uid>`` from a plist that is removed
  again right after (launchd keeps the job, and its environment, in memory); ``run stop``/``pause`` boot it out.
* **process** anywhere else, or with ``AGENTOPS_SUPERVISOR_MANAGER=process``: the detached process of before,
  not restarted after a crash.

Which exits are restarted, and why. ``supervise`` exits 0 (complete), 1 (blocked, budget-limited, paused, stopped:
``_exit_for`` in :mod:`git_agentops.cli.run`), 2 (usage), 3 (refused: ``RUN_RESTART_STORM``, ``RUN_NOT_ACTIVE``,
``RUN_SUPERVISOR_ACTIVE``, an untrusted policy), 130 (SIGTERM or SIGINT: it stopped its workers first), 4 (an
internal error) or dies by a signal. Only the last two are crashes: ``Restart=on-failure`` with
``RestartPreventExitStatus=1 2 3 130`` (launchd has no such list, so its agent runs ``python -m
git_agentops.cli.keepalive supervise RUN``, which maps every deliberate end to 0 for ``KeepAlive.SuccessfulExit =
false``).

How often. The supervisor's own rule decides: its :data:`~git_agentops.model.run.STORM_STARTS`-th start within
:data:`~git_agentops.model.run.STORM_WINDOW` seconds of the last user resume is refused (``RUN_RESTART_STORM``)
and blocks the run. The manager must let that start happen -- a stricter limit would leave an ``active`` run with
nobody serving it and no reason recorded -- so its start limit is looser (two more starts in the same window) and
only stops a supervisor that dies before it can count its start.

``KillMode=process``: the manager never kills the agents a crashed supervisor leaves; the next supervisor deals
with them as after any crash (README "Runs"). Stopping the unit sends SIGTERM to the supervisor alone, which
stops its agents itself.

The environment is the one a detached supervisor gets today (``ctx.env``), minus what belongs to the calling
shell or to systemd itself. ``systemd-run`` is given only the names (``--setenv=NAME``) and takes the values
from its own environment, so nothing shows on a command line; the user manager keeps them in its transient unit
file under ``$XDG_RUNTIME_DIR`` (0700, yours alone), as launchd keeps them in memory.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import platform
import plistlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ..errors import EXIT_INTERRUPTED, EXIT_NEGATIVE, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, AgentOpsError
from ..model.run import STORM_STARTS, STORM_WINDOW

SWITCH: Final = "AGENTOPS_SUPERVISOR_MANAGER"
"""``auto`` (the default), ``systemd``, ``launchd`` or ``process``."""

RESTART_SEC: Final = 5
CLEAN_EXITS: Final = (EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE, EXIT_REFUSED, EXIT_INTERRUPTED)
"""Exit statuses of ``supervise`` that end it on purpose: never restarted."""
START_LIMIT_BURST: Final = STORM_STARTS + 2
START_LIMIT_INTERVAL: Final = int(STORM_WINDOW)
RECORD: Final = "supervisor.service"
"""The run directory's note of the unit or job its last detached supervisor was started as."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DROPPED: Final = frozenset(
    {"PWD", "OLDPWD", "SHLVL", "_", "NOTIFY_SOCKET", "INVOCATION_ID", "JOURNAL_STREAM", "MAINPID", "MANAGERPID"}
    | {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "SYSTEMD_EXEC_PID", "WATCHDOG_PID", "WATCHDOG_USEC"}
)


class Manager(enum.StrEnum):
    SYSTEMD = "systemd"
    LAUNCHD = "launchd"
    PROCESS = "process"


class Wanted(enum.StrEnum):
    """What ``AGENTOPS_SUPERVISOR_MANAGER`` may say: a :class:`Manager`, or ``auto`` (unset too): the platform's
    own manager when it is available, else a plain process."""

    AUTO = "auto"
    SYSTEMD = Manager.SYSTEMD.value
    LAUNCHD = Manager.LAUNCHD.value
    PROCESS = Manager.PROCESS.value


@dataclass(frozen=True, slots=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], Mapping[str, str]], Completed]
"""Runs a command with an environment; tests pass a fake."""


def run_command(argv: Sequence[str], env: Mapping[str, str]) -> Completed:
    """The real :data:`Runner` (30 s at most; a missing program or a timeout is exit 127 / 124)."""
    try:
        done = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError as exc:
        return Completed(127, "", str(exc))
    except subprocess.TimeoutExpired:
        return Completed(124, "", f"{argv[0]} did not answer within 30 s")
    return Completed(done.returncode, done.stdout, done.stderr)


# -- which manager -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Availability:
    manager: Manager
    reason: str
    forced: bool = False


def _systemd(env: Mapping[str, str], run: Runner) -> str | None:
    """None when a user systemd can take the supervisor; otherwise why not."""
    path = env.get("PATH")
    missing = [tool for tool in ("systemd-run", "systemctl") if shutil.which(tool, path=path) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH"
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime:
        return "XDG_RUNTIME_DIR is not set (no login session)"
    if not Path(runtime, "systemd", "private").exists():
        return f"no user systemd listens in {runtime}/systemd/private"
    done = run(["systemctl", "--user", "show-environment"], env)
    if done.returncode != 0:
        return f"'systemctl --user show-environment' failed: {(done.stderr or done.stdout).strip()[:200]}"
    return None


def _launchd(env: Mapping[str, str], run: Runner) -> str | None:
    if shutil.which("launchctl", path=env.get("PATH")) is None:
        return "launchctl not on PATH"
    done = run(["launchctl", "print", f"gui/{os.getuid()}"], env)
    if done.returncode != 0:
        return f"no GUI login domain gui/{os.getuid()} (an ssh session?)"
    return None


def detect(env: Mapping[str, str], *, system: str | None = None, run: Runner = run_command) -> Availability:
    """The manager a detached supervisor would run under, and why. ``RUN_SERVICE_UNAVAILABLE`` when
    ``AGENTOPS_SUPERVISOR_MANAGER`` names an unknown manager, or one not available here."""
    named = (env.get(SWITCH) or Wanted.AUTO).strip().lower()
    system = system or platform.system()
    if named not in tuple(Wanted):
        raise AgentOpsError("RUN_SERVICE_UNAVAILABLE", f"{SWITCH}={named!r}: say auto, systemd, launchd or process")
    wanted = Wanted(named)
    if wanted is Wanted.PROCESS:
        return Availability(Manager.PROCESS, f"{SWITCH}=process", forced=True)
    candidates = {"Linux": Manager.SYSTEMD, "Darwin": Manager.LAUNCHD}
    native = candidates.get(system)
    if wanted is not Wanted.AUTO and Manager(wanted.value) is not native:
        raise AgentOpsError("RUN_SERVICE_UNAVAILABLE", f"{SWITCH}={wanted}: not available on {system}")
    if native is None:
        return Availability(Manager.PROCESS, f"no supported service manager on {system}")
    why_not = _systemd(env, run) if native is Manager.SYSTEMD else _launchd(env, run)
    if why_not is None:
        how = "a systemd user unit" if native is Manager.SYSTEMD else "a launchd agent"
        return Availability(native, f"{how}, restarted after a crash", forced=wanted is not Wanted.AUTO)
    if wanted is not Wanted.AUTO:
        raise AgentOpsError("RUN_SERVICE_UNAVAILABLE", f"{SWITCH}={wanted}, but {why_not}")
    return Availability(Manager.PROCESS, why_not)


def linger(env: Mapping[str, str]) -> bool | None:
    """Whether systemd keeps this user's manager (and so its units) running after logout; None if unknown."""
    import pwd

    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = env.get("USER") or env.get("LOGNAME") or ""
    folder = Path("/var/lib/systemd/linger")
    return (folder / user).exists() if user and folder.is_dir() else None


# -- what the supervisor runs as -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """A supervisor to hand to a service manager: the same for systemd and launchd."""

    name: str
    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    log: Path
    description: str


def service_name(run_id: str, common_dir: Path) -> str:
    """``agentops-<run>-<tag>``: the tag (from the repository's git dir) keeps equal run ids of two repositories
    apart, so nothing ever stops another repository's supervisor."""
    tag = hashlib.sha256(str(common_dir).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"agentops-{re.sub(r'[^A-Za-z0-9_.-]', '_', run_id)[:128]}-{tag}"


def service_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the calling shell's and systemd's own variables, and without what a unit cannot carry (a
    name that is not an identifier, a value with control characters other than tab and newline)."""
    return {
        name: value
        for name, value in env.items()
        if _NAME.fullmatch(name)
        and name not in _DROPPED
        and not any((ord(c) < 32 and c not in "\t\n") or ord(c) == 127 for c in value)
    }


def supervisor_spec(run_id: str, *, common_dir: Path, cwd: Path, env: Mapping[str, str], log: Path) -> ServiceSpec:
    return ServiceSpec(
        name=service_name(run_id, common_dir),
        argv=(sys.executable, "-m", "git_agentops.cli.run", "supervise", run_id),
        cwd=cwd,
        env=service_env(env),
        log=log,
        description=f"git-agentops supervisor of {run_id} in {cwd}",
    )


def unit_properties(spec: ServiceSpec) -> list[tuple[str, str, str]]:
    """(section, key, value) of the unit, besides its description, command and environment."""
    return [
        ("Unit", "CollectMode", "inactive-or-failed"),
        ("Unit", "StartLimitIntervalSec", str(START_LIMIT_INTERVAL)),
        ("Unit", "StartLimitBurst", str(START_LIMIT_BURST)),
        ("Service", "Type", "exec"),
        ("Service", "WorkingDirectory", str(spec.cwd)),
        ("Service", "Restart", "on-failure"),
        ("Service", "RestartSec", str(RESTART_SEC)),
        ("Service", "RestartPreventExitStatus", " ".join(str(s) for s in CLEAN_EXITS)),
        ("Service", "KillMode", "process"),
        ("Service", "StandardInput", "null"),
        ("Service", "StandardOutput", f"append:{spec.log}"),
        ("Service", "StandardError", f"append:{spec.log}"),
    ]


def _exec_arg(arg: str) -> str:
    return arg.replace("$", "$$")  # systemd expands ${NAME} and $NAME in command lines; $$ is a literal $


def systemd_run_argv(spec: ServiceSpec) -> list[str]:
    """The ``systemd-run`` command starting ``spec``. Only variable *names* are on it: run it with ``spec.env``."""
    # not --quiet: that also silences why a start job failed (the program ended before the manager saw its exec)
    argv = ["systemd-run", "--user", f"--unit={spec.name}.service", f"--description={spec.description}"]
    argv += ["--collect", f"--working-directory={spec.cwd}"]
    argv += [f"--property={key}={value}" for section, key, value in unit_properties(spec) if key not in _FLAGS]
    argv += [f"--setenv={name}" for name in sorted(spec.env)]
    return [*argv, "--", *(_exec_arg(a) for a in spec.argv)]


_FLAGS: Final = frozenset({"CollectMode", "WorkingDirectory"})
"""Properties :func:`systemd_run_argv` gives as flags of their own (``--collect``, ``--working-directory``)."""


def _quoted(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def unit_file(spec: ServiceSpec) -> str:
    """The unit file equivalent to :func:`systemd_run_argv` (what ``systemd-analyze verify`` checks)."""
    sections: dict[str, list[str]] = {"Unit": [f"Description={spec.description.replace('%', '%%')}"], "Service": []}
    for section, key, value in unit_properties(spec):
        sections[section].append(f"{key}={value.replace('%', '%%')}")
    sections["Service"] += [f"Environment={_quoted(f'{k}={v}')}" for k, v in sorted(spec.env.items())]
    sections["Service"].append("ExecStart=" + " ".join(_quoted(a) for a in spec.argv))
    return "\n".join(f"[{name}]\n" + "\n".join(lines) + "\n" for name, lines in sections.items())


def launchd_label(spec: ServiceSpec) -> str:
    return "org.git-agentops." + spec.name


def launchd_plist(spec: ServiceSpec) -> bytes:
    """The launchd agent running ``spec``: restarted when it exits non-zero or dies by a signal, so its program is
    the exit-mapping wrapper :mod:`git_agentops.cli.keepalive`; started when bootstrapped; its agents left alone
    when it exits."""
    run_id = spec.argv[-1]
    doc: dict[str, Any] = {
        "Label": launchd_label(spec),
        "ProgramArguments": [spec.argv[0], "-m", "git_agentops.cli.keepalive", "supervise", run_id],
        "WorkingDirectory": str(spec.cwd),
        "EnvironmentVariables": dict(spec.env),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": RESTART_SEC,
        "AbandonProcessGroup": True,
        "ExitTimeOut": 90,
        "StandardInPath": "/dev/null",
        "StandardOutPath": str(spec.log),
        "StandardErrorPath": str(spec.log),
        "ProcessType": "Standard",
    }
    return plistlib.dumps(doc, fmt=plistlib.FMT_XML, sort_keys=True)


def launchd_exit(status: int) -> int:
    """The wrapper's exit status under launchd: 0 for every deliberate end of ``supervise``, so only a crash is
    restarted."""
    return 0 if status in CLEAN_EXITS else status


# -- starting, watching and removing ---------------------------------------------------------------------------------


class Liveness(enum.StrEnum):
    RUNNING = "running"
    RESTARTING = "restarting"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class Seen:
    """What the manager says of the supervisor: its state, pid, exit status (when known), whether it is loaded."""

    state: Liveness
    pid: int | None = None
    returncode: int | None = None
    loaded: bool = False


def _show(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@dataclass(frozen=True, slots=True)
class SystemdUnit:
    unit: str
    env: Mapping[str, str]
    run: Runner = run_command
    manager: Manager = Manager.SYSTEMD

    def _ctl(self, *args: str) -> Completed:
        return self.run(["systemctl", "--user", *args], self.env)

    def poll(self) -> Seen:
        done = self._ctl("show", "--property=LoadState,ActiveState,SubState,MainPID", self.unit)
        props = _show(done.stdout)
        if done.returncode != 0 or props.get("LoadState") != "loaded":
            return Seen(Liveness.ENDED)
        if props.get("SubState", "").startswith("auto-restart"):
            return Seen(Liveness.RESTARTING, loaded=True)
        if props.get("ActiveState") in ("inactive", "failed", "deactivating"):
            return Seen(Liveness.ENDED, loaded=True)
        return Seen(Liveness.RUNNING, int(props.get("MainPID") or 0) or None, loaded=True)

    def stop(self) -> None:
        """Stop it and forget a failure: a pending restart is cancelled; the agents a crashed supervisor left in
        its control group stay (``KillMode=process``) for the next supervisor, which stops them."""
        self._ctl("stop", self.unit)
        self._ctl("reset-failed", self.unit)

    def remove(self) -> None:
        """Stop the unit (SIGTERM to the supervisor, which stops its agents) without waiting; cancel a restart."""
        self._ctl("stop", "--no-block", self.unit)


@dataclass(frozen=True, slots=True)
class LaunchdJob:
    label: str
    env: Mapping[str, str]
    run: Runner = run_command
    manager: Manager = Manager.LAUNCHD

    @property
    def target(self) -> str:
        return f"gui/{os.getuid()}/{self.label}"

    def poll(self) -> Seen:
        done = self.run(["launchctl", "print", self.target], self.env)
        if done.returncode != 0:
            return Seen(Liveness.ENDED)
        found = dict(re.findall(r"^\s*(state|pid|last exit code) = (.+?)\s*$", done.stdout, re.MULTILINE))
        pid = int(found["pid"]) if found.get("pid", "").isdigit() else None
        if found.get("state") == "running":
            return Seen(Liveness.RUNNING, pid)
        return Seen(Liveness.RESTARTING if found.get("state") in ("spawn scheduled", "waiting") else Liveness.ENDED)

    def start(self, spec: ServiceSpec, plist: Path) -> None:
        """Bootstrap from ``plist``, then remove it: launchd keeps the loaded job. ``RUN_SERVICE_FAILED``."""
        from ..gitstore.private import remove_private, write_private

        self.remove()  # a job of an earlier supervisor stays loaded after it exited
        write_private(plist.parent, plist.name, launchd_plist(spec))
        try:
            done = self.run(["launchctl", "bootstrap", f"gui/{os.getuid()}", str(plist)], self.env)
        finally:
            remove_private(plist.parent, plist.name)
        if done.returncode != 0:
            raise AgentOpsError("RUN_SERVICE_FAILED", f"launchctl bootstrap {self.label}: {done.stderr.strip()}")

    def remove(self) -> None:
        self.run(["launchctl", "bootout", self.target], self.env)


def recorded(directory: Path) -> dict[str, Any] | None:
    """The run directory's note of its last unit or job: ``{"manager", "name", "n"}``, or None."""
    from ..gitstore.private import read_private

    try:
        doc = json.loads(read_private(directory, RECORD) or b"null")
    except (AgentOpsError, ValueError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("name"), str) and isinstance(doc.get("n", 0), int)
    return doc if ok else None


def record(directory: Path, manager: Manager, name: str, n: int = 1) -> None:
    from ..gitstore.private import write_private

    doc = {"manager": str(manager), "name": name, "n": n}
    write_private(directory, RECORD, json.dumps(doc).encode() + b"\n")


def start_systemd(
    spec: ServiceSpec, directory: Path, env: Mapping[str, str], *, run: Runner = run_command
) -> SystemdUnit:
    """Start ``spec`` as a new unit ``<name>-<n>.service`` and record it.

    A new name each time: a unit whose supervisor crashed stays loaded as long as the agents it left run in its
    control group, so its name cannot be reused at once. That previous unit is stopped first (a restart it was
    waiting for would race the new one); if it is running, a supervisor is starting there right now -- the caller
    found the run's lock free -- and that is ``RUN_SUPERVISOR_ACTIVE``. ``RUN_SERVICE_FAILED`` when systemd-run
    does not start the unit.
    """
    previous = recorded(directory)
    n = 1
    if previous is not None and previous.get("manager") == Manager.SYSTEMD:
        old = SystemdUnit(previous["name"], env, run)
        seen = old.poll()
        if seen.state is Liveness.RUNNING:
            raise AgentOpsError("RUN_SUPERVISOR_ACTIVE", f"a supervisor is starting as {old.unit}")
        if seen.loaded:
            old.stop()
        n = int(previous.get("n", 0)) + 1
    while SystemdUnit(f"{spec.name}-{n}.service", env, run).poll().loaded:
        n += 1
    spec = replace(spec, name=f"{spec.name}-{n}")
    unit = SystemdUnit(f"{spec.name}.service", env, run)
    done = run(systemd_run_argv(spec), {**env, **spec.env})
    if done.returncode != 0:
        # a failed start job may leave the unit waiting to restart: nothing is to start behind the caller's back
        unit.stop()
        said = done.stderr.strip() or f"its start job failed (systemctl --user status {unit.unit})"
        raise AgentOpsError("RUN_SERVICE_FAILED", f"systemd-run did not start {unit.unit}: {said}")
    record(directory, Manager.SYSTEMD, unit.unit, n)
    return unit


def start_launchd(
    spec: ServiceSpec, directory: Path, env: Mapping[str, str], *, run: Runner = run_command
) -> LaunchdJob:
    """Bootstrap ``spec`` as the run's launchd agent (a job of an earlier supervisor is booted out first: it stays
    loaded after it exited) and record it. ``RUN_SERVICE_FAILED``."""
    job = LaunchdJob(launchd_label(spec), env, run)
    job.start(spec, directory / "launchd.plist")
    record(directory, Manager.LAUNCHD, job.label)
    return job


def release(directory: Path, env: Mapping[str, str], *, run: Runner = run_command) -> str | None:
    """After ``run stop``/``pause``: remove the unit or job the run's supervisor was started as (it is then not
    restarted, and its supervisor stops its agents and exits). The name removed, or None (a plain process)."""
    from ..gitstore.private import remove_private

    doc = recorded(directory)
    if doc is None:
        return None
    if doc.get("manager") == Manager.SYSTEMD:
        SystemdUnit(doc["name"], env, run).remove()
    elif doc.get("manager") == Manager.LAUNCHD:
        LaunchdJob(doc["name"], env, run).remove()
    else:
        return None
    remove_private(directory, RECORD)
    return str(doc["name"])
