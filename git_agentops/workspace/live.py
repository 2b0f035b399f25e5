"""The workspaces one supervisor holds: each one's ports and service instances, from acquire to release.

A workspace is named by who works in it: a worker id for its worktree, ``verify-<slot>`` for a verification
checkout. :meth:`Workspaces.acquire` is idempotent -- provisioning, every generation's start and a verification ask
for it as they need it -- and :meth:`Workspaces.release` undoes it: detach from run-scoped services, stop the
workspace's own instances, delete their data, free the ports. Job threads and the loop thread share one registry,
so every method holds its lock; a slow service start holds it too (two workspaces never race for a run-scoped
service's first start).

State lives in ``$GIT_COMMON_DIR/agentops/workspaces/<run>/``: each instance's record (:mod:`.services`), its data
and its log. A supervisor killed with ``kill -9`` leaves records behind and its port locks freed (:mod:`.ports`);
the next supervisor of the run calls :meth:`Workspaces.recover` before anything else, which stops every recorded
instance -- so a resumed run starts its services afresh on the ports it is given then.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..clock import Clock
from ..errors import AgentOpsError
from ..model.workspace import Scope, ServiceSpec, WorkspaceSpec
from . import ports as portblocks
from . import services

SAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(slots=True)
class Workspace:
    """One held workspace: the placeholders and environment its commands get."""

    name: str
    block: portblocks.PortBlock | None
    values: dict[str, str]
    env: dict[str, str]
    instances: list[tuple[ServiceSpec, services.Instance]] = field(default_factory=list)
    attached: list[tuple[ServiceSpec, services.Instance]] = field(default_factory=list)

    def services(self) -> tuple[str, ...]:
        """``name:port`` of each service it reaches, its own instances and the run's it attached to."""
        return tuple(f"{spec.name}:{self.env[spec.variable]}" for spec, _ in (*self.instances, *self.attached))

    def describe(self) -> str:
        parts = []
        if self.block is not None:
            shown = str(self.block.first) if self.block.count == 1 else f"{self.block.first}-{self.block.ports[-1]}"
            parts.append(f"ports {shown}")
        parts += [f"{spec.name} on {self.env[spec.variable]}" for spec, _ in (*self.instances, *self.attached)]
        return ", ".join(parts) or "nothing"


def state_root(common_dir: Path, run_id: str) -> Path:
    return common_dir / "agentops" / "workspaces" / run_id


class Workspaces:
    """The registry (see the module docstring)."""

    def __init__(
        self,
        spec: WorkspaceSpec,
        *,
        run_id: str,
        common_dir: Path,
        environ: Mapping[str, str],
        clock: Clock,
        log: Callable[[str], None] = lambda _text: None,
    ) -> None:
        self.spec = spec
        self.run_id = run_id
        self.root = state_root(common_dir, run_id)
        self.environ = environ
        self.clock = clock
        self.log = log
        self._held: dict[str, Workspace] = {}
        self._shared: dict[str, tuple[services.Instance, portblocks.PortBlock]] = {}
        self._blocks: dict[int, portblocks.PortBlock] = {}  # a workspace-scoped instance's own port, by id()
        self._lock = threading.RLock()

    @property
    def empty(self) -> bool:
        return not (self.spec.ports or self.spec.services)

    def recover(self) -> int:
        """Stop every instance an earlier supervisor of the run recorded and left running; returns how many."""
        if not self.root.is_dir():
            return 0
        stopped = 0
        with self._lock:
            for records in sorted(self.root.glob("**/records")):
                stopped += len(services.stop_recorded(records, clock=self.clock))
        return stopped

    def get(self, name: str) -> Workspace | None:
        with self._lock:
            return self._held.get(name)

    def acquire(self, name: str, *, worker_id: str | None = None) -> Workspace:
        """The workspace ``name``, made now if not held: its ports, then its services started and ready.

        Raises ``WORKSPACE_NO_PORTS`` and what :func:`services.start` raises (``SERVICE_NOT_READY``,
        ``SERVICE_EXITED``, ``SERVICE_FAILED``), having released whatever it took.
        """
        with self._lock:
            held = self._held.get(name)
            if held is not None:
                return held
            block = (
                portblocks.allocate(self.spec.ports, holder=f"run {self.run_id} workspace {name}", environ=self.environ)
                if self.spec.ports
                else None
            )
            values = {"workspace": name, "worker": worker_id or name, "run": self.run_id}
            env = {"AGENTOPS_WORKSPACE": name}
            if block is not None:
                values.update(block.values())
                env.update(block.environment())
            workspace = Workspace(name, block, values, env)
            try:
                for spec in self.spec.services:
                    self._start_for(workspace, spec)
            except BaseException:
                self._release(workspace)
                raise
            self._held[name] = workspace
            if self.spec.services or block is not None:
                self.log(f"workspace {name}: {workspace.describe()}")
            return workspace

    def _start_for(self, workspace: Workspace, spec: ServiceSpec) -> None:
        if spec.scope is Scope.RUN:
            instance, port = self._shared_instance(spec)
            services.attach(spec, instance, workspace.values, self.environ, clock=self.clock)
            workspace.attached.append((spec, instance))
        else:
            own = portblocks.allocate(1, holder=f"run {self.run_id} {workspace.name} {spec.name}", environ=self.environ)
            try:
                instance = self._start(spec, f"{SAFE.sub('_', workspace.name)}/{spec.name}", own, workspace.values)
            except BaseException:
                own.release()
                raise
            workspace.instances.append((spec, instance))
            self._blocks[id(instance)] = own
            port = own
        workspace.env.update(services.environment(spec, port.first))
        workspace.values[f"{spec.name}_port"] = str(port.first)

    def _start(
        self, spec: ServiceSpec, where: str, block: portblocks.PortBlock, values: Mapping[str, str]
    ) -> services.Instance:
        home = self.root / where
        return services.start(
            spec,
            values={**values, "service_port": str(block.first)},
            data_dir=home / "data",
            state_dir=home / "records",
            environ=self.environ,
            log_dir=home,
            clock=self.clock,
        )

    def _shared_instance(self, spec: ServiceSpec) -> tuple[services.Instance, portblocks.PortBlock]:
        if spec.name not in self._shared:
            block = portblocks.allocate(1, holder=f"run {self.run_id} shared {spec.name}", environ=self.environ)
            try:
                instance = self._start(spec, f"run/{spec.name}", block, {"workspace": "run", "run": self.run_id})
            except BaseException:
                block.release()
                raise
            self._shared[spec.name] = (instance, block)
            self.log(f"run service {spec.name} on port {block.first}")
        return self._shared[spec.name]

    def release(self, name: str) -> None:
        """Undo :meth:`acquire` (nothing when ``name`` is not held). A failing detach or stop is logged, not raised:
        the ports are freed and the rest stopped whatever one command did."""
        with self._lock:
            workspace = self._held.pop(name, None)
            if workspace is not None:
                self._release(workspace)

    def _release(self, workspace: Workspace) -> None:
        for spec, instance in workspace.attached:
            try:
                services.detach(spec, instance, workspace.values, self.environ, clock=self.clock)
            except AgentOpsError as exc:
                self.log(f"workspace {workspace.name}: {exc.message}")
        for spec, instance in workspace.instances:
            self._stop(spec, instance)
        workspace.attached.clear()
        workspace.instances.clear()
        if workspace.block is not None:
            workspace.block.release()

    def _stop(self, spec: ServiceSpec, instance: services.Instance) -> None:
        try:
            services.stop(instance, clock=self.clock)
        except AgentOpsError as exc:
            self.log(f"service {spec.name}: {exc.message}")
        block = self._blocks.pop(id(instance), None)
        if block is not None:
            block.release()
        self._remove(instance.data_dir)  # the workspace's database is gone with it

    def _remove(self, data: Path) -> None:
        """Delete a stopped instance's data; tried again for a few seconds, as a server's last children may still
        be writing there while they exit (a directory not empty yet)."""
        for _attempt in range(50):
            shutil.rmtree(data, ignore_errors=True)
            if not data.exists():
                return
            time.sleep(0.1)
        self.log(f"could not delete {data}: something still writes there")

    def release_all(self) -> None:
        """Release every workspace, then stop the run-scoped services (the supervisor is leaving)."""
        with self._lock:
            for name in list(self._held):
                self.release(name)
            for name, (instance, block) in list(self._shared.items()):
                spec = next(s for s in self.spec.services if s.name == name)
                self._stop(spec, instance)
                block.release()
                del self._shared[name]
