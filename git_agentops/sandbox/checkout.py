"""The sandbox of what the supervisor runs in its own clean checkouts: the verification commands and setup steps.

They are the agent's code -- its tests, its ``conftest.py``, its build backend, its ``package.json`` scripts --
run as the supervisor's user, and their exit status is the proof. Unconfined, a test could replace ``pytest`` in
the repository's shared dependency base (every later verification passes), write the supervisor's private dir,
refs, trust store or the person's HOME, signal the supervisor, or drive the person's ssh-agent. So they run under
the agents' launcher (:mod:`.launcher`: Landlock, namespaces, a reaper), at the level the policy's ``[sandbox]``
gives agents (:func:`git_agentops.sandbox.plan.choose_mode`), with rules computed the same way
(:func:`git_agentops.sandbox.rules.agent_rules`):

* **read** everything an agent may read (not the supervisor's private dir, the trust store, the signing key's
  directory, ``[sandbox] deny_read``; the shared environments and the hooks' policy cache are readable);
* **write** only the checkout, a TMPDIR of their own (emptied before each verification), a cache directory of the
  checkout's slot (``XDG_CACHE_HOME``: pip's, go's build cache...; kept between verifications of the slot),
  ``[sandbox] writable``, and the null and terminal devices. HOME stays the person's, read-only;
* at the ``namespace`` level, the checkout's own repository (``<checkout>/.git``: its alternates, config, setup
  record and object directory decide what the next verification checks out) is bound **read-only**, the person's
  unix sockets and credential stores are out of reach, ``/tmp`` is private; the network stays (tests bind
  ``127.0.0.1``; Landlock does not handle TCP).

Setup steps see the shared environments (``$GIT_COMMON_DIR/agentops/envs``: the Python bases, the toolkit's uv)
read-only too, but for npm's cache there (content-addressed, each entry checked against its integrity on read, and
``npm ci`` checks each package against the lockfile's). A base a setup step needs is built before the step, by the
supervisor (:func:`git_agentops.verify.proof.confinement`, :func:`git_agentops.envs.pybase.ensure_base`), with only
the parts the commit can steer run here: pip, installing registry packages, may write the one base it builds
(:meth:`Wall.granting`), and the project's build backend, asked what an editable build needs, writes nothing of
it. So no code of the commit writes where a complete base, its marker or a base of another key lives, and a later
commit with the same dependencies never gets what this one put there. Landlock alone (level ``landlock``) cannot
make a directory beneath a writable one read-only: there the checkout's ``.git`` stays writable, which
:func:`wall` says in :attr:`Wall.gaps`; without any wall (``none``) the shared environments are not walled either.
A write to what is only to be read is then found after the fact (:meth:`Wall.written`, by stat, change time
included) and refused.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..clock import Clock
from ..model.sandbox import Level
from ..process.command import CommandResult, run_command
from .launcher import EXIT_CANNOT_RUN, EXIT_NOT_FOUND
from .plan import Sandbox, _hidden, _keep, _private
from .rules import WRITE, Places, agent_rules, expand
from .spec import Namespace, Rule

__all__ = ["Scratch", "Wall", "scratch_for", "wall"]

GRACE: Final = 0.5
"""Seconds the launcher gives what a command left behind between SIGTERM and SIGKILL, once the command ended."""


@dataclass(frozen=True, slots=True)
class Scratch:
    """A slot's own directories beside its checkout: ``tmp`` (TMPDIR, emptied per verification), ``cache``
    (XDG_CACHE_HOME, kept) -- both writable by what runs -- and ``specs`` (the launcher's specs: not writable)."""

    root: Path

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def specs(self) -> Path:
        return self.root / "specs"

    def prepare(self) -> None:
        """Make the three directories (0700), ``tmp`` emptied: no file of the last verification is left there."""
        from ..gitstore.clean import remove_tree

        for directory in (self.root, self.cache, self.specs):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.path.lexists(self.tmp):
            remove_tree(self.tmp)
        self.tmp.mkdir(mode=0o700)


def scratch_for(slots: Path, slot: str) -> Scratch:
    """The scratch of ``slot`` among a run's checkouts in ``slots``: ``<slots>/.sandbox/<slot>/``, outside the
    checkout (``git clean`` there would empty it; a file there would be drift)."""
    return Scratch(slots / ".sandbox" / slot)


@dataclass(frozen=True, slots=True)
class Wall:
    """One clean checkout's confinement: the sandbox, where its specs go, what its environment gets, and what this
    level could not wall off (empty at ``namespace``)."""

    sandbox: Sandbox
    scratch: Scratch
    gaps: tuple[str, ...] = ()
    guarded: tuple[Path, ...] = ()  # what it may only read but this level cannot make read-only: checked after
    unguarded: tuple[Path, ...] = ()  # beneath those, what it may write (npm's cache in the shared environments)

    def snapshot(self) -> dict[str, tuple[int, ...]]:
        """Every file and directory under :attr:`guarded` (not below :attr:`unguarded`), by its stat (change time
        included: no process sets it), but a repository's ``index`` (a test's ``git status`` refreshes it; the
        proof never trusts it)."""
        found: dict[str, tuple[int, ...]] = {}
        skip = {str(p) for p in self.unguarded}
        for root in self.guarded:
            for directory, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if os.path.join(directory, d) not in skip]
                for name in (*dirnames, *filenames):
                    path = os.path.join(directory, name)
                    if name == "index" and directory == str(root):
                        continue
                    try:
                        st = os.lstat(path)
                    except OSError:
                        continue
                    found[path] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        return found

    def written(self, before: Mapping[str, tuple[int, ...]]) -> list[str]:
        """The guarded paths made, changed or removed since ``before`` (:meth:`snapshot`)."""
        after = self.snapshot()
        return sorted(p for p in {*before, *after} if before.get(p) != after.get(p))

    @property
    def level(self) -> str:
        """``namespace``, ``landlock`` or ``none``."""
        return self.sandbox.mode

    def granting(self, paths: Sequence[Path]) -> Wall:
        """This wall with ``paths`` writable too -- the base pip is building, which it may fill and nothing else
        of the shared environments. Without a wall (``none``) there is nothing to widen."""
        if not paths or self.sandbox.mode == Level.NONE:
            return self
        rules = (*self.sandbox.rules, *(Rule(str(p), WRITE) for p in paths))
        namespace = self.sandbox.namespace
        if namespace is not None:
            extra = tuple(str(p) for p in paths)
            namespace = dataclasses.replace(
                namespace, keep=tuple(sorted({*namespace.keep, *extra})), own=(*namespace.own, *extra)
            )
        return dataclasses.replace(self, sandbox=dataclasses.replace(self.sandbox, rules=rules, namespace=namespace))

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the slot's TMPDIR and cache: what runs writes its temporary files and caches there."""
        return {**env, "TMPDIR": str(self.scratch.tmp), "XDG_CACHE_HOME": str(self.scratch.cache)}

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
        shell: bool,
        clock: Clock,
        grace: float = 3.0,
        tail_bytes: int = 65536,
    ) -> CommandResult:
        """:func:`~git_agentops.process.command.run_command` of ``argv`` under the launcher. The result names
        ``argv`` as given; a command the launcher could not start (its 126/127 with ``sandbox: ...``) is a
        ``spawn_error``, as it is unconfined."""
        inner = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
        spec = self.scratch.specs / f"{uuid.uuid4().hex}.json"
        launcher = self._sees(env).wrap(inner, cwd, spec)
        try:
            result = run_command(
                launcher,
                cwd=cwd,
                env=self.environment(env),
                timeout=timeout,
                grace=grace,
                clock=clock,
                tail_bytes=tail_bytes,
            )
        finally:
            spec.unlink(missing_ok=True)
        shown = (argv,) if isinstance(argv, str) else tuple(argv)
        return _unwrapped(result, shown)

    def _sees(self, env: Mapping[str, str]) -> Sandbox:
        """The sandbox with what ``env`` names visible in the namespace: a path the policy gives a command or step
        (``PIP_FIND_LINKS``, a config file) is read where it is, even beneath a directory the namespace covers."""
        namespace = self.sandbox.namespace
        if namespace is None:
            return self.sandbox
        named = {
            word
            for value in env.values()
            for part in value.split(os.pathsep)
            for word in part.split()
            if word.startswith("/") and "\0" not in word and os.path.exists(word)
        }
        if named <= set(namespace.keep):
            return self.sandbox
        keep = tuple(sorted({*namespace.keep, *named}))
        return dataclasses.replace(self.sandbox, namespace=dataclasses.replace(namespace, keep=keep))


def _unwrapped(result: CommandResult, argv: tuple[str, ...]) -> CommandResult:
    """``result`` naming ``argv``; the launcher's own refusal to start it turned into a spawn error."""
    spawn_error = result.spawn_error
    exit_code = result.exit_code
    if exit_code in (EXIT_CANNOT_RUN, EXIT_NOT_FOUND) and result.output_size < 4096:
        last = result.output.decode(errors="replace").strip().rsplit("\n", 1)[-1]
        if last.startswith("sandbox: "):
            spawn_error, exit_code = last.removeprefix("sandbox: "), None
    return dataclasses.replace(result, argv=argv, exit_code=exit_code, spawn_error=spawn_error)


def wall(
    *,
    mode: str,
    reason: str | None,
    checkout: Path,
    scratch: Scratch,
    common_dir: Path,
    environ: Mapping[str, str],
    signing_key: str | None,
    policy_writable: Sequence[str],
    deny_read: Sequence[str],
    writable: Sequence[Path] = (),
    guard: Sequence[Path] = (),
) -> Wall:
    """The confinement of what runs in the clean ``checkout`` (see the module docstring); ``writable``: more it may
    write (a setup step: npm's cache in the shared environments); ``guard``: what it may only read that no wall
    covers at level ``none`` (a setup step: the shared environments, but ``writable``), checked by stat after."""
    scratch.prepare()
    if mode == Level.NONE:
        guarded = (checkout / ".git", *guard)
        sandbox = Sandbox(Level.NONE, reason, (), scratch.tmp, grace=GRACE)
        return Wall(sandbox, scratch, guarded=guarded, unguarded=tuple(writable))
    places = Places(checkout, scratch.root, common_dir, scratch.tmp, *_private(common_dir, environ, signing_key))
    own = [checkout, scratch.tmp, scratch.cache, *writable]
    granted = [expand(p, environ) for p in policy_writable]
    rules = agent_rules(places, own=own, writable=granted, deny_read=[expand(p, environ) for p in deny_read])
    readonly = [checkout / ".git"]
    namespace, gaps = None, tuple[str, ...]()
    if mode == Level.NAMESPACE:
        home = Path(environ.get("HOME") or os.path.expanduser("~"))
        keep = _keep(places, home, [*granted, *writable], environ)
        namespace = Namespace(
            hide=_hidden(environ),
            keep=keep,
            own=tuple(str(p) for p in own),
            network=True,
            readonly=tuple(str(p) for p in readonly if os.path.lexists(p)),
        )
    else:
        gaps = tuple(
            f"{p} stays writable (Landlock alone cannot make it read-only; a write is refused after)" for p in readonly
        )
    sandbox = Sandbox(mode, reason, tuple(rules), scratch.tmp, grace=GRACE, namespace=namespace)
    return Wall(sandbox, scratch, gaps, guarded=() if namespace is not None else tuple(readonly))
