"""SSH signatures over receipts, made by OpenSSH's ``ssh-keygen -Y`` and checked exactly as Git checks commits.

Why SSH signatures: teams that sign commits with SSH keys (``gpg.format = ssh``) already have the keys, the
``allowed_signers`` file and the habits; a receipt is trusted by the same file and the same rules as a signed
commit, with no new PKI.

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

Why in process: those are two to four ``ssh-keygen`` processes per signature (~12 ms), the whole cost of checking
a range of receipts. :func:`verify` therefore does the same three steps itself (:class:`Engine`): the SSHSIG blob
(PROTOCOL.sshsig) is parsed here and its signature over ``"SSHSIG" || namespace || reserved || hash_alg ||
H(data)`` checked with ``cryptography`` -- Ed25519, ECDSA P-256/384/521, RSA with ``rsa-sha2-256``/``-512`` (the
signature's own algorithm decides; ``ssh-rsa``, SHA-1, is refused as ssh-keygen refuses it for SSHSIG) and
OpenSSH user certificates of those keys signed by a ``cert-authority`` line's key (the CA signature, the
certificate's type, validity and principals: ``sshkey_cert_check_authority``) -- and steps 1 and 2 are
:func:`.signers.find_principals` and :func:`.signers.allows`, which read the file as ssh-keygen does. Hardware
keys (``sk-*``), DSA, a CA of those kinds and any key type we do not know go to ``ssh-keygen`` as before, and so
does everything when ``cryptography`` is not installed. Both engines first parse the file with
:mod:`.signers`, so a file with a line ssh-keygen would skip is ``RECEIPT_SIGNERS_INVALID`` with either.
:func:`verify_with_ssh_keygen` is the subprocess path alone: the reference the tests hold the in-process one to.
No revocation list is consulted (``-r``): the project never passes one.

Before any of that, the DSSE ``keyid`` must be the fingerprint of the key inside the signature (it is only a
hint, but a wrong hint is a sign of tampering): ``RECEIPT_SIGNATURE_INVALID`` otherwise. For a certificate the
fingerprint is taken over the certificate blob.

``ssh-keygen`` runs in its own session with no stdin but the data, so it can never prompt on the terminal: a key
that needs a passphrase must be in ``ssh-agent``. It inherits the caller's environment (``SSH_AUTH_SOCK``).
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from ..clock import SystemClock
from ..errors import AgentOpsError
from ..files import read_bounded
from ..process.command import run_command
from . import signers
from .dsse import Signature

NAMESPACE: Final = "git-agentops"
SIGN_TIMEOUT: Final = 120.0  # a hardware key may wait for a touch
VERIFY_TIMEOUT: Final = 30.0
MAX_SIGNERS_BYTES: Final = 16 * 1024 * 1024
"""An allowed-signers file is read whole, up to this: thousands of keys fit in far less."""
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
    """Run ssh-keygen in its own process group, stopped whole at the timeout (an askpass or security-key helper
    with it: :func:`~git_agentops.process.command.run_command`); ``OSError``/``TimeoutExpired`` are raised for the
    caller to name."""
    done = run_command(
        argv, cwd=Path.cwd(), env=None, timeout=timeout, clock=SystemClock(), stdin=data, merge_stderr=False
    )
    if done.spawn_error is not None:
        raise OSError(done.spawn_error)
    if done.timed_out:
        raise subprocess.TimeoutExpired(argv, timeout)
    stderr = done.error_output.decode("utf-8", "replace").strip()
    code = done.exit_code if done.exit_code is not None else -(done.signal or 0)
    return _Done(code, done.output, stderr[-_STDERR_SHOWN:])


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


class Engine(enum.StrEnum):
    """Who checks a signature: ``AUTO`` in process when it can (module docstring), else ssh-keygen."""

    AUTO = "auto"
    IN_PROCESS = "in-process"  # never ssh-keygen: a key it cannot check in process is RECEIPT_SIGNATURE_INVALID
    SSH_KEYGEN = "ssh-keygen"


def verify(
    data: bytes,
    sig: Signature,
    *,
    allowed_signers: Path,
    namespace: str = NAMESPACE,
    when: datetime | None = None,
    ssh_keygen: str = "ssh-keygen",
    engine: Engine = Engine.AUTO,
) -> str:
    """Check ``sig`` over ``data`` against ``allowed_signers`` as Git does (module docstring); return the principal.

    ``when`` is the time the key must be valid at (``valid-after``/``valid-before``, a certificate's validity);
    None: now. Raises ``RECEIPT_SIGNERS_INVALID`` when the file has a line ssh-keygen would skip,
    ``RECEIPT_UNTRUSTED_SIGNER`` for a good signature by a key the file does not allow (unknown, expired, not for
    this namespace), and ``RECEIPT_SIGNATURE_INVALID`` for a bad one -- and, failing closed, when ssh-keygen is
    needed but cannot be run.
    """
    actual = _preflight(sig, allowed_signers)
    try:
        text = read_bounded(allowed_signers, MAX_SIGNERS_BYTES)
    except OSError as exc:
        raise AgentOpsError(
            "RECEIPT_UNTRUSTED_SIGNER",
            f"cannot read the allowed signers file {allowed_signers} ({exc.strerror or exc}), so no signer "
            f"({actual}) can be trusted",
            details={"key": actual},
        ) from exc
    if len(text) > MAX_SIGNERS_BYTES:
        raise AgentOpsError(
            "RECEIPT_SIGNERS_INVALID", f"the allowed signers file {allowed_signers} is over {MAX_SIGNERS_BYTES} bytes"
        )
    entries = _parse_signers(text, str(allowed_signers))
    parsed = _parse_or_none(sig.sig)
    checkable = _in_process_can(parsed)
    if engine == Engine.SSH_KEYGEN or (engine == Engine.AUTO and not checkable):
        return _verify_ssh_keygen(data, sig, allowed_signers, namespace, when, ssh_keygen, actual)
    if not checkable or isinstance(parsed, _Unknown):
        raise AgentOpsError(
            "RECEIPT_SIGNATURE_INVALID",
            f"the signature by {actual} cannot be checked in process (its key type, or no cryptography library)",
            details={"key": actual},
        )
    seconds = int(time.time()) if when is None else int(_aware(when).timestamp())
    if parsed is None or not _signature_ok(parsed, data, namespace):
        raise _invalid(actual, namespace)
    listed = signers.find_principals(entries, parsed.key, seconds)
    for principal in listed:
        if signers.allows(entries, parsed.key, principal, namespace, seconds):
            return principal
    raise _untrusted(actual, allowed_signers, namespace, listed, "no principal matched")


@functools.lru_cache(maxsize=32)
def _parse_signers(data: bytes, source: str) -> tuple[signers.AllowedSigner, ...]:
    """Keyed on the file's bytes, read afresh for every signature: a range check reads one file 1,000 times."""
    return signers.parse_allowed_signers(data, source=source)


def verify_with_ssh_keygen(
    data: bytes,
    sig: Signature,
    *,
    allowed_signers: Path,
    namespace: str = NAMESPACE,
    when: datetime | None = None,
    ssh_keygen: str = "ssh-keygen",
) -> str:
    """:func:`verify` by ``ssh-keygen`` alone, the file as ssh-keygen reads it (a bad line is skipped, not refused).

    The reference the in-process engine is tested against. Raises ``RECEIPT_UNTRUSTED_SIGNER`` and
    ``RECEIPT_SIGNATURE_INVALID`` as :func:`verify` does, never ``RECEIPT_SIGNERS_INVALID``.
    """
    actual = _preflight(sig, allowed_signers)
    return _verify_ssh_keygen(data, sig, allowed_signers, namespace, when, ssh_keygen, actual)


def _preflight(sig: Signature, allowed_signers: Path) -> str:
    """The fingerprint of the signing key, once the keyid names it and the allowed signers file exists."""
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
        what = "is not a regular file" if allowed_signers.exists() else "does not exist"
        raise AgentOpsError(
            "RECEIPT_UNTRUSTED_SIGNER",
            f"allowed signers file {allowed_signers} {what}, so no signer ({actual}) can be trusted",
            details={"key": actual},
        )
    return actual


def _invalid(actual: str, namespace: str) -> AgentOpsError:
    return AgentOpsError(
        "RECEIPT_SIGNATURE_INVALID",
        f"the signature by {actual} does not verify over this receipt (namespace {namespace!r})",
        details={"key": actual},
    )


def _untrusted(actual: str, allowed_signers: Path, namespace: str, listed: Sequence[str], other: str) -> AgentOpsError:
    why = f"listed as {', '.join(listed)} but not for namespace {namespace!r} at this time" if listed else other
    return AgentOpsError(
        "RECEIPT_UNTRUSTED_SIGNER",
        f"key {actual} made a good signature but {allowed_signers} does not allow it here ({why})",
        details={"key": actual},
    )


def _verify_ssh_keygen(
    data: bytes,
    sig: Signature,
    allowed_signers: Path,
    namespace: str,
    when: datetime | None,
    ssh_keygen: str,
    actual: str,
) -> str:
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
        other = found.stderr.splitlines()[-1] if found.stderr else "no principal matched"
        raise _untrusted(actual, allowed_signers, namespace, listed, other)
    raise _invalid(actual, namespace)


# -- in process --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SshSig:
    """The fields of an SSHSIG blob (PROTOCOL.sshsig); ``signature`` is the key's own signature blob."""

    key: signers.PublicKey
    namespace: str
    hash_algorithm: str
    signature: bytes


def parse_sshsig(blob: bytes) -> SshSig:
    """``UnknownKeyType`` for a key :mod:`.signers` does not know; ``ValueError`` when not SSHSIG (version <= 1)."""
    reader = signers.WireReader(blob)
    if reader.take(len(_MAGIC)) != _MAGIC or reader.u32() > 1:
        raise ValueError("not an SSHSIG blob of version 1")
    key = signers.parse_public_key(reader.string())
    namespace = reader.cstring()
    reader.string()  # reserved: ignored, and the signed data holds an empty one (sshsig_wrap_verify)
    hash_algorithm, signature = reader.cstring(), reader.string()
    reader.end()
    return SshSig(key, namespace, hash_algorithm, signature)


class _Unknown:
    """A signature whose key type only ssh-keygen may know."""


def _parse_or_none(blob: bytes) -> SshSig | _Unknown | None:
    try:
        return parse_sshsig(blob)
    except signers.UnknownKeyType:
        return _Unknown()
    except ValueError:
        return None  # garbled: invalid in process, as it is for ssh-keygen


_CHECKABLE: Final = frozenset(
    {"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"}
)
_HASHES: Final = frozenset({"sha256", "sha512"})


@functools.cache
def _have_cryptography() -> bool:
    try:
        import cryptography.hazmat.primitives.asymmetric.ed25519  # noqa: F401
    except ImportError:
        return False
    return True


def _in_process_can(parsed: SshSig | _Unknown | None) -> bool:
    if isinstance(parsed, _Unknown) or not _have_cryptography():
        return False
    if parsed is None:
        return True
    key = parsed.key
    return key.kind in _CHECKABLE and (key.cert is None or key.cert.ca.kind in _CHECKABLE)


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("verify time must be timezone-aware")
    return when


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _signature_ok(parsed: SshSig, data: bytes, namespace: str) -> bool:
    """``sshsig_verify_fd``: namespace, hash, the certificate's CA signature, then the signature itself."""
    if parsed.namespace != namespace or parsed.hash_algorithm not in _HASHES:
        return False
    digest = hashlib.new(parsed.hash_algorithm, data).digest()
    fields = (namespace.encode("utf-8", "surrogateescape"), b"", parsed.hash_algorithm.encode(), digest)
    message = _MAGIC + b"".join(map(_string, fields))
    cert = parsed.key.cert
    if cert is not None and not _key_signed(cert.ca, cert.signature, cert.signed, sha1_ok=True):
        return False  # a certificate's CA may still sign with ssh-rsa: OpenSSH's cert_parse accepts it
    return _key_signed(parsed.key, parsed.signature, message, sha1_ok=False)


def _octets(key: signers.PublicKey, index: int) -> bytes:
    value = key.fields[index]
    if not isinstance(value, bytes):
        raise ValueError("not a string field")
    return value


def _key_signed(key: signers.PublicKey, blob: bytes, message: bytes, *, sha1_ok: bool) -> bool:
    """Whether ``blob`` (``string algorithm, string signature``) is ``key``'s signature over ``message``."""
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    try:
        reader = signers.WireReader(blob)
        algorithm, raw = reader.cstring(), reader.string()
        reader.end()
        if key.kind == "ssh-ed25519":
            if algorithm != key.kind or len(raw) != 64:
                return False
            ed25519.Ed25519PublicKey.from_public_bytes(_octets(key, 0)).verify(raw, message)
        elif key.kind.startswith("ecdsa-sha2-"):
            curve, digest = {
                "ecdsa-sha2-nistp256": (ec.SECP256R1, hashes.SHA256),
                "ecdsa-sha2-nistp384": (ec.SECP384R1, hashes.SHA384),
                "ecdsa-sha2-nistp521": (ec.SECP521R1, hashes.SHA512),
            }[key.kind]
            inner = signers.WireReader(raw)
            r, s = inner.mpint(), inner.mpint()
            inner.end()
            if algorithm != key.kind:
                return False
            public = ec.EllipticCurvePublicKey.from_encoded_point(curve(), _octets(key, 1))
            public.verify(encode_dss_signature(r, s), message, ec.ECDSA(digest()))
        elif key.kind == "ssh-rsa":
            allowed = {"rsa-sha2-256": hashes.SHA256, "rsa-sha2-512": hashes.SHA512}
            rsa_hash = allowed.get(algorithm) or (hashes.SHA1 if sha1_ok and algorithm == "ssh-rsa" else None)
            e, n = int(key.fields[0]), int(key.fields[1])
            size = (n.bit_length() + 7) // 8
            if rsa_hash is None or len(raw) > size:
                return False
            public_rsa = rsa.RSAPublicNumbers(e, n).public_key()
            public_rsa.verify(raw.rjust(size, b"\0"), message, padding.PKCS1v15(), rsa_hash())
        else:
            return False
    except (InvalidSignature, UnsupportedAlgorithm, ValueError):
        return False
    return True
