"""The repository's MAC key: how the toolkit recognises what it wrote itself.

Refs and notes are writable by every process that can write the object database -- an agent included. So what the
supervisor must be able to believe later (its run state commits, its evidence records, its delivery records) carries
an HMAC-SHA256 made with a key that lives in the private dir, ``$GIT_COMMON_DIR/agentops/keys/mac.key`` (32 random
bytes, 0600, created once under a file lock so two first writers cannot make two keys). A record whose MAC does not
check was not written by the toolkit of this repository.

Each use names a *purpose* ("evidence", "state", "delivery"...), mixed into the MAC, so a value authenticated for
one use can never be replayed as another.

What this does not stop: a process that can read the key can forge. Same-uid agents can, unless the sandbox walls
the private dir off (the sandbox issue); until then the MAC turns silent tampering through git plumbing -- the
attacks seen in practice -- into detected tampering. The key never leaves the machine: CI checks receipts, which
are signed, not MACs. Machines that take runs over from each other share one key (``git agentops-sync
--export-key`` on one, ``--import-key`` on the other, over a channel the person trusts), as they would share an
SSH key: the key authenticates, it never travels through the repository.

No pygit2 here: the hook fast path may authenticate too.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from .private import file_lock, read_private, write_private

KEY_PATH: Final = "keys/mac.key"
KEY_BYTES: Final = 32
_CACHE: dict[str, Keyring] = {}
_CACHE_LOCK = threading.Lock()


class Keyring:
    """The MAC key of one repository's private dir, loaded (or created) on first use."""

    def __init__(self, private_dir: Path) -> None:
        self.private_dir = private_dir
        self._key: bytes | None = None

    def _load(self) -> bytes:
        if self._key is None:
            key = read_private(self.private_dir, KEY_PATH, max_bytes=4096)
            if key is None:
                with file_lock(self.private_dir, KEY_PATH + ".lock"):
                    key = read_private(self.private_dir, KEY_PATH, max_bytes=4096)
                    if key is None:
                        key = os.urandom(KEY_BYTES)
                        write_private(self.private_dir, KEY_PATH, key)
            if len(key) != KEY_BYTES:
                raise AgentOpsError(
                    "KEY_INVALID",
                    f"{self.private_dir / KEY_PATH} is {len(key)} bytes, not {KEY_BYTES}; it was damaged or replaced "
                    "-- remove it only if no run is in progress (every record it authenticated becomes foreign)",
                )
            self._key = key
        return self._key

    def mac(self, purpose: str, data: bytes) -> str:
        """HMAC-SHA256 of ``data`` for ``purpose``, as 64 hex digits."""
        return hmac.new(self._load(), purpose.encode("ascii") + b"\0" + data, hashlib.sha256).hexdigest()

    def check(self, purpose: str, data: bytes, mac: object) -> bool:
        """Whether ``mac`` is the MAC of ``data`` for ``purpose`` (constant-time; False for anything not a str)."""
        return isinstance(mac, str) and hmac.compare_digest(self.mac(purpose, data), mac)


def export_key(private_dir: Path) -> bytes:
    """This repository's MAC key (made if there is none): to give another machine that may take runs over."""
    return keyring(private_dir)._load()


def import_key(private_dir: Path, key: bytes) -> bool:
    """Install another machine's MAC key here, so each recognises what the other wrote (a team's machines share
    one). True when it was installed, False when it is the key already. ``KEY_INVALID`` for a malformed key,
    ``SYNC_KEY_EXISTS`` when this repository has a key of its own: replacing it would make everything it
    authenticated foreign."""
    if len(key) != KEY_BYTES:
        raise AgentOpsError("KEY_INVALID", f"a MAC key is {KEY_BYTES} bytes, not {len(key)}")
    with file_lock(private_dir, KEY_PATH + ".lock"):
        current = read_private(private_dir, KEY_PATH, max_bytes=4096)
        if current == key:
            return False
        if current is not None:
            raise AgentOpsError(
                "SYNC_KEY_EXISTS",
                f"{private_dir / KEY_PATH} holds this repository's own key; import the team's key before the first "
                "run here (replacing a key makes everything it authenticated foreign)",
            )
        write_private(private_dir, KEY_PATH, key)
    with _CACHE_LOCK:
        _CACHE.pop(os.path.realpath(private_dir), None)
    return True


def has_key(private_dir: Path) -> bool:
    """Whether this repository has a MAC key yet; unlike every other use, asking makes none."""
    return read_private(private_dir, KEY_PATH, max_bytes=4096) is not None


def keyring(private_dir: Path) -> Keyring:
    """The (cached) keyring of a private dir -- one per repository, shared by every thread of the process."""
    key = os.path.realpath(private_dir)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = Keyring(Path(key))
        return found
