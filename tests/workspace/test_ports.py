"""Port blocks: distinct across every concurrent allocator on the machine, free again when the holder dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.workspace import ports

HOLDER = textwrap.dedent(
    """
    import json, sys, time
    from git_agentops.workspace.ports import allocate
    import os
    size, count = int(sys.argv[2]), int(sys.argv[3])
    blocks = [allocate(size, holder=f"proc-{sys.argv[1]}-{i}", environ=os.environ) for i in range(count)]
    print(json.dumps([b.ports for b in blocks]), flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    # not the default range: other tests' servers listen there
    return {"AGENTOPS_PORTS_DIR": str(tmp_path / "locks"), "AGENTOPS_PORT_RANGE": "30000-30999"}


def _holders(environ: dict[str, str], count: int, per: int, size: int) -> tuple[list[subprocess.Popen[str]], list[int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(i), str(size), str(per)],
            env={**os.environ, **environ},
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    taken: list[int] = []
    for proc in procs:
        assert proc.stdout is not None
        for block in json.loads(proc.stdout.readline()):
            assert block == list(range(block[0], block[0] + size))
            taken += block
    return procs, taken


def test_invariant_100_parallel_allocations_are_100_distinct_blocks_and_kill_9_frees_them(
    environ: dict[str, str],
) -> None:
    procs, taken = _holders(environ, count=4, per=25, size=3)
    try:
        assert len(taken) == 300 and len(set(taken)) == 300  # no port in two blocks
        assert set(ports.holders(environ)) == set(taken)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert ports.holders(environ) == {}  # the kernel dropped the dead holders' locks: nothing to clean up
    again = [ports.allocate(3, holder="after", environ=environ) for _ in range(100)]
    assert len({p for b in again for p in b.ports}) == 300  # every block is there to take again
    for block in again:
        block.release()


def test_threads_of_one_process_never_share_a_block(environ: dict[str, str]) -> None:
    blocks: list[ports.PortBlock] = []
    lock = threading.Lock()

    def take() -> None:
        block = ports.allocate(2, holder="thread", environ=environ)
        with lock:
            blocks.append(block)

    threads = [threading.Thread(target=take) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    taken = [p for b in blocks for p in b.ports]
    assert len(taken) == 100 and len(set(taken)) == 100
    for block in blocks:
        block.release()
    assert ports.holders(environ) == {}


def test_a_port_something_listens_on_is_never_handed_out(environ: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        narrow = {**environ, "AGENTOPS_PORT_RANGE": f"{port}-{port}"}  # its lock is free: only the bind check refuses
        with pytest.raises(AgentOpsError) as caught:
            ports.allocate(1, holder="t", environ=narrow)
        assert caught.value.code == "WORKSPACE_NO_PORTS"
    with ports.allocate(1, holder="t", environ=narrow) as block:  # free again once nothing listens there
        assert block.ports == (port,)


def test_no_free_block_left_is_a_coded_error(environ: dict[str, str]) -> None:
    narrow = {**environ, "AGENTOPS_PORT_RANGE": "30000-30003"}
    with (
        ports.allocate(2, holder="a", environ=narrow),
        ports.allocate(2, holder="b", environ=narrow),
        pytest.raises(AgentOpsError) as caught,
    ):
        ports.allocate(1, holder="c", environ=narrow)
    assert caught.value.code == "WORKSPACE_NO_PORTS"
    assert "30000-30003" in caught.value.message


def test_block_values_and_environment(environ: dict[str, str]) -> None:
    with ports.allocate(3, holder="v", environ=environ) as block:
        first = block.first
        assert block.values() == {"port": str(first), **{f"port:{k}": str(first + k) for k in range(3)}}
        assert block.environment() == {
            "AGENTOPS_PORT": str(first),
            "AGENTOPS_PORTS": f"{first},{first + 1},{first + 2}",
        }
    assert not block.held


@pytest.mark.parametrize("text", ["nonsense", "30000-20000", "80-90", "20000-70000"])
def test_a_bad_port_range_is_refused(environ: dict[str, str], text: str) -> None:
    with pytest.raises(AgentOpsError) as caught:
        ports.allocate(1, holder="x", environ={**environ, "AGENTOPS_PORT_RANGE": text})
    assert caught.value.code == "WORKSPACE_NO_PORTS"


def test_a_lock_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "locks").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AgentOpsError) as caught:
        ports.allocate(1, holder="x", environ={"AGENTOPS_PORTS_DIR": str(tmp_path / "locks")})
    assert caught.value.code == "WORKSPACE_NO_PORTS"
    assert list((tmp_path / "elsewhere").iterdir()) == []
