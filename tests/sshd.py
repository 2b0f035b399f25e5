"""A real OpenSSH server on 127.0.0.1 for the tests that push and fetch the way teams do: over ``ssh://``.

The host and user keys are made by the test; the server runs in the foreground as a child of the test, on a free
port, with its own config (no PAM, keys only, the test's HOME and git config for the sessions it starts), and is
killed when the block ends. Clients reach it through ``core.sshCommand`` (or ``GIT_SSH_COMMAND``), which names the
user key and a known_hosts file holding the host key: nothing of the person's ``~/.ssh`` is read or written.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .helpers import public_key, require_tool, ssh_key

SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding no
X11Forwarding no
PrintMotd no
LogLevel ERROR
SetEnv {env}
"""


@dataclass(frozen=True)
class SshServer:
    """A running server: ``url(path)`` names a repository on it; ``command`` is the ssh client to use."""

    port: int
    user: str
    command: str

    def url(self, path: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def ssh_server(tmp: Path) -> Iterator[SshServer]:
    """An sshd on 127.0.0.1 whose sessions get this test's HOME and git config (as the server machine's user)."""
    sshd = (
        "/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else require_tool("sshd", "apt-get install openssh-server")
    )
    where = tmp / "sshd"
    where.mkdir(mode=0o700)
    host_key = ssh_key(where / "host_key", comment="host")
    user_key = ssh_key(where / "user_key", comment="user")
    (where / "authorized_keys").write_text(public_key(user_key) + "\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
    env = {k: os.environ[k] for k in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME") if k in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("GIT_CONFIG")})
    env["PATH"] = os.environ["PATH"]
    port = _free_port()
    config = where / "sshd_config"
    config.write_text(
        SSHD_CONFIG.format(
            port=port,
            host_key=host_key,
            pid_file=where / "sshd.pid",
            authorized=where / "authorized_keys",
            env=" ".join(f'"{k}={v}"' for k, v in env.items()),
        )
    )
    known = where / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {public_key(host_key)}\n")
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=(where / "sshd.log").open("w"))
    command = " ".join(
        shlex.quote(part)
        for part in (
            "ssh",
            "-i",
            str(user_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={known}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-F",
            "/dev/null",
        )
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert server.poll() is None, (where / "sshd.log").read_text()
            assert time.monotonic() < deadline, "sshd did not listen"
            time.sleep(0.05)
        yield SshServer(port, getpass.getuser(), command)
    finally:
        server.kill()
        server.wait()
