"""The launcher's input, built in Python: typed rules and spec, written as the JSON file the launcher reads.

The launcher (:mod:`.launcher`) checks the file again itself -- it must not import this package -- so the two
agree by test, not by shared code: every spec this module writes, the launcher accepts.
"""

from __future__ import annotations

import enum
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from .landlock import NAMES

LAUNCHER: Final = Path(__file__).with_name("launcher.py")
"""The launcher script, run as ``python3 -I -S LAUNCHER SPEC``."""

AccessWord = Literal["read", "write", "execute", "list"]


class Mode(enum.StrEnum):
    """``landlock``: confine the agent (refuse to run it where Landlock is missing); ``none``: only reap."""

    LANDLOCK = "landlock"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Rule:
    """Grant ``access`` beneath ``path`` (a directory and all it holds, or one file): any of ``read``, ``write``,
    ``execute``, ``list`` (a directory's names only)."""

    path: str
    access: tuple[AccessWord, ...]

    def __post_init__(self) -> None:
        if not self.path.startswith("/") or "\0" in self.path:
            raise ValueError(f"a rule's path must be absolute, not {self.path!r}")
        if not self.access or any(word not in NAMES for word in self.access):
            raise ValueError(f"a rule's access must be some of {sorted(NAMES)}, not {self.access!r}")


@dataclass(frozen=True, slots=True)
class Namespace:
    """The agent's namespaces (:mod:`.namespace`): directories covered by an empty tmpfs, paths bound back from
    beneath them, the agent's own directories (their sockets are not masked), whether it keeps the network, and
    paths it sees read-only whatever its rules grant (a clean checkout's ``.git``)."""

    hide: tuple[str, ...]
    keep: tuple[str, ...]
    own: tuple[str, ...]
    network: bool = True
    readonly: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """The spec's ``namespace`` object (``readonly`` only when there is one: older launchers' form)."""
        doc: dict[str, object] = {
            "hide": list(self.hide),
            "keep": list(self.keep),
            "own": list(self.own),
            "network": self.network,
        }
        if self.readonly:
            doc["readonly"] = list(self.readonly)
        return doc


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """One agent launch: what to run, where, and what it may touch."""

    argv: tuple[str, ...]
    cwd: str
    rules: tuple[Rule, ...] = ()
    mode: Mode = Mode.LANDLOCK
    grace: float = 0.5
    scope_signals: bool = True
    scope_abstract_unix: bool = True
    namespace: Namespace | None = None
    version: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("argv must not be empty")
        if not self.cwd.startswith("/"):
            raise ValueError(f"cwd must be absolute, not {self.cwd!r}")
        if not 0 <= self.grace <= 60:
            raise ValueError(f"grace must be 0 to 60 seconds, not {self.grace!r}")

    def to_json(self) -> dict[str, object]:
        """The JSON object the launcher reads."""
        return {
            "version": self.version,
            "argv": list(self.argv),
            "cwd": self.cwd,
            "rules": [{"path": rule.path, "access": list(rule.access)} for rule in self.rules],
            "scope_signals": self.scope_signals,
            "scope_abstract_unix": self.scope_abstract_unix,
            "grace": self.grace,
            "mode": str(self.mode),
            "namespace": self.namespace.to_json() if self.namespace is not None else None,
        }


def write_spec(path: Path, spec: SandboxSpec) -> None:
    """Write ``spec`` to ``path`` (mode 0600, replacing a regular file, never following a symlink)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(spec.to_json(), handle, indent=1)
        handle.write("\n")


def launcher_command(spec_path: Path, *, python: str = sys.executable) -> list[str]:
    """The argv that launches a spec: ``[python, "-I", "-S", LAUNCHER, spec_path]``."""
    return [python, "-I", "-S", str(LAUNCHER), str(spec_path)]
