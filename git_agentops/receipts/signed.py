"""A person's policy commit: how a change of the rules reaches a protected target without a run.

Why a person and a signature: a run may not change the rules it is judged by -- a delivery cannot carry
``.agentops/**`` or the signers file, and a mid-run policy transition may not move the signers, the target or the
approval rule (:mod:`git_agentops.model.judge`) -- while trust in a policy is a person's to give
(``git agentops-policy trust``). On the target, which only takes commits that receipts cover, a person's policy
change therefore lands as a commit *signed by that person*, checked as Git checks an SSH-signed commit (``git
verify-commit`` with ``gpg.ssh.allowedSignersFile``) against the same ``allowed_signers`` file that receipts are
judged by, from the trusted side -- the policy at the range's base, never at the commit itself, so a commit that adds
its own key vouches for nothing.

A **policy commit** has one parent and changes nothing but ``.agentops/**`` and the allowed signers file the policy
names before or after it. It is *covered* (``RECEIPT_POLICY_SIGNED``, ok) when its signature is an SSH signature
(``gpg.format = ssh``) in Git's namespace ``git`` by a key the rules in force allow for that namespace: a line
``namespaces="git-agentops"`` is the supervisor's receipt key and does not sign policy; a line with
``namespaces="git"`` (or none) is a person's. Unsigned it is ``RECEIPT_POLICY_UNSIGNED``; signed by a key the file does
not allow, ``RECEIPT_UNTRUSTED_SIGNER``; a signature that does not verify (or is OpenPGP/X.509),
``RECEIPT_SIGNATURE_INVALID``. Any other commit is not a policy commit and is judged as before.

Reading goes through git plumbing (``cat-file``, ``diff-tree``): this runs in the server's ``pre-receive`` too.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from . import sshsig
from .dsse import Signature
from .verify import Verdict

GIT_NAMESPACE: Final = "git"
"""The namespace ``git commit -S`` signs in with an SSH key (``gpg.format = ssh``)."""
POLICY_DIR: Final = ".agentops/"
_HEADERS: Final = {40: b"gpgsig", 64: b"gpgsig-sha256"}
"""The header that holds a commit's signature, by the length of the repository's object ids (git's
``gpg_sig_headers``)."""


@dataclass(frozen=True, slots=True)
class SignedCommit:
    """A commit's signature and the bytes it signs: the commit object without that header (git's
    ``parse_buffer_signed_by_header``). ``signature`` is None for an unsigned commit."""

    payload: bytes
    signature: bytes | None


def split_signature(raw: bytes, commit: str) -> SignedCommit:
    """The signature header of the raw commit object ``raw`` (whose id is ``commit``) and the signed payload."""
    header = _HEADERS.get(len(commit), b"gpgsig") + b" "
    head, sep, message = raw.partition(b"\n\n")
    kept: list[bytes] = []
    signature: list[bytes] = []
    inside = False
    for line in head.split(b"\n"):
        if line.startswith(header):
            inside = True
            signature.append(line[len(header) :])
        elif inside and line.startswith(b" "):
            signature.append(line[1:])
        else:
            inside = False
            kept.append(line)
    payload = b"\n".join(kept) + sep + message
    return SignedCommit(payload, b"\n".join(signature) + b"\n" if signature else None)


def is_policy_change(paths: Iterable[str], signer_files: Iterable[str]) -> bool:
    """Whether ``paths`` (a commit's changes against its parent) are all policy: ``.agentops/**`` or a signers file.
    An empty change is no policy change."""
    files = {p for p in signer_files if p}
    changed = list(paths)
    return bool(changed) and all(p.startswith(POLICY_DIR) or p in files for p in changed)


def _git(cwd: Path, *args: str) -> bytes | None:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120, check=False)
    return done.stdout if done.returncode == 0 else None


def changed_paths(cwd: Path, parent: str, commit: str) -> list[str]:
    """The paths ``commit`` changes against ``parent`` (both names of a rename: no rename detection)."""
    out = _git(cwd, "diff-tree", "-r", "-z", "--no-renames", "--name-only", parent, commit)
    if out is None:
        raise AgentOpsError("OBJECT_MISSING", f"cannot compare {commit[:12]} with its parent {parent[:12]}")
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def judge_policy_commit(
    cwd: Path,
    commit: str,
    parents: tuple[str, ...],
    *,
    paths: list[str] | None,
    signer_files: Callable[[str], Iterable[str]],
    allowed_signers: Path | None,
    source: str,
    when: datetime | None,
) -> Verdict | None:
    """The verdict on ``commit`` as a person's policy commit (module docstring); None when it is not one.

    ``paths``: what it changes against its parent, when the caller knows (else asked of git); ``signer_files(rev)``
    the allowed signers path the policy at ``rev`` names; ``allowed_signers``: the file of the rules in force
    (``source`` says where they come from); ``when``: the time the key must be valid at.
    """
    if len(parents) != 1:
        return None
    changed = paths if paths is not None else changed_paths(cwd, parents[0], commit)
    outside = [p for p in changed if not p.startswith(POLICY_DIR)]
    if not changed or len(outside) > 2:  # at most the two signers files: no policy read for an ordinary commit
        return None
    if outside and not is_policy_change(outside, [*signer_files(parents[0]), *signer_files(commit)]):
        return None
    short = commit[:12]
    raw = _git(cwd, "cat-file", "commit", commit)
    if raw is None:
        raise AgentOpsError("OBJECT_MISSING", f"cannot read the commit {short}")
    signed = split_signature(raw, commit)
    what = f"{short} changes only the policy ({', '.join(sorted(changed)[:4])})"
    how = (
        "a person's policy commit lands signed with an SSH key that the allowed signers of "
        f"{source} list for namespace {GIT_NAMESPACE!r} ('git -c gpg.format=ssh -c user.signingKey=KEY commit -S')"
    )
    if signed.signature is None:
        return Verdict(commit, False, "RECEIPT_POLICY_UNSIGNED", f"{what} but is not signed: {how}")
    if allowed_signers is None:
        return Verdict(
            commit,
            False,
            "RECEIPT_UNTRUSTED_SIGNER",
            f"{what}; it is signed, but {source} names no allowed signers file to check it against: {how}",
        )
    try:
        blob = sshsig.dearmor(signed.signature)
        keyid = sshsig.fingerprint(sshsig.signer_public_key(blob))
    except ValueError:
        return Verdict(
            commit,
            False,
            "RECEIPT_SIGNATURE_INVALID",
            f"{what}; its signature is not an SSH signature (OpenPGP or X.509?): {how}",
        )
    try:
        principal = sshsig.verify(
            signed.payload, Signature(keyid, blob), allowed_signers=allowed_signers, namespace=GIT_NAMESPACE, when=when
        )
    except AgentOpsError as exc:
        return Verdict(commit, False, exc.code, f"{what}; its signature does not count: {exc.message}. {how}")
    return Verdict(
        commit,
        True,
        "RECEIPT_POLICY_SIGNED",
        f"{short} is a person's policy commit signed by {principal} (allowed by {source})",
        principals=(principal,),
        covers=(commit,),
    )


def signer_files(cwd: Path, rev: str) -> tuple[str, ...]:
    """The allowed signers path the policy committed at ``rev`` names (none without a policy or a readable one)."""
    from ..model.policy import POLICY_PATH
    from ..policy.load import policy_from_bytes

    data = _git(cwd, "cat-file", "blob", f"{rev}:{POLICY_PATH}")
    if data is None:
        return ()
    try:
        where = policy_from_bytes(data, source=f"{rev[:12]}:{POLICY_PATH}").doc["receipts"].get("allowed_signers")
    except AgentOpsError:
        return ()
    return (where,) if isinstance(where, str) else ()
