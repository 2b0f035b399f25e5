"""SSH signatures over receipts, made and checked by OpenSSH's ``ssh-keygen -Y`` exactly as Git does for commits.

Why SSH signatures: teams that sign commits with SSH keys (``gpg.format = ssh``) already have the keys, the
``allowed_signers`` file and the habits; a receipt is trusted by the same file and the same rules as a signed
commit, with no new PKI. Why shell out instead of implementing SSHSIG: ``ssh-keygen`` is the reference for the
format, the ``allowed_signers`` syntax (principals patterns, ``namespaces=``, ``valid-after``/``valid-before``,
``cert-authority``) and hardware keys; re-implementing any of it would be a second, subtly different truth.

Signing: ``ssh-keygen -Y sign -f KEY -n git-agentops`` over the DSSE PAE bytes on stdin (KEY may be a private key
file, or a public key whose private half is in ``ssh-agent``). The armored signature is stored de-armored: the
DSSE ``sig`` is the raw SSHSIG blob and ``keyid`` the ``SHA256:`` fingerprint of the public key inside it.

Verifying follows Git's ``verify_ssh_signed_buffer``:

1. ``ssh-keygen -Y find-principals -f ALLOWED -s SIG [-Overify-time=T]`` -- which principals may own this key
   (at time T: an expired ``valid-before`` or a future ``valid-after`` matches nothing);
2. for each principal, ``ssh-keygen -Y verify -f ALLOWED -I PRINCIPAL -n git-agentops -s SIG [-Overify-time=T]``
   with the data on stdin; the first success names the signer;
3. otherwise ``ssh-keygen -Y check-novalidate -n git-agentops -s SIG`` tells the two failures apart: the
   signature is cryptographically good but its key is not allowed (unknown, expired, wrong namespace) --
   ``RECEIPT_UNTRUSTED_SIGNER`` -- or it is bad (garbled, other data, other namespace) --
   ``RECEIPT_SIGNATURE_INVALID``.

Before any of that, the DSSE ``keyid`` must be the fingerprint of the key inside the signature (it is only a
hint, but a wrong hint is a sign of tampering): ``RECEIPT_SIGNATURE_INVALID`` otherwise. For a certificate the
fingerprint is taken over the certificate blob.

``ssh-keygen`` runs in its own session with no stdin but the data, so it can never prompt on the terminal: a key
that needs a passphrase must be in ``ssh-agent``. It inherits the caller's environment (``SSH_AUTH_SOCK``).
"""

from __future__ import annotations

import base64
import hashlib
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from .dsse import Signature

NAMESPACE: Final = "git-agentops"
SIGN_TIMEOUT: Final = 120.0  # a hardware key may wait for a touch
VERIFY_TIMEOUT: Final = 30.0
ARMOR_BEGIN: Final = b"-----BEGIN SSH SIGNATURE-----"
ARMOR_END: Final = b"-----END SSH SIGNATURE-----"
_MAGIC: Final = b"SSHSIG"
_STDERR_SHOWN: Final = 400


@dataclass(frozen=True, slots=True)
class _Done:
    returncode: int
    stdout: bytes
    stderr: str


def armor(blob: bytes) -> bytes:
    """The PEM-like text ``ssh-keygen`` reads: base64 of the SSHSIG blob in 70-column lines."""
    text = base64.b64encode(blob)
    lines = [text[i : i + 70] for i in range(0, len(text), 70)]
    return b"\n".join([ARMOR_BEGIN, *lines, ARMOR_END]) + b"\n"


def dearmor(text: bytes) -> bytes:
    """The SSHSIG blob inside an armored signature; ``ValueError`` when it is not one."""
    body = text.strip()
    if not (body.startswith(ARMOR_BEGIN) and body.endswith(ARMOR_END)):
        raise ValueError("not an armored SSH signature")
    inner = b"".join(body[len(ARMOR_BEGIN) : -len(ARMOR_END)].split())
    return base64.b64decode(inner, validate=True)


def signer_public_key(blob: bytes) -> bytes:
    """The public key (SSH wire format) inside an SSHSIG blob; ``ValueError`` when the blob is not SSHSIG."""
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 8:
        raise ValueError("not an SSHSIG blob")
    offset = len(_MAGIC) + 4  # magic, uint32 version
    (length,) = struct.unpack_from(">I", blob, offset)
    key = blob[offset + 4 : offset + 4 + length]
    if len(key) != length or length == 0:
        raise ValueError("truncated SSHSIG blob")
    return key


def fingerprint(public_key: bytes) -> str:
    """OpenSSH's ``SHA256:`` fingerprint of a wire-format public key (what ``ssh-keygen -l`` prints)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(public_key).digest()).decode("ascii").rstrip("=")


def verify_time(when: datetime) -> str:
    """``ssh-keygen``'s ``-Overify-time`` value for an aware datetime: ``YYYYMMDDHHMMSSZ`` in UTC."""
    if when.tzinfo is None:
        raise ValueError("verify time must be timezone-aware")
    return when.astimezone(UTC).strftime("%Y%m%d%H%M%SZ")


def _run(argv: list[str], data: bytes, timeout: float) -> _Done:
    """Run ssh-keygen; ``OSError``/``TimeoutExpired`` propagate for the caller to name."""
    done = subprocess.run(argv, input=data, capture_output=True, timeout=timeout, check=False, start_new_session=True)
    stderr = done.stderr.decode("utf-8", "replace").strip()
    return _Done(done.returncode, done.stdout, stderr[-_STDERR_SHOWN:])


def sign(data: bytes, *, key: Path, namespace: str = NAMESPACE, ssh_keygen: str = "ssh-keygen") -> Signature:
    """Sign ``data`` with ``key``; ``keyid`` is the key's ``SHA256:`` fingerprint.

    Raises ``RECEIPT_SIGNING_FAILED`` when ssh-keygen is missing, times out, or refuses (no such key, a key that
    needs a passphrase and is not in the agent, bad permissions...), with ssh-keygen's own words.
    """
    argv = [ssh_keygen, "-Y", "sign", "-f", str(key), "-n", namespace]
    try:
        done = _run(argv, data, SIGN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise AgentOpsError("RECEIPT_SIGNING_FAILED", f"ssh-keygen did not sign within {SIGN_TIMEOUT:g}s") from exc
    except OSError as exc:
        raise AgentOpsError("RECEIPT_SIGNING_FAILED", f"cannot run {ssh_keygen}: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        raise AgentOpsError(
            "RECEIPT_SIGNING_FAILED",
            f"ssh-keygen could not sign with {key} (exit {done.returncode}): {done.stderr or 'no message'}",
            details={"key": str(key), "exitCode": done.returncode},
        )
    try:
        blob = dearmor(done.stdout)
        keyid = fingerprint(signer_public_key(blob))
    except ValueError as exc:
        raise AgentOpsError("RECEIPT_SIGNING_FAILED", f"ssh-keygen wrote no usable signature: {exc}") from exc
    return Signature(keyid, blob)


def verify(
    data: bytes,
    sig: Signature,
    *,
    allowed_signers: Path,
    namespace: str = NAMESPACE,
    when: datetime | None = None,
    ssh_keygen: str = "ssh-keygen",
) -> str:
    """Check ``sig`` over ``data`` against ``allowed_signers`` as Git does (module docstring); return the principal.

    ``when`` is the time the key must be valid at (``valid-after``/``valid-before``); None lets ssh-keygen use
    the current time. Raises ``RECEIPT_UNTRUSTED_SIGNER`` for a good signature by a key the file does not allow
    (unknown, expired, not for this namespace), and ``RECEIPT_SIGNATURE_INVALID`` for a bad one -- and, failing
    closed, when ssh-keygen cannot be run at all.
    """
    try:
        public_key = signer_public_key(sig.sig)
    except ValueError as exc:
        raise AgentOpsError("RECEIPT_SIGNATURE_INVALID", f"signature {sig.keyid!r} is not an SSH signature") from exc
    actual = fingerprint(public_key)
    if sig.keyid != actual:
        raise AgentOpsError(
            "RECEIPT_SIGNATURE_INVALID",
            f"signature keyid {sig.keyid!r} does not name the key that made it ({actual})",
            details={"keyid": sig.keyid, "key": actual},
        )
    if not allowed_signers.is_file():
        raise AgentOpsError(
            "RECEIPT_UNTRUSTED_SIGNER",
            f"allowed signers file {allowed_signers} does not exist, so no signer ({actual}) can be trusted",
            details={"key": actual},
        )
    time_option = [f"-Overify-time={verify_time(when)}"] if when is not None else []
    with tempfile.TemporaryDirectory(prefix="agentops-sshsig-") as tmp:
        sig_file = Path(tmp) / "receipt.sig"
        sig_file.write_bytes(armor(sig.sig))
        common = ["-f", str(allowed_signers), "-s", str(sig_file)]
        try:
            found = _run([ssh_keygen, "-Y", "find-principals", *common, *time_option], b"", VERIFY_TIMEOUT)
            principals = [line.strip() for line in found.stdout.decode("utf-8", "replace").splitlines()]
            for principal in filter(None, principals if found.returncode == 0 else []):
                argv = [ssh_keygen, "-Y", "verify", *common, "-I", principal, "-n", namespace, *time_option]
                if _run(argv, data, VERIFY_TIMEOUT).returncode == 0:
                    return principal
            argv = [ssh_keygen, "-Y", "check-novalidate", "-n", namespace, "-s", str(sig_file)]
            check = _run(argv, data, VERIFY_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise AgentOpsError("RECEIPT_SIGNATURE_INVALID", "ssh-keygen timed out checking a signature") from exc
        except OSError as exc:
            raise AgentOpsError(
                "RECEIPT_SIGNATURE_INVALID", f"cannot check the signature: cannot run {ssh_keygen}: {exc}"
            ) from exc
    if check.returncode == 0:
        listed = [p for p in principals if p] if found.returncode == 0 else []
        if listed:
            why = f"listed as {', '.join(listed)} but not for namespace {namespace!r} at this time"
        else:
            why = found.stderr.splitlines()[-1] if found.stderr else "no principal matched"
        raise AgentOpsError(
            "RECEIPT_UNTRUSTED_SIGNER",
            f"key {actual} made a good signature but {allowed_signers} does not allow it here ({why})",
            details={"key": actual},
        )
    raise AgentOpsError(
        "RECEIPT_SIGNATURE_INVALID",
        f"the signature by {actual} does not verify over this receipt (namespace {namespace!r})",
        details={"key": actual},
    )
