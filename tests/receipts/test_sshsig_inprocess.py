"""In-process SSH signature checks held to ``ssh-keygen`` on real keys, signatures, certificates and signer files.

Every case runs both engines -- :func:`sshsig.verify` in process and :func:`sshsig.verify_with_ssh_keygen`, the
subprocess reference Git's own algorithm is -- and asserts the same outcome: the error code, or the principal.
The one deliberate difference is tested as such: a line ssh-keygen skips is ``RECEIPT_SIGNERS_INVALID`` for us.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_agentops.errors import AgentOpsError
from git_agentops.receipts import signers, sshsig
from git_agentops.receipts.dsse import Signature
from git_agentops.receipts.sshsig import NAMESPACE, Engine

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DATA = b"the DSSE PAE bytes of a receipt\n"
Outcome = tuple[str, str]


@dataclass(frozen=True)
class Keys:
    dir: Path
    ed25519: Path
    ecdsa256: Path
    ecdsa384: Path
    ecdsa521: Path
    rsa: Path
    other: Path
    ca: Path
    ca_rsa: Path


def _keygen(path: Path, *args: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-C", "test", "-f", str(path), *args], check=True)
    return path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    d = tmp_path_factory.mktemp("keys")
    return Keys(
        d,
        _keygen(d / "ed25519", "-t", "ed25519"),
        _keygen(d / "ecdsa256", "-t", "ecdsa", "-b", "256"),
        _keygen(d / "ecdsa384", "-t", "ecdsa", "-b", "384"),
        _keygen(d / "ecdsa521", "-t", "ecdsa", "-b", "521"),
        _keygen(d / "rsa", "-t", "rsa", "-b", "2048"),
        _keygen(d / "other", "-t", "ed25519"),
        _keygen(d / "ca", "-t", "ed25519"),
        _keygen(d / "ca_rsa", "-t", "rsa", "-b", "2048"),
    )


def pub(key: Path) -> str:
    path = key if key.name.endswith(".pub") else key.with_name(key.name + ".pub")
    return " ".join(path.read_text().split()[:2])


def as_signature(blob: bytes) -> Signature:
    """A DSSE signature whose keyid is right for ``blob`` (so a tampered blob reaches the real check)."""
    try:
        keyid = sshsig.fingerprint(sshsig.signer_public_key(blob))
    except ValueError:
        keyid = "SHA256:none"
    return Signature(keyid, blob)


def keygen_sign(key: Path, data: bytes = DATA, namespace: str = NAMESPACE, *options: str) -> Signature:
    """``ssh-keygen -Y sign`` over stdin, as Git signs a commit."""
    argv = ["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", namespace, *options]
    done = subprocess.run(argv, input=data, capture_output=True, check=True)
    return as_signature(sshsig.dearmor(done.stdout))


def outcome(call: Callable[[], str]) -> Outcome:
    try:
        return "ok", call()
    except AgentOpsError as exc:
        return exc.code, ""


def both(
    tmp: Path,
    sig: Signature,
    lines: str,
    *,
    data: bytes = DATA,
    when: datetime | None = NOW,
    namespace: str = NAMESPACE,
) -> Outcome:
    """The outcome of the in-process engine, asserted equal to the ssh-keygen reference's."""
    path = tmp / f"allowed_signers-{hashlib.sha256(lines.encode()).hexdigest()[:12]}"
    path.write_text(lines)
    kwargs = {"allowed_signers": path, "namespace": namespace, "when": when}
    ours = outcome(lambda: sshsig.verify(data, sig, engine=Engine.IN_PROCESS, **kwargs))  # type: ignore[arg-type]
    reference = outcome(lambda: sshsig.verify_with_ssh_keygen(data, sig, **kwargs))  # type: ignore[arg-type]
    assert ours == reference, f"in process {ours}, ssh-keygen {reference}, for:\n{lines}"
    return ours


def _s(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def build_sshsig(
    key: Path,
    *,
    algorithm: str,
    data: bytes = DATA,
    namespace: bytes = NAMESPACE.encode(),
    hash_algorithm: bytes = b"sha512",
    reserved: bytes = b"",
    version: int = 1,
) -> Signature:
    """An SSHSIG blob made here, for what ``ssh-keygen -Y sign`` will not make (``ssh-rsa``, ``rsa-sha2-256``...)."""
    private = serialization.load_ssh_private_key(key.read_bytes(), None)
    digest = hashlib.new(hash_algorithm.decode(), data).digest()
    message = b"SSHSIG" + _s(namespace) + _s(b"") + _s(hash_algorithm) + _s(digest)
    if isinstance(private, ed25519.Ed25519PrivateKey):
        raw = private.sign(message)
    else:
        assert isinstance(private, rsa.RSAPrivateKey)
        chosen = {"ssh-rsa": hashes.SHA1(), "rsa-sha2-256": hashes.SHA256(), "rsa-sha2-512": hashes.SHA512()}
        raw = private.sign(message, padding.PKCS1v15(), chosen[algorithm])
    blob = base64.b64decode(pub(key).split()[1])
    body = _s(blob) + _s(namespace) + _s(reserved) + _s(hash_algorithm) + _s(_s(algorithm.encode()) + _s(raw))
    return as_signature(b"SSHSIG" + struct.pack(">I", version) + body)


# -- signatures --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa256", "ecdsa384", "ecdsa521", "rsa"])
def test_a_good_signature_names_its_principal(keys: Keys, tmp_path: Path, kind: str) -> None:
    key = getattr(keys, kind)
    line = f'alice@example.com namespaces="git-agentops" {pub(key)}\n'
    assert both(tmp_path, keygen_sign(key), line) == ("ok", "alice@example.com")
    assert both(tmp_path, keygen_sign(key, DATA, NAMESPACE, "-Ohashalg=sha256"), line) == ("ok", "alice@example.com")
    assert both(tmp_path, sshsig.sign(DATA, key=key), line) == ("ok", "alice@example.com")
    assert both(tmp_path, keygen_sign(key), line, when=None) == ("ok", "alice@example.com")


def test_rsa_signature_algorithms(keys: Keys, tmp_path: Path) -> None:
    line = f"alice@x {pub(keys.rsa)}\n"
    assert both(tmp_path, build_sshsig(keys.rsa, algorithm="rsa-sha2-256"), line) == ("ok", "alice@x")
    assert both(tmp_path, build_sshsig(keys.rsa, algorithm="rsa-sha2-512"), line) == ("ok", "alice@x")
    # SHA-1 is refused for SSHSIG: a bad signature, not an untrusted signer
    assert both(tmp_path, build_sshsig(keys.rsa, algorithm="ssh-rsa"), line) == ("RECEIPT_SIGNATURE_INVALID", "")


def test_blob_fields_ssh_keygen_tolerates_or_refuses(keys: Keys, tmp_path: Path) -> None:
    line = f"alice@x {pub(keys.ed25519)}\n"
    ok, bad = ("ok", "alice@x"), ("RECEIPT_SIGNATURE_INVALID", "")
    make = build_sshsig
    assert both(tmp_path, make(keys.ed25519, algorithm="ssh-ed25519", reserved=b"ignored"), line) == ok
    assert both(tmp_path, make(keys.ed25519, algorithm="ssh-ed25519", version=0), line) == ok
    assert both(tmp_path, make(keys.ed25519, algorithm="ssh-ed25519", version=2), line) == bad
    assert both(tmp_path, make(keys.ed25519, algorithm="ssh-ed25519", hash_algorithm=b"sha384"), line) == bad
    assert both(tmp_path, make(keys.ed25519, algorithm="rsa-sha2-512"), line) == bad  # wrong algorithm name
    good = make(keys.ed25519, algorithm="ssh-ed25519")
    assert both(tmp_path, as_signature(good.sig + b"\0"), line) == bad  # trailing data


def test_namespace(keys: Keys, tmp_path: Path) -> None:
    line = f"alice@x {pub(keys.ed25519)}\n"
    invalid = ("RECEIPT_SIGNATURE_INVALID", "")
    assert both(tmp_path, keygen_sign(keys.ed25519, DATA, "git"), line) == invalid
    assert both(tmp_path, keygen_sign(keys.ed25519), line, namespace="git") == invalid


def test_tampered_data_and_truncated_blobs(keys: Keys, tmp_path: Path) -> None:
    sig = keygen_sign(keys.ecdsa256)
    line = f"alice@x {pub(keys.ecdsa256)}\n"
    assert both(tmp_path, sig, line, data=DATA + b" ") == ("RECEIPT_SIGNATURE_INVALID", "")
    for size in (0, 5, 10, 30, len(sig.sig) // 2, len(sig.sig) - 1):
        assert both(tmp_path, as_signature(sig.sig[:size]), line) == ("RECEIPT_SIGNATURE_INVALID", "")


@pytest.fixture(scope="module")
def signed(keys: Keys) -> Signature:
    return keygen_sign(keys.ed25519)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, 10**6), mask=st.integers(1, 255))
def test_any_flipped_byte_is_judged_alike(keys: Keys, signed: Signature, tmp_path: Path, index: int, mask: int) -> None:
    blob = bytearray(signed.sig)
    blob[index % len(blob)] ^= mask  # whatever the outcome, both engines must reach the same one
    both(tmp_path, as_signature(bytes(blob)), f"alice@x {pub(keys.ed25519)}\n")


# -- who is trusted ----------------------------------------------------------------------------------------------------


def test_a_key_not_listed_is_untrusted(keys: Keys, tmp_path: Path) -> None:
    sig = keygen_sign(keys.ed25519)
    assert both(tmp_path, sig, f"alice@x {pub(keys.other)}\n") == ("RECEIPT_UNTRUSTED_SIGNER", "")
    assert both(tmp_path, sig, "# nobody\n\n") == ("RECEIPT_UNTRUSTED_SIGNER", "")


def test_validity_window(keys: Keys, tmp_path: Path) -> None:
    sig, key = keygen_sign(keys.ed25519), pub(keys.ed25519)
    untrusted = ("RECEIPT_UNTRUSTED_SIGNER", "")
    assert both(tmp_path, sig, f'alice@x valid-before="20250101Z" {key}\n') == untrusted
    assert both(tmp_path, sig, f'alice@x valid-after="20270101" {key}\n') == untrusted
    window = f'alice@x valid-after="20250101Z",valid-before="20260101000000Z" {key}\n'
    assert both(tmp_path, sig, window) == ("ok", "alice@x")  # both ends are inclusive
    assert both(tmp_path, sig, window, when=NOW + timedelta(seconds=1)) == untrusted
    assert both(tmp_path, sig, f'alice@x valid-after="202601010000Z" {key}\n') == ("ok", "alice@x")
    assert both(tmp_path, sig, f'alice@x valid-after="202601010000Z" {key}\n', when=NOW - timedelta(seconds=1)) == (
        untrusted
    )


@pytest.fixture
def summer_time_zone() -> Iterator[None]:
    """Central European time, for this process (``time.mktime``) and the ssh-keygen it starts alike."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "CET-1CEST,M3.5.0,M10.5.0/3"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def test_local_times_are_read_as_ssh_keygen_reads_them(keys: Keys, tmp_path: Path, summer_time_zone: None) -> None:
    sig, key = keygen_sign(keys.ed25519), pub(keys.ed25519)
    line = f'alice@x valid-after="20260701120000" {key}\n'  # no Z: local time, and in summer
    at = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
    results = [both(tmp_path, sig, line, when=at + timedelta(minutes=30 * i))[0] for i in range(7)]
    assert results[0] == "RECEIPT_UNTRUSTED_SIGNER"
    assert results[-1] == "ok"


def test_namespaces_option(keys: Keys, tmp_path: Path) -> None:
    sig, key = keygen_sign(keys.ed25519), pub(keys.ed25519)
    untrusted = ("RECEIPT_UNTRUSTED_SIGNER", "")
    assert both(tmp_path, sig, f'alice@x namespaces="git,file" {key}\n') == untrusted
    assert both(tmp_path, sig, f'alice@x namespaces="git-*" {key}\n') == ("ok", "alice@x")
    assert both(tmp_path, sig, f'alice@x namespaces="!git-agentops,*" {key}\n') == untrusted
    assert both(tmp_path, sig, f'alice@x namespaces="" {key}\n') == untrusted


def test_principal_patterns(keys: Keys, tmp_path: Path) -> None:
    sig, key = keygen_sign(keys.ed25519), pub(keys.ed25519)
    assert both(tmp_path, sig, f"*@example.com {key}\n") == ("ok", "*@example.com")  # Git names the pattern
    assert both(tmp_path, sig, f"alice@x,bob@x {key}\n") == ("ok", "alice@x")
    assert both(tmp_path, sig, f"alice@x,,bob@x {key}\n") == ("ok", "alice@x")
    # find-principals prints the field as written: Git then verifies "!alice@x" itself, and that matches "*@x"
    assert both(tmp_path, sig, f"!alice@x,*@x {key}\n") == ("ok", "!alice@x")
    # the first line listing the key names the principal, even when only a later line allows the namespace
    first = f'alice@x namespaces="git" {key}\nbob@x {key}\n'
    assert both(tmp_path, sig, first) == ("RECEIPT_UNTRUSTED_SIGNER", "")
    assert both(tmp_path, sig, f'alice@x namespaces="git" {key}\n*@x {key}\n') == ("ok", "alice@x")
    # ... and a negated pattern on that later line rejects it
    assert both(tmp_path, sig, f'alice@x namespaces="git" {key}\n!alice@x,*@x {key}\n') == (
        "RECEIPT_UNTRUSTED_SIGNER",
        "",
    )
    assert both(tmp_path, sig, f'"alice@x bob@x" {key}\n') == ("ok", "alice@x bob@x")


def test_lines_ssh_keygen_accepts(keys: Keys, tmp_path: Path) -> None:
    sig, key, rsa_key = keygen_sign(keys.ed25519), pub(keys.ed25519), pub(keys.rsa).split()[1]
    assert both(tmp_path, sig, f"# comment\n\n   \n  alice@x\t{key}\tsome comment here\r\n") == ("ok", "alice@x")
    assert both(tmp_path, sig, f'alice@x NAMESPACES="git-agentops",,Valid-After="20200101" {key}\n')[0] == "ok"
    assert both(tmp_path, sig, f'alice@x valid-after="20200231",valid-before="20300101UTC" {key}\n')[0] == "ok"
    assert both(tmp_path, sig, f'alice@x namespaces="a\\"b,git-agentops" {key}\n')[0] == "ok"
    assert both(tmp_path, keygen_sign(keys.rsa), f"alice@x rsa-sha2-256 {rsa_key}\n") == ("ok", "alice@x")


MALFORMED = [
    "alice@x",
    "alice@x ssh-ed25519",
    "alice@x ssh-ed25519 AAAA!!!!",
    "alice@x ED25519 {b64}",
    "alice@x ssh-rsa {b64}",
    "alice@x foo {key}",
    "alice@x namespaces=git-agentops {key}",
    "alice@x valid-after=20200101 {key}",
    'alice@x valid-after="2020" {key}',
    'alice@x valid-after="20200101240000" {key}',
    'alice@x valid-before="19700101Z" {key}',
    'alice@x namespaces="a",namespaces="b" {key}',
    'alice@x valid-after="20300101Z",valid-before="20200101Z" {key}',
    "alice@x cert-authority, {key}",
    'alice@x namespaces="git-agentops {key}',
    "alice@x no-touch-required {key}",
]


@pytest.mark.parametrize("template", MALFORMED)
def test_a_line_ssh_keygen_skips_is_refused(keys: Keys, tmp_path: Path, template: str) -> None:
    key = pub(keys.ed25519)
    line = template.format(key=key, b64=key.split()[1])
    path = tmp_path / "allowed_signers"
    path.write_text(f"# trusted\nalice@x {pub(keys.other)}\n{line}\n")
    sig = keygen_sign(keys.ed25519)
    # ssh-keygen itself ignores the line: the signer it lists is not trusted
    reference = outcome(lambda: sshsig.verify_with_ssh_keygen(DATA, sig, allowed_signers=path, when=NOW))
    assert reference == ("RECEIPT_UNTRUSTED_SIGNER", "")
    for engine in Engine:
        with pytest.raises(AgentOpsError) as caught:
            sshsig.verify(DATA, sig, allowed_signers=path, when=NOW, engine=engine)
        assert caught.value.code == "RECEIPT_SIGNERS_INVALID"
        assert f"{path}:3:" in caught.value.message
        assert caught.value.details["line"] == 3


# -- certificates ------------------------------------------------------------------------------------------------------


def certify(keys: Keys, tmp: Path, user: Path, *options: str, ca: Path | None = None) -> Path:
    """``ssh-keygen -s CA -I id ...``: the certificate of a copy of ``user``, to sign with."""
    copy = tmp / f"{user.name}-{hashlib.sha256(repr((options, ca)).encode()).hexdigest()[:8]}"
    copy.write_bytes(user.read_bytes())
    copy.chmod(0o600)
    copy.with_name(copy.name + ".pub").write_bytes(user.with_name(user.name + ".pub").read_bytes())
    argv = ["ssh-keygen", "-q", "-s", str(ca or keys.ca), "-I", "id", *options, str(copy) + ".pub"]
    subprocess.run(argv, check=True)
    return copy.with_name(copy.name + "-cert.pub")


def test_certificates_signed_by_a_cert_authority(keys: Keys, tmp_path: Path) -> None:
    cert = certify(keys, tmp_path, keys.ed25519, "-n", "alice@x,bob@x", "-V", "20250101:20270101")
    sig, ca = keygen_sign(cert), pub(keys.ca)
    untrusted = ("RECEIPT_UNTRUSTED_SIGNER", "")
    assert both(tmp_path, sig, f"*@x cert-authority {ca}\n") == ("ok", "alice@x")
    assert both(tmp_path, sig, f'bob@x CERT-AUTHORITY,namespaces="git-agentops" {ca}\n') == ("ok", "bob@x")
    assert both(tmp_path, sig, f"carol@x cert-authority {ca}\n") == untrusted  # not a principal of the cert
    assert both(tmp_path, sig, f"*@x {ca}\n") == untrusted  # the CA's key, but not as a cert-authority
    assert both(tmp_path, sig, f"alice@x {pub(keys.ed25519)}\n") == untrusted  # the plain key is not the cert
    assert both(tmp_path, sig, f"alice@x {pub(cert)}\n") == ("ok", "alice@x")  # the certificate itself, listed
    assert both(tmp_path, sig, f"*@x cert-authority {pub(keys.other)}\n") == untrusted
    assert both(tmp_path, sig, f"*@x cert-authority {ca}\n", when=datetime(2028, 1, 1, tzinfo=UTC)) == untrusted
    assert both(tmp_path, sig, f'*@x cert-authority,valid-before="20251231Z" {ca}\n') == untrusted


def test_certificate_kinds(keys: Keys, tmp_path: Path) -> None:
    line = f"*@x cert-authority {pub(keys.ca_rsa)}\n"
    rsa_ca = certify(keys, tmp_path, keys.ecdsa384, "-n", "alice@x", ca=keys.ca_rsa)
    assert both(tmp_path, keygen_sign(rsa_ca), line) == ("ok", "alice@x")
    host = certify(keys, tmp_path, keys.ecdsa256, "-h", "-n", "alice@x", ca=keys.ca_rsa)
    assert both(tmp_path, keygen_sign(host), line) == ("RECEIPT_UNTRUSTED_SIGNER", "")
    nobody = certify(keys, tmp_path, keys.rsa, ca=keys.ca_rsa)  # no principals at all
    assert both(tmp_path, keygen_sign(nobody), line) == ("RECEIPT_UNTRUSTED_SIGNER", "")


def test_a_tampered_certificate_is_invalid(keys: Keys, tmp_path: Path) -> None:
    cert = certify(keys, tmp_path, keys.ed25519, "-n", "alice@x")
    sig = keygen_sign(cert)
    cert_blob = sshsig.signer_public_key(sig.sig)
    forged = cert_blob.replace(b"alice@x", b"carol@x")  # same length: only the CA signature notices
    assert forged != cert_blob
    line = f"*@x cert-authority {pub(keys.ca)}\n"
    assert both(tmp_path, as_signature(sig.sig.replace(cert_blob, forged)), line) == ("RECEIPT_SIGNATURE_INVALID", "")


# -- the engines -------------------------------------------------------------------------------------------------------


def test_without_cryptography_ssh_keygen_checks(keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "allowed_signers"
    path.write_text(f"alice@x {pub(keys.ed25519)}\n")
    sig, calls = keygen_sign(keys.ed25519), []
    real = sshsig._run
    monkeypatch.setattr(sshsig, "_run", lambda *a: calls.append(a) or real(*a))
    assert sshsig.verify(DATA, sig, allowed_signers=path, when=NOW) == "alice@x"
    assert calls == []
    monkeypatch.setattr(sshsig, "_have_cryptography", lambda: False)
    assert sshsig.verify(DATA, sig, allowed_signers=path, when=NOW) == "alice@x"
    assert len(calls) == 2  # find-principals, verify
    with pytest.raises(AgentOpsError, match="cannot be checked in process") as caught:
        sshsig.verify(DATA, sig, allowed_signers=path, when=NOW, engine=Engine.IN_PROCESS)
    assert caught.value.code == "RECEIPT_SIGNATURE_INVALID"


def test_a_key_type_we_do_not_know_goes_to_ssh_keygen(
    keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "allowed_signers"
    path.write_text(f"alice@x {pub(keys.ed25519)}\n")
    blob = b"SSHSIG" + struct.pack(">I", 1) + _s(_s(b"ssh-xmss@openssh.com") + _s(b"k")) + _s(b"git-agentops")
    sig, calls = as_signature(blob + _s(b"") + _s(b"sha512") + _s(b"sig")), []
    real = sshsig._run
    monkeypatch.setattr(sshsig, "_run", lambda *a: calls.append(a) or real(*a))
    assert outcome(lambda: sshsig.verify(DATA, sig, allowed_signers=path, when=NOW)) == (
        "RECEIPT_SIGNATURE_INVALID",
        "",
    )
    assert calls
    calls.clear()
    assert outcome(lambda: sshsig.verify(DATA, sig, allowed_signers=path, engine=Engine.IN_PROCESS))[0] == (
        "RECEIPT_SIGNATURE_INVALID"
    )
    assert calls == []


def test_importing_sshsig_does_not_load_cryptography() -> None:
    code = (
        "import git_agentops.receipts.sshsig, git_agentops.receipts.verify, sys; print('cryptography' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


# -- the parser --------------------------------------------------------------------------------------------------------


def test_parsed_entries(keys: Keys) -> None:
    key = pub(keys.ed25519)
    text = f'# c\n"a@x b@x" Cert-Authority,namespaces="g\\"it",valid-after="20250101Z" {key} my key\n'
    (entry,) = signers.parse_allowed_signers(text.encode(), source="f")
    assert entry.line == 2
    assert entry.principals == "a@x b@x"
    assert entry.cert_authority and entry.namespaces == 'g"it' and entry.comment == "my key"
    assert entry.valid_after == int(datetime(2025, 1, 1, tzinfo=UTC).timestamp()) and entry.valid_before is None
    assert entry.key.kind == "ssh-ed25519" and entry.key.cert is None


NAMES = st.text(alphabet="ab@.-", min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    principals=st.lists(NAMES, min_size=1, max_size=3),
    ca=st.booleans(),
    namespaces=st.none() | st.lists(st.text(alphabet="gitx-*?!", min_size=1, max_size=5), min_size=1, max_size=3),
    after=st.none() | st.datetimes(datetime(1971, 1, 1), datetime(2099, 1, 1)),
    comment=st.text(alphabet="xyz ", max_size=8),
)
def test_rendered_lines_parse_back(
    principals: list[str],
    ca: bool,
    namespaces: list[str] | None,
    after: datetime | None,
    comment: str,
) -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFctDD1ntveBjy9T5EavrX2sU5As5tYvDvtE4MJH+6kK"
    options = ["cert-authority"] if ca else []
    options += [f'namespaces="{",".join(namespaces)}"'] if namespaces else []
    options += [f'valid-after="{after:%Y%m%d%H%M%S}Z"'] if after else []
    fields = [",".join(principals), *([",".join(options)] if options else []), key]
    text = " ".join(fields) + (f" {comment}" if comment else "")
    (entry,) = signers.parse_allowed_signers(text.encode(), source="f")
    assert entry.principals == ",".join(principals)
    assert entry.cert_authority is ca
    assert entry.namespaces == (",".join(namespaces) if namespaces else None)
    assert entry.valid_after == (int(after.replace(tzinfo=UTC).timestamp()) if after else None)
    assert entry.comment == comment.strip()


PATTERNS = st.lists(st.text(alphabet="ab*?!", max_size=4), min_size=1, max_size=3).map(",".join)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(patterns=PATTERNS.filter(bool), name=st.text(alphabet="ab!*?", min_size=1, max_size=5))
def test_pattern_lists_match_as_in_ssh_keygen(keys: Keys, tmp_path: Path, patterns: str, name: str) -> None:
    path = tmp_path / "allowed_signers"
    path.write_text(f"{patterns} {pub(keys.ed25519)}\n")
    argv = ["ssh-keygen", "-Y", "match-principals", "-I", name, "-f", str(path)]
    theirs = subprocess.run(argv, capture_output=True, check=False).returncode == 0
    assert (signers.match_pattern_list(name, patterns) == 1) is theirs


def test_long_subpatterns_and_times() -> None:
    assert signers.match_pattern_list("a", "a," + "x" * 1023) == 0
    assert signers.match_pattern_list("a", "a," + "x" * 1022) == 1
    assert signers.match_pattern_list("", "a,") == 0
    assert signers.match_pattern_list("", "a,,b") == 1
    assert signers.parse_time("20200231Z") == signers.parse_time("20200302Z")
    assert signers.parse_time("202001010000utc") == int(datetime(2020, 1, 1, tzinfo=UTC).timestamp())
    for bad in ("2020", "2020010", "20201301", "20200100", "20200101t", "19700101Z", "2020-1-01"):
        with pytest.raises(ValueError):
            signers.parse_time(bad)
