"""Private files and path containment: every escape, symlink and oversize gets its own code; nothing written."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.private import (
    file_lock,
    read_private,
    read_private_json,
    remove_private,
    resolve_contained,
    write_private,
    write_private_json,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_write_is_0600_in_0700_dirs_and_atomic(tmp_path: Path) -> None:
    anchor = tmp_path / "state"
    path = write_private(anchor, "a/b/rec.json", b"one")
    assert path.read_bytes() == b"one" and _mode(path) == 0o600
    assert _mode(anchor / "a") == 0o700 and _mode(anchor / "a" / "b") == 0o700
    write_private(anchor, "a/b/rec.json", b"two")
    assert read_private(anchor, "a/b/rec.json") == b"two"
    assert sorted(os.listdir(anchor / "a" / "b")) == ["rec.json"]  # no temp files left behind
    assert read_private(anchor, "a/b/missing.json") is None
    assert read_private(tmp_path / "nowhere", "x") is None
    assert remove_private(anchor, "a/b/rec.json") and not remove_private(anchor, "a/b/rec.json")


@pytest.mark.parametrize(
    ("rel", "code"),
    [
        ("../x", "PATH_ESCAPE"),
        ("/etc/passwd", "PATH_ESCAPE"),
        ("a/../../x", "PATH_ESCAPE"),
        ("", "PATH_INVALID"),
        ("a\x00b", "PATH_INVALID"),
        ("a\nb", "PATH_INVALID"),
        (".", "PATH_INVALID"),
    ],
)
def test_bad_relative_paths_are_refused(tmp_path: Path, rel: str, code: str) -> None:
    for call in (
        lambda: resolve_contained(tmp_path, rel),
        lambda: write_private(tmp_path / "s", rel, b"x"),
        lambda: read_private(tmp_path, rel),
    ):
        with pytest.raises(AgentOpsError) as caught:
            call()
        assert caught.value.code == code
    assert not (tmp_path / "s").exists() or list((tmp_path / "s").iterdir()) == []


def test_resolve_contained_follows_only_symlinks_that_stay_inside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "inside").symlink_to(root / "real")
    (root / "outside").symlink_to("/etc")
    (root / "sneaky").symlink_to("../..")
    assert resolve_contained(root, "inside/f.txt") == (root / "real" / "f.txt").resolve()
    assert resolve_contained(root, "new/file") == root.resolve() / "new" / "file"
    for rel in ("outside/passwd", "sneaky/x", "outside"):
        with pytest.raises(AgentOpsError) as caught:
            resolve_contained(root, rel)
        assert caught.value.code == "PATH_ESCAPE"


def test_symlinked_target_file_or_directory_is_refused_for_write_and_read(tmp_path: Path) -> None:
    anchor = tmp_path / "state"
    anchor.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (anchor / "file.json").symlink_to(victim)
    (anchor / "dir").symlink_to(tmp_path)
    for rel in ("file.json", "dir/victim"):
        with pytest.raises(AgentOpsError) as write_error:
            write_private(anchor, rel, b"overwrite")
        assert write_error.value.code == "PATH_SYMLINK"
        with pytest.raises(AgentOpsError) as read_error:
            read_private(anchor, rel)
        assert read_error.value.code == "PATH_SYMLINK"
    assert victim.read_text() == "precious"


def test_non_regular_and_oversized_files_are_refused(tmp_path: Path) -> None:
    anchor = tmp_path / "state"
    (anchor / "adir").mkdir(parents=True)
    os.mkfifo(anchor / "fifo")
    with pytest.raises(AgentOpsError) as fifo:
        read_private(anchor, "fifo")  # must not block on the FIFO
    assert fifo.value.code == "PATH_NOT_REGULAR"
    with pytest.raises(AgentOpsError) as directory:
        write_private(anchor, "adir", b"x")
    assert directory.value.code == "PATH_NOT_REGULAR"
    write_private(anchor, "big", b"x" * 2048)
    with pytest.raises(AgentOpsError) as big:
        read_private(anchor, "big", max_bytes=1024)
    assert big.value.code == "DOC_TOO_LARGE"


def test_private_json_is_validated(tmp_path: Path) -> None:
    anchor = tmp_path / "state"
    good = {"code": "OK_DONE", "summary": "s", "data": {}, "time": 0}
    write_private_json(anchor, "e.json", good, schema="event")
    assert read_private_json(anchor, "e.json", schema="event") == good
    with pytest.raises(AgentOpsError) as write_error:
        write_private_json(anchor, "bad.json", {"code": "lower"}, schema="event")
    assert write_error.value.code == "SCHEMA_INVALID" and not (anchor / "bad.json").exists()
    write_private(anchor, "broken.json", b"{not json")
    with pytest.raises(AgentOpsError) as invalid:
        read_private_json(anchor, "broken.json", schema="event")
    assert invalid.value.code == "JSON_INVALID"


def test_file_lock_excludes_and_times_out(tmp_path: Path) -> None:
    anchor = tmp_path / "locks"
    events: list[str] = []
    with file_lock(anchor, "run.lock"):
        assert _mode(anchor / "run.lock") == 0o600
        with pytest.raises(AgentOpsError) as held, file_lock(anchor, "run.lock", blocking=False):
            pass
        assert held.value.code == "LOCK_HELD"

        def other() -> None:
            try:
                with file_lock(anchor, "run.lock", timeout=0.2):
                    events.append("acquired")
            except AgentOpsError as exc:
                events.append(exc.code)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert events == ["LOCK_TIMEOUT"]
    start = time.monotonic()
    with file_lock(anchor, "run.lock", timeout=1):
        pass
    assert time.monotonic() - start < 0.5


def test_reading_a_directory_is_not_regular(tmp_path: Path) -> None:
    (tmp_path / "state" / "adir").mkdir(parents=True)
    with pytest.raises(AgentOpsError) as caught:
        read_private(tmp_path / "state", "adir")
    assert caught.value.code == "PATH_NOT_REGULAR"
