"""Which variables are credentials, and finding a held value in the encodings an agent could hide it in."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import lzma
import os
import urllib.parse
import zipfile
import zlib

import pytest

from git_agentops.process.command import ENV_ALLOWLIST
from git_agentops.verify import held as heldmod
from git_agentops.verify.credentials import HeldSecrets, is_credential, is_credential_name, scrub
from git_agentops.verify.held import base64_cores, find_held

TOKEN = "ghp_" + "aB3dE5" * 6
PASSWORD = "p@ss/w0rd:S3cret! x?>~"  # URL-encoding changes it, and its base64 has + and /
HELD = HeldSecrets.of([("GITHUB_TOKEN", TOKEN), ("MY_SERVICE_PASSWORD", PASSWORD)])


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN",
        "gh_token",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "TWINE_PASSWORD",
        "PGPASSWORD",
        "ANTHROPIC_API_KEY",
        "STRIPE_APIKEY",
        "DOCKER_AUTH_CONFIG",
        "HTTP_AUTHORIZATION",
        "SSH_AUTH_SOCK",
        "GPG_AGENT_INFO",
        "KUBECONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SIGNING_PRIVATE_KEY",
        "BROWSER_COOKIE",
        "OP_SESSION_my",
    ],
)
def test_credential_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "ANTHROPIC_BASE_URL", "LANG"])
def test_ordinary_names(name: str) -> None:
    assert not is_credential_name(name)


def test_a_secret_value_is_a_credential_whatever_its_name() -> None:
    assert is_credential("INNOCENT", TOKEN)
    assert is_credential("DATABASE_URL", "postgres://app:hunter2@db.internal:5432/app")
    assert not is_credential("DATABASE_URL", "postgres://db.internal:5432/app")
    assert not is_credential("EDITOR", "vim")


def test_verification_commands_get_no_credential_variable() -> None:
    """Invariant: the verification allowlist is narrower than the agents' scrub, one rule for both."""
    assert [name for name in ENV_ALLOWLIST if is_credential_name(name)] == []


def test_scrub_keeps_what_pass_env_names_and_nothing_else_that_is_a_credential() -> None:
    environ = {"PATH": "/bin", "GITHUB_TOKEN": TOKEN, "ANTHROPIC_API_KEY": "sk-ant-" + "k" * 30, "X": TOKEN}
    assert scrub(environ) == {"PATH": "/bin"}
    assert scrub(environ, ["ANTHROPIC_API_KEY"]) == {"PATH": "/bin", "ANTHROPIC_API_KEY": environ["ANTHROPIC_API_KEY"]}


def test_held_secrets_never_show_their_values() -> None:
    held = HeldSecrets.from_environ(
        {"GITHUB_TOKEN": TOKEN, "ALIAS": TOKEN, "SHORT_TOKEN": "abc", "PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "Jo"}
    )
    assert held.names == ("ALIAS",)  # one name per value, the first in order; too short is not held
    assert TOKEN not in repr(held) and TOKEN not in str(held) and "ALIAS" in repr(held)
    assert not HeldSecrets() and held


def test_the_three_base64_cores_are_in_any_longer_base64_text() -> None:
    value = TOKEN.encode()
    for before in range(6):
        stream = base64.b64encode(os.urandom(before) + value + os.urandom(5))
        assert any(core in stream for core in base64_cores(value)), before


def _gzip_in_base64() -> bytes:
    return b"payload = '" + base64.b64encode(gzip.compress(b"env: " + TOKEN.encode())) + b"'\n"


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("dump/env.txt", f"GITHUB_TOKEN={TOKEN}\n")
    return out.getvalue()


ENCODED = {
    "plain": (f"# config\ntoken = '{TOKEN}'\n".encode(), "plain", 2),
    "base64 at offset 0": (base64.b64encode(TOKEN.encode() + b"tail"), "base64", 1),
    "base64 at offset 1": (base64.b64encode(b"a" + TOKEN.encode() + b"tail"), "base64", 1),
    "base64 at offset 2": (base64.b64encode(b"ab" + TOKEN.encode() + b"tail"), "base64", 1),
    "urlsafe base64": (base64.urlsafe_b64encode(b"\xfb\xff" + PASSWORD.encode()), "base64url", 1),
    "wrapped base64": (base64.encodebytes(os.urandom(90) + TOKEN.encode()), "base64", None),
    "hex": (TOKEN.encode().hex().encode(), "hex", 1),
    "HEX": (b"\n" + TOKEN.encode().hex().upper().encode(), "hex", 2),
    "url-encoded": (f"https://x.test/?p={urllib.parse.quote(PASSWORD, safe='')}".encode(), "url-encoded", 1),
    "percent every byte": ("".join(f"%{b:02x}" for b in TOKEN.encode()).encode(), "url-encoded", 1),
    "gzip": (gzip.compress(TOKEN.encode()), "gzip/plain", None),
    "zlib": (zlib.compress(b"x" + TOKEN.encode()), "zlib/plain", None),
    "bzip2 after a header": (b"HDR" + bz2.compress(TOKEN.encode()), "bzip2/plain", None),
    "xz": (lzma.compress(TOKEN.encode()), "xz/plain", None),
    "gzip of base64": (gzip.compress(base64.b64encode(b"q" + TOKEN.encode())), "gzip/base64", None),
    "base64 of gzip": (_gzip_in_base64(), "base64/gzip/plain", None),
    "hex of gzip": (b"blob " + gzip.compress(TOKEN.encode()).hex().encode(), "hex/gzip/plain", None),
    "base64 twice": (base64.b64encode(base64.b64encode(TOKEN.encode())), "base64/base64", None),
    "zip": (_zip(), "zip/plain", None),
}


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_a_held_value_is_found_in_each_encoding(case: str) -> None:
    data, encoding, line = ENCODED[case]
    scan = find_held(data, HELD)
    assert scan.unscannable is None
    assert [(f.encoding, f.line) for f in scan.found] == [(encoding, line)]
    assert scan.found[0].name in ("GITHUB_TOKEN", "MY_SERVICE_PASSWORD")
    assert scan.found[0].rule == f"held-secret:{scan.found[0].name} ({encoding})"


def test_raw_deflate_is_tried_in_a_file_named_gz() -> None:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = packer.compress(TOKEN.encode()) + packer.flush()
    assert find_held(raw, HELD).found == ()
    assert [f.encoding for f in find_held(raw, HELD, name="dump.gz").found] == ["deflate/plain"]


def test_ordinary_content_finds_nothing() -> None:
    source = (
        b"def test_a_long_identifier_that_is_also_base64_ish_abcdef():\n    return 'deadbeef' * 8  # 0123456789abcdef\n"
    )
    for data in (source, os.urandom(64 * 1024), base64.encodebytes(os.urandom(64 * 1024)), gzip.compress(source)):
        assert find_held(data, HELD) == heldmod.HeldScan(())
    assert find_held(source, HeldSecrets()) == heldmod.HeldScan(())


def test_a_stream_past_the_cap_or_nested_too_deep_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldmod, "MAX_INFLATED", 1024)
    bomb = gzip.compress(b"\0" * 10_000 + TOKEN.encode())
    assert "inflates past" in (find_held(bomb, HELD).unscannable or "")
    nested = gzip.compress(gzip.compress(gzip.compress(gzip.compress(b"nothing"))))
    assert "nested more than" in (find_held(nested, HELD).unscannable or "")


def test_a_zip_member_that_cannot_be_read_is_unscannable_not_let_through() -> None:
    """Fail closed, as the caps do: an encrypted member, or one in a compression method Python cannot read
    (deflate64, say), could hold a held value nobody can see."""
    plain = _zip()
    encrypted = bytearray(plain)
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # set the encryption bit in the local and central headers
        at = encrypted.find(header)
        flags = 6 if header == b"PK\x03\x04" else 8
        encrypted[at + flags] |= 0x1
    assert "encrypted" in (find_held(bytes(encrypted), HELD).unscannable or "")
    unknown = bytearray(plain)
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # method 9: deflate64, which zipfile does not implement
        at = unknown.find(header)
        method = 8 if header == b"PK\x03\x04" else 10
        unknown[at + method : at + method + 2] = (9).to_bytes(2, "little")
    assert "cannot be read" in (find_held(bytes(unknown), HELD).unscannable or "")
