"""The sandbox launcher with real processes: Landlock denials seen by the agent, reaping of daemons, exit status.

Every test runs the launcher as the supervisor will (``python -I -S launcher.py SPEC``) on a real spec file and
looks at what the agent's own processes saw (the errno of an ``open``, a ``kill``) and at what is left running
afterwards (``/proc``, ``ps``). Tests that need Landlock are skipped, with the reason, on a kernel without it.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from git_agentops.process.groups import ProcessIdentity, is_alive, process_identity
from git_agentops.sandbox import landlock
from git_agentops.sandbox.landlock import Access
from git_agentops.sandbox.spec import LAUNCHER, Mode, Rule, SandboxSpec, launcher_command, write_spec

ABI = landlock.abi()
# A kernel without Landlock cannot be installed around a test: there the product runs agents unconfined (warned,
# RUN_UNSANDBOXED; tests/test_attacks.py covers that mode), so only what needs the kernel's wall is skipped, by
# reason. This machine and CI have ABI 7.
needs_landlock = pytest.mark.skipif(ABI < 1, reason="this kernel has no Landlock (or it is disabled or filtered)")
needs_scoping = pytest.mark.skipif(ABI < 6, reason=f"Landlock ABI {ABI} < 6 cannot scope signals or sockets")

PY = os.path.realpath(sys.executable)  # the real interpreter: a venv's pyvenv.cfg would be outside the sandbox
SYSTEM = (
    *(Rule(p, ("read", "execute")) for p in ("/usr", "/bin", "/lib", "/lib64") if os.path.isdir(p)),
    Rule(sys.base_prefix, ("read", "execute")),
    Rule("/dev/null", ("read", "write")),  # sh opens it for every background command
)
ERRNO_OF = """
import os, sys
def attempt(action):
    try:
        action()
    except OSError as exc:
        return exc.errno
    return 0
"""


def _spec(tmp_path: Path, spec: SandboxSpec) -> Path:
    path = tmp_path / "spec.json"
    write_spec(path, spec)
    return path


def launch(
    tmp_path: Path,
    argv: Sequence[str],
    *,
    cwd: Path,
    rules: Sequence[Rule] = (),
    mode: Mode = Mode.LANDLOCK,
    grace: float = 0.5,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    spec = SandboxSpec(tuple(argv), str(cwd), (*SYSTEM, *rules), mode=mode, grace=grace)
    return subprocess.run(
        launcher_command(_spec(tmp_path, spec)), capture_output=True, text=True, timeout=timeout, check=False
    )


def start(
    tmp_path: Path, script: str, *, cwd: Path, rules: Sequence[Rule] = (), mode: Mode = Mode.LANDLOCK, **kw: object
) -> subprocess.Popen[str]:
    spec = SandboxSpec(("sh", "-c", script), str(cwd), (*SYSTEM, *rules), mode=mode, grace=0.5)
    return subprocess.Popen(
        launcher_command(_spec(tmp_path, spec)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def python_errnos(tmp_path: Path, body: str, *args: str, **kw: object) -> list[int]:
    """Run ``body`` (which prints errnos on one line) with the real interpreter inside the sandbox."""
    result = launch(tmp_path, [PY, "-I", "-S", "-c", ERRNO_OF + body, *args], **kw)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    return [int(word) for word in result.stdout.split()]


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not the agent's: the supervisor, or another worker."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


# -- the Landlock layer, without the kernel --------------------------------------------------------------------


def test_struct_layouts_match_the_uapi_header() -> None:
    assert ctypes.sizeof(landlock._PathBeneathAttr) == 12  # packed
    assert landlock._PathBeneathAttr.parent_fd.offset == 8
    assert ctypes.sizeof(landlock._RulesetAttr) == 24
    assert [landlock.ruleset_size(v) for v in range(1, 8)] == [8, 8, 8, 16, 16, 24, 24]


def test_each_abi_handles_exactly_the_rights_it_knows() -> None:
    v1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
    assert [int(landlock.handled_access(v)) for v in range(8)] == [
        0,
        v1,
        v1 | 1 << 13,
        v1 | 3 << 13,
        v1 | 3 << 13,
        v1 | 7 << 13,
        v1 | 7 << 13,
        v1 | 7 << 13,
    ]
    assert landlock.scopes(5, signals=True, abstract_unix=True) == 0
    assert landlock.scopes(6, signals=True, abstract_unix=False) == landlock.SCOPE_SIGNAL == 2
    assert landlock.scopes(7, signals=False, abstract_unix=True) == landlock.SCOPE_ABSTRACT_UNIX_SOCKET == 1


def test_access_words_and_file_rules() -> None:
    write = landlock.access_for(["write"], 7, directory=True)
    assert write == landlock.handled_access(7) & ~(Access.EXECUTE | Access.READ_FILE | Access.READ_DIR)
    assert landlock.access_for(["write"], 7, directory=False) == Access.WRITE_FILE | Access.TRUNCATE | Access.IOCTL_DEV
    assert landlock.access_for(["write"], 2, directory=False) == Access.WRITE_FILE  # no TRUNCATE, IOCTL_DEV yet
    assert landlock.access_for(["read"], 7, directory=False) == Access.READ_FILE
    assert landlock.access_for(["read", "execute"], 1, directory=True) == (
        Access.READ_FILE | Access.READ_DIR | Access.EXECUTE
    )


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"path": "relative", "access": ["read"]}, "absolute"),
        ({"path": "/x", "access": []}, "non-empty"),
        ({"path": "/x", "access": ["read", "admin"]}, "non-empty list of"),
        ({"path": "/x", "access": ["read"], "extra": 1}, "exactly"),
        ("/x", "exactly"),
    ],
)
def test_malformed_rules_are_refused_before_anything_is_applied(rule: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        landlock.check_rules([rule])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=message):
        landlock.apply([rule])  # type: ignore[list-item]


def test_abi_is_what_the_kernel_says() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    raw = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    assert max(raw, 0) == ABI


# -- confinement -----------------------------------------------------------------------------------------------


@needs_landlock
def test_the_agent_writes_where_allowed_and_gets_eacces_elsewhere(tmp_path: Path, work: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret").write_text("s")
    body = """
here, there = sys.argv[1], sys.argv[2]
print(
    attempt(lambda: open(here + "/new", "w").write("ok")),
    attempt(lambda: os.mkdir(here + "/sub")),
    attempt(lambda: os.rename(here + "/new", here + "/sub/moved")),
    attempt(lambda: open(there + "/secret").read()),
    attempt(lambda: open(there + "/new", "w")),
    attempt(lambda: os.listdir(there)),
    attempt(lambda: os.unlink(there + "/secret")),
    attempt(lambda: open(os.path.expanduser("~") + "/.gitconfig", "a")),
)
"""
    errnos = python_errnos(
        tmp_path, body, str(work), str(elsewhere), cwd=work, rules=[Rule(str(work), ("read", "write"))]
    )
    assert errnos == [0, 0, 0] + [errno.EACCES] * 5
    assert (work / "sub" / "moved").read_text() == "ok"
    assert (elsewhere / "secret").exists()
    assert not (elsewhere / "new").exists()


@needs_landlock
def test_a_rule_on_a_file_grants_that_file_only(tmp_path: Path, work: Path) -> None:
    body = """
print(
    attempt(lambda: open("/dev/null", "w").write("x")),
    attempt(lambda: open("/dev/null").read()),
    attempt(lambda: open("/dev/zero", "w")),
    attempt(lambda: open("/dev/zero", "rb").read(1)),
)
"""
    assert python_errnos(tmp_path, body, cwd=work) == [0, 0, errno.EACCES, errno.EACCES]
    result = launch(tmp_path, ["sh", "-c", "echo x > /dev/null && echo fine"], cwd=work)  # O_TRUNC: TRUNCATE
    assert (result.returncode, result.stdout) == (0, "fine\n"), result.stderr


@needs_landlock
@pytest.mark.parametrize(("access", "expected"), [(("read",), 126), (("read", "execute"), 0)])
def test_running_a_program_needs_execute(tmp_path: Path, work: Path, access: tuple[str, ...], expected: int) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy2(shutil.which("true") or "/bin/true", tools / "true")
    result = launch(tmp_path, [str(tools / "true")], cwd=work, rules=[Rule(str(tools), access)])  # type: ignore[arg-type]
    assert result.returncode == expected
    if expected:
        assert result.stderr == f"sandbox: cannot run '{tools / 'true'}': Permission denied\n"


@needs_landlock
def test_a_missing_program_is_127_and_a_missing_cwd_126(tmp_path: Path, work: Path) -> None:
    result = launch(tmp_path, ["no-such-program-here"], cwd=work)
    assert result.returncode == 127
    assert result.stderr == "sandbox: cannot run 'no-such-program-here': No such file or directory\n"
    result = launch(tmp_path, ["true"], cwd=work / "gone")
    assert result.returncode == 126
    assert result.stderr.startswith(f"sandbox: cannot enter cwd {work / 'gone'}: No such file or directory")


@needs_landlock
def test_a_missing_rule_path_is_skipped_and_reported(tmp_path: Path, work: Path) -> None:
    result = launch(tmp_path, ["true"], cwd=work, rules=[Rule(str(tmp_path / "absent"), ("read",))])
    assert result.returncode == 0
    assert f"sandbox: rule path {tmp_path / 'absent'} does not exist; skipped\n" in result.stderr


@needs_landlock
def test_a_rule_path_that_cannot_be_opened_fails_closed_naming_it(tmp_path: Path, work: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    result = launch(tmp_path, ["true"], cwd=work, rules=[Rule(str(loop), ("read",))])
    assert result.returncode == 126
    assert result.stderr == (
        f"sandbox: landlock: cannot open a rule's path: Too many levels of symbolic links ({loop})\n"
    )


@needs_scoping
def test_the_agent_cannot_signal_outside_but_the_launcher_stops_it(
    tmp_path: Path, work: Path, outside: subprocess.Popen[bytes]
) -> None:
    body = """
import signal
print(
    attempt(lambda: os.kill(int(sys.argv[1]), signal.SIGTERM)),
    attempt(lambda: os.kill(os.getppid(), signal.SIGKILL)),
    attempt(lambda: os.kill(int(sys.argv[1]), 0)),
    attempt(lambda: os.kill(os.getpid(), 0)),
)
"""
    assert python_errnos(tmp_path, body, str(outside.pid), cwd=work) == [errno.EPERM] * 3 + [0]
    assert outside.poll() is None


@needs_scoping
def test_the_agent_cannot_reach_an_abstract_socket_made_outside(tmp_path: Path, work: Path) -> None:
    name = f"agentops-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("\0" + name)
        server.listen()
        body = "import socket\nprint(attempt(lambda: socket.socket(socket.AF_UNIX).connect('\\0' + sys.argv[1])))"
        assert python_errnos(tmp_path, body, name, cwd=work) == [errno.EPERM]


# -- reaping ---------------------------------------------------------------------------------------------------

DAEMONS = {
    "setsid": "setsid sh -c 'echo $$ > daemon.pid; : > started; exec sleep 60' &",
    "double-fork": "( setsid sh -c 'echo $$ > daemon.pid; : > started; exec sleep 60' & )",
    "ignores-sigterm": (
        "setsid sh -c 'trap \"\" TERM; echo $$ > daemon.pid; : > started; while :; do sleep 0.05; done' &"
    ),
}


GO = "while [ ! -e go ]; do sleep 0.01; done"  # the agent goes on once the test has seen its daemon


def _session(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[3])


def _daemon(work: Path, launcher: subprocess.Popen[str]) -> ProcessIdentity:
    wait_for(lambda: (work / "started").exists() or launcher.poll() is not None)
    assert launcher.poll() is None, launcher.communicate()
    pid = int((work / "daemon.pid").read_text())
    identity = process_identity(pid)
    assert identity is not None
    assert _session(pid) != _session(launcher.pid)  # it really left the agent's session
    return identity


def _gone_within(identity: ProcessIdentity, seconds: float) -> None:
    wait_for(lambda: not is_alive(identity), timeout=seconds)
    assert not Path(f"/proc/{identity.pid}").exists()  # reaped, not a zombie
    ps = subprocess.run(["ps", "-o", "pid=", "-p", str(identity.pid)], capture_output=True, text=True, check=False)
    assert (ps.returncode, ps.stdout.strip()) == (1, "")


@needs_landlock
@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_daemons_die_within_a_second_of_the_launchers_sigterm(tmp_path: Path, work: Path, daemon: str) -> None:
    script = f"{DAEMONS[daemon]}\nwhile [ ! -e started ]; do sleep 0.01; done\nexec sleep 60"
    launcher = start(tmp_path, script, cwd=work, rules=[Rule(str(work), ("read", "write"))])
    identity = _daemon(work, launcher)
    sent = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=5) == 128 + signal.SIGTERM
    _gone_within(identity, max(0.0, 1.0 - (time.monotonic() - sent)))


@needs_landlock
@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_daemons_die_when_the_agent_exits_and_its_status_is_kept(tmp_path: Path, work: Path, daemon: str) -> None:
    script = f"{DAEMONS[daemon]}\nwhile [ ! -e started ]; do sleep 0.01; done\nsleep 60 &\n{GO}\necho bye\nexit 5"
    launcher = start(tmp_path, script, cwd=work, rules=[Rule(str(work), ("read", "write"))])
    identity = _daemon(work, launcher)
    (work / "go").touch()
    out, _ = launcher.communicate(timeout=5)
    exited = time.monotonic()
    assert (launcher.returncode, out) == (5, "bye\n")
    _gone_within(identity, max(0.0, 1.0 - (time.monotonic() - exited)))


@needs_landlock
def test_the_supervisors_group_sigterm_is_done_well_within_its_grace(tmp_path: Path, work: Path) -> None:
    """The supervisor signals the launcher's group, then SIGKILLs it 3 s later: the launcher is done long before."""
    script = f"trap '' TERM\n{DAEMONS['ignores-sigterm']}\nwhile [ ! -e started ]; do sleep 0.01; done\n"
    script += "while :; do sleep 0.05; done"
    launcher = start(tmp_path, script, cwd=work, rules=[Rule(str(work), ("read", "write"))], start_new_session=True)
    identity = _daemon(work, launcher)
    sent = time.monotonic()
    os.killpg(launcher.pid, signal.SIGTERM)
    assert launcher.wait(timeout=5) == 128 + signal.SIGTERM
    assert time.monotonic() - sent < 1.5  # grace 0.5 s, then SIGKILL
    _gone_within(identity, 0.5)


@needs_landlock
def test_a_second_stop_signal_skips_the_grace(tmp_path: Path, work: Path) -> None:
    spec = SandboxSpec(
        ("sh", "-c", "trap '' TERM INT; : > started; while :; do sleep 0.05; done"),
        str(work),
        (*SYSTEM, Rule(str(work), ("read", "write"))),
        grace=30,
    )
    spec_path = tmp_path / "spec.json"
    write_spec(spec_path, spec)
    launcher = subprocess.Popen(launcher_command(spec_path))
    wait_for(lambda: (work / "started").exists())
    launcher.send_signal(signal.SIGINT)
    time.sleep(0.2)
    assert launcher.poll() is None  # in its grace: the agent ignores SIGTERM
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=2) == 128 + signal.SIGINT


@pytest.mark.parametrize(
    ("script", "status"), [("exit 7", 7), ("kill -9 $$", 128 + 9), ("kill -TERM $$", 128 + 15), ("true", 0)]
)
@pytest.mark.parametrize("mode", [Mode.LANDLOCK, Mode.NONE])
def test_the_exit_status_is_passed_through(tmp_path: Path, work: Path, script: str, status: int, mode: Mode) -> None:
    if mode is Mode.LANDLOCK and ABI < 1:  # Landlock cannot be given to a kernel around a test; CI's has it
        pytest.skip("this kernel has no Landlock")
    assert launch(tmp_path, ["sh", "-c", script], cwd=work, mode=mode).returncode == status


def test_mode_none_runs_unsandboxed_and_still_reaps(tmp_path: Path, work: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = f"{DAEMONS['setsid']}\nwhile [ ! -e started ]; do sleep 0.01; done\n{GO}\necho out > {elsewhere}/written"
    launcher = start(tmp_path, script, cwd=work, mode=Mode.NONE)
    identity = _daemon(work, launcher)
    (work / "go").touch()
    assert launcher.wait(timeout=5) == 0
    assert (elsewhere / "written").read_text() == "out\n"
    _gone_within(identity, 1.0)


# -- the spec and the launcher itself --------------------------------------------------------------------------


def test_the_documented_json_is_accepted_and_bad_specs_are_126(tmp_path: Path, work: Path) -> None:
    raw = {
        "version": 1,
        "argv": ["sh", "-c", "echo $0 here", "agent"],
        "cwd": str(work),
        "rules": [],
        "scope_signals": True,
        "scope_abstract_unix": True,
        "grace": 0.5,
        "mode": "none",
    }
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(raw))
    result = subprocess.run(launcher_command(path), capture_output=True, text=True, timeout=30, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, "agent here\n", "")
    assert path.exists()  # read, never deleted
    for change, message in [
        ({"argv": []}, "argv must be"),
        ({"mode": "chroot"}, "mode must be"),
        ({"grace": -1}, "grace must be"),
        ({"version": 2}, "version must be 1"),
        ({"rules": [{"path": "x", "access": ["read"]}]}, "absolute"),
        ({"rulez": []}, "unknown spec keys ['rulez']"),
    ]:
        path.write_text(json.dumps({**raw, **change}))
        result = subprocess.run(launcher_command(path), capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 126
        assert result.stderr.startswith("sandbox: bad spec: ") and message in result.stderr, result.stderr
    result = subprocess.run(launcher_command(tmp_path / "none.json"), capture_output=True, text=True, check=False)
    assert result.returncode == 126
    assert "cannot read spec" in result.stderr


def test_the_typed_spec_refuses_what_the_launcher_would() -> None:
    with pytest.raises(ValueError, match="absolute"):
        Rule("rel", ("read",))
    with pytest.raises(ValueError, match="access"):
        Rule("/x", ("admin",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grace"):
        SandboxSpec(("true",), "/", grace=61)


def test_the_spec_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    write_spec(path, SandboxSpec(("true",), "/"))
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["mode"] == "landlock"


def test_the_launcher_loads_only_the_standard_library(tmp_path: Path, work: Path) -> None:
    spec = _spec(tmp_path, SandboxSpec(("true",), str(work), SYSTEM))
    command = launcher_command(spec)
    result = subprocess.run([command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    names = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    names.discard("imported package")  # the header line
    assert {"landlock", "reaper"} <= names
    assert sorted(n for n in names - {"landlock", "reaper"} if n.split(".")[0] not in sys.stdlib_module_names) == []
    assert LAUNCHER.parent == Path(landlock.__file__).parent


def startup_cost(rounds: int = 25, mode: Mode = Mode.NONE) -> float:
    """Seconds the launcher adds to starting a program: median of ``launcher -> /bin/true`` minus ``/bin/true``."""
    work = Path(os.path.realpath("/tmp"))
    spec = Path(f"/tmp/agentops-startup-{os.getpid()}-{mode}.json")
    write_spec(spec, SandboxSpec(("/bin/true",), str(work), SYSTEM, mode=mode))
    try:
        command = launcher_command(spec)
        direct, launched = [], []
        for _ in range(rounds):  # interleaved, so both see the same machine load
            for argv, times in ((["/bin/true"], direct), (command, launched)):
                began = time.perf_counter()
                subprocess.run(argv, check=True)
                times.append(time.perf_counter() - began)
        return statistics.median(launched) - statistics.median(direct)
    finally:
        spec.unlink()


@pytest.mark.parametrize("mode", [Mode.NONE, Mode.LANDLOCK])
def test_startup_cost_stays_small(mode: Mode) -> None:
    if mode is Mode.LANDLOCK and ABI < 1:  # Landlock cannot be given to a kernel around a test; CI's has it
        pytest.skip("this kernel has no Landlock")
    cost = startup_cost(rounds=10, mode=mode)
    sys.stderr.write(f"launcher startup cost ({mode}): {cost * 1000:.1f} ms\n")
    assert cost < 0.25  # ~20 ms on an idle machine; generous for a loaded CI runner
