"""What a worker's workspace gets besides its checkout, as values: ports, services and local files.

``[worktree]`` in the policy says it::

    [worktree]
    ports = 2                          # a private block of 2 free loopback ports per workspace
    include = [".env.local"]           # untracked files copied from the person's checkout into each worktree
    include_in_verify = false          # ... and into verification checkouts too when true

    [[worktree.services]]              # a server the worker's tests need, one per workspace (or one per run)
    name = "db"
    init = ["initdb", "-D", "{data}"]
    start = ["postgres", "-D", "{data}", "-p", "{port}", "-k", "{data}", "-h", "127.0.0.1"]
    ready = ["pg_isready", "-h", "127.0.0.1", "-p", "{port}"]

A **workspace** is where commands run for one worker: its worktree, or a verification checkout of its work. Each
gets its own block of ports and its own instances of the ``scope = "workspace"`` services; a ``scope = "run"``
service is started once per run and each workspace gets its own database in it through ``attach`` / ``detach``
(``{workspace}`` names it). Validated once, here (:meth:`WorkspaceSpec.from_doc`), from a document the schema accepted.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .jsonform import JsonRecord, on_disk

MAX_PORTS: Final = 64
DEFAULT_READY_TIMEOUT: Final = 60.0
DEFAULT_STOP_TIMEOUT: Final = 10.0

PLACEHOLDER: Final = re.compile(
    r"\{(port(?::[0-9]{1,2})?|worker|workspace|run|data|service_port|[a-z][a-z0-9-]{0,63}_port)\}"
)
"""The placeholders a workspace fills in setup, verify and service argv (:func:`expand`)."""


class Scope(enum.StrEnum):
    """Whether a service runs once per workspace or once per run (each workspace attaching its own database)."""

    WORKSPACE = "workspace"
    RUN = "run"


Argv = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One ``[[worktree.services]]`` entry."""

    name: str
    start: Argv
    ready: Argv
    scope: Scope = Scope.WORKSPACE
    init: Argv = ()
    stop: Argv = ()
    attach: Argv = ()
    detach: Argv = ()
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    stop_timeout: float = DEFAULT_STOP_TIMEOUT

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> ServiceSpec:
        """From an entry of the effective policy (the schema accepted it)."""
        return cls(
            name=str(doc["name"]),
            start=tuple(doc["start"]),
            ready=tuple(doc["ready"]),
            scope=Scope(doc.get("scope", Scope.WORKSPACE)),
            init=tuple(doc.get("init", ())),
            stop=tuple(doc.get("stop", ())),
            attach=tuple(doc.get("attach", ())),
            detach=tuple(doc.get("detach", ())),
            env=dict(doc.get("env", {})),
            ready_timeout=float(doc.get("ready_timeout", DEFAULT_READY_TIMEOUT)),
            stop_timeout=float(doc.get("stop_timeout", DEFAULT_STOP_TIMEOUT)),
        )

    @property
    def variable(self) -> str:
        """The environment variable naming the port a workspace reaches it on: ``AGENTOPS_SERVICE_DB_PORT``."""
        return "AGENTOPS_SERVICE_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper()) + "_PORT"


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    """``[worktree]`` beyond its setup steps."""

    ports: int = 0
    include: tuple[str, ...] = ()
    include_in_verify: bool = False
    services: tuple[ServiceSpec, ...] = ()

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> WorkspaceSpec:
        """From the effective policy's ``[worktree]`` table (the schema accepted it)."""
        return cls(
            ports=int(doc.get("ports", 0)),
            include=tuple(str(p) for p in doc.get("include", ())),
            include_in_verify=bool(doc.get("include_in_verify", False)),
            services=tuple(ServiceSpec.from_doc(s) for s in doc.get("services", ())),
        )

    @property
    def empty(self) -> bool:
        """Nothing beyond the checkout: no ports, services or local files."""
        return not (self.ports or self.include or self.services)


def expand(argv: Argv | str, values: Mapping[str, str]) -> Argv | str:
    """``argv`` with the workspace placeholders of :data:`PLACEHOLDER` that ``values`` holds filled in, in one pass
    (a value that itself holds ``{port}`` is never expanded again); others are left as written. In a shell string
    each value is shell-quoted; in a list it fills (part of) one element verbatim."""

    def fill(text: str, quote: bool) -> str:
        def one(match: re.Match[str]) -> str:
            value = values.get(match.group(1))
            if value is None:
                return match.group(0)
            return shlex.quote(value) if quote else value

        return PLACEHOLDER.sub(one, text)

    return fill(argv, True) if isinstance(argv, str) else tuple(fill(a, False) for a in argv)


@dataclass(frozen=True, slots=True)
class WorkspaceCost(JsonRecord):
    """What making a worker's workspace cost and what it holds (the worker's ``extra.workspace``): shown by
    ``run status`` and the report, so a slow or heavy setup is seen where it happens."""

    seconds: float = on_disk("seconds")  # worktree, setup, ports and services, wall time
    disk_bytes: int = on_disk("diskBytes")  # new blocks on disk: the worktree and its admin dir, links counted once
    ports: tuple[int, ...] = on_disk("ports", absent=())
    services: tuple[str, ...] = on_disk("services", absent=())  # "db:20004"

    def describe(self) -> str:
        """``4.2s, 91 MB, ports 20010-20011, db on 20012``."""
        parts = [f"{self.seconds:.1f}s", f"{self.disk_bytes / 1e6:.0f} MB"]
        if self.ports:
            parts.append(f"ports {self.ports[0]}" + (f"-{self.ports[-1]}" if len(self.ports) > 1 else ""))
        parts += [s.replace(":", " on ", 1) for s in self.services]
        return ", ".join(parts)
