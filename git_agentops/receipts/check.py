"""What CI runs: check the receipts of one commit or of a range of the target's history, offline.

For a single commit, it must carry a receipt (``refs/notes/agentops/receipts``) that passes every check of
:func:`git_agentops.receipts.verify.verify_receipt`. For a range ``A..B``, every first-parent commit of ``B``
down to ``A`` whose second parent is a frozen delivery (it has a delivery record under
``refs/notes/agentops/deliveries``) was made by an integration, so it must either carry a receipt itself or be
one of the merge steps recorded in the receipt of a later first-parent commit: a receipt lost in a squash, a
rebase or a re-merge is reported as ``RECEIPT_MISSING``.

The allowed signers default to the policy's ``receipts.allowed_signers`` **as committed at the verified
commit**, and so does ``require_signature``; ``--allowed-signers`` and ``--require-signature`` override both,
which is what CI should do (pin its own trust, not the branch's). Reading goes through git plumbing: no pygit2.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.backend import GitCliBackend
from ..gitstore.identity import DEFAULT_IDENTITY
from ..gitstore.notes import DELIVERIES_REF, RECEIPTS_REF, Notes
from .dsse import parse_envelope
from .verify import Verdict, verify_receipt


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """A commit as ``git log --format='%H %T %P'`` shows it: the id, tree and parents a receipt is checked against."""

    commit: str
    tree: str
    parents: tuple[str, ...]


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AgentOpsError("OBJECT_MISSING", f"git {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout


def commits(cwd: Path, spec: str) -> list[CommitInfo]:
    """The commit ``spec`` names, or the first-parent walk of a range ``A..B`` (newest first)."""
    if ".." in spec:
        base, _, tip = spec.partition("..")
        out = _git(
            cwd,
            "rev-list",
            "--first-parent",
            "--format=%H %T %P",
            "--no-commit-header",
            f"{tip or 'HEAD'}",
            f"^{base}" if base else "--all",
        )
    else:
        out = _git(cwd, "log", "-1", "--format=%H %T %P", f"{spec}^{{commit}}")
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            found.append(CommitInfo(parts[0], parts[1], tuple(parts[2:])))
    return found


def first_parent_chain(cwd: Path, known: list[str] | None = None) -> Any:
    """``chain(commit, base)``: the first-parent walk from ``commit`` down to (not including) ``base``.

    A range check already has the walk of the whole range; a lookup into it costs nothing, where asking git for
    each receipt would walk the history again every time (quadratic over a long range).
    """
    position = {commit: index for index, commit in enumerate(known or [])}

    def chain(commit: str, base: str) -> list[str]:
        if known is not None and commit in position and base in position and position[base] > position[commit]:
            return known[position[commit] : position[base]]
        count = 64
        while True:
            walk = _git(cwd, "rev-list", "--first-parent", f"--max-count={count}", commit).split()
            if base in walk:
                return walk[: walk.index(base)]
            if len(walk) < count:
                return walk
            count *= 8

    return chain


def _policy_signers(cwd: Path, commit: str, scratch: Path) -> tuple[Path | None, bool]:
    """The allowed-signers file and require_signature of the policy committed at ``commit``."""
    from ..model.policy import POLICY_PATH
    from ..policy.load import policy_from_bytes

    done = subprocess.run(
        ["git", "cat-file", "blob", f"{commit}:{POLICY_PATH}"], cwd=cwd, capture_output=True, timeout=60, check=False
    )
    if done.returncode != 0:
        return None, False
    try:
        policy = policy_from_bytes(done.stdout, source=f"{commit[:12]}:{POLICY_PATH}")
    except AgentOpsError:
        return None, False
    receipts = policy.doc["receipts"]
    required = bool(receipts.get("require_signature"))
    where = receipts.get("allowed_signers")
    if not where:
        return None, required
    blob = subprocess.run(
        ["git", "cat-file", "blob", f"{commit}:{where}"], cwd=cwd, capture_output=True, timeout=60, check=False
    )
    if blob.returncode != 0:
        return None, required
    path = scratch / f"allowed_signers-{commit[:12]}"
    path.write_bytes(blob.stdout)
    return path, required


class _IncomingRefs(GitCliBackend):
    def __init__(self, cwd: Path, *, incoming: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(cwd, **kwargs)
        self.incoming = dict(incoming)

    def read_ref(self, name: str) -> str | None:
        return self.incoming.get(name) or super().read_ref(name)


def check(
    cwd: Path,
    spec: str,
    *,
    environ: Mapping[str, str],
    clock: Clock,
    allowed_signers: Path | None = None,
    require_signature: bool | None = None,
    incoming: Mapping[str, str] | None = None,
) -> list[Verdict]:
    """One verdict per commit that needs (or has) a receipt; see the module docstring.

    ``incoming`` gives notes refs their value from a push still being received (``pre-receive``: the objects
    are here, the refs not yet), so receipts pushed together with their commits count.
    """
    backend = _IncomingRefs(cwd, environ=environ, identity=DEFAULT_IDENTITY, clock=clock, incoming=incoming or {})
    receipts = Notes(backend, RECEIPTS_REF)
    deliveries = Notes(backend, DELIVERIES_REF)
    walk = commits(cwd, spec)
    single = ".." not in spec
    chain = first_parent_chain(cwd, None if single else [info.commit for info in walk])
    when = datetime.fromtimestamp(clock.now(), tz=UTC)
    covered: set[str] = set()
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix="agentops-receipts-") as tmp:
        for info in walk:
            data = receipts.read(info.commit)
            is_delivery_merge = len(info.parents) >= 2 and deliveries.read(info.parents[1]) is not None
            if data is None:
                if single or (is_delivery_merge and info.commit not in covered):
                    what = "has no receipt" if single else "integrates a delivery but no receipt covers it"
                    verdicts.append(Verdict(info.commit, False, "RECEIPT_MISSING", f"{info.commit[:12]} {what}"))
                continue
            signers, required = (allowed_signers, bool(require_signature)) if allowed_signers else (None, False)
            if allowed_signers is None:
                signers, required = _policy_signers(cwd, info.commit, Path(tmp))
            if require_signature is not None:
                required = require_signature
            verdict = verify_receipt(
                data,
                commit=info.commit,
                tree=info.tree,
                parents=info.parents,
                first_parent_chain=chain,
                allowed_signers=signers,
                require_signature=required,
                when=when,
            )
            verdicts.append(verdict)
            if verdict.ok:
                covered.update(_steps(data))
    return verdicts


def _steps(data: bytes) -> set[str]:
    try:
        predicate = parse_envelope(data).statement()["predicate"]
        return {step["commit"] for step in predicate["integration"]["value"]["steps"]}
    except (AgentOpsError, KeyError, TypeError):
        return set()


def show(cwd: Path, rev: str, *, environ: Mapping[str, str], clock: Clock) -> dict[str, Any]:
    """The receipt of ``rev``: the envelope's signatures and the statement. ``RECEIPT_MISSING``."""
    info = commits(cwd, rev)[0]
    backend = GitCliBackend(cwd, environ=environ, identity=DEFAULT_IDENTITY, clock=clock)
    data = Notes(backend, RECEIPTS_REF).read(info.commit)
    if data is None:
        raise AgentOpsError("RECEIPT_MISSING", f"{info.commit[:12]} has no receipt")
    envelope = parse_envelope(data)
    return {
        "commit": info.commit,
        "payloadType": envelope.payload_type,
        "signatures": [{"keyid": s.keyid} for s in envelope.signatures],
        "statement": envelope.statement(),
    }
