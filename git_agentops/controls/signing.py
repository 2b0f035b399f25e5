"""Signing a control with the person's SSH key, and judging one: whose signature, and may they decide this kind.

The key is the one git signs commits with (``agentops.signingKey``, else ``user.signingKey`` when ``gpg.format`` is
ssh: :func:`git_agentops.receipts.build.signing_keys`); the signature is ``ssh-keygen -Y sign`` in the
``git-agentops-control`` namespace, checked as git checks a signed commit (:func:`git_agentops.receipts.sshsig.verify`)
against the allowed signers the supervisor trusts. Then the principal must match the ``[controls]`` patterns of the
control's kind (OpenSSH pattern lists: ``*``, ``?``, ``!negation``). Codes: ``CONTROL_UNSIGNED``,
``CONTROL_SIGNATURE_INVALID``, ``CONTROL_NOT_ALLOWED``, ``CONTROL_NO_KEY``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import AgentOpsError, SignatureInvalid
from ..receipts import signers, sshsig
from ..receipts.dsse import Signature
from .record import NAMESPACE, Control


def rule_of(kind: str) -> str:
    """The ``[controls]`` key whose patterns say who may send a control of ``kind`` (approve and refuse share one)."""
    return "approve" if kind in ("approve", "refuse") else kind


def sign(control: Control, keys: Sequence[Path]) -> bytes:
    """The armored signature of ``control`` by the first of ``keys``; ``CONTROL_NO_KEY`` when there is none,
    ``RECEIPT_SIGNING_FAILED`` (ssh-keygen's own words) when it cannot sign."""
    if not keys:
        raise AgentOpsError(
            "CONTROL_NO_KEY",
            "a control sent to another machine is signed with your SSH key, and none is configured: "
            "'git config agentops.signingKey ~/.ssh/id_ed25519' (or gpg.format=ssh with user.signingKey)",
        )
    signature = sshsig.sign(control.payload(), key=keys[0], namespace=NAMESPACE)
    return sshsig.armor(signature.sig)


def signer(control: Control, armored: bytes | None, allowed_signers: bytes | None, source: str) -> str:
    """The principal whose good signature ``armored`` is over ``control``, allowed by ``allowed_signers`` (the
    file's bytes; ``source`` names it in messages). ``CONTROL_UNSIGNED``, ``CONTROL_SIGNATURE_INVALID`` or
    ``CONTROL_NOT_ALLOWED`` otherwise."""
    if not armored or not armored.strip():
        raise AgentOpsError("CONTROL_UNSIGNED", f"control {control.control_id} carries no signature")
    try:
        blob = sshsig.dearmor(armored)
        keyid = sshsig.fingerprint(sshsig.signer_public_key(blob))
    except ValueError as exc:
        raise AgentOpsError("CONTROL_SIGNATURE_INVALID", f"control {control.control_id}: {exc}") from exc
    if allowed_signers is None:
        raise AgentOpsError(
            "CONTROL_NOT_ALLOWED",
            f"control {control.control_id} is signed by {keyid}, but the run has no allowed signers file ({source}): "
            "no one may control it from another machine",
        )
    with tempfile.TemporaryDirectory(prefix="agentops-control-") as tmp:
        path = Path(tmp) / "allowed_signers"
        path.write_bytes(allowed_signers)
        try:
            return sshsig.verify(control.payload(), Signature(keyid, blob), allowed_signers=path, namespace=NAMESPACE)
        except SignatureInvalid as exc:
            message = exc.message.replace(str(path), source)
            raise AgentOpsError("CONTROL_SIGNATURE_INVALID", message, details=exc.details) from exc
        except AgentOpsError as exc:  # a good signature by a key not allowed, or an allowed signers file that is bad
            message = exc.message.replace(str(path), source)
            raise AgentOpsError("CONTROL_NOT_ALLOWED", message, details=exc.details) from exc


def check_allowed(control: Control, principal: str, patterns: Sequence[str]) -> None:
    """``CONTROL_NOT_ALLOWED`` unless ``principal`` matches ``patterns`` (the ``[controls]`` list of the kind)."""
    if patterns and signers.match_pattern_list(principal, ",".join(patterns)) == 1:
        return
    raise AgentOpsError(
        "CONTROL_NOT_ALLOWED",
        f"{principal} signed control {control.control_id} ({control.describe()}), but [controls] "
        f"{rule_of(control.kind)} = {list(patterns)} does not name them",
        details={"principal": principal, "kind": control.kind},
    )
