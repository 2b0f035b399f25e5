"""Supervisors the OS keeps alive (``service/manager.py``, ``supervisor/spawn.py``).

First what is pure: the ``systemd-run`` command, the equivalent unit file (checked by ``systemd-analyze
verify``), the restart rule against every exit status ``supervise`` has, the launchd plist, the choice of
manager in fake environments. Then end to end: without a user systemd the supervisor is the detached process of
before (``kill -9`` + ``resume`` revives it); with one -- the session's, or a private manager this test starts in
a mount namespace of its own when it runs as root -- a supervisor killed with ``kill -9`` is started again by
systemd and the run completes, clean exits are never restarted, and ``run stop`` removes the unit.
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from git_agentops.cli import keepalive
from git_agentops.cli.run import _exit_for
from git_agentops.errors import CODES, EXIT_INTERNAL, AgentOpsError
from git_agentops.model.run import STORM_STARTS, STORM_WINDOW, RunStatus
from git_agentops.service import manager as service
from git_agentops.service.manager import (
    CLEAN_EXITS,
    RESTART_SEC,
    START_LIMIT_BURST,
    START_LIMIT_INTERVAL,
    SWITCH,
    Completed,
    Liveness,
    Manager,
    Seen,
    ServiceSpec,
    detect,
    launchd_exit,
    launchd_plist,
    record,
    recorded,
    release,
    service_env,
    start_systemd,
    supervisor_spec,
    systemd_run_argv,
    unit_file,
    unit_properties,
)
from git_agentops.supervisor.spawn import Spawned, _wait

from ..helpers import HANDOFF, Part, child, commit_step, require_tool, write_step
from ..runkit import cli, events, project, recipe, status, stop, supervisor_log, supervisor_running, wait_for

RUN = "run-20260101-abcdef"
ODD = 'a "quoted" $HOME ${HOME} %n 100% back\\slash\ttab\nnewline'


def _spec(tmp_path: Path, env: Mapping[str, str] | None = None) -> ServiceSpec:
    cwd = tmp_path / "my repo"
    cwd.mkdir(exist_ok=True)
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "API_KEY": "s3cret-value", "ODD": ODD}
    return supervisor_spec(
        RUN, common_dir=cwd / ".git", cwd=cwd, env=environ if env is None else env, log=tmp_path / "supervisor.out"
    )


# -- the systemd unit --------------------------------------------------------------------------------------------


def test_systemd_run_argv_names_the_unit_the_restart_rule_and_only_the_names_of_the_environment(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    argv = systemd_run_argv(spec)
    assert argv[:2] == ["systemd-run", "--user"] and "--quiet" not in argv  # it would hide why a start job failed
    assert f"--unit={spec.name}.service" in argv and spec.name.startswith(f"agentops-{RUN}-")
    assert "--collect" in argv and f"--working-directory={spec.cwd}" in argv
    for wanted in (
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        "RestartPreventExitStatus=0 1 2 3 130",
        f"StartLimitBurst={START_LIMIT_BURST}",
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL}",
        "KillMode=process",
        "Type=exec",
        f"StandardOutput=append:{spec.log}",
        f"StandardError=append:{spec.log}",
    ):
        assert f"--property={wanted}" in argv, wanted
    for section, key, value in unit_properties(spec):  # the unit file verified below says what systemd-run says
        flag = {"CollectMode": "--collect", "WorkingDirectory": f"--working-directory={value}"}.get(key)
        assert (flag or f"--property={key}={value}") in argv, (section, key)
    assert sorted(a for a in argv if a.startswith("--setenv=")) == [
        "--setenv=API_KEY",
        "--setenv=HOME",
        "--setenv=ODD",
        "--setenv=PATH",
    ]
    assert not [a for a in argv if "s3cret" in a or "quoted" in a]  # values travel in the environment only
    command = argv[argv.index("--") + 1 :]
    assert command == [sys.executable.replace("$", "$$"), "-m", "git_agentops.cli.run", "supervise", RUN]


def test_the_unit_name_is_sanitized_and_tells_repositories_apart(tmp_path: Path) -> None:
    one = supervisor_spec(RUN, common_dir=tmp_path / "a/.git", cwd=tmp_path, env={}, log=tmp_path / "o").name
    two = supervisor_spec(RUN, common_dir=tmp_path / "b/.git", cwd=tmp_path, env={}, log=tmp_path / "o").name
    assert one != two and one.startswith(f"agentops-{RUN}-")
    odd = supervisor_spec("r/un x", common_dir=tmp_path, cwd=tmp_path, env={}, log=tmp_path / "o").name
    assert odd.startswith("agentops-r_un_x-")


def test_the_environment_loses_the_shells_and_systemds_own_variables_and_what_a_unit_cannot_carry() -> None:
    env = {
        "PATH": "/bin",
        "ANTHROPIC_API_KEY": "k",
        "PWD": "/x",
        "SHLVL": "2",
        "_": "/usr/bin/git",
        "NOTIFY_SOCKET": "/run/x",
        "INVOCATION_ID": "abc",
        "BASH_FUNC_f%%": "() { :; }",
        "BELL": "a\x07b",
        "MULTI": "a\nb\tc",
    }
    assert service_env(env) == {"PATH": "/bin", "ANTHROPIC_API_KEY": "k", "MULTI": "a\nb\tc"}


def test_systemd_analyze_verify_accepts_the_unit_the_supervisor_runs_under(tmp_path: Path) -> None:
    require_tool("systemd-analyze", "apt-get install -y systemd")
    spec = _spec(tmp_path)
    units = tmp_path / "units"
    units.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)

    def verify(text: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        path = units / f"{spec.name}.service"
        path.write_text(text)
        done = subprocess.run(
            ["systemd-analyze", "verify", "--user", str(path)],
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        output = (done.stdout + done.stderr).splitlines()
        return done, [line for line in output if path.name in line]  # what it says about this unit

    text = unit_file(spec)
    assert 'Environment="ODD=a \\"quoted\\" $$HOME $${HOME} %%n 100%% back\\\\slash\\ttab\\nnewline"' in text
    done, complaints = verify(text)
    assert done.returncode == 0 and complaints == [], done.stdout + done.stderr
    # the check is not blind: a value systemd cannot parse, or a missing program, is reported
    _, complaints = verify(text.replace("Restart=on-failure", "Restart=on-failur"))
    assert any("Restart" in line or "restart" in line for line in complaints), complaints
    done, complaints = verify(text.replace(f'ExecStart="{sys.executable}"', 'ExecStart="/nonexistent/python"'))
    assert done.returncode != 0 or complaints, done.stdout + done.stderr


def test_only_a_crash_is_restarted_and_the_supervisors_storm_rule_gets_its_say() -> None:
    """Every run status ``supervise`` ends with, and every exit status an error code has, except an internal
    error, is a deliberate end: never restarted (blocked exits 1!). The manager allows more starts than the storm
    rule, so the start that trips it -- and blocks the run with a reason -- does happen."""
    for run_status in RunStatus:
        assert _exit_for(str(run_status)) in CLEAN_EXITS, run_status
    assert {spec.exit_status for spec in CODES.values()} - {EXIT_INTERNAL} <= set(CLEAN_EXITS)
    assert EXIT_INTERNAL not in CLEAN_EXITS
    assert START_LIMIT_BURST >= STORM_STARTS + 1 and START_LIMIT_INTERVAL >= STORM_WINDOW
    assert [launchd_exit(s) for s in (0, 1, 2, 3, 130, 4)] == [0, 0, 0, 0, 0, 4]


# -- the launchd agent -------------------------------------------------------------------------------------------


def test_the_launchd_plist_keeps_only_a_crashed_supervisor_alive(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    doc = plistlib.loads(launchd_plist(spec))
    assert doc["Label"] == f"org.git-agentops.{spec.name}"
    assert doc["ProgramArguments"] == [sys.executable, "-m", "git_agentops.cli.keepalive", "supervise", RUN]
    assert doc["WorkingDirectory"] == str(spec.cwd)
    assert doc["EnvironmentVariables"] == {**spec.env} and doc["EnvironmentVariables"]["ODD"] == ODD
    assert doc["KeepAlive"] == {"SuccessfulExit": False} and doc["RunAtLoad"] is True
    assert doc["ThrottleInterval"] == RESTART_SEC and doc["AbandonProcessGroup"] is True
    assert doc["StandardOutPath"] == doc["StandardErrorPath"] == str(spec.log)
    assert plistlib.loads(plistlib.dumps(doc)) == doc


def test_the_launchd_wrapper_maps_deliberate_ends_to_0(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Sequence[str]] = []

    def fake_run_main(argv: Sequence[str]) -> int:
        seen.append(list(argv))
        return {"r1": 1, "r3": 3, "r4": 4}[argv[1]]

    monkeypatch.setattr("git_agentops.cli.run.main", fake_run_main)
    assert [keepalive.main(["supervise", r]) for r in ("r1", "r3", "r4")] == [0, 0, 4]
    assert seen == [["supervise", "r1"], ["supervise", "r3"], ["supervise", "r4"]]
    assert keepalive.main(["bogus"]) == 0  # a usage error would only be repeated


# -- which manager -------------------------------------------------------------------------------------------------


class FakeRunner:
    def __init__(self, returncode: int = 0, stdout: str = "") -> None:
        self.returncode, self.stdout = returncode, stdout
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str]) -> Completed:
        self.calls.append((list(argv), dict(env)))
        return Completed(self.returncode, self.stdout, "nope" if self.returncode else "")


def _machine(tmp_path: Path, *tools: str, socket: bool = True) -> dict[str, str]:
    """An environment with fake ``tools`` on PATH and a runtime dir (with systemd's private socket)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    runtime = tmp_path / "runtime"
    (runtime / "systemd").mkdir(parents=True, exist_ok=True)
    if socket:
        (runtime / "systemd" / "private").touch()
    return {"PATH": str(bin_dir), "XDG_RUNTIME_DIR": str(runtime)}


def test_detection_finds_a_reachable_user_systemd_and_says_why_not_otherwise(tmp_path: Path) -> None:
    env = _machine(tmp_path, "systemd-run", "systemctl")
    ok = FakeRunner()
    found = detect(env, system="Linux", run=ok)
    assert (found.manager, found.forced) == (Manager.SYSTEMD, False)
    assert ok.calls == [(["systemctl", "--user", "show-environment"], env)]
    refused = detect(env, system="Linux", run=FakeRunner(1))
    assert refused.manager is Manager.PROCESS and "show-environment" in refused.reason
    no_session = detect({"PATH": env["PATH"]}, system="Linux", run=ok)
    assert no_session.manager is Manager.PROCESS and "XDG_RUNTIME_DIR" in no_session.reason
    no_socket = detect(_machine(tmp_path / "b", "systemd-run", "systemctl", socket=False), system="Linux", run=ok)
    assert no_socket.manager is Manager.PROCESS and "private" in no_socket.reason
    no_tools = detect(_machine(tmp_path / "c", "systemctl"), system="Linux", run=ok)
    assert no_tools.manager is Manager.PROCESS and "systemd-run not on PATH" in no_tools.reason
    assert detect(env, system="FreeBSD", run=ok).manager is Manager.PROCESS


def test_detection_obeys_the_switch(tmp_path: Path) -> None:
    env = _machine(tmp_path, "systemd-run", "systemctl", "launchctl")
    never = FakeRunner(1)
    forced = detect({**env, SWITCH: "process"}, system="Linux", run=never)
    assert (forced.manager, forced.forced) == (Manager.PROCESS, True) and never.calls == []
    assert detect({**env, SWITCH: "systemd"}, system="Linux", run=FakeRunner()).forced is True
    assert detect({**env, SWITCH: "auto"}, system="Linux", run=FakeRunner()).manager is Manager.SYSTEMD
    for value, system in (("systemd", "Linux"), ("launchd", "Linux"), ("bogus", "Linux"), ("launchd", "Darwin")):
        with pytest.raises(AgentOpsError) as caught:
            detect({**env, SWITCH: value}, system=system, run=FakeRunner(1))
        assert caught.value.code == "RUN_SERVICE_UNAVAILABLE", (value, system)


def test_detection_finds_launchd_in_a_gui_login_domain(tmp_path: Path) -> None:
    env = _machine(tmp_path, "launchctl")
    ok = FakeRunner()
    assert detect(env, system="Darwin", run=ok).manager is Manager.LAUNCHD
    assert ok.calls[0][0] == ["launchctl", "print", f"gui/{os.getuid()}"]
    assert detect(env, system="Darwin", run=FakeRunner(1)).manager is Manager.PROCESS


def test_the_doctor_says_which_manager_detached_supervisors_run_under() -> None:
    from git_agentops.diagnose.checks import _service

    check = _service({SWITCH: "process"})
    assert check.id == "service" and check.status == "ok" and check.value == {"manager": "process", "forced": True}
    assert _service({SWITCH: "bogus"}).status == "warn"


# -- starting, watching and removing, with a fake systemctl ------------------------------------------------------


def test_each_start_is_a_new_unit_and_the_previous_one_is_stopped_first(tmp_path: Path) -> None:
    """A crashed supervisor's unit stays loaded while the agents it left run in its control group: the next start
    takes the next free name, after stopping the old unit so the restart it waits for does not race the new one."""
    spec = _spec(tmp_path)
    base = spec.name
    waiting = "LoadState=loaded\nActiveState=activating\nSubState=auto-restart\nMainPID=0\n"
    leftovers = "LoadState=loaded\nActiveState=inactive\nSubState=dead\nMainPID=0\n"
    shown = {f"{base}-1.service": waiting, f"{base}-2.service": leftovers}
    calls: list[list[str]] = []
    envs: list[dict[str, str]] = []

    def fake(argv: Sequence[str], env: Mapping[str, str]) -> Completed:
        calls.append(list(argv))
        envs.append(dict(env))
        return Completed(0, shown.get(argv[-1], "LoadState=not-found\n") if "show" in argv else "", "")

    record(tmp_path, Manager.SYSTEMD, f"{base}-1.service", 1)
    unit = start_systemd(spec, tmp_path, {"XDG_RUNTIME_DIR": "/r"}, run=fake)
    assert unit.unit == f"{base}-3.service"
    assert [c[2:3] + c[-1:] for c in calls[:-1]] == [
        ["show", f"{base}-1.service"],
        ["stop", f"{base}-1.service"],
        ["reset-failed", f"{base}-1.service"],
        ["show", f"{base}-2.service"],
        ["show", f"{base}-3.service"],
    ]
    assert calls[-1] == systemd_run_argv(replace(spec, name=f"{base}-3"))
    assert envs[-1]["API_KEY"] == "s3cret-value" and envs[-1]["XDG_RUNTIME_DIR"] == "/r"
    assert recorded(tmp_path) == {"manager": "systemd", "name": f"{base}-3.service", "n": 3}

    def running(argv: Sequence[str], env: Mapping[str, str]) -> Completed:
        return Completed(0, "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=42\n", "")

    with pytest.raises(AgentOpsError) as caught:  # the lock is free, but a restart is starting a supervisor
        start_systemd(spec, tmp_path, {}, run=running)
    assert caught.value.code == "RUN_SUPERVISOR_ACTIVE"

    said: list[list[str]] = []

    def refusing(argv: Sequence[str], env: Mapping[str, str]) -> Completed:
        said.append(list(argv))
        return Completed(1, "LoadState=not-found\n", "Failed to start transient service unit")

    with pytest.raises(AgentOpsError) as caught:
        start_systemd(spec, tmp_path / "fresh", {}, run=refusing)
    assert caught.value.code == "RUN_SERVICE_FAILED" and "Failed to start" in caught.value.message
    # the unit of a failed start job may be waiting to restart: it is stopped, so nothing starts behind our back
    assert [c[2] for c in said[-2:]] == ["stop", "reset-failed"] and said[-1][-1] == f"{base}-1.service"

    def failed_job(argv: Sequence[str], env: Mapping[str, str]) -> Completed:
        return Completed(1 if argv[0] == "systemd-run" else 0, "LoadState=not-found\n", "")

    with pytest.raises(AgentOpsError) as caught:  # under a loaded manager: the program ended before its exec was seen
        start_systemd(spec, tmp_path / "fresher", {}, run=failed_job)
    assert "start job failed" in caught.value.message and "systemctl --user status" in caught.value.message


def test_release_removes_the_recorded_unit_once(tmp_path: Path) -> None:
    runner = FakeRunner()
    record(tmp_path, Manager.SYSTEMD, "agentops-x.service")
    assert release(tmp_path, {}, run=runner) == "agentops-x.service"
    assert runner.calls[0][0] == ["systemctl", "--user", "stop", "--no-block", "agentops-x.service"]
    assert release(tmp_path, {}, run=runner) is None and len(runner.calls) == 1
    record(tmp_path, Manager.LAUNCHD, "org.git-agentops.x")
    assert release(tmp_path, {}, run=runner) == "org.git-agentops.x"
    assert runner.calls[1][0] == ["launchctl", "bootout", f"gui/{os.getuid()}/org.git-agentops.x"]


class _FakeHandle:
    def __init__(self, seen: Seen, manager: Manager = Manager.SYSTEMD) -> None:
        self.seen, self.manager, self.unit, self.removed = seen, manager, "agentops-x.service", False

    def poll(self) -> Seen:
        return self.seen

    def remove(self) -> None:
        self.removed = True


class _NoEvents:
    def log(self, limit: int) -> list[Any]:
        return []


def test_waiting_raises_the_supervisors_own_refusal_and_removes_the_unit(tmp_path: Path) -> None:
    log = tmp_path / "supervisor.out"
    log.write_text("old noise\nerror[RUN_RESTART_STORM]: earlier\n")
    offset = log.stat().st_size
    log.write_text(log.read_text() + "error[RUN_NOT_ACTIVE]: run is stopped; 'resume' continues it\n")
    for state in (Liveness.ENDED, Liveness.RESTARTING):
        handle = _FakeHandle(Seen(state))
        with pytest.raises(AgentOpsError) as caught:
            _wait(handle, _NoEvents(), None, log, offset, RUN)
        assert caught.value.code == "RUN_NOT_ACTIVE" and handle.removed
    quiet = tmp_path / "quiet.out"
    quiet.write_text(f"{RUN}: complete\n")
    ended = _FakeHandle(Seen(Liveness.ENDED))  # a run complete already: served, ended, no error
    assert _wait(ended, _NoEvents(), None, quiet, 0, RUN) == Spawned(None, Manager.SYSTEMD, "agentops-x.service")
    assert not ended.removed


def test_a_failed_start_job_reports_what_the_supervisor_did_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd fails the start job of a supervisor that ended before the manager saw its exec (a loaded machine):
    spawning then says what the supervisor did -- served the run (its start is recorded), or refused it (its own
    error line) -- and only without either the manager's failure."""
    import io

    from git_agentops.cli.common import Context
    from git_agentops.gitstore.events import Event
    from git_agentops.runs.state import journal
    from git_agentops.supervisor import spawn

    repo = project(tmp_path)
    ctx = Context(env=dict(os.environ), cwd=repo, stdout=io.StringIO(), stderr=io.StringIO())
    monkeypatch.setattr(spawn, "detect", lambda env: service.Availability(Manager.SYSTEMD, "forced", forced=True))
    failure = AgentOpsError("RUN_SERVICE_FAILED", "systemd-run did not start x: its start job failed")
    said: list[str] = []

    def served_then_failed(spec: ServiceSpec, directory: Path, env: Mapping[str, str]) -> None:
        journal(ctx.store(), RUN).mutate(lambda change: None, Event("RUN_SUPERVISOR_START", "started", {"pid": 4242}))
        raise failure

    def refused_then_failed(spec: ServiceSpec, directory: Path, env: Mapping[str, str]) -> None:
        with spec.log.open("a") as out:
            out.write("error[RUN_LEASE_HELD]: machine m2 holds the lease\n")
        raise failure

    def just_failed(spec: ServiceSpec, directory: Path, env: Mapping[str, str]) -> None:
        said.append(spec.name)
        raise failure

    monkeypatch.setattr(spawn, "start_systemd", served_then_failed)
    assert spawn.spawn_supervisor(ctx.store(), RUN, cwd=ctx.cwd, env=ctx.env) == Spawned(4242, Manager.SYSTEMD)
    monkeypatch.setattr(spawn, "start_systemd", refused_then_failed)
    with pytest.raises(AgentOpsError) as caught:
        spawn.spawn_supervisor(ctx.store(), RUN, cwd=ctx.cwd, env=ctx.env)
    assert caught.value.code == "RUN_LEASE_HELD" and "m2" in caught.value.message
    monkeypatch.setattr(spawn, "start_systemd", just_failed)
    with pytest.raises(AgentOpsError) as caught:
        spawn.spawn_supervisor(ctx.store(), RUN, cwd=ctx.cwd, env=ctx.env)
    assert caught.value is failure and said


# -- end to end ----------------------------------------------------------------------------------------------------


def _sleeper(seconds: float, *, sleepy: int | None = None) -> Part:
    """One child that commits, then sleeps ``seconds`` before it hands off: in every generation, or only in its
    first ``sleepy`` ones (one per planned kill), a later one -- started after the kill -- handing off at once."""
    work = [write_step("src/s.txt", "s\n"), commit_step("Add s")]
    sleeping = [*work, f"{{ sleep = {seconds} }}", HANDOFF]
    return child("s", "Slow", [sleeping] if sleepy is None else [sleeping] * sleepy + [[*work, HANDOFF]])


def _start(repo: Path, recipe_path: Path) -> dict[str, Any]:
    done = cli(repo, "agentops-run", "start", "--goal", "Build", "--recipe", str(recipe_path), "--detach", "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _slow_running(doc: dict[str, Any]) -> bool:
    task = next(t for t in doc["tasks"] if t["title"] == "Slow")
    return bool(next(w for w in doc["workers"] if w["taskId"] == task["taskId"])["status"] == "running")


def _starts(repo: Path, run_id: str) -> list[int]:
    return [e["data"]["pid"] for e in events(repo, run_id) if e["code"] == "RUN_SUPERVISOR_START"]


def _kill_9(pid: int, repo: Path, run_id: str) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while supervisor_running(repo, run_id):
        assert time.monotonic() < deadline, "the killed supervisor still holds its lock"
        time.sleep(0.05)


@pytest.mark.slow
def test_without_a_user_systemd_the_supervisor_is_a_detached_process_that_resume_revives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if detect(os.environ).manager is not Manager.PROCESS:  # this machine has a manager: the fallback, forced
        monkeypatch.setenv(SWITCH, "process")
    repo = project(tmp_path, max_workers=1)
    doc = _start(repo, recipe(tmp_path, _sleeper(3, sleepy=1), finalize=True))
    run_id = doc["runId"]
    try:
        assert doc["supervisorManager"] == "process" and "supervisorUnit" not in doc
        assert not (repo / ".git" / "agentops" / "runs" / run_id / service.RECORD).exists()
        wait_for(repo, run_id, _slow_running)
        _kill_9(doc["supervisorPid"], repo, run_id)
        time.sleep(1)
        assert not supervisor_running(repo, run_id)  # nothing restarts a plain process
        resumed = cli(repo, "agentops-run", "resume", run_id)
        assert resumed.returncode == 0, resumed.stderr
        assert "a detached process, not restarted after a crash" in resumed.stdout
        final = wait_for(repo, run_id, lambda d: d["status"] != "active", timeout=120)
        assert final["status"] == "complete", supervisor_log(repo, run_id)
        assert len(_starts(repo, run_id)) == 2
    finally:
        stop(repo, run_id)


# -- with a real user systemd --------------------------------------------------------------------------------------


def _systemd_binary() -> str | None:
    return next((p for p in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd") if os.access(p, os.X_OK)), None)


@pytest.fixture
def user_systemd(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A reachable user systemd, in this test's environment: the session's own, or -- as root, where there is
    none -- a private ``systemd --user`` in a mount namespace of its own (``/run`` a tmpfs there, so it believes
    the system booted with systemd) with a runtime directory of this test. Skips, saying why, without either."""
    monkeypatch.delenv(SWITCH, raising=False)
    if detect(os.environ).manager is Manager.SYSTEMD:
        yield
        return
    binary, unshare = _systemd_binary(), shutil.which("unshare")
    # the issue's own rule: where no user systemd can be had, say so; the fallback path is tested regardless
    if sys.platform != "linux" or os.geteuid() != 0 or binary is None or unshare is None:
        pytest.skip(
            f"no user systemd is reachable ({detect(os.environ).reason}) and none can be started here "
            "(that needs root, unshare and systemd)"
        )
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus"}
    # -n: no utab entry, which mount would otherwise create under the real /run before it is covered
    script = f"mount -n -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec {binary} --user"
    log = runtime.parent / f"{runtime.name}-systemd.log"
    with log.open("wb") as out:
        manager = subprocess.Popen(
            [unshare, "--mount", "sh", "-c", script], env=env, stdout=out, stderr=out, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 15
        while detect(env).manager is not Manager.SYSTEMD:
            if manager.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"no user systemd is reachable, and a private one did not start: {log.read_text()[-500:]}")
            time.sleep(0.1)
        for name in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"):
            monkeypatch.setenv(name, env[name])
        yield
    finally:
        manager.terminate()
        try:
            manager.wait(30)
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait(10)


def _unit(unit: str, *props: str) -> dict[str, str]:
    done = subprocess.run(
        ["systemctl", "--user", "show", f"--property={','.join(props)}", unit],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _gone(unit: str, *, within: float = 15) -> bool:
    deadline = time.monotonic() + within
    while _unit(unit, "LoadState").get("LoadState") != "not-found":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.slow
def test_a_user_systemd_starts_a_killed_supervisor_again_and_the_run_completes(
    tmp_path: Path, user_systemd: None
) -> None:
    repo = project(tmp_path, max_workers=1)
    doc = _start(repo, recipe(tmp_path, _sleeper(4, sleepy=1), finalize=True))
    run_id, unit = doc["runId"], doc["supervisorUnit"]
    try:
        assert doc["supervisorManager"] == "systemd" and unit.endswith(".service")
        shown = _unit(unit, "ActiveState", "MainPID", "Restart", "RestartPreventExitStatus", "KillMode", "NRestarts")
        assert shown["ActiveState"] == "active" and int(shown["MainPID"]) == doc["supervisorPid"], shown
        assert shown["Restart"] == "on-failure" and shown["KillMode"] == "process", shown
        assert shown["RestartPreventExitStatus"].split() == [str(s) for s in CLEAN_EXITS], shown
        wait_for(repo, run_id, _slow_running)
        _kill_9(doc["supervisorPid"], repo, run_id)
        deadline = time.monotonic() + RESTART_SEC + 20
        while len(starts := _starts(repo, run_id)) < 2:
            assert time.monotonic() < deadline, f"systemd did not start the supervisor again\n{_unit(unit, 'SubState')}"
            time.sleep(0.2)
        assert starts[1] != doc["supervisorPid"] and _unit(unit, "NRestarts")["NRestarts"] == "1"
        final = wait_for(repo, run_id, lambda d: d["status"] != "active", timeout=120)
        assert final["status"] == "complete", supervisor_log(repo, run_id)
        assert _gone(unit), _unit(unit, "ActiveState", "SubState")  # exit 0: collected, not restarted
        time.sleep(RESTART_SEC + 1)
        assert len(_starts(repo, run_id)) == 2 and _unit(unit, "LoadState")["LoadState"] == "not-found"
    finally:
        stop(repo, run_id)
        subprocess.run(["systemctl", "--user", "stop", unit], capture_output=True, timeout=60, check=False)


@pytest.mark.slow
def test_a_user_systemd_restarts_crashes_only_never_a_clean_exit(tmp_path: Path, user_systemd: None) -> None:
    """The unit of a supervisor, with its program swapped for one that exits with each status ``supervise`` has
    (blocked exits 1, a refusal 3, SIGTERM 130): only the internal error and a ``kill -9`` are started again."""
    spec = _spec(tmp_path, env={"PATH": os.environ["PATH"]})
    marks = tmp_path / "marks"
    marks.mkdir()
    units: dict[str, str] = {}
    try:
        for case in [*(str(s) for s in CLEAN_EXITS), str(EXIT_INTERNAL), "kill"]:
            mark = marks / case
            # each lives a moment first, as a supervisor does: the start job of a Type=exec unit fails (silently,
            # under --quiet) when its program has ended before the manager saw the exec, which a loaded machine
            # allows for a program that ends at once
            code = f"import os, signal, sys, time; open({str(mark)!r}, 'a').write('x'); time.sleep(1); " + (
                "os.kill(os.getpid(), signal.SIGKILL)" if case == "kill" else f"sys.exit({case})"
            )
            one = replace(spec, name=f"{spec.name}-{case}", argv=(sys.executable, "-c", code))
            units[case] = f"{one.name}.service"
            done = subprocess.run(systemd_run_argv(one), env={**os.environ, **one.env}, capture_output=True, timeout=60)
            assert done.returncode == 0, done.stderr
        started = time.monotonic()

        def counts() -> dict[str, int]:
            return {case: len((marks / case).read_text()) if (marks / case).exists() else 0 for case in units}

        # the crashes are started again after RESTART_SEC; a clean exit must not be, however long one waits
        while min(counts()[str(EXIT_INTERNAL)], counts()["kill"]) < 2 and time.monotonic() < started + 60:
            time.sleep(0.2)
        time.sleep(max(0.0, started + RESTART_SEC + 3 - time.monotonic()))
        seen = counts()
        assert {c: n for c, n in seen.items() if c in [str(s) for s in CLEAN_EXITS]} == {
            str(s): 1 for s in CLEAN_EXITS
        }, seen
        assert seen[str(EXIT_INTERNAL)] >= 2 and seen["kill"] >= 2, seen
        assert all(_gone(units[str(s)], within=5) for s in CLEAN_EXITS)  # collected once they ended
    finally:
        for unit in units.values():
            subprocess.run(["systemctl", "--user", "stop", unit], capture_output=True, timeout=60, check=False)


@pytest.mark.slow
def test_run_stop_removes_the_unit_and_nothing_starts_the_supervisor_again(tmp_path: Path, user_systemd: None) -> None:
    repo = project(tmp_path, max_workers=1)
    doc = _start(repo, recipe(tmp_path, _sleeper(60), finalize=True))
    run_id, unit = doc["runId"], doc["supervisorUnit"]
    try:
        wait_for(repo, run_id, _slow_running)
        done = cli(repo, "agentops-run", "stop", run_id, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["supervisorUnitRemoved"] == unit
        assert _gone(unit), _unit(unit, "ActiveState", "SubState")
        time.sleep(RESTART_SEC + 1)
        assert _unit(unit, "LoadState")["LoadState"] == "not-found" and len(_starts(repo, run_id)) == 1
        assert not supervisor_running(repo, run_id) and status(repo, run_id)["status"] != "active"
    finally:
        stop(repo, run_id)
        subprocess.run(["systemctl", "--user", "stop", unit], capture_output=True, timeout=60, check=False)
