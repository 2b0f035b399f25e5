"""Secret-shaped strings: find them (with line and column) and redact them.

Verification output is stored in Git as evidence, and Git history is forever and travels with every clone: a test
that prints an environment variable, a traceback showing a config dict, a tool echoing a token would otherwise
publish it. So the stored tail of every command's output goes through :func:`redact`, and the pre-commit hook uses
:func:`find_secrets` to name the path, line and column of a secret an agent is about to commit -- never the value.

The rules match the *shape* of credentials whose issuers made them recognisable on purpose (fixed prefixes such
as ``ghp_``, ``AKIA``, ``sk-ant-``, ``xoxb-``, PEM armour), plus the AWS secret key, which has no prefix and is
recognised by the name it is assigned to. Shapes, not entropy: a rule either matches or not, the same on every
machine, and ordinary code (``task-1234``, ``risk-free``, UUIDs, commit ids) does not trip it. Documented example
keys such as ``AKIAIOSFODNN7EXAMPLE`` are secret-shaped and are reported like real ones. A policy adds its own
patterns (:func:`compile_extra`), reported as ``policy-<index>`` (0-based); a pattern with a named group
``secret`` reports and redacts only that group, otherwise the whole match.

Overlapping matches are merged into one region, reported once under the rule of the match that starts first (the
longest, then the first rule, on a tie), so a redaction never leaves part of a secret behind. Found regions are
blanked and the text searched again until nothing new matches: removing one secret can expose a neighbour that
its boundary check had hidden. Redact a whole output before cutting its tail, or the cut may split a secret into
unrecognisable halves.

Pure ``re`` and no imports beyond the standard library and :mod:`..errors`: the hook loads it on every commit.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..errors import AgentOpsError


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret-shaped region: ``rule`` id, 1-based ``line`` and ``column`` (in characters), ``length``."""

    rule: str
    line: int
    column: int
    length: int


# -- the built-in rules ----------------------------------------------------------------------------------------

# PEM armour; SSH.com's format uses four dashes and spaces ("---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----").
_PEM_BEGIN: Final = r"-{4,5} ?BEGIN [A-Z0-9 ]{0,40}?PRIVATE KEY(?: BLOCK)? ?-{4,5}"
_PEM_END: Final = r"-{4,5} ?END [A-Z0-9 ]{0,40}?PRIVATE KEY(?: BLOCK)? ?-{4,5}"
# A line break, real or escaped as in JSON and .env values ("-----BEGIN ...-----\nMIIE...\n-----END ...").
_PEM_BREAK: Final = r"(?:\r?\n|\\r\\n|\\n)"
# Without an END (a truncated output, a key cut short), the body is the base64 and header lines that follow.
_PEM_BODY_LINE: Final = (
    rf"{_PEM_BREAK}{{1,2}}[ \t]*(?:[A-Za-z0-9+/]+={{0,2}}|[A-Z][A-Za-z-]*: [^\r\n\\]*)"
    r"(?=[ \t]*(?:\r|\n|\\r|\\n|\Z|[\"',]))"
)
_PEM_MAX_BLOCK: Final = 65536  # the largest PGP private key blocks with subkeys are a few tens of KiB

_ALNUM_BEFORE: Final = r"(?<![A-Za-z0-9])"
_ALNUM_AFTER: Final = r"(?![A-Za-z0-9])"
_URLSAFE_BEFORE: Final = r"(?<![A-Za-z0-9_-])"
_URLSAFE_AFTER: Final = r"(?![A-Za-z0-9_-])"

_RULE_SOURCES: Final = {
    "private-key": (
        rf"{_PEM_BEGIN}(?:(?:(?!-{{4,5}} ?BEGIN )[\s\S]){{0,{_PEM_MAX_BLOCK}}}?{_PEM_END}|(?:{_PEM_BODY_LINE})*)"
    ),
    "aws-access-key-id": (
        rf"{_ALNUM_BEFORE}(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{{16}}"
        rf"{_ALNUM_AFTER}"
    ),
    "aws-secret-access-key": (
        r"(?i:(?<![A-Za-z0-9])(?:aws[_.-]?)?secret[_.-]?access[_.-]?key)[\"']?[ \t]*(?:=>|:=|=|:)[ \t]*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
    ),
    "github-token": rf"{_ALNUM_BEFORE}(?:gh[pousr]_[A-Za-z0-9]{{36,}}|github_pat_[A-Za-z0-9_]{{22,}})",
    "gitlab-token": (
        rf"{_ALNUM_BEFORE}gl(?:pat|dt|rt|ptt|ft|soat)-[A-Za-z0-9_-]{{20,}}(?:\.[A-Za-z0-9_-]+)*{_URLSAFE_AFTER}"
    ),
    # the lookbehind excludes '-' so that only the first "xoxb-" of a run like "xoxb-xoxb-..." runs the lookahead
    "slack-token": r"(?<![A-Za-z0-9-])(?:xox[abeprs]|xapp)-(?=[A-Za-z-]*[0-9])[A-Za-z0-9-]{10,}",
    "anthropic-key": rf"{_URLSAFE_BEFORE}sk-ant-[A-Za-z0-9_-]{{20,}}",
    # sk-, sk-proj-, sk-svcacct-, sk-admin-...: the body must hold an uppercase letter or a digit, so a CSS class
    # or slug such as "sk-loading-spinner-container" is not a key.
    "openai-key": rf"{_URLSAFE_BEFORE}sk-(?!ant-)(?:[a-z]{{2,10}}-)?(?=[a-z_-]*[A-Z0-9])[A-Za-z0-9_-]{{20,}}",
    "google-api-key": rf"{_URLSAFE_BEFORE}AIza[A-Za-z0-9_-]{{35}}{_URLSAFE_AFTER}",
    "stripe-key": rf"{_ALNUM_BEFORE}(?:sk|rk)_live_[A-Za-z0-9]{{24,}}",
    "npm-token": rf"{_ALNUM_BEFORE}npm_[A-Za-z0-9]{{36}}{_ALNUM_AFTER}",
    "jwt": rf"{_URLSAFE_BEFORE}eyJ[A-Za-z0-9_-]{{10,}}\.ey[A-Za-z0-9_-]{{10,}}\.[A-Za-z0-9_-]*",
}

# Rule id -> compiled regex; the order is the tie-break when two rules match the same region.
RULES: Final[Mapping[str, re.Pattern[str]]] = {rule: re.compile(source) for rule, source in _RULE_SOURCES.items()}

# A rule runs only if one of its literals is in the text (``in`` is far cheaper than a regex scan); the
# case-insensitive AWS secret rule is checked against the lowercased text.
_LITERALS: Final[Mapping[str, tuple[str, ...]]] = {
    "private-key": ("PRIVATE KEY",),
    "aws-access-key-id": ("A",),
    "aws-secret-access-key": ("secret",),
    "github-token": ("gh", "github_pat_"),
    "gitlab-token": ("gl",),
    "slack-token": ("xox", "xapp-"),
    "anthropic-key": ("sk-ant-",),
    "openai-key": ("sk-",),
    "google-api-key": ("AIza",),
    "stripe-key": ("_live_",),
    "npm-token": ("npm_",),
    "jwt": ("eyJ",),
}
_LOWERCASED: Final = frozenset({"aws-secret-access-key"})
_GROUP: Final = "secret"


def compile_extra(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Compile a policy's extra secret patterns. ``POLICY_VALUE_INVALID`` for a pattern that is not a valid
    regular expression or that matches the empty string (it would flag every position)."""
    return list(_compile_extra(tuple(patterns)))


@functools.lru_cache(maxsize=32)
def _compile_extra(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise AgentOpsError(
                "POLICY_VALUE_INVALID", f"secret pattern {index} ({pattern!r}) is not a valid regular expression: {exc}"
            ) from exc
        if regex.fullmatch("") is not None:
            raise AgentOpsError(
                "POLICY_VALUE_INVALID", f"secret pattern {index} ({pattern!r}) matches the empty string"
            )
        compiled.append(regex)
    return tuple(compiled)


def _span(match: re.Match[str]) -> tuple[int, int]:
    if _GROUP in match.re.groupindex and match.start(_GROUP) >= 0:
        return match.span(_GROUP)
    return match.span()


def _active_rules(text: str, extras: Sequence[re.Pattern[str]]) -> list[tuple[str, re.Pattern[str]]]:
    rules: list[tuple[str, re.Pattern[str]]] = []
    lowered: str | None = None
    for rule, regex in RULES.items():
        if rule in _LOWERCASED:
            lowered = text.lower() if lowered is None else lowered
            haystack = lowered
        else:
            haystack = text
        if any(literal in haystack for literal in _LITERALS[rule]):
            rules.append((rule, regex))
    rules.extend((f"policy-{index}", regex) for index, regex in enumerate(extras))
    return rules


# A match: (start, -length, rule order, rule) -- sorting puts the earliest, then longest, then first rule first.
_Match = tuple[int, int, int, str]


def _merge(matches: list[_Match]) -> list[tuple[int, int, str]]:
    regions: list[tuple[int, int, str]] = []
    for start, negative_length, _order, rule in sorted(matches):
        end = start - negative_length
        if regions and start < regions[-1][1]:
            last_start, last_end, last_rule = regions[-1]
            regions[-1] = (last_start, max(last_end, end), last_rule)
        else:
            regions.append((start, end, rule))
    return regions


def _inside(regions: list[tuple[int, int, str]], start: int, end: int) -> bool:
    index = bisect.bisect_right(regions, start, key=lambda region: region[0]) - 1
    return index >= 0 and end <= regions[index][1]


def _regions(text: str, extra_patterns: Sequence[str]) -> list[tuple[int, int, str]]:
    """Merged, sorted ``(start, end, rule)`` regions of ``text`` that hold a secret.

    Found to a fixed point on a masked copy (found regions blanked with spaces, so positions stay those of
    ``text``): blanking a secret lets a neighbour that touched it pass its boundary check, as it will once
    redacted. A later pass only counts a match that reaches outside the regions already found, so it ends.
    """
    extras = compile_extra(extra_patterns)
    matches: list[_Match] = []
    regions: list[tuple[int, int, str]] = []
    masked = text
    while True:
        found = False
        for order, (rule, regex) in enumerate(_active_rules(masked, extras)):
            for match in regex.finditer(masked):
                start, end = _span(match)
                if end > start and not _inside(regions, start, end):
                    matches.append((start, start - end, order, rule))
                    found = True
        if not found:
            return regions
        regions = _merge(matches)
        pieces = []
        position = 0
        for start, end, _rule in regions:
            pieces += [text[position:start], " " * (end - start)]
            position = end
        masked = "".join([*pieces, text[position:]])


def find_secrets(text: str, extra_patterns: Sequence[str] = ()) -> list[Finding]:
    """Every secret-shaped region of ``text``, in order, each reported once. ``POLICY_VALUE_INVALID`` for a bad
    extra pattern."""
    findings = []
    line, line_start, position = 1, 0, 0
    for start, end, rule in _regions(text, extra_patterns):
        newlines = text.count("\n", position, start)
        if newlines:
            line += newlines
            line_start = text.rfind("\n", position, start) + 1
        position = start
        findings.append(Finding(rule, line, start - line_start + 1, end - start))
    return findings


def redact(text: str, extra_patterns: Sequence[str] = ()) -> str:
    """``text`` with every secret-shaped region replaced by ``[REDACTED:<rule>]``.

    An extra pattern that matches the marker itself (``REDACTED``) is not re-applied to it.
    """
    pieces = []
    position = 0
    for start, end, rule in _regions(text, extra_patterns):
        pieces += [text[position:start], f"[REDACTED:{rule}]"]
        position = end
    return "".join([*pieces, text[position:]])
