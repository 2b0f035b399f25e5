"""What a server with the toolkit's ``pre-receive`` takes, and how one is set up: ``git agentops-init --server``.

The bootstrap, decided: **a branch's first push is its baseline**. The hook judges the commits a push adds to the
target by the policy at the tip it replaces -- the trusted side, as ``git agentops-receipt verify OLD..NEW`` does
-- so the first push of a branch, and the push that first gives it a policy, have no rules before them and are
taken as they are. Nothing is recorded at install time, so both orders work and reinstalling changes nothing:

* an empty server: ``git init --bare``, ``git agentops-init --server``, then push the project (``git push origin
  main``) -- that push is the target's baseline;
* a server that already holds the project: its history is what it is; the hook judges what comes after it.

From then on the target only moves forward, never disappears, and only to commits a valid receipt covers or to a
person's SSH-signed policy commit (:mod:`git_agentops.receipts.signed`) -- the way a person lands a policy change
(a remote, signers, a new check) that no run may make. :func:`describe` reads the server's branches for ``init
--server`` to print what it will take from here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from .rules import POLICY_FILE
from .where import Where, blobs, git

AGENTOPS_BRANCHES = "refs/heads/agentops/"


@dataclass(frozen=True, slots=True)
class Branch:
    """A branch of the server as the hook sees it: its tip and what the policy there says."""

    name: str  # without refs/heads/
    tip: str
    target: str | None  # run.target of the policy at the tip; None without a policy
    signers: str | None  # [receipts] allowed_signers there
    plain: bool  # [receipts] plain_commits = "allow"

    @property
    def protected(self) -> bool:
        return self.target == self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.name,
            "tip": self.tip,
            "protected": self.protected,
            "target": self.target,
            "allowedSigners": self.signers,
            "plainCommits": self.plain,
        }


def _policy(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        return tomllib.loads(data.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError:
        return {}  # a broken policy still protects the default target, as the hook reads it


def describe(where: Where) -> list[Branch]:
    """Every branch of the server (the runs' own ``agentops/*`` ones left out) and the policy at its tip."""
    status, out = git(where, ["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"])
    lines = out.decode("utf-8", "replace").splitlines() if status == 0 else []
    tips = [(oid, ref) for oid, _, ref in (line.partition(" ") for line in lines) if ref]
    tips = [(oid, ref) for oid, ref in tips if not ref.startswith(AGENTOPS_BRANCHES)]
    found = []
    for (oid, ref), data in zip(tips, blobs(where, [f"{oid}:{POLICY_FILE}" for oid, _ in tips]), strict=True):
        doc = _policy(data)
        name = ref.removeprefix("refs/heads/")
        if doc is None:
            found.append(Branch(name, oid, None, None, False))
            continue
        run, receipts = doc.get("run", {}), doc.get("receipts", {})
        target = run.get("target", "main") if isinstance(run, dict) else "main"
        signers = receipts.get("allowed_signers") if isinstance(receipts, dict) else None
        plain = isinstance(receipts, dict) and receipts.get("plain_commits") == "allow"
        found.append(
            Branch(
                name,
                oid,
                target if isinstance(target, str) else "main",  # as the hook reads it: a bad one guards main
                signers if isinstance(signers, str) else None,
                plain,
            )
        )
    return found


def expectations(branches: list[Branch]) -> list[str]:
    """What ``init --server`` prints: the bootstrap order, the pushes the hook takes, the state of each branch."""
    lines = [
        "What this server's pre-receive takes:",
        "  - a branch it does not hold yet, as it is: a branch's first push (and the push that first gives it a "
        "policy) is its baseline",
        "  - the target (run.target of the policy at its tip): forward only (HOOK_TARGET_REWOUND), never deleted "
        "(HOOK_REF_DELETE), and only to commits a valid receipt covers -- a run's integration, pushed with "
        "refs/notes/agentops/receipts -- or to a person's policy commit: one parent, changing only .agentops/** and "
        "the signers file, SSH-signed (git -c gpg.format=ssh commit -S) by a key the allowed signers at the old tip "
        "list for namespace 'git' (HOOK_RECEIPT_INVALID otherwise, naming why)",
        "  - refs/agentops/*, refs/heads/agentops/*, refs/notes/agentops/*: created or moved forward, never deleted; "
        "no receipt, delivery or evidence note is dropped or rewritten",
    ]
    if not branches:
        lines += [
            "This repository is empty: set it up by pushing the project from your machine, once --",
            "  git push origin main        (its first push is taken as it is: the baseline)",
            "then clone it on each machine; the first run publishes with its receipt and the notes.",
        ]
        return lines
    lines.append("Here now:")
    for branch in branches:
        if branch.protected:
            signers = f"signers {branch.signers}" if branch.signers else "no allowed signers: no policy commit lands"
            plain = "plain commits allowed" if branch.plain else "plain commits refused"
            lines.append(f"  {branch.name} at {branch.tip[:12]}: the target, guarded from here ({signers}; {plain})")
        elif branch.target is None:
            lines.append(
                f"  {branch.name} at {branch.tip[:12]}: no policy yet -- the push that adds one naming it the target "
                "is its baseline"
            )
        else:
            lines.append(f"  {branch.name} at {branch.tip[:12]}: not a target (its policy names {branch.target})")
    return lines
