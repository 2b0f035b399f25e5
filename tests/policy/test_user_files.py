"""Files a person names on the command line are read with a bound: a FIFO, ``/dev/zero``, a directory or an
oversized file given as a recipe, a policy to check, a MAC key or an allowed-signers file is refused at once with
the reader's own code -- never a read that blocks forever or fills memory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.files import read_bounded
from git_agentops.policy.load import MAX_POLICY_BYTES
from git_agentops.receipts import sshsig

from ..receipts.test_sshsig_inprocess import DATA, NOW, Keys, keygen_sign, keys, pub
from ..runkit import cli, project

__all__ = ["keys"]  # the module-scoped key fixture, shared with the signature tests

HANG = 20  # seconds: a reader that blocks on a FIFO would run into this


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A FIFO with no writer, an endless device, a directory."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    yield {"fifo": fifo, "zero": Path("/dev/zero"), "dir": tmp_path / "dir"}


def test_read_bounded_reads_a_regular_file_to_one_byte_past_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    assert read_bounded(path, 10) == b"x" * 11  # over the limit, told without reading it all
    assert read_bounded(path, 0) == b"x"
    (tmp_path / "empty").write_bytes(b"")
    assert read_bounded(tmp_path / "empty", 10) == b""


def test_read_bounded_refuses_what_is_not_a_regular_file_without_blocking(hostile: dict[str, Path]) -> None:
    for name, path in hostile.items():
        with pytest.raises(OSError) as caught:
            read_bounded(path, 1024)
        assert caught.value.strerror.startswith("not a regular file"), name
    with pytest.raises(FileNotFoundError):
        read_bounded(hostile["dir"] / "missing", 10)


def test_a_recipe_that_is_a_fifo_a_device_a_directory_or_too_large_is_refused(
    tmp_path: Path, hostile: dict[str, Path]
) -> None:
    from git_agentops.hosts.recipe import MAX_RECIPE_BYTES

    repo = project(tmp_path)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_RECIPE_BYTES + 1))
    for name, path in {**hostile, "big": big}.items():
        done = cli(repo, "agentops-run", "start", "--goal", "g", "--recipe", str(path), timeout=HANG)
        assert done.returncode != 0 and "error[RUN_RECIPE_INVALID]" in done.stderr, (name, done.stderr)
        assert ("over" if name == "big" else "not a regular file") in done.stderr, (name, done.stderr)


def test_policy_check_of_a_fifo_a_device_or_an_oversized_file_is_refused(
    tmp_path: Path, hostile: dict[str, Path]
) -> None:
    repo = project(tmp_path)
    for name, path in hostile.items():
        done = cli(repo, "agentops-policy", "check", str(path), timeout=HANG)
        assert done.returncode != 0 and "error[PATH_NOT_REGULAR]" in done.stderr, (name, done.stderr)
    done = cli(repo, "agentops-policy", "check", str(tmp_path / "missing.toml"), timeout=HANG)
    assert done.returncode != 0 and "error[POLICY_MISSING]" in done.stderr, done.stderr
    big = tmp_path / "policy.toml"
    big.write_bytes(b"#" * (MAX_POLICY_BYTES + 10))
    done = cli(repo, "agentops-policy", "check", str(big), timeout=HANG)
    # said so, rather than a part of it checked as if it were the whole
    assert done.returncode != 0 and "error[DOC_TOO_LARGE]" in done.stderr, done.stdout + done.stderr


def test_a_fifo_in_place_of_the_worktree_policy_is_refused_not_waited_on(tmp_path: Path) -> None:
    """An agent may put a FIFO where its worktree's policy is: a reader of that policy (a hook, a check) must
    not block on it."""
    repo = project(tmp_path)
    policy = repo / ".agentops" / "policy.toml"
    policy.unlink()
    os.mkfifo(policy)
    done = cli(repo, "agentops-policy", "check", timeout=HANG)
    assert done.returncode != 0 and "error[PATH_NOT_REGULAR]" in done.stderr and "a fifo" in done.stderr, done.stderr


def test_a_key_to_import_that_is_a_fifo_a_device_or_too_long_is_refused(
    tmp_path: Path, hostile: dict[str, Path]
) -> None:
    repo = project(tmp_path)
    big = tmp_path / "big.key"
    big.write_bytes(b"ab" * 100_000)
    for name, path in {**hostile, "big": big}.items():
        done = cli(repo, "agentops-sync", "--import-key", str(path), timeout=HANG)
        assert done.returncode != 0 and "error[KEY_INVALID]" in done.stderr, (name, done.stderr)


def test_an_allowed_signers_file_that_is_a_fifo_or_oversized_is_refused(
    keys: Keys, tmp_path: Path, hostile: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    sig = keygen_sign(keys.ed25519)
    for engine in sshsig.Engine:
        with pytest.raises(AgentOpsError) as caught:
            sshsig.verify(DATA, sig, allowed_signers=hostile["fifo"], when=NOW, engine=engine)
        assert caught.value.code == "RECEIPT_UNTRUSTED_SIGNER" and "not a regular file" in caught.value.message
    path = tmp_path / "allowed_signers"
    path.write_text(f"alice@x {pub(keys.ed25519)}\n")
    assert sshsig.verify(DATA, sig, allowed_signers=path, when=NOW) == "alice@x"
    monkeypatch.setattr(sshsig, "MAX_SIGNERS_BYTES", path.stat().st_size - 1)
    with pytest.raises(AgentOpsError) as caught:
        sshsig.verify(DATA, sig, allowed_signers=path, when=NOW)
    assert caught.value.code == "RECEIPT_SIGNERS_INVALID" and "over" in caught.value.message
