"""OpenSSH's ``allowed_signers`` file, read as ``ssh-keygen -Y`` reads it, and the SSH key blobs it names.

Why our own reader: receipts are verified in process (:mod:`.sshsig`), and who signed is decided by this file, so
its every rule must be ssh-keygen's (OpenSSH 9, ``sshsig.c``; the format is ``ssh-keygen(1)``, ALLOWED SIGNERS):

* a line is ``principals [options] keytype base64-key [comment]``; blank lines and ``#`` comments are skipped;
  the principals field may be double-quoted (then it may hold spaces);
* principals and ``namespaces=`` are pattern-lists (``ssh_config(5)`` PATTERNS): ``*``/``?`` wildcards, a
  ``!`` negation that rejects outright, comma-separated (:func:`match_pattern_list`);
* options are comma-separated, keywords case-insensitive: ``cert-authority``, ``namespaces="..."``,
  ``valid-after="..."``, ``valid-before="..."``; a value must be double-quoted (``\\"`` escapes a quote: the man
  page does not say so, ssh-keygen refuses a bare value); a timestamp is ``YYYYMMDD[Z]`` or
  ``YYYYMMDDHHMM[SS][Z]``, ``Z`` (or ``UTC``) meaning UTC and local time otherwise (:func:`parse_time`).

Where we differ on purpose: ssh-keygen logs a line it cannot parse and skips it, and because the *first* line
that lists a key names its principal (:func:`find_principals`), a skipped line can silently change who a
signature is attributed to. We refuse the whole file instead -- ``RECEIPT_SIGNERS_INVALID`` naming the line --
whichever engine then checks the signature, so one file means one thing. Hardware-key, DSA and certificate lines
are parsed like any other; whether a signature by such a key can be checked in process is :mod:`.sshsig`'s call.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from ..errors import AgentOpsError

# the public fields of each plain key type after its name: "s" a string, "m" an mpint (sshkey.c's impls)
_FIELDS: Final = {
    "ssh-ed25519": "s",
    "ssh-rsa": "mm",
    "ssh-dss": "mmmm",
    "ecdsa-sha2-nistp256": "ss",
    "ecdsa-sha2-nistp384": "ss",
    "ecdsa-sha2-nistp521": "ss",
    "sk-ssh-ed25519@openssh.com": "ss",
    "sk-ecdsa-sha2-nistp256@openssh.com": "sss",
}
_CERT_OF: Final = {p.removesuffix("@openssh.com") + "-cert-v01@openssh.com": p for p in _FIELDS}
# what a line's keytype may say: every plain and certificate name, and the signature-only RSA and webauthn names
# ssh-keygen also accepts there (it refuses the short names "ED25519", "RSA"...)
_LINE_TYPES: Final = {
    **{name: (name, False) for name in _FIELDS},
    **{name: (plain, True) for name, plain in _CERT_OF.items()},
    "rsa-sha2-256": ("ssh-rsa", False),
    "rsa-sha2-512": ("ssh-rsa", False),
    "rsa-sha2-256-cert-v01@openssh.com": ("ssh-rsa", True),
    "rsa-sha2-512-cert-v01@openssh.com": ("ssh-rsa", True),
    "webauthn-sk-ecdsa-sha2-nistp256@openssh.com": ("sk-ecdsa-sha2-nistp256@openssh.com", False),
}
_RSA_MIN_BITS: Final = 1024  # SSH_RSA_MINIMUM_MODULUS_SIZE
_MAX_MPINT: Final = 16384 // 8  # SSHBUF_MAX_BIGNUM
_MAX_PRINCIPALS: Final = 256  # SSHKEY_CERT_MAX_PRINCIPALS
_MAX_SUBPATTERN: Final = 1023  # match_pattern_list's buffer: a longer subpattern makes the whole list not match
USER_CERT: Final = 1


class UnknownKeyType(ValueError):
    """A key blob of a type this module does not know (ssh-keygen may: XMSS, a type newer than us)."""


class WireReader:
    """SSH wire format (RFC 4251 §5) over a bytes value; every short read is a ``ValueError``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        """The next ``size`` raw bytes."""
        end = self.pos + size
        if end > len(self.data):
            raise ValueError("truncated")
        chunk, self.pos = self.data[self.pos : end], end
        return chunk

    def u32(self) -> int:
        """A uint32."""
        return int.from_bytes(self.take(4), "big")

    def u64(self) -> int:
        """A uint64."""
        return int.from_bytes(self.take(8), "big")

    def string(self) -> bytes:
        """A length-prefixed string."""
        return self.take(self.u32())

    def cstring(self) -> str:
        """A string that must hold no NUL (sshbuf_get_cstring), as text (invalid UTF-8 kept as surrogates)."""
        raw = self.string()
        if b"\0" in raw:
            raise ValueError("NUL in string")
        return raw.decode("utf-8", "surrogateescape")

    def mpint(self) -> int:
        """A non-negative mpint (OpenSSH refuses negative ones; leading zero bytes are allowed)."""
        raw = self.string()
        if raw and raw[0] & 0x80:
            raise ValueError("negative mpint")
        if len(raw) > _MAX_MPINT + 1 or (len(raw) == _MAX_MPINT + 1 and raw[0] != 0):
            raise ValueError("mpint too large")
        return int.from_bytes(raw, "big")

    def end(self) -> None:
        """Nothing may follow."""
        if self.pos != len(self.data):
            raise ValueError("trailing data")


@dataclass(frozen=True, slots=True)
class Certificate:
    """An OpenSSH certificate's fields (PROTOCOL.certkeys); ``signed`` is what ``signature`` is over."""

    cert_type: int
    key_id: str
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int
    ca: PublicKey
    signed: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A public key or certificate: its wire ``blob``, its plain ``kind`` and its public ``fields``."""

    blob: bytes
    kind: str
    fields: tuple[bytes | int, ...]
    cert: Certificate | None = None

    def same_public(self, other: PublicKey) -> bool:
        """``sshkey_equal_public``: the same plain key (a certificate stands for the key it certifies)."""
        return self.kind == other.kind and self.fields == other.fields

    def same_key(self, other: PublicKey) -> bool:
        """``sshkey_equal``: the same plain key, or the very same certificate."""
        if (self.cert is None) != (other.cert is None):
            return False
        return self.blob == other.blob if self.cert is not None else self.same_public(other)


def _fields(reader: WireReader, kind: str) -> tuple[bytes | int, ...]:
    values = tuple(reader.mpint() if f == "m" else reader.string() for f in _FIELDS[kind])
    if kind in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com") and len(values[0]) != 32:  # type: ignore[arg-type]
        raise ValueError("bad Ed25519 key length")
    if kind == "ssh-rsa" and int(values[1]).bit_length() < _RSA_MIN_BITS:
        raise ValueError("RSA key too small")
    if "ecdsa" in kind and values[0] != re.findall(r"nistp\d+", kind)[0].encode():
        raise ValueError("ECDSA curve does not match the key type")
    return values


def parse_public_key(blob: bytes, *, allow_cert: bool = True) -> PublicKey:
    """The key in a wire blob; ``UnknownKeyType`` for a type we do not know, ``ValueError`` when malformed."""
    reader = WireReader(blob)
    name = reader.cstring()
    if name in _FIELDS:
        key = PublicKey(blob, name, _fields(reader, name))
        reader.end()
        return key
    if name not in _CERT_OF:
        raise UnknownKeyType(f"unknown key type {name!r}")
    if not allow_cert:
        raise ValueError("a certificate cannot sign a certificate")
    kind = _CERT_OF[name]
    reader.string()  # nonce
    fields = _fields(reader, kind)
    reader.u64()  # serial
    cert_type, key_id, packed = reader.u32(), reader.cstring(), WireReader(reader.string())
    valid_after, valid_before = reader.u64(), reader.u64()
    for section in (reader.string(), reader.string()):  # critical options, extensions: (name, data) pairs
        pairs = WireReader(section)
        while pairs.pos < len(section):
            pairs.string(), pairs.string()
    reader.string()  # reserved
    ca = parse_public_key(reader.string(), allow_cert=False)
    signed = blob[: reader.pos]
    signature = reader.string()
    reader.end()
    if cert_type not in (1, 2):
        raise ValueError("unknown certificate type")
    principals: list[str] = []
    while packed.pos < len(packed.data):
        if len(principals) >= _MAX_PRINCIPALS:
            raise ValueError("too many principals")
        principals.append(packed.cstring())
    cert = Certificate(cert_type, key_id, tuple(principals), valid_after, valid_before, ca, signed, signature)
    return PublicKey(blob, kind, fields, cert)


# -- patterns and times ------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in re.sub(r"\*+", "*", pattern))
    return re.compile("".join(parts), re.DOTALL)


def match_pattern(string: str, pattern: str) -> bool:
    """OpenSSH ``match_pattern``: ``pattern`` (``*`` any run, ``?`` any one character) matches all of ``string``."""
    return _regex(pattern).fullmatch(string) is not None


def match_pattern_list(string: str, patterns: str) -> int:
    """OpenSSH ``match_pattern_list``: -1 when a ``!`` subpattern matches, 1 when another does, else 0."""
    subs = patterns.split(",")
    if subs[-1] == "":  # the C loop stops at the end of the text: a trailing comma adds no empty subpattern
        subs.pop()
    positive = 0
    for sub in subs:
        negated = sub.startswith("!")
        if len(sub) - negated >= _MAX_SUBPATTERN:
            return 0
        if match_pattern(string, sub[1:] if negated else sub):
            if negated:
                return -1
            positive = 1
    return positive


def split_principals(field: str) -> tuple[str, ...]:
    """The names ``ssh-keygen -Y find-principals`` prints for a principals field: up to the first empty one."""
    names: list[str] = []
    for name in field.split(","):
        if not name:
            break
        names.append(name)
    return tuple(names)


def parse_time(text: str) -> int:
    """``parse_absolute_time``: seconds since the epoch; ``ValueError`` for anything ssh-keygen would refuse.

    Stricter than ssh-keygen only in refusing non-digits (its strptime skips blanks); like it, a day past the end
    of the month rolls over and local time is read as standard time (``tm_isdst = 0``).
    """
    utc = False
    if len(text) > 1 and text[-1] in "zZ":
        utc, text = True, text[:-1]
    elif len(text) > 3 and text[-3:].lower() == "utc":
        utc, text = True, text[:-3]
    if not re.fullmatch(r"\d{8}|\d{12}|\d{14}", text):
        raise ValueError("not YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z]")
    year, month, day = int(text[:4]), int(text[4:6]), int(text[6:8])
    hour, minute, second = int(text[8:10] or 0), int(text[10:12] or 0), int(text[12:14] or 0)
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 61):
        raise ValueError("a field is out of range")
    try:
        fields = (year, month, day, hour, minute, second)
        seconds = calendar.timegm(fields) if utc else int(time.mktime((*fields, 0, 0, 0)))
    except (OverflowError, ValueError) as exc:
        raise ValueError("not a representable time") from exc
    if seconds <= 0:
        raise ValueError("before the epoch")
    return seconds


# -- the file ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllowedSigner:
    """One line of an allowed signers file; times are seconds since the epoch, None when the line sets none."""

    line: int
    principals: str
    key: PublicKey
    cert_authority: bool = False
    namespaces: str | None = None
    valid_after: int | None = None
    valid_before: int | None = None
    comment: str = ""

    def valid_at(self, when: int) -> bool:
        """``valid-after`` <= ``when`` <= ``valid-before`` (both ends inclusive, as in ssh-keygen)."""
        after_ok = self.valid_after is None or when >= self.valid_after
        return after_ok and (self.valid_before is None or when <= self.valid_before)

    def allows_namespace(self, namespace: str) -> bool:
        """No ``namespaces=``, or ``namespace`` matches its pattern-list."""
        return self.namespaces is None or match_pattern_list(namespace, self.namespaces) == 1


class _Bad(Exception):
    """A line ssh-keygen would not use; the message says why."""


_PRINCIPALS = re.compile(r'"(?P<quoted>[^"]*)"[ \t\r]+|(?P<plain>[^ \t\r"]+)[ \t\r]+')
_OPTIONS: Final = ("namespaces", "valid-after", "valid-before")


def parse_allowed_signers(data: bytes, *, source: str) -> tuple[AllowedSigner, ...]:
    """Every entry of an allowed signers file, in file order (module docstring).

    Raises ``RECEIPT_SIGNERS_INVALID`` naming ``source`` and the line for a line ssh-keygen would skip: a
    malformed line, a key that does not decode, an unknown or repeated option, a bad or unquoted value.
    """
    entries = []
    for number, raw in enumerate(data.decode("utf-8", "surrogateescape").split("\n"), start=1):
        try:
            entry = _parse_line(raw, number)
        except _Bad as exc:
            raise AgentOpsError(
                "RECEIPT_SIGNERS_INVALID",
                f"{source}:{number}: {exc} (ssh-keygen would ignore this line; fix or remove it)",
                details={"file": source, "line": number},
            ) from exc
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def _parse_line(raw: str, number: int) -> AllowedSigner | None:
    text = raw.lstrip(" \t\r")
    if not text or text.startswith("#"):
        return None
    if "\0" in text:
        raise _Bad("NUL byte in the line")
    head = _PRINCIPALS.match(text)
    if head is None:
        raise _Bad("expected 'principals [options] keytype base64-key': a principals field, then the key")
    principals = head["plain"] if head["quoted"] is None else head["quoted"]
    rest = text[head.end() :].lstrip(" \t\r")
    options: dict[str, str | bool] = {}
    if not rest.strip():
        raise _Bad("missing key after the principals")
    # ssh-keygen tries to read a key first; when the field is not one, it holds the options
    if re.split(r"[ \t]", rest, maxsplit=1)[0] not in _LINE_TYPES:
        end = _options_end(rest)
        options = _parse_options(rest[:end])
        rest = rest[end:].lstrip(" \t")
        if not rest.strip():
            raise _Bad("missing key after the options")
    key, comment = _read_key(rest)
    after, before = options.get("valid-after"), options.get("valid-before")
    valid_after = _time_option("valid-after", after) if isinstance(after, str) else None
    valid_before = _time_option("valid-before", before) if isinstance(before, str) else None
    if valid_after is not None and valid_before is not None and valid_before <= valid_after:
        raise _Bad('"valid-before" time is before "valid-after"')
    namespaces = options.get("namespaces")
    namespaces = namespaces if isinstance(namespaces, str) else None
    ca = bool(options.get("cert-authority"))
    return AllowedSigner(number, principals, key, ca, namespaces, valid_after, valid_before, comment)


def _options_end(text: str) -> int:
    """``sshkey_advance_past_options``: the first blank outside double quotes (``\\"`` does not close)."""
    quoted, i = False, 0
    while i < len(text) and (quoted or text[i] not in " \t"):
        if text[i] == "\\" and text[i + 1 : i + 2] == '"':
            i += 1
        elif text[i] == '"':
            quoted = not quoted
        i += 1
    if quoted:
        raise _Bad("unterminated quote in the options")
    return i


def _parse_options(text: str) -> dict[str, str | bool]:
    """``sshsigopt_parse``: comma-separated, keywords case-insensitive, values double-quoted."""
    found: dict[str, str | bool] = {}
    pos = 0
    while pos < len(text):
        start, lower = pos, text[pos:].lower()
        if lower.startswith("cert-authority"):
            found["cert-authority"] = True
            pos += len("cert-authority")
        else:
            for name in _OPTIONS:
                if lower.startswith(name + "="):
                    if name in found:
                        raise _Bad(f'multiple "{name}" clauses')
                    found[name], pos = _dequote(text, pos + len(name) + 1, name)
                    break
        if pos == len(text):
            break
        if text[pos] != ",":
            word = text[start:].split(",", 1)[0]
            raise _Bad(
                f"unknown option {word!r} (allowed signers options are cert-authority, namespaces=, "
                "valid-after= and valid-before=)"
            )
        pos += 1
        if pos == len(text):
            raise _Bad("the options end with a comma")
    return found


def _dequote(text: str, pos: int, name: str) -> tuple[str, int]:
    """``opt_dequote``: a double-quoted value starting at ``pos``; the value and the position after it."""
    if text[pos : pos + 1] != '"':
        raise _Bad(f'the value of {name}= must be in double quotes ({name}="...")')
    pos += 1
    value = []
    while pos < len(text) and text[pos] != '"':
        if text[pos] == "\\" and text[pos + 1 : pos + 2] == '"':
            pos += 1
        value.append(text[pos])
        pos += 1
    if pos == len(text):
        raise _Bad(f"missing end quote in {name}=")
    return "".join(value), pos + 1


def _time_option(name: str, value: str) -> int:
    try:
        return parse_time(value)
    except ValueError as exc:
        raise _Bad(f'invalid "{name}" time {value!r}: {exc}') from exc


def _read_key(text: str) -> tuple[PublicKey, str]:
    """``sshkey_read``: ``keytype base64 [comment]``; the blob's type must be the one the line names."""
    parts = re.split(r"[ \t]+", text.rstrip("\r"), maxsplit=2)
    if len(parts) < 2 or parts[0] not in _LINE_TYPES:
        raise _Bad(f"invalid key: {parts[0][:40]!r} is not an OpenSSH key type")
    try:
        key = parse_public_key(base64.b64decode(parts[1], validate=True))
    except (binascii.Error, ValueError) as exc:
        raise _Bad(f"invalid key: the base64 key does not decode to a {parts[0]} key ({exc})") from exc
    if (key.kind, key.cert is not None) != _LINE_TYPES[parts[0]]:
        raise _Bad(f"invalid key: the line says {parts[0]} but the key is another type")
    return key, parts[2].strip() if len(parts) > 2 else ""


# -- the decisions ssh-keygen makes ------------------------------------------------------------------------------------


def _cert_refused(cert: Certificate, when: int, name: str | None) -> bool:
    """``sshkey_cert_check_authority`` for a user certificate that must list principals (and ``name``)."""
    if cert.cert_type != USER_CERT or not cert.valid_after <= when < cert.valid_before or not cert.principals:
        return True
    return name is not None and name not in cert.principals


def _line_yields(entry: AllowedSigner, key: PublicKey, when: int, principal: str | None) -> tuple[str, ...] | None:
    """``check_allowed_keys_line`` but the namespace: the principals the line gives ``key`` at ``when``, or None."""
    if not entry.cert_authority:
        if not entry.key.same_key(key):
            return None
        names = split_principals(entry.principals) if principal is None else (principal,)
    else:
        cert = key.cert
        if cert is None or not entry.key.same_public(cert.ca) or _cert_refused(cert, when, principal):
            return None
        if principal is None:  # cert_filter_principals: the certificate's names the line's patterns match
            patterns = split_principals(entry.principals)
            joined = ""  # joined as sshbuf_putf does: no comma while the buffer is still empty
            for name in (name for pattern in patterns for name in cert.principals if match_pattern(name, pattern)):
                joined += f",{name}" if joined else name
            if not joined:
                return None
            names = split_principals(joined)
        else:
            names = (principal,)
    return names if entry.valid_at(when) else None


def find_principals(entries: tuple[AllowedSigner, ...], key: PublicKey, when: int) -> tuple[str, ...]:
    """``ssh-keygen -Y find-principals``: the principals of the *first* line listing ``key`` at ``when``.

    The namespace plays no part here (Git checks it in the next step, :func:`allows`).
    """
    for entry in entries:
        names = _line_yields(entry, key, when, None)
        if names is not None:
            return names
    return ()


def allows(entries: tuple[AllowedSigner, ...], key: PublicKey, principal: str, namespace: str, when: int) -> bool:
    """``ssh-keygen -Y verify -I principal``'s trust half: some line whose principals match ``principal``
    (a negated pattern rejects the line) allows ``key`` for ``namespace`` at ``when``."""
    for entry in entries:
        if match_pattern_list(principal, entry.principals) != 1 or not entry.allows_namespace(namespace):
            continue
        if _line_yields(entry, key, when, principal) is not None:
            return True
    return False
