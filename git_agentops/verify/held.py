"""Finding a secret the supervisor holds in bytes an agent wrote, plainly or in the encodings it could hide it in.

The shape rules (:mod:`.redact`) find a ``ghp_`` token; its base64 is no recognisable shape, and an agent that wants
a secret out -- or is told to by a prompt it read -- encodes it. For the values the supervisor *knows* to be secret
(:class:`~.credentials.HeldSecrets`: its environment's credentials) the search is exact instead, on every form that
decodes back to the value without a key:

* **plain** (and UTF-16LE);
* **base64**, standard and urlsafe, padded or not: a value inside a longer base64 text encodes differently with its
  offset mod 3, so each of the three *aligned cores* is searched (the characters that depend on the value's bytes
  alone, :func:`base64_cores`);
* **hex**, lower and upper case;
* **URL-encoded**: ``quote``, ``quote_plus`` and every byte percent-encoded, upper or lower case hex digits;
* each of those also with line breaks and indentation taken out of the blob (``base64 -w 76``, ``xxd -p``);
* inside **containers**, to :data:`MAX_DEPTH` levels: a gzip, zlib, bzip2 or xz stream (where the blob starts, a
  gzip, bzip2 or xz stream anywhere in it, a raw deflate stream in a ``*.gz``/``*.z``/``*.deflate`` file), the
  members of a zip archive, and base64 or hex runs (line-wrapped too) that decode to anything -- a gzip stream, or
  the value base64-encoded twice. Each is decoded and searched again for all of the above.

Decompression is capped (:data:`MAX_INFLATED` bytes per blob, :data:`MAX_DECODED` of decoded runs, :data:`MAX_STREAMS`
streams), and the cap fails closed: a stream cut short, or a container nested deeper than :data:`MAX_DEPTH`, makes the
blob ``unscannable``, as an oversized blob is in :mod:`git_agentops.integrate.secrets`. What is left -- encryption,
an encoding of the agent's own -- cannot be found by searching; the defence against it is that agents never get the
supervisor's secrets in the first place (:func:`~.credentials.scrub`), and this search is the second wall.

A finding names the variable and the encoding (``held-secret:GITHUB_TOKEN (gzip/base64)``: the outer containers
first, the form of the value last), never the value.
"""

from __future__ import annotations

import base64
import bz2
import functools
import io
import itertools
import lzma
import re
import urllib.parse
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from .credentials import HeldSecrets

MAX_INFLATED: Final = 16 * 1024 * 1024
"""Bytes decompressed per blob, all streams and levels together."""
MAX_DECODED: Final = 32 * 1024 * 1024
"""Bytes of base64 and hex runs decoded per blob, all levels together."""
MAX_STREAMS: Final = 64
"""Compressed streams and archive members opened per blob."""
MAX_DEPTH: Final = 3
"""Containers inside containers searched: gzip in base64 in gzip is three."""
MIN_RUN: Final = 24
"""Shorter base64 or hex runs are not decoded (a ``gzip`` header alone, base64-encoded, is 14 characters)."""

_WHITESPACE: Final = b" \t\r\n"
_GZIP: Final = b"\x1f\x8b\x08"
_XZ: Final = b"\xfd7zXZ\x00"
_BZ2: Final = re.compile(rb"BZh[1-9]1AY&SY")
_ZIP: Final = b"PK\x03\x04"
DEFLATE_NAMES: Final = (".gz", ".gzip", ".z", ".zz", ".zlib", ".deflate")
_BASE64_RUN: Final = re.compile(rb"[A-Za-z0-9+/_-]{%d,}(?:={0,2}\r?\n[ \t]*[A-Za-z0-9+/_-]{4,})*={0,2}" % MIN_RUN)
_HEX_RUN: Final = re.compile(rb"[0-9A-Fa-f]{%d,}(?:\r?\n[ \t]*[0-9A-Fa-f]{2,})*" % MIN_RUN)
_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")
_OPENINGS: Final = (_GZIP, _XZ, _ZIP, b"BZh", b"\x78")


@dataclass(frozen=True, slots=True)
class HeldFinding:
    """A held secret found: the variable it is the value of, how it was encoded, its 1-based line (None when it was
    found inside a container or across line breaks)."""

    name: str
    encoding: str
    line: int | None

    @property
    def rule(self) -> str:
        """``held-secret:<NAME> (<encoding>)``: what a refusal names."""
        return f"held-secret:{self.name} ({self.encoding})"


@dataclass(frozen=True, slots=True)
class HeldScan:
    """What :func:`find_held` found, and why (part of) the blob could not be searched, if so."""

    found: tuple[HeldFinding, ...]
    unscannable: str | None = None


# -- the forms of one value ------------------------------------------------------------------------------------------


def base64_cores(value: bytes, alphabet: bytes | None = None) -> list[bytes]:
    """The base64 characters of ``value`` at each offset mod 3 inside a longer stream, padding and the characters
    that also depend on a neighbouring byte left out (``alphabet``: ``b"-_"`` for urlsafe)."""
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + value, altchars=alphabet)
        first = -(-8 * offset // 6)  # the first character made of the value's bits alone
        last = 8 * (offset + len(value)) // 6  # the characters before it hold no bit of what follows
        cores.append(encoded[first:last])
    return cores


def _percent_all(value: bytes) -> list[bytes]:
    upper = "".join(f"%{byte:02X}" for byte in value).encode()
    return [upper, upper.lower()]


def _quoted(value: bytes) -> list[bytes]:
    forms = []
    for quoted in (urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe="")):
        forms += [quoted.encode(), re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted).encode()]
    return forms + _percent_all(value)


def _forms(value: str) -> list[tuple[str, bytes]]:
    raw = value.encode("utf-8", errors="surrogateescape")
    forms: list[tuple[str, bytes]] = [("plain", raw), ("utf-16", value.encode("utf-16-le", errors="surrogatepass"))]
    forms += [("base64", core) for core in base64_cores(raw)]
    forms += [("base64url", core) for core in base64_cores(raw, b"-_")]
    forms += [("hex", raw.hex().encode()), ("hex", raw.hex().upper().encode())]
    forms += [("url-encoded", quoted) for quoted in _quoted(raw)]
    return forms


@functools.lru_cache(maxsize=8)
def needles(held: HeldSecrets) -> tuple[tuple[str, str, bytes], ...]:
    """``(variable, encoding, bytes)`` of every form of every held value, each distinct form once."""
    seen: set[bytes] = set()
    out = []
    for name, value in held.secrets:
        for encoding, form in _forms(value):
            if form and form not in seen:
                seen.add(form)
                out.append((name, encoding, form))
    return tuple(out)


def redact_held(text: str, held: HeldSecrets) -> str:
    """``text`` with each held value, in each of its textual forms, replaced by ``[REDACTED:held-secret:<NAME>]``:
    for what is shown of a finding -- a path can be the secret's base64."""
    for name, _encoding, form in sorted(needles(held), key=lambda needle: -len(needle[2])):
        shown = form.decode("utf-8", errors="replace")
        if shown in text:
            text = text.replace(shown, f"[REDACTED:held-secret:{name}]")
    return text


# -- the search ------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Budget:
    inflated: int = MAX_INFLATED
    decoded: int = MAX_DECODED
    streams: int = MAX_STREAMS
    problem: str | None = None
    found: dict[tuple[str, str], HeldFinding] = field(default_factory=dict)

    def fail(self, why: str) -> None:
        self.problem = self.problem or f"unscannable for held secrets: {why}"


def find_held(data: bytes, held: HeldSecrets, *, name: str = "") -> HeldScan:
    """Every held secret in ``data`` (a blob; ``name`` is its file name, for ``*.gz``), one finding per variable and
    encoding found in the blob itself, one per variable found only inside a container."""
    if not held:
        return HeldScan(())
    budget = _Budget(MAX_INFLATED, MAX_DECODED, MAX_STREAMS)  # read now: a test may lower them
    _search(data, needles(held), budget, path=(), depth=0, name=name)
    return HeldScan(tuple(budget.found.values()), budget.problem)


def _search(
    data: bytes,
    forms: tuple[tuple[str, str, bytes], ...],
    budget: _Budget,
    *,
    path: tuple[str, ...],
    depth: int,
    name: str,
) -> None:
    _match(data, forms, budget, path, lines=True)
    if any(byte in data for byte in _WHITESPACE):  # wrapped: base64 -w 76, xxd -p, a PEM-like block
        _match(data.translate(None, _WHITESPACE), forms, budget, path, lines=False)
    if depth >= MAX_DEPTH:
        if next(_streams(data, _Budget(inflated=1), name), None) is not None:
            budget.fail(f"a compressed stream inside {'/'.join(path)} is nested more than {MAX_DEPTH} deep")
        return  # base64 and hex runs this deep are not decoded: a long identifier is one too
    for kind, inner in itertools.chain(_streams(data, budget, name), _runs(data, budget)):
        _search(inner, forms, budget, path=(*path, kind), depth=depth + 1, name="")


def _match(
    data: bytes, forms: tuple[tuple[str, str, bytes], ...], budget: _Budget, path: tuple[str, ...], *, lines: bool
) -> None:
    for variable, encoding, form in forms:
        if path and any(found == variable for found, _encoding in budget.found):
            continue  # inside a container: one finding per variable is enough
        at = data.find(form)
        if at < 0:
            continue
        shown = "/".join((*path, encoding))
        line = data.count(b"\n", 0, at) + 1 if lines and not path else None
        budget.found.setdefault((variable, shown), HeldFinding(variable, shown, line))


def _streams(data: bytes, budget: _Budget, name: str) -> Iterator[tuple[str, bytes]]:
    starts: list[tuple[str, int]] = []
    if len(data) >= 2 and data[0] == 0x78 and (data[0] << 8 | data[1]) % 31 == 0:
        starts.append(("zlib", 0))
    if name.lower().endswith(DEFLATE_NAMES):
        starts += [("zlib", 0), ("deflate", 0)]
    starts += [("gzip", m.start()) for m in re.finditer(re.escape(_GZIP), data)]
    starts += [("xz", m.start()) for m in re.finditer(re.escape(_XZ), data)]
    starts += [("bzip2", m.start()) for m in _BZ2.finditer(data)]
    for kind, at in sorted(set(starts), key=lambda start: start[1]):
        if budget.streams <= 0:
            budget.fail(f"more than {MAX_STREAMS} compressed streams")
            return
        budget.streams -= 1
        inflated = _decompress(kind, data[at:], budget)
        if inflated is not None:
            yield kind, inflated
    if data.startswith(_ZIP):
        yield from _zip_members(data, budget)


def _decompressor(kind: str) -> zlib._Decompress | lzma.LZMADecompressor | bz2.BZ2Decompressor:
    if kind == "xz":
        return lzma.LZMADecompressor()
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    return zlib.decompressobj({"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS, "deflate": -zlib.MAX_WBITS}[kind])


def _decompress(kind: str, data: bytes, budget: _Budget) -> bytes | None:
    """The first stream of ``kind`` in ``data`` decompressed, within the budget; None when it is no such stream."""
    try:
        inflater = _decompressor(kind)
        out = inflater.decompress(data, budget.inflated + 1)
    except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError):
        return None
    if not out:
        return None
    if len(out) > budget.inflated:
        budget.fail(f"a {kind} stream inflates past {MAX_INFLATED // (1024 * 1024)} MiB")
        out = out[: budget.inflated]
    budget.inflated -= len(out)
    return out


def _zip_members(data: bytes, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    for info in members:
        if info.is_dir():
            continue
        if info.flag_bits & 0x1:  # encrypted: what it holds cannot be searched, so it is not let through
            budget.fail(f"zip member {info.filename[:100]!r} is encrypted")
            return
        if budget.streams <= 0:
            budget.fail(f"more than {MAX_STREAMS} compressed streams")
            return
        budget.streams -= 1
        try:
            with archive.open(info) as member:
                out = member.read(budget.inflated + 1)
        except NotImplementedError:  # a compression method Python cannot read: unscannable, fail closed
            budget.fail(f"zip member {info.filename[:100]!r} uses a compression method that cannot be read")
            return
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, zlib.error):
            continue  # corrupt: its bytes were searched as they are, in the blob itself
        if len(out) > budget.inflated:
            budget.fail(f"a zip member inflates past {MAX_INFLATED // (1024 * 1024)} MiB")
            out = out[: budget.inflated]
        budget.inflated -= len(out)
        yield "zip", out


def _runs(data: bytes, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    """Base64 and hex runs of ``data`` decoded (a base64 run at each of its 4 possible starts)."""
    for kind, pattern in (("base64", _BASE64_RUN), ("hex", _HEX_RUN)):
        for match in pattern.finditer(data):
            run = match.group().translate(None, _WHITESPACE)
            for decoded in _decode(kind, run):
                if len(decoded) > budget.decoded:
                    budget.fail(f"more than {MAX_DECODED // (1024 * 1024)} MiB of base64 and hex runs")
                    return
                budget.decoded -= len(decoded)
                yield kind, decoded


def _decode(kind: str, run: bytes) -> list[bytes]:
    """``run`` decoded from its first character, and from each later start (a run may begin with a stray letter or
    digit) where that opens a compressed stream."""
    out = []
    for start in range(2 if kind == "hex" else 4):
        try:
            decoded = _hex(run[start:]) if kind == "hex" else _base64(run[start:])
        except ValueError:  # binascii.Error is one
            continue
        if start == 0 or decoded.startswith(_OPENINGS):
            out.append(decoded)
    return out


def _hex(run: bytes) -> bytes:
    return bytes.fromhex(run[: len(run) // 2 * 2].decode("ascii"))


def _base64(run: bytes) -> bytes:
    text = run.rstrip(b"=").translate(_URLSAFE)
    text = text[: len(text) - 1] if len(text) % 4 == 1 else text
    return base64.b64decode(text + b"=" * (-len(text) % 4))
