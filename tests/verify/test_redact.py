"""Secret detection and redaction: every rule found and fully redacted, exact line and column, PEM blocks across
lines, policy patterns, no false positives on ordinary code, and the property that redacted text holds nothing
secret-shaped.

The samples are assembled at run time from pieces, so this file holds no secret-shaped literal itself (secret
scanners, including ours in the pre-commit hook, would rightly flag it).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_agentops.errors import AgentOpsError
from git_agentops.verify.redact import RULES, Finding, compile_extra, find_secrets, redact

B64_LINE = "MIIEowIBAAKCAQEA" + "x7Qp3Lk9Zr2Vb8Nc" * 3


def _pem(kind: str, *, headers: str = "", dashes: str = "-----", space: str = "") -> str:
    begin = f"{dashes}{space}BEGIN {kind}{space}{dashes}"
    end = f"{dashes}{space}END {kind}{space}{dashes}"
    return f"{begin}\n{headers}{B64_LINE}\n{B64_LINE}\nabcd==\n{end}"


def _whole(secret: str) -> tuple[str, str]:
    return secret, secret


# rule -> (the text to scan, the secret in it that must disappear)
SAMPLES: dict[str, tuple[str, str]] = {
    "private-key": (_pem("RSA PRIVATE KEY"), B64_LINE),
    "aws-access-key-id": _whole("AKIA" + "IOSFODNN7EXAMPLE"),
    "aws-secret-access-key": (
        "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY",
    ),
    "github-token": _whole("ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"),
    "gitlab-token": _whole("glpat-" + "xY3_kP9-mN2qR7sT4vW1"),
    "slack-token": _whole("xoxb-" + "1234567890123-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"),
    "anthropic-key": _whole("sk-" + "ant-api03-" + "Qw9_Er8-Ty7Ui6Op5As4Df3Gh2"),
    "openai-key": _whole("sk-" + "proj-" + "Ab3_dE6-gH9jK2mN5pQ8sT1vW4yZ7"),
    "google-api-key": _whole("AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    "stripe-key": _whole("sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
    "npm-token": _whole("npm_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7cF0iL3oR6"),
    "jwt": _whole(
        "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w"
    ),
}


def test_every_rule_has_a_sample() -> None:
    assert list(SAMPLES) == list(RULES)


def _leftovers(secret: str, text: str) -> list[str]:
    """Any 8-character piece of ``secret`` still in ``text``."""
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in text]


@pytest.mark.parametrize("rule", list(SAMPLES))
def test_each_rule_is_found_and_fully_redacted(rule: str) -> None:
    sample, secret = SAMPLES[rule]
    text = f"line one\n  value: {sample} # trailing\nlast"
    start = text.index(secret) if rule == "aws-secret-access-key" else text.index(sample)
    length = len(secret) if rule == "aws-secret-access-key" else len(sample)
    line = text.count("\n", 0, start) + 1
    column = start - text.rfind("\n", 0, start)
    assert find_secrets(text) == [Finding(rule, line, column, length)]
    redacted = redact(text)
    assert _leftovers(secret, redacted) == []
    assert redacted.startswith("line one\n  value: ") and redacted.endswith(" # trailing\nlast")
    assert f"[REDACTED:{rule}]" in redacted
    assert find_secrets(redacted) == []


def test_line_and_column_on_multiline_text() -> None:
    aws = SAMPLES["aws-access-key-id"][0]
    gh = SAMPLES["github-token"][0]
    npm = SAMPLES["npm-token"][0]
    text = f"first\n\n\tkey={aws} and {gh}\nπ→ {npm}\n"
    assert find_secrets(text) == [
        Finding("aws-access-key-id", 3, 6, 20),
        Finding("github-token", 3, 31, 40),
        Finding("npm-token", 4, 4, 40),  # columns count characters, not bytes
    ]
    assert redact(text) == (
        "first\n\n\tkey=[REDACTED:aws-access-key-id] and [REDACTED:github-token]\nπ→ [REDACTED:npm-token]\n"
    )


@pytest.mark.parametrize(
    "block",
    [
        _pem("RSA PRIVATE KEY", headers="Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0123456789ABCDEF\n\n"),
        _pem("OPENSSH PRIVATE KEY"),
        _pem("EC PRIVATE KEY"),
        _pem("DSA PRIVATE KEY"),
        _pem("PRIVATE KEY"),
        _pem("ENCRYPTED PRIVATE KEY"),
        _pem("PGP PRIVATE KEY BLOCK", headers="Version: GnuPG v2\nComment: test\n\n"),
        _pem("SSH2 ENCRYPTED PRIVATE KEY", dashes="----", space=" "),
        _pem("RSA PRIVATE KEY").replace("\n", "\r\n"),
        _pem("PRIVATE KEY").replace("\n", "\\n"),  # as in a JSON service-account file or a .env value
        _pem("PRIVATE KEY").replace("\n", "\n    "),  # indented in YAML
    ],
)
def test_private_key_block_spanning_lines(block: str) -> None:
    text = f"config loaded\nkey: {block}\nnext line\n"
    assert find_secrets(text) == [Finding("private-key", 2, 6, len(block))]
    assert redact(text) == "config loaded\nkey: [REDACTED:private-key]\nnext line\n"


def test_private_key_unterminated_and_not_keys() -> None:
    truncated = f"-----BEGIN RSA PRIVATE KEY-----\n{B64_LINE}\n{B64_LINE[:20]}"
    assert redact(f"out\n{truncated}") == "out\n[REDACTED:private-key]"
    cut = f"-----BEGIN RSA PRIVATE KEY-----\n{B64_LINE}\nTraceback (most recent call last):\n"
    assert redact(cut) == "[REDACTED:private-key]\nTraceback (most recent call last):\n"
    constant = 'HEADER = "-----BEGIN OPENSSH PRIVATE KEY-----"\nprint(HEADER)\n'
    assert find_secrets(constant) == [Finding("private-key", 1, 11, 35)]
    assert redact(constant) == 'HEADER = "[REDACTED:private-key]"\nprint(HEADER)\n'
    # two keys: the first block ends at its own END, the text between them survives
    two = f"{_pem('EC PRIVATE KEY')}\nbetween\n{_pem('PRIVATE KEY')}"
    assert redact(two) == "[REDACTED:private-key]\nbetween\n[REDACTED:private-key]"
    for public in ("CERTIFICATE", "PUBLIC KEY", "RSA PUBLIC KEY", "OPENSSH PUBLIC KEY", "PGP PUBLIC KEY BLOCK"):
        block = _pem(public)
        assert find_secrets(block) == [], public


def test_overlaps_are_reported_once_and_never_leave_a_piece() -> None:
    gh = SAMPLES["github-token"][0]
    # a token inside a key block: one region, the block's
    block = _pem("PRIVATE KEY").replace(B64_LINE, gh, 1)
    assert [f.rule for f in find_secrets(block)] == ["private-key"]
    # a policy pattern starting earlier and ending inside the token: merged, the earlier match names it
    text = f"token={gh} rest"
    assert find_secrets(text, [r"token=ghp_\w{4}"]) == [Finding("policy-0", 1, 1, 6 + len(gh))]
    assert redact(text, [r"token=ghp_\w{4}"]) == "[REDACTED:policy-0] rest"
    # the same region from a built-in and a policy pattern: the built-in rule comes first
    assert find_secrets(gh, [r"ghp_\w+"]) == [Finding("github-token", 1, 1, len(gh))]


def test_a_secret_hidden_by_its_neighbour_is_found_once_the_neighbour_is_blanked() -> None:
    google = SAMPLES["google-api-key"][0]
    block = _pem("EC PRIVATE KEY")
    # the '-' of the armour fails the Google key's boundary check; redacted, it would pass
    text = google + block
    assert [f.rule for f in find_secrets(text)] == ["google-api-key", "private-key"]
    assert redact(text) == "[REDACTED:google-api-key][REDACTED:private-key]"


def test_extra_patterns() -> None:
    text = "ok\ninternal: ACME-1234-5678 and token tok_abcdef\n"
    found = find_secrets(text, [r"ACME-\d{4}-\d{4}", r"token (?P<secret>tok_\w+)"])
    assert found == [Finding("policy-0", 2, 11, 14), Finding("policy-1", 2, 36, 10)]
    assert redact(text, [r"ACME-\d{4}-\d{4}", r"token (?P<secret>tok_\w+)"]) == (
        "ok\ninternal: [REDACTED:policy-0] and token [REDACTED:policy-1]\n"
    )
    # a pattern that matches the marker itself is applied once, not forever
    assert redact("a SECRET b", ["SECRET", "REDACTED"]) == "a [REDACTED:policy-0] b"
    assert [p.pattern for p in compile_extra(["a+", "b"])] == ["a+", "b"]
    assert compile_extra([]) == []


@pytest.mark.parametrize("pattern", ["(unclosed", "*", "[z-a]", "", "x*", "(?P<secret>a)?"])
def test_invalid_extra_patterns_are_refused(pattern: str) -> None:
    for call in (lambda: compile_extra(["fine", pattern]), lambda: find_secrets("text", ["fine", pattern])):
        with pytest.raises(AgentOpsError) as caught:
            call()
        assert caught.value.code == "POLICY_VALUE_INVALID"
        assert "secret pattern 1" in caught.value.message


ORDINARY_CODE = """
import os
import uuid

TASK_ID = "task-1234-abcd"
RUN = "run-9f8e7d6c5b4a39281706"
# risk-free: ask_user() before the disk-usage check; see ticket sk-1 and SK-42
CSS = ".sk-loading-spinner-container, .task-list-item-checkbox"
REQUEST_ID = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")
COMMIT = "9fceb02d0ae598e95dc970b74767f19372d61af8"
DIGEST = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJ"
    "RU5ErkJggg=="
)
secret_access_key = os.environ["AWS_SECRET_ACCESS_KEY"]
aws_secret_access_key: str | None = None
openai_key = os.environ.get("OPENAI_API_KEY", "sk-...")
if token.startswith(("ghp_", "github_pat_", "glpat-", "xoxb-", "sk_live_", "npm_", "AIza", "AKIA")):
    raise ValueError("looks like a token: xoxb-your-token-here")
HEADER = "eyJhbGciOiJIUzI1NiJ9"
PEM = "-----BEGIN CERTIFICATE-----"
def ask_user(question: str) -> str:
    return input(question)
"""

ORDINARY_JS = """
const taskId = `task-${crypto.randomUUID()}`;
const riskFree = items.filter((item) => item.kind === 'risk-free');
export async function askUser(prompt) {
  return await ui.ask_user({ prompt, id: 'a1b2c3d4-e5f6-7890-abcd-ef1234567890' });
}
const apiKey = process.env.OPENAI_API_KEY ?? '';
const sha = 'da39a3ee5e6b4b0d3255bfef95601890afd80709';
document.querySelector('#sk-toggle').classList.add('sk-visible-and-active-now');
"""


@pytest.mark.parametrize("source", [ORDINARY_CODE, ORDINARY_JS])
def test_no_false_positives_on_ordinary_code(source: str) -> None:
    assert find_secrets(source) == []
    assert redact(source) == source


def test_importing_redact_stays_light() -> None:
    code = (
        "import git_agentops.verify.redact, sys\n"
        "print(sorted(m for m in ('pygit2', 'jsonschema', 'dulwich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "hostile",
    [
        "xoxb-" * 40_000,
        "eyJ" * 100_000,
        "sk-" + "a" * 200_000,
        "-----BEGIN RSA PRIVATE KEY-----\n" * 5_000,
        "-----BEGIN RSA PRIVATE KEY-----" + "\nAAAA" * 50_000,
        "A" * 500_000,
        "secret_access_key:" * 30_000,
    ],
)
def test_no_pathological_backtracking(hostile: str) -> None:
    started = time.monotonic()
    redact(hostile)
    assert time.monotonic() - started < 5


NOISE = st.text(alphabet=st.sampled_from(list("aZ09 -_=./:+\n\"'\\[]")), max_size=12)
FRAGMENTS = st.sampled_from(
    [
        "AKIA",
        "sk-",
        "ghp_",
        "eyJ",
        "xoxb-",
        "\\n",
        "aws_secret_access_key=",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "REDACTED",
    ]
)
SECRETS = st.sampled_from([sample for sample, _secret in SAMPLES.values()])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(SECRETS, NOISE, FRAGMENTS), max_size=12))
def test_redacted_text_holds_nothing_secret_shaped(pieces: list[str]) -> None:
    text = "".join(pieces)
    redacted = redact(text)
    assert find_secrets(redacted) == []
    assert redact(redacted) == redacted
    if not find_secrets(text):
        assert redacted == text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(list(SAMPLES)), NOISE), max_size=8), st.sampled_from([" ", "\n", "\t"]))
def test_separated_secrets_never_survive(pieces: list[str], separator: str) -> None:
    text = separator.join(SAMPLES[piece][0] if piece in SAMPLES else piece for piece in pieces)
    redacted = redact(text)
    for piece in pieces:
        if piece in SAMPLES:
            assert _leftovers(SAMPLES[piece][1], redacted) == [], piece
