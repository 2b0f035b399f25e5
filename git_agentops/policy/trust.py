"""Trust: nothing from a policy runs until the user has trusted that exact policy for that repository.

A policy names commands that will run on the user's machine, and anyone who can push to the repository can change
it. So trust is recorded *outside* the repository, in the user's state directory
(``$XDG_STATE_HOME/git-agentops/trust.json``, 0600, updated under a file lock with an atomic replace): a fetched
ref can never grant it. A record binds

* the repository's canonical path (its common dir, so linked worktrees share the main checkout's trust),
* its remote identity (normalised ``remote.origin.url``, else ``local:<path>``),
* the policy's config hash, and a copy of the effective policy (so a change can be shown field by field),
* the toolkit version (a new toolkit may run the same policy differently).

Status: ``TRUSTED`` (a record matches all four), ``STALE`` (a record for this repository or remote differs; the
differences are listed), ``UNTRUSTED`` (no record). A record is found by repository and compared by config hash,
so a policy that reaches the target any other way -- a delivery cannot change ``.agentops/`` at all
(:mod:`git_agentops.integrate.guards`), but anyone may push -- is STALE until a person trusts that exact hash.

**Trust is a person's act.** Worker agents run as the same OS user, so the store is within their reach, and an
agent that ran ``git agentops-policy trust --yes`` on a policy it had weakened would grant itself the trust the
user never gave. :func:`agent_signs` names what marks an agent's surroundings -- the variables the supervisor
gives agents (:data:`AGENT_VARIABLES`), a current directory inside a run's worktree (a linked worktree whose git
dir holds the ownership record, or anything under the policy's ``worktree_root``) or inside the supervisor's
clean verification checkouts -- and :func:`refuse_agent` refuses a grant there (``POLICY_TRUST_AGENT``) before
the store is touched. An agent that unsets the variables and changes directory is not stopped by this: that is
the sandbox's part (no write to the trust store). ``untrust`` only lowers trust and is allowed anywhere. Each
record says who granted it (:class:`Grantor`: git identity, login name, terminal, whether ``--yes`` answered
for them), so ``policy status`` can show it.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from .. import __version__
from ..canonical import JsonObject
from ..clock import Clock, iso8601
from ..errors import AgentOpsError
from ..gitstore.private import file_lock, read_private, write_private
from ..model.jsonform import JsonRecord, on_disk
from ..model.policy import Policy, diff_paths
from ..model.policydoc import PolicyDoc
from ..schema import documents

STORE_NAME: Final = "trust.json"
AGENT_VARIABLES: Final = (
    "AGENTOPS_RUN_ID",
    "AGENTOPS_WORKER_ID",
    "AGENTOPS_GENERATION",
    "AGENTOPS_MAILBOX",
    "AGENTOPS_REVIEWER",
    "AGENTOPS_PROMPT",
    "AGENTOPS_REVIEW_INPUT",
    "AGENTOPS_REVIEW_REPORT",
)
"""Set by the supervisor for the agents it starts (workers and reviewers; :mod:`git_agentops.hosts.launch`) and
stripped from what it inherits, so none of them is ever set in a person's own shell."""
WORKTREE_RECORD: Final = "agentops/worktree.json"
"""The ownership record in a run worktree's git dir (:data:`git_agentops.verify.workspaces.RECORD`)."""
_DEFAULT_PORTS: Final = {"ssh": "22", "https": "443", "http": "80", "git": "9418"}
_CASE_INSENSITIVE_HOSTS: Final = frozenset({"github.com", "gitlab.com", "bitbucket.org"})
_SCP_LIKE: Final = re.compile(r"(?:[^@/]+@)?([^:/]+):(?!//)(.+)")


class TrustStatus(enum.StrEnum):
    TRUSTED = "TRUSTED"
    STALE = "STALE"
    UNTRUSTED = "UNTRUSTED"


@dataclass(frozen=True, slots=True)
class RepoIdentity:
    repository: str  # canonical absolute path of the repository (main checkout, or the bare dir)
    remote: str  # normalised remote identity, or local:<path>


@dataclass(frozen=True, slots=True)
class Grantor(JsonRecord):
    """Who granted trust, as far as this machine can tell: the OS ``login`` name, the git identity (``name``,
    ``email``), the terminal stdin was (``tty``, None when there was none) and whether ``--yes`` answered the
    question (``yes``). A record of what happened, not a proof: every part of it is the user's to set."""

    login: str = on_disk("login")
    name: str | None = on_disk("name", default=None)
    email: str | None = on_disk("email", default=None)
    tty: str | None = on_disk("tty", default=None)
    yes: bool = on_disk("yes", default=False)


@dataclass(frozen=True, slots=True)
class TrustGrant(JsonRecord):
    """One record of the trust store (``schemas/trust-store.schema.json``): this repository (by path and remote)
    trusts the policy whose hash and effective document it keeps, since when and -- for grants made since they
    were attributed -- by whom."""

    repository: str = on_disk("repository")
    remote: str = on_disk("remote")
    config_hash: str = on_disk("configHash")
    toolkit_version: str = on_disk("toolkitVersion")
    granted_at: str = on_disk("grantedAt")
    policy: PolicyDoc = on_disk("policy")
    granted_by: Grantor | None = on_disk("grantedBy", absent=None, decode=Grantor.from_json)


@dataclass(frozen=True, slots=True)
class Verdict:
    status: TrustStatus
    identity: RepoIdentity
    config_hash: str
    record: TrustGrant | None = None
    differences: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> JsonObject:
        by = self.record.granted_by if self.record else None
        return {
            "status": str(self.status),
            "repository": self.identity.repository,
            "remote": self.identity.remote,
            "configHash": self.config_hash,
            "toolkitVersion": __version__,
            "trustedConfigHash": self.record.config_hash if self.record else None,
            "trustedAt": self.record.granted_at if self.record else None,
            "trustedBy": by.to_json() if by is not None else None,
            "differences": list(self.differences),
        }


def describe_grant(record: TrustGrant) -> str:
    """``by alice (Alice <a@example.com>) at 2026-01-01T00:00:00Z on /dev/pts/3, confirmed at the prompt``; a
    record from before grants were attributed says only when."""
    when = f"at {record.granted_at}"
    who = record.granted_by
    if who is None:
        return f"{when} (who is not recorded)"
    git_identity = " ".join(part for part in (who.name, f"<{who.email}>" if who.email else None) if part)
    person = (who.login or "?") + (f" ({git_identity})" if git_identity else "")
    where = f" on {who.tty}" if who.tty else " without a terminal"
    how = "with --yes" if who.yes else "confirmed at the prompt"
    return f"by {person} {when}{where}, {how}"


def agent_signs(
    environ: Mapping[str, str], *, cwd: Path, git_dir: Path | None = None, fenced: Sequence[Path] = ()
) -> list[str]:
    """What says this process runs in an agent's surroundings (empty: nothing does).

    ``cwd`` is the current directory; ``git_dir`` the git dir of the repository the command opened; ``fenced`` the
    directories only agents and the supervisor work in (the run worktrees' root, the clean checkouts' root).
    """
    signs = [f"${name} is set" for name in AGENT_VARIABLES if name in environ]
    here = Path(os.path.realpath(cwd))
    top = _worktree_top(here)
    if top is not None and _has_record(top / ".git"):
        signs.append(f"{top} is a run's worktree")
    if git_dir is not None and (Path(git_dir) / WORKTREE_RECORD).exists():
        signs.append(f"the repository's git dir {git_dir} belongs to a run's worktree")
    for root in fenced:
        real = Path(os.path.realpath(root))
        if here == real or real in here.parents:
            signs.append(f"{here} is under {real}")
    return signs


def _worktree_top(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` with a ``.git`` (file or directory), or None."""
    for directory in (start, *start.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def _has_record(dot_git: Path) -> bool:
    """Whether the ``.git`` file of a linked worktree points at a git dir that holds the ownership record."""
    from ..gitstore.checkout import admin_dir

    if not dot_git.is_file() or dot_git.is_symlink():
        return False
    admin = admin_dir(dot_git.parent)
    return admin is not None and os.path.lexists(admin / WORKTREE_RECORD)


def refuse_agent(signs: Sequence[str]) -> None:
    """``POLICY_TRUST_AGENT`` when :func:`agent_signs` found anything: trust is granted by a person only."""
    if not signs:
        return
    raise AgentOpsError(
        "POLICY_TRUST_AGENT",
        f"refusing to grant trust from an agent's environment ({'; '.join(signs)}); nothing was changed. Trust is "
        "a person's decision: review the policy with 'git agentops-policy show' and run 'git agentops-policy trust' "
        "yourself, in your own shell, from the main checkout",
        details={"signs": list(signs)},
    )


def _strip(path: str) -> str:
    path = path.rstrip("/")
    return path[:-4] if path.endswith(".git") else path


def normalise_remote(url: str, *, base: Path) -> str:
    """``git@GitHub.com:Org/Repo.git`` -> ``github.com/org/repo``; a local path -> ``local:<realpath>``."""
    url = url.strip()
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme == "file":
            return "local:" + _strip(os.path.realpath(parts.path))
        host = (parts.hostname or "").lower()
        port = f":{parts.port}" if parts.port and str(parts.port) != _DEFAULT_PORTS.get(parts.scheme) else ""
        path = _strip(parts.path.lstrip("/"))
    else:
        scp = _SCP_LIKE.fullmatch(url)
        if scp is None or "/" in scp.group(1):
            return "local:" + _strip(os.path.realpath(base / url))
        host, port, path = scp.group(1).lower(), "", _strip(scp.group(2).lstrip("/"))
    if host in _CASE_INSENSITIVE_HOSTS:
        path = path.lower()
    return f"{host}{port}/{path}"


def repo_identity(common_dir: Path, origin_url: str | None) -> RepoIdentity:
    """Identity of the repository whose common dir is ``common_dir`` (shared by all its worktrees)."""
    common = Path(os.path.realpath(common_dir))
    repository = common.parent if common.name == ".git" else common
    remote = normalise_remote(origin_url, base=repository) if origin_url else f"local:{repository}"
    return RepoIdentity(str(repository), remote)


class TrustStore:
    """The user's trust records, in ``state_dir/trust.json``."""

    def __init__(self, state_dir: Path, clock: Clock) -> None:
        self.state_dir = state_dir
        self.clock = clock

    @property
    def path(self) -> Path:
        return self.state_dir / STORE_NAME

    def _read(self) -> list[TrustGrant]:
        try:
            data = read_private(self.state_dir, STORE_NAME, max_bytes=16 * 1024 * 1024)
        except AgentOpsError as exc:
            raise AgentOpsError("TRUST_STORE_INVALID", f"{self.path}: {exc.message}") from exc
        if data is None:
            return []
        try:
            doc = documents.load(data, schema="trust-store", what=str(self.path), max_bytes=16 * 1024 * 1024)
        except AgentOpsError as exc:
            raise AgentOpsError(
                "TRUST_STORE_INVALID", f"{exc.message}; fix or remove {self.path} (nothing was changed)"
            ) from exc
        return [TrustGrant.from_json(record) for record in doc["records"]]

    def _write(self, records: list[TrustGrant]) -> None:
        doc = {"version": 1, "records": [record.to_json() for record in records]}
        write_private(self.state_dir, STORE_NAME, documents.dump(doc, schema="trust-store"))

    def status(self, identity: RepoIdentity, policy: Policy) -> Verdict:
        records = self._read()
        exact = [r for r in records if r.repository == identity.repository]
        related = exact or [
            r for r in records if not identity.remote.startswith("local:") and r.remote == identity.remote
        ]
        if not related:
            return Verdict(TrustStatus.UNTRUSTED, identity, policy.config_hash)
        record = related[-1]
        differences = []
        if record.repository != identity.repository:
            differences.append("repository")
        if record.remote != identity.remote:
            differences.append("remote")
        if record.toolkit_version != __version__:
            differences.append("toolkitVersion")
        if record.config_hash != policy.config_hash:
            differences.append("configHash")
            differences += list(diff_paths(dict(record.policy), dict(policy.doc)))
        status = TrustStatus.STALE if differences else TrustStatus.TRUSTED
        return Verdict(status, identity, policy.config_hash, record, tuple(differences))

    def grant(self, identity: RepoIdentity, policy: Policy, *, by: Grantor | None = None) -> TrustGrant:
        """Trust ``policy`` for this repository, replacing any record for the same path or remote; ``by`` is who
        granted it. The caller refuses an agent first (:func:`refuse_agent`)."""
        record = TrustGrant(
            repository=identity.repository,
            remote=identity.remote,
            config_hash=policy.config_hash,
            toolkit_version=__version__,
            granted_at=iso8601(self.clock.now()),
            policy=policy.doc,
            granted_by=by,
        )
        with file_lock(self.state_dir, "trust.lock"):
            records = [r for r in self._read() if not _same_repo(r, identity)]
            records.append(record)
            self._write(records)
        return record

    def revoke(self, identity: RepoIdentity) -> int:
        """Remove every record for this repository (by path or remote); returns how many."""
        with file_lock(self.state_dir, "trust.lock"):
            records = self._read()
            kept = [r for r in records if not _same_repo(r, identity)]
            if len(kept) != len(records):
                self._write(kept)
        return len(records) - len(kept)


def _same_repo(record: TrustGrant, identity: RepoIdentity) -> bool:
    if record.repository == identity.repository:
        return True
    return not identity.remote.startswith("local:") and record.remote == identity.remote


def require_trusted(verdict: Verdict) -> None:
    """Refuse (``POLICY_UNTRUSTED``) unless the verdict is TRUSTED, saying what differs and how to trust."""
    if verdict.status is TrustStatus.TRUSTED:
        return
    what = f"policy {verdict.config_hash[:12]} is {verdict.status} for {verdict.identity.repository}"
    if verdict.differences:
        shown = ", ".join(verdict.differences[:6]) + (" ..." if len(verdict.differences) > 6 else "")
        what += f" (changed: {shown})"
    raise AgentOpsError(
        "POLICY_UNTRUSTED",
        f"{what}; nothing was run. Review it with 'git agentops-policy show', then trust it with "
        "'git agentops-policy trust'",
        details=verdict.to_json(),
    )
