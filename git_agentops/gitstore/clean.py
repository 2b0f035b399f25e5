"""Clean checkouts: a directory that holds exactly one commit's files, in a repository only the toolkit configures.

Verification that an agent's own worktree hosts proves nothing: files git ignores (a root ``conftest.py``, a
``pytest.ini`` with a shadow module, a stale ``.pyc``), ``--skip-worktree`` entries and ``git status`` itself are
all the agent's to arrange. So the supervisor verifies in a checkout it makes itself:

* **A private repository** at ``<root>/.git`` (``git init --template=``: no sample hooks, no ``info/exclude``)
  whose objects come from the real repository through ``objects/info/alternates``, and whose only config is the
  toolkit's (:data:`CONFIG`): the shared config an agent can edit -- fsmonitor, hooks, filter drivers,
  excludes -- is never read, and every git call is neutralised besides (:mod:`.safegit`).
* **Populate** (:meth:`CleanCheckout.populate`): ``read-tree --reset -u`` to the commit, ``HEAD`` detached at it,
  then ``git clean -ffdx`` of everything that is not the commit's -- untracked and ignored files alike -- except
  the paths the checkout's own setup made (:attr:`CleanCheckout.kept`: the venv, build products).
* **Inspect** (:meth:`CleanCheckout.inspect`): every tracked file re-hashed from its content (a scratch index read
  from the commit's tree carries no stat data, so ``update-index --refresh`` must compare content; a file that
  differs only by the eol conversion of its attributes is compared raw as well), and every path on disk that
  the commit does not have listed (``ls-files --others`` with no ignore rules at all). Before the commands both
  must be empty; after them, tracked files must be unchanged (files the commands create are theirs, not dirt).

Gitlinks (submodules) are left empty, as a fresh clone leaves them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from .safegit import run_git

CONFIG: Final = (
    "[core]\n"
    "\trepositoryformatversion = 0\n"
    "\tbare = false\n"
    "\tfilemode = true\n"
    "\tlogallrefupdates = false\n"
    "\tfsmonitor = false\n"
    "\thooksPath = /dev/null\n"
    "\tuntrackedCache = false\n"
    "\tautocrlf = false\n"
    "\ttrustctime = true\n"
    "\tcheckStat = default\n"
    "[gc]\n"
    "\tauto = 0\n"
    "[maintenance]\n"
    "\tauto = false\n"
)
SCRATCH_INDEX: Final = "agentops-inspect.index"
GLOBAL_CONFIG: Final = "agentops-global.gitconfig"
LISTED: Final = 50


@dataclass(frozen=True, slots=True)
class Drift:
    """How a clean checkout differs from its commit: tracked paths changed (M/D/T) and paths it should not have."""

    changed: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """No difference at all."""
        return not self.changed and not self.extra

    def describe(self) -> str:
        """The first differences, for a message."""
        parts = []
        if self.changed:
            parts.append("changed: " + ", ".join(self.changed[:10]) + (" ..." if len(self.changed) > 10 else ""))
        if self.extra:
            parts.append("not in the commit: " + ", ".join(self.extra[:10]) + (" ..." if len(self.extra) > 10 else ""))
        return "; ".join(parts) or "identical"


@dataclass
class CleanCheckout:
    """A supervisor-owned checkout at ``root`` (its private repository at ``root/.git``)."""

    root: Path
    objects: Path  # the real repository's object directory
    kept: tuple[str, ...] = field(default_factory=tuple)  # top-relative paths that setup made and populate keeps
    commit: str | None = None

    identity: tuple[str, str] = ("git-agentops", "agentops@localhost")

    @property
    def git_dir(self) -> Path:
        """The private repository."""
        return self.root / ".git"

    def command_git_env(self) -> dict[str, str]:
        """What the verification commands get besides their scrubbed environment: for their git, no system
        config and a global config of the identity only -- never the person's ``~/.gitconfig``, which an agent
        can write too; for Python, no user site-packages (``~/.local/lib/python*/site-packages`` is the agent's
        to plant a ``sitecustomize`` in)."""
        path = self.git_dir / GLOBAL_CONFIG
        name, email = (_config_quote(v) for v in self.identity)
        text = f"[user]\n\tname = {name}\n\temail = {email}\n[core]\n\tfsmonitor = false\n"
        if not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != text:
            path.write_text(text, encoding="utf-8")
        return {"GIT_CONFIG_GLOBAL": str(path), "GIT_CONFIG_NOSYSTEM": "1", "PYTHONNOUSERSITE": "1"}

    def _run(
        self, *args: str, index: Path | None = None, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        env = {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.root)}
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        try:  # its config is the toolkit's, byte for byte: no driver to blank, no need to ask git for them
            ours = (self.git_dir / "config").read_bytes() == CONFIG.encode()
        except OSError:
            ours = False
        return run_git(self.root, *args, env=env, input=stdin, timeout=600, scan_drivers=not ours)

    def _git(self, *args: str, index: Path | None = None, stdin: bytes | None = None) -> bytes:
        done = self._run(*args, index=index, stdin=stdin)
        if done.returncode != 0:
            error = done.stderr.decode(errors="replace").strip()
            raise AgentOpsError("GIT_FAILED", f"git {args[0]} failed in the clean checkout {self.root}: {error}")
        return done.stdout

    # -- making it ---------------------------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the private repository if it is not there (an incomplete one is removed and made again)."""
        marker = self.git_dir / "agentops-clean"
        if marker.is_file() and not self.git_dir.is_symlink():
            return
        if self.root.exists() or self.root.is_symlink():
            remove_tree(self.root)
        self.root.mkdir(mode=0o700, parents=True)
        done = run_git(self.root.parent, "init", "-q", "--template=", str(self.root))
        if done.returncode != 0:
            raise AgentOpsError("GIT_FAILED", f"git init {self.root} failed: {done.stderr.decode(errors='replace')}")
        (self.git_dir / "config").write_text(CONFIG, encoding="utf-8")
        info = self.git_dir / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(f"{self.objects}\n", encoding="utf-8")
        marker.write_text("made by git-agentops: a verification checkout; safe to delete when no run uses it\n")

    def populate(self, commit: str) -> None:
        """Make the checkout hold ``commit`` and nothing else but :attr:`kept` (see the module docstring)."""
        self.ensure()
        config = self.git_dir / "config"
        if config.is_symlink() or not config.is_file() or config.read_bytes() != CONFIG.encode():
            config.unlink(missing_ok=True)  # someone edited the toolkit's config: it is the toolkit's again
            config.write_text(CONFIG, encoding="utf-8")
        self._git("read-tree", "--reset", "-u", commit)
        self._git("update-ref", "--no-deref", "HEAD", commit)
        self._clean()
        self.commit = commit

    def wipe(self) -> None:
        """Delete the whole checkout (the next :meth:`populate` starts from nothing)."""
        remove_tree(self.root)
        self.kept = ()
        self.commit = None

    # -- looking at it -----------------------------------------------------------------------------------------

    def inspect(self, commit: str | None = None, *, extras: bool = True) -> Drift:
        """Compare the files on disk with ``commit`` (default: the populated one) by content.

        The scratch index starts from the commit's tree with no stat data, so ``update-index --refresh`` compares
        every file's content -- except when the scratch index is byte for byte the one this process left after its
        last inspection of this checkout (:data:`_TRUSTED`, a digest held in memory, never on disk): then the stat
        data of unchanged entries is kept (``read-tree --reset``), and only files whose stat (ctime included, which no
        user process can set) or racy timestamps say so are hashed again.
        """
        commit = commit or self.commit
        if commit is None:
            raise ValueError("inspect() before populate()")
        index = self.git_dir / SCRATCH_INDEX
        key = str(index)
        known = _TRUSTED.pop(key, None)
        if known is not None and _digest_of(index) == known:
            self._git("read-tree", "--reset", commit, index=index)
        else:
            index.unlink(missing_ok=True)
            self._git("read-tree", commit, index=index)
        refreshed = self._run("update-index", "--refresh", "--ignore-submodules", index=index)
        changed: list[str] = []
        if refreshed.returncode != 0:  # some entry "needs update": diff-files says which and how
            out = self._git("diff-files", "-z", "--raw", "--no-renames", "--ignore-submodules=all", index=index)
            changed = self._really_changed(commit, _raw_entries(out))
        digest = _digest_of(index)
        if digest is not None:
            _TRUSTED[key] = digest
        found: list[str] = []
        if extras:
            pathspec = [".", *(f":(exclude,top){path.strip('/')}" for path in self.kept)]
            out = self._git("ls-files", "-z", "--others", "--directory", "--", *pathspec, index=index)
            found = sorted(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p)
        return Drift(tuple(changed[:LISTED]), tuple(found[:LISTED]))

    def _really_changed(self, commit: str, entries: Sequence[tuple[str, str, bool]]) -> list[str]:
        """The entries that differ for real: a file modified in content only whose raw bytes are its blob's is
        unchanged (its attributes convert line endings, so the filtered hash differs from a blob committed as is)."""
        modified = [path for status, path, mode_changed in entries if status == "M" and not mode_changed]
        same: set[str] = set()
        if modified:
            listing = self._git("ls-tree", "-z", commit, "--", *modified)
            blobs = {}
            for item in listing.decode("utf-8", "surrogateescape").split("\0"):
                if item:
                    meta, _, path = item.partition("\t")
                    blobs[path] = meta.split()[2]
            regular = [p for p in modified if (self.root / p).is_file() and not (self.root / p).is_symlink()]
            if regular:
                stdin = "".join(f"{p}\n" for p in regular).encode("utf-8", "surrogateescape")
                hashes = self._git("hash-object", "--no-filters", "--stdin-paths", stdin=stdin).decode().split()
                same = {path for path, oid in zip(regular, hashes, strict=True) if blobs.get(path) == oid}
        return [f"{status} {path}" for status, path, _ in entries if path not in same]

    def blob_ids(self, commit: str, paths: Sequence[str]) -> dict[str, str]:
        """The blob id of each of ``paths`` that ``commit`` has (others left out)."""
        out = self._git("ls-tree", "-z", "--full-tree", commit, "--", *paths)
        found: dict[str, str] = {}
        for item in out.decode("utf-8", "surrogateescape").split("\0"):
            meta, _, path = item.partition("\t")
            fields = meta.split()
            if len(fields) == 3 and fields[1] == "blob":
                found[path] = fields[2]
        return found

    def tree_dirs(self, commit: str) -> list[str]:
        """Every directory of ``commit``'s tree."""
        out = self._git("ls-tree", "-r", "-d", "-z", "--name-only", "--full-tree", commit)
        return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]

    def rewrite(self) -> None:
        """Write every file of the index again and clean once more: what follows a :class:`Drift` before the
        commands, since ``read-tree -u`` leaves an unchanged entry's file alone, tampered or not."""
        self._git("checkout-index", "-f", "-a")
        self._clean()

    def _clean(self) -> None:
        excludes = [arg for path in self.kept for arg in ("-e", "/" + path.strip("/"))]
        self._git("clean", "-ffdxq", *excludes)


def clean_source(git_dir: Path) -> Path | None:
    """The common dir of the repository whose clean checkout has ``git_dir`` as its private repository, or None
    when ``git_dir`` is not one: the toolkit's marker (a regular file), the toolkit's config byte for byte, and an
    ``objects/info/alternates`` of one absolute line naming ``<common dir>/objects`` of a repository that has a
    ``HEAD``. The shared environments of a clean checkout are found by it (:func:`git_agentops.envs.tools.shared_dir`).
    """
    try:
        if (
            git_dir.is_symlink()
            or not (git_dir / "agentops-clean").is_file()
            or (git_dir / "agentops-clean").is_symlink()
        ):
            return None
        if (git_dir / "config").read_bytes() != CONFIG.encode():
            return None
        lines = (git_dir / "objects" / "info" / "alternates").read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) != 1 or not os.path.isabs(lines[0]):
        return None
    objects = Path(lines[0])
    common = objects.parent
    if objects.name != "objects" or not objects.is_dir() or not (common / "HEAD").is_file():
        return None
    return common.resolve()


DISCOVERED: Final = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pyproject.toml",
        "tox.ini",
        "setup.cfg",
        "setup.py",
        "mypy.ini",
        ".mypy.ini",
        "ruff.toml",
        ".ruff.toml",
        ".coveragerc",
        "sitecustomize.py",
        "usercustomize.py",
        "package.json",
        "node_modules",
        ".npmrc",
        ".yarnrc",
        ".yarnrc.yml",
        ".pnpmfile.cjs",
        "tsconfig.json",
        "jsconfig.json",
        ".babelrc",
        "Cargo.toml",
        ".cargo",
        "go.work",
        "go.mod",
        ".python-version",
        ".tool-versions",
    }
)
DISCOVERED_PREFIXES: Final = (".eslintrc", "eslint.config.", "jest.config.", "vitest.config.", "babel.config.")
"""Names that tools find by walking *up* from where they run (pytest's rootdir and conftest files, node's
``node_modules``, Cargo workspaces, ``go.work``...): a file planted above a clean checkout reaches into it."""


def is_discovered(path: str) -> bool:
    """Whether a (top-relative) path names a file tools pick up by name: :data:`DISCOVERED`, or a ``.pth``."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name in DISCOVERED or name.startswith(DISCOVERED_PREFIXES) or name.endswith(".pth")


def discoverable_above(root: Path) -> dict[str, str]:
    """Every :data:`DISCOVERED` entry in a directory above ``root``: path -> fingerprint (a file's digest)."""
    import hashlib

    found: dict[str, str] = {}
    directory = root.resolve().parent
    while True:
        try:
            names = os.listdir(directory)
        except OSError:
            names = []
        for name in names:
            if name in DISCOVERED or name.startswith(DISCOVERED_PREFIXES):
                path = directory / name
                try:
                    if path.is_file() and not path.is_symlink() and path.stat().st_size <= 1 << 20:
                        found[str(path)] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
                    else:
                        found[str(path)] = "present"
                except OSError:
                    found[str(path)] = "present"
        if directory.parent == directory:
            return found
        directory = directory.parent


def _config_quote(value: str) -> str:
    cleaned = "".join(c for c in value if c >= " " and c != "\x7f")
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


_TRUSTED: dict[str, str] = {}
"""Scratch index path -> SHA-256 of the bytes this process left there: an index someone else rewrote (to make a
tampered file's stat look cached) is never trusted, and after a restart every file is hashed again."""


def _digest_of(path: Path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _raw_entries(out: bytes) -> list[tuple[str, str, bool]]:
    """(status, path, mode changed) of ``diff-files --raw -z`` (``:old new oid oid S\0path\0``)."""
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    entries = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].split()
        if len(meta) == 5:
            entries.append((meta[4][:1], fields[i + 1], meta[0].lstrip(":") != meta[1]))
    return entries


def collapse(paths: Sequence[str], tracked_dirs: set[str]) -> list[str]:
    """Each path cut to its first directory that is not one of the commit's (``src/pkg.egg-info/`` for
    ``src/pkg.egg-info/PKG-INFO`` when ``src`` is tracked), so a product of thousands of files is one entry."""
    out: set[str] = set()
    for path in paths:
        parts = path.rstrip("/").split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if prefix not in tracked_dirs:
                out.add(prefix)
                break
    return sorted(out)


def remove_tree(path: Path) -> None:
    """Delete ``path`` (a symlink is unlinked, never followed); files made read-only are made writable first."""
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    if not path.exists():
        return

    def retry(function: object, name: str, excinfo: object) -> None:
        del function, excinfo
        try:
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
        except OSError:
            pass
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name, ignore_errors=True)
        else:
            try:
                os.unlink(name)
            except OSError:
                pass

    shutil.rmtree(path, onerror=retry)
