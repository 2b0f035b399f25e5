"""The agent's own namespaces, through the real launcher: private /tmp, masked sockets, no capability, closed /proc.

Why: Landlock (ABI 7) does not mediate ``connect()`` on a pathname unix socket, so before these walls an agent
could drive the person's tmux server or ssh-agent; as root it could read the supervisor's ``/proc/PID/environ``.
Each test starts the launcher as the supervisor does, with a spec holding a ``namespace``, and looks at what the
agent's own process could do. A machine without user namespaces fails here (CI and this machine have them): the
product refuses to run agents there unless the policy accepts ``[sandbox] level = "landlock"``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.sandbox import namespace
from git_agentops.sandbox.plan import Sandbox, choose_mode, for_worker, namespace_problem
from git_agentops.sandbox.spec import Mode, Namespace, Rule, SandboxSpec, launcher_command, write_spec

PY = os.path.realpath(sys.executable)
READ_ALL = (Rule("/", ("read", "execute")), Rule("/dev/null", ("read", "write")))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Path]:
    """A listening pathname socket of "the person" (as tmux's or ssh-agent's is) in ``tmp_path/sockets``."""
    where = tmp_path / "sockets"
    where.mkdir()
    path = where / "server.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    try:
        yield path
    finally:
        listener.close()


def launch(
    tmp_path: Path,
    code: str,
    *,
    hide: Sequence[str] = (),
    keep: Sequence[str] = (),
    own: Sequence[str] = (),
    network: bool = True,
    rules: Sequence[Rule] = READ_ALL,
) -> subprocess.CompletedProcess[str]:
    spec = SandboxSpec(
        (PY, "-I", "-c", code),
        str(tmp_path),
        tuple(rules),
        mode=Mode.LANDLOCK,
        namespace=Namespace(tuple(hide), tuple(keep), tuple(own), network),
    )
    path = tmp_path / "spec.json"
    write_spec(path, spec)
    return subprocess.run(launcher_command(path), capture_output=True, text=True, timeout=30, check=False)


CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1] if len(sys.argv) > 1 else {path!r})
except OSError as exc:
    print("refused", exc.errno)
else:
    print("connected")
"""


def test_this_machine_gives_agents_namespaces() -> None:
    assert namespace_problem() is None  # CI and this machine: every test below relies on it
    assert namespace.probe_forked() is None  # the single-threaded path (run status, doctor) agrees
    done = subprocess.run([sys.executable, "-I", "-S", namespace.__file__, "probe"], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr  # and so does the new-interpreter path (the supervisor's)


def test_a_socket_of_the_person_in_a_visible_directory_is_masked(tmp_path: Path, server: Path) -> None:
    """Invariant: every pathname socket outside the agent's own directories refuses ``connect()``."""
    outside = socket.socket(socket.AF_UNIX)
    outside.connect(str(server))  # it does listen: the refusal below is the namespace's
    outside.close()
    done = launch(tmp_path, CONNECT.format(path=str(server)), keep=[str(tmp_path)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused"), done.stdout


def test_a_socket_in_the_agents_own_directory_stays_usable(tmp_path: Path, server: Path) -> None:
    code = CONNECT.format(path=str(server)) + "\nimport socket as s2; print('own ok')"
    done = launch(tmp_path, code, keep=[str(tmp_path)], own=[str(server.parent)])
    assert done.stdout.startswith("connected"), done.stdout + done.stderr


def test_a_hidden_directory_is_empty_but_what_is_kept_is_there(tmp_path: Path, server: Path) -> None:
    kept = tmp_path / "work"
    kept.mkdir()
    (kept / "file.txt").write_text("mine\n")
    code = (
        "import os\n"
        f"print(sorted(os.listdir({str(tmp_path)!r})))\n"
        f"print(open({str(kept / 'file.txt')!r}).read().strip())\n"
        f"print(os.path.exists({str(server)!r}))\n"
    )
    keep = ["/", "/usr", str(kept), str(tmp_path / "spec.json")]  # "/" holds everything, and is no reason to skip
    done = launch(tmp_path, code, hide=[str(tmp_path)], keep=keep)
    assert done.returncode == 0, done.stderr
    listing, content, socket_seen = done.stdout.splitlines()
    assert listing == "['spec.json', 'work']" and content == "mine" and socket_seen == "False"
    assert server.exists()  # outside, nothing changed


def test_the_agent_holds_no_capability_and_cannot_lift_a_mount(tmp_path: Path) -> None:
    code = (
        "import ctypes, os\n"
        "print([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapBnd'))])\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"print(libc.umount2({str(tmp_path).encode()!r}, 2), ctypes.get_errno())\n"
    )
    done = launch(tmp_path, code, hide=[str(tmp_path)], keep=[str(tmp_path / "spec.json")])
    assert done.returncode == 0, done.stderr
    caps, umount = done.stdout.splitlines()
    assert "CapEff:\\t0000000000000000" in caps and "CapBnd:\\t0000000000000000" in caps
    assert umount.split()[0] == "-1"  # Landlock forbids (un)mounting inside the domain


def test_without_network_nothing_is_reachable_not_even_loopback(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
    )
    try:
        cut = launch(tmp_path, code, network=False)
        kept = launch(tmp_path, code, network=True)
    finally:
        listener.close()
    assert cut.stdout.startswith("refused"), cut.stdout + cut.stderr
    assert kept.stdout.startswith("connected"), kept.stdout + kept.stderr


def test_a_non_dumpable_parent_s_proc_files_are_closed_to_the_agent_even_as_root(tmp_path: Path) -> None:
    """The launcher (and the supervisor) are not dumpable; the agent has no capability in their namespace."""
    code = (
        "import os\n"
        "for name in ('environ', 'maps'):\n"
        "    try:\n"
        "        open(f'/proc/{os.getppid()}/' + name, 'rb').read(1); print(name, 'read')\n"
        "    except OSError as exc:\n"
        "        print(name, 'refused', exc.errno)\n"
        "print('self', len(open('/proc/self/environ', 'rb').read()) >= 0)\n"
    )
    done = launch(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["environ refused 13", "maps refused 13", "self True"], done.stdout


def test_the_probe_and_the_level_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from git_agentops.sandbox import plan

    assert choose_mode("landlock", False) == ("namespace", None)
    monkeypatch.setattr(plan, "namespace_problem", lambda: "Operation not permitted")
    with pytest.raises(AgentOpsError) as refused:
        choose_mode("landlock", False)
    assert refused.value.code == "RUN_SANDBOX_UNAVAILABLE" and 'level = "landlock"' in refused.value.message
    level, why = choose_mode("landlock", False, "landlock")
    assert level == "landlock" and why is not None and "sockets" in why
    assert choose_mode("none", False)[0] == "none"


def test_pathname_sockets_are_read_from_the_kernel_table(tmp_path: Path, server: Path) -> None:
    assert str(server) in namespace.pathname_sockets()
    table = tmp_path / "unix"
    table.write_text(
        "Num       RefCount Protocol Flags    Type St Inode Path\n"
        "0: 00000002 00000000 00010000 0001 01 1 /run/a b.sock\n"  # a name with a space is one path
        "0: 00000002 00000000 00010000 0001 01 2 @abstract\n"
        "0: 00000002 00000000 00010000 0001 01 3\n"
    )
    assert namespace.pathname_sockets(str(table)) == ["/run/a b.sock"]


def _worker_box(tmp_path: Path, environ: dict[str, str], **options: Any) -> Sandbox:
    """The namespace sandbox of a worker whose worktree and admin dir are in ``tmp_path``."""
    for name in ("admin", "wt"):
        (tmp_path / name).mkdir(exist_ok=True)
    return for_worker(
        mode="namespace",
        reason=None,
        worktree=tmp_path / "wt",
        admin_dir=tmp_path / "admin",
        common_dir=tmp_path / "common",
        environ=environ,
        signing_key=None,
        host_writable=["~/.claude"],
        policy_writable=[],
        deny_read=[],
        recipe=None,
        **options,
    )


def test_what_a_generation_plants_in_its_private_home_settings_is_gone_at_the_next_start(tmp_path: Path) -> None:
    """A private HOME outlives a generation: a user-scope hook setting it wrote there must not reach the next."""
    person = tmp_path / "person"
    (person / ".claude").mkdir(parents=True)
    (person / ".claude" / ".credentials.json").write_text('{"token": "t"}\n')
    files = ["~/.claude/.credentials.json", "~/.absent.json", "/etc/hostname"]

    def start() -> Path:
        box = _worker_box(tmp_path, {"HOME": str(person), "PATH": "/usr/bin:/bin"}, home_files=files)
        assert box.home is not None
        return box.home

    home = start()
    assert (home / ".claude" / ".credentials.json").read_text() == '{"token": "t"}\n'
    assert not (home / ".absent.json").exists()
    (home / ".claude" / "settings.json").write_text('{"disableAllHooks": true}\n')
    (home / ".config" / "opencode" / "plugins").mkdir(parents=True)
    (home / ".config" / "opencode" / "plugins" / "evil.js").write_text("export default 1\n")
    (home / ".claude" / "projects").mkdir()  # its own session state stays
    (home / ".claude" / ".credentials.json").write_text("changed by the agent\n")
    assert start() == home
    assert not (home / ".claude" / "settings.json").exists() and not (home / ".config" / "opencode").exists()
    assert (home / ".claude" / "projects").is_dir()
    assert (home / ".claude" / ".credentials.json").read_text() == '{"token": "t"}\n'  # the person's, again
    assert (person / ".claude" / ".credentials.json").read_text() == '{"token": "t"}\n'  # never written


def test_in_a_private_home_git_still_knows_the_person_by_their_gitconfig(tmp_path: Path) -> None:
    """HOME is the agent's own, but the person's git identity (and npm, pip and toolchain config) is named to it."""
    person = tmp_path / "person"
    person.mkdir()
    (person / ".gitconfig").write_text("[user]\n\temail = person@example.invalid\n")
    environ = {"HOME": str(person), "PATH": os.environ["PATH"]}
    box = _worker_box(tmp_path, environ)
    env = box.environment(environ)
    assert env["GIT_CONFIG_GLOBAL"] == str(person / ".gitconfig") and env["HOME"] != str(person)
    argv = box.wrap(["git", "config", "--global", "user.email"], tmp_path / "wt", tmp_path / "spec.json")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.stdout.strip() == "person@example.invalid", done.stderr
    argv = box.wrap(["git", "config", "--global", "user.name", "Mallory"], tmp_path / "wt", tmp_path / "spec.json")
    assert subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False).returncode != 0  # read-only
    assert "Mallory" not in (person / ".gitconfig").read_text()


def test_codexs_own_sandbox_is_turned_off_inside_ours_and_the_log_says_so() -> None:
    """Codex runs each command under bubblewrap, which cannot start inside Landlock (its uid map write is refused):
    with our sandbox on, its default ``--sandbox workspace-write`` becomes ``danger-full-access``, said in the log."""
    from git_agentops.hosts.launch import HostSpec, unnest

    codex = HostSpec("codex", "codex", (), False, {})
    argv = ["codex", "exec", "--sandbox", "workspace-write", "--json", "go"]
    changed, note = unnest(codex, argv)
    assert changed == ["codex", "exec", "--sandbox", "danger-full-access", "--json", "go"]
    assert "cannot start inside the agentops sandbox" in note and argv[3] == "workspace-write"
    assert unnest(codex, ["codex", "exec", "-s", "read-only", "x"])[0][3] == "danger-full-access"
    assert unnest(codex, ["codex", "exec", "--sandbox=workspace-write"])[0][2] == "--sandbox=danger-full-access"
    assert unnest(codex, ["codex", "exec", "--sandbox", "danger-full-access"]) == (
        ["codex", "exec", "--sandbox", "danger-full-access"],
        "",
    )
    claude = HostSpec("claude", "claude", (), False, {})
    assert unnest(claude, ["claude", "--sandbox", "workspace-write"]) == (
        ["claude", "--sandbox", "workspace-write"],
        "",
    )


def test_the_persons_credential_files_and_directories_read_as_empty(tmp_path: Path) -> None:
    """``~/.netrc`` and its kind are covered by ``/dev/null``, ``~/.aws`` and its kind by an empty tmpfs."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine example.com login me password hunter2hunter2\n")
    aws = tmp_path / ".aws"
    aws.mkdir()
    (aws / "credentials").write_text("[default]\naws_secret_access_key = abc\n")
    code = f"import os\nprint(repr(open({str(netrc)!r}).read()), os.listdir({str(aws)!r}))\n"
    done = launch(tmp_path, code, hide=[str(netrc), str(aws)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "'' []"
    assert "hunter2" in netrc.read_text() and (aws / "credentials").exists()  # outside, untouched


def test_the_hidden_places_of_a_worker_include_the_persons_credential_stores(tmp_path: Path) -> None:
    from git_agentops.sandbox.plan import HIDDEN_HOME

    person = tmp_path / "person"
    for rel in (".aws", ".config/gh", ".ssh"):
        (person / rel).mkdir(parents=True)
    (person / ".netrc").write_text("x\n")
    box = _worker_box(tmp_path, {"HOME": str(person), "PATH": "/usr/bin"})
    assert box.namespace is not None
    hidden = set(box.namespace.hide)
    assert {str(person / rel) for rel in (".aws", ".config/gh", ".ssh", ".netrc")} <= hidden
    assert not any(str(person / rel) in hidden for rel in HIDDEN_HOME if not (person / rel).exists())
    assert "/tmp" in hidden
