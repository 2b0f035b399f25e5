"""Deliveries are scanned for secrets before verification: what ``--no-verify`` skipped, the supervisor still refuses.

The unit tests build real commits and scan them with :func:`scan_delivery`; the run has a child commit a freshly
made private key with ``git commit --no-verify`` and hand it off.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from git_agentops.errors import CODES
from git_agentops.gitstore.repo import Store
from git_agentops.integrate import secrets
from git_agentops.integrate.secrets import Finding, path_rule, scan_delivery, secrets_refusal
from git_agentops.model.policy import DEFAULT_SECRET_PATHS, Policy, effective
from git_agentops.runs.jobs import Request
from git_agentops.verify.credentials import HeldSecrets

from ..conftest import commit_files, git
from ..helpers import HANDOFF, child, commit_step, recipe_text, simple_child, ssh_key, write_step
from ..runkit import (
    UNCONFINED,
    children_settled,
    cli,
    events,
    project,
    recipe,
    refs,
    start,
    stop,
    supervisor_log,
    wait_for,
)

TOKEN = "ghp_" + "Q" * 36


def _scan(store: Store, base: str, head: str, **kwargs: object) -> list[tuple[str, str, int | None]]:
    options: dict[str, object] = {"patterns": (), "path_rules": DEFAULT_SECRET_PATHS, **kwargs}
    found = scan_delivery(store, base, head, **options)  # type: ignore[arg-type]
    return [(f.path, f.rule, f.line) for f in found]


def _private_key(tmp_path: Path) -> str:
    return ssh_key(tmp_path / "made_key").read_text()


def test_a_pem_private_key_in_a_text_file_is_found_with_its_line(tmp_path: Path, repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"src/config.txt": "name = demo\n\n" + _private_key(tmp_path)})
    assert _scan(store, base, head) == [("src/config.txt", "private-key", 3)]


def test_an_ssh_key_file_is_found_by_name_and_content_and_its_public_half_is_not(
    tmp_path: Path, repo_path: Path, store: Store
) -> None:
    key = ssh_key(tmp_path / "id_ed25519")
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(
        repo_path,
        {".ssh/id_ed25519": key.read_text(), ".ssh/id_ed25519.pub": key.with_suffix(".pub").read_text()},
    )
    assert _scan(store, base, head) == [
        (".ssh/id_ed25519", "file name matches 'id_*'", None),
        (".ssh/id_ed25519", "private-key", 1),
    ]


def test_a_p12_bundle_is_found_by_name_though_binary(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"certs/client.P12": os.urandom(2048), "certs/readme.md": "how to rotate\n"})
    assert _scan(store, base, head) == [("certs/client.P12", "file name matches '*.p12'", None)]


def test_a_policy_deny_pattern_is_a_rule_too(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"notes.md": "ok\nticket internal-123456 here\n"})
    assert _scan(store, base, head, patterns=("internal-[0-9]{6}",)) == [("notes.md", "policy-0", 2)]
    assert _scan(store, base, head) == []


def test_a_clean_diff_has_no_findings(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"src/app.py": "def key():\n    return 'risk-free task-1234'\n", "id.txt": "x\n"})
    assert _scan(store, base, head) == []
    assert _scan(store, head, head) == []  # a no-change delivery adds nothing


def test_a_secret_in_a_file_marked_binary_is_still_found(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {".gitattributes": "*.bin binary\n*.dat -diff -text\n"})
    head = commit_files(repo_path, {"blob.bin": b"\x00\x01\xff" * 100 + TOKEN.encode() + b"\x00\xfe", "x.dat": b"\0ok"})
    assert _scan(store, base, head) == [("blob.bin", "github-token", 1)]


def test_a_secret_removed_by_a_later_commit_is_still_in_the_history(
    tmp_path: Path, repo_path: Path, store: Store
) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    added = commit_files(repo_path, {"deploy.txt": _private_key(tmp_path)}, "add")
    git(repo_path, "rm", "-q", "deploy.txt")
    git(repo_path, "commit", "-q", "--no-verify", "-m", "remove")
    head = git(repo_path, "rev-parse", "HEAD")
    [finding] = scan_delivery(store, base, head, patterns=(), path_rules=DEFAULT_SECRET_PATHS)
    assert finding == Finding("deploy.txt", "private-key", 1, added[:12])


def test_a_secret_already_in_the_base_is_not_the_deliverys(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {"fixtures.py": f"FAKE = '{TOKEN}'\n"})
    head = commit_files(repo_path, {"fixtures.py": f"# test data\nFAKE = '{TOKEN}'\nOTHER = 1\n"})
    assert _scan(store, base, head) == []
    newer = commit_files(repo_path, {"fixtures.py": f"FAKE = '{TOKEN}'\nNEW = '{'ghp_' + 'R' * 36}'\n"})
    assert _scan(store, head, newer) == [("fixtures.py", "github-token", 2)]


def test_path_rules_negate_and_the_last_match_decides() -> None:
    assert path_rule("a/id_rsa", DEFAULT_SECRET_PATHS) == "id_*"
    assert path_rule("a/id_rsa.pub", DEFAULT_SECRET_PATHS) is None
    assert path_rule("tls/SERVER.PEM", DEFAULT_SECRET_PATHS) == "*.pem"
    assert path_rule("src/ident.py", DEFAULT_SECRET_PATHS) is None
    rules = ("*.pem", "!tests/fixtures/*.pem", "secrets/*")
    assert path_rule("tests/fixtures/ca.pem", rules) is None and path_rule("ca.pem", rules) == "*.pem"
    assert path_rule("secrets/token", rules) == "secrets/*" and path_rule("other/token", rules) is None


def test_a_blob_too_large_to_scan_is_reported_not_skipped(
    monkeypatch: pytest.MonkeyPatch, repo_path: Path, store: Store
) -> None:
    monkeypatch.setattr(secrets, "MAX_BLOB_BYTES", 1024)
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"data/big.csv": "a,b\n" * 1000, "small.txt": "fine\n"})
    [(path, rule, line)] = _scan(store, base, head)
    assert path == "data/big.csv" and rule.startswith("unscannable: 4000 bytes") and line is None


def _policy(guardrails: dict[str, object]) -> Policy:
    return Policy.from_effective(effective({"version": 1, "guardrails": guardrails}))


def test_the_refusal_names_paths_and_rules_never_values_and_scanning_can_be_off(
    tmp_path: Path, repo_path: Path, store: Store
) -> None:
    key = _private_key(tmp_path)
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"keys/deploy.key": key, f"{TOKEN}.txt": "named after a token\n", "a.txt": TOKEN})
    request = Request({"requestId": "r-1"}, "0" * 64, "1" * 64)
    refused = secrets_refusal(store, _policy({}), request, base=base, head=head)
    assert refused is not None and refused.code == "RUN_DELIVERY_SECRET" and CODES[refused.code].exit_status == 1
    assert "keys/deploy.key: file name matches '*.key'" in refused.message
    assert "keys/deploy.key:1: private-key" in refused.message and "a.txt:1: github-token" in refused.message
    assert "[REDACTED:github-token].txt: github-token in the path" in refused.message  # a path is published too
    body = [line for line in key.splitlines() if "PRIVATE KEY" not in line]
    assert TOKEN not in refused.message and not any(line in refused.message for line in body)
    assert TOKEN not in json.dumps(refused.detail) and refused.head == head
    assert secrets_refusal(store, _policy({"secret_scanning": False}), request, base=base, head=head) is None
    narrowed = _policy({"secret_paths": ["*.pem"], "deny_patterns": ["named after"]})
    again = secrets_refusal(store, narrowed, request, base=base, head=head)
    assert again is not None and "'*.key'" not in again.message and "policy-0" in again.message


# -- the secrets the supervisor holds ---------------------------------------------------------------------------------

HELD_TOKEN = "ghp_" + "k7Q2x" * 7 + "a"  # GITHUB_TOKEN in the person's environment
SERVICE_PASSWORD = "p@ss/w0rd: hunter2?"  # MY_SERVICE_PASSWORD: no shape any rule knows
HELD = HeldSecrets.from_environ(
    {"GITHUB_TOKEN": HELD_TOKEN, "MY_SERVICE_PASSWORD": SERVICE_PASSWORD, "PATH": "/usr/bin", "HOME": "/home/me"}
)


def _in_base64(value: str, offset: int) -> str:
    """``value`` inside a longer base64 text, starting ``offset`` bytes after a multiple of 3."""
    return base64.b64encode(b"prefix"[:offset] + b"padding!" * 3 + value.encode() + b" and more").decode()


def test_a_held_secret_is_found_plain_and_encoded_naming_the_variable_and_encoding(
    repo_path: Path, store: Store
) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    files: dict[str, str | bytes | None] = {
        "plain.txt": f"password = {SERVICE_PASSWORD}\n",
        "b64-0.txt": _in_base64(HELD_TOKEN, 0),
        "b64-1.txt": _in_base64(HELD_TOKEN, 1),
        "b64-2.txt": "data:\n" + _in_base64(HELD_TOKEN, 2),
        "hex.txt": HELD_TOKEN.encode().hex(),
        "url.txt": "https://svc.test/login?pw=" + urllib.parse.quote(SERVICE_PASSWORD, safe=""),
        "env.gz": gzip.compress(f"GITHUB_TOKEN={HELD_TOKEN}\n".encode()),
        "clean.txt": "nothing to see\n",
    }
    head = commit_files(repo_path, files)
    found = _scan(store, base, head, held=HELD)
    assert found == [
        ("b64-0.txt", "held-secret:GITHUB_TOKEN (base64)", 1),
        ("b64-1.txt", "held-secret:GITHUB_TOKEN (base64)", 1),
        ("b64-2.txt", "held-secret:GITHUB_TOKEN (base64)", 2),
        ("env.gz", "held-secret:GITHUB_TOKEN (gzip/plain)", None),
        ("hex.txt", "held-secret:GITHUB_TOKEN (hex)", 1),
        ("plain.txt", "held-secret:MY_SERVICE_PASSWORD (plain)", 1),
        ("url.txt", "held-secret:MY_SERVICE_PASSWORD (url-encoded)", 1),
    ]
    assert _scan(store, base, head) == []  # no rule knows their shapes: only holding them finds them


def test_a_held_secret_is_refused_without_its_value_and_a_clean_delivery_passes(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    request = Request({"requestId": "r-1"}, "0" * 64, "1" * 64)
    clean = commit_files(repo_path, {"src/app.py": "print('hello')\n"})
    assert secrets_refusal(store, _policy({}), request, base=base, head=clean, held=HELD) is None
    encoded = base64.b64encode(b"x" + HELD_TOKEN.encode()).decode()
    head = commit_files(repo_path, {"src/blob.txt": encoded, f"{encoded}.txt": "named after it\n"})
    refused = secrets_refusal(store, _policy({}), request, base=base, head=head, held=HELD)
    assert refused is not None and refused.code == "RUN_DELIVERY_SECRET"
    assert "src/blob.txt:1: held-secret:GITHUB_TOKEN (base64)" in refused.message
    assert "held-secret:GITHUB_TOKEN (base64) in the path" in refused.message
    assert "supervisor's environment" in refused.message
    shown = refused.message + json.dumps(refused.detail)
    assert HELD_TOKEN not in shown and encoded not in shown and encoded[4:40] not in shown


# -- a real run ------------------------------------------------------------------------------------------------------

KEYGEN = {"run": ["sh", "-c", "mkdir -p deploy && ssh-keygen -q -t ed25519 -N '' -C agent -f deploy/id_ed25519"]}
ADD = {"run": ["git", "add", "-A"]}
NO_VERIFY = {"run": ["git", "commit", "-q", "--no-verify", "-m", "Add the deploy key"]}


@pytest.mark.slow
def test_a_key_committed_with_no_verify_is_refused_and_never_delivered(tmp_path: Path) -> None:
    repo = project(tmp_path)
    keyed = child("k", "Keyed", [[KEYGEN, ADD, NO_VERIFY, HANDOFF], [HANDOFF]])
    run_id = start(repo, recipe(tmp_path, keyed + simple_child("o", "src/o.txt", title="Other")))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        tasks = {t["title"]: t for t in doc["tasks"] if t["parent"]}
        assert tasks["Other"]["status"] == "delivered"
        assert tasks["Keyed"]["status"] == "blocked" and "RUN_DELIVERY_SECRET" in tasks["Keyed"]["blockedReason"]
        refusals = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
        secret = [r for r in refusals if r["code"] == "RUN_DELIVERY_SECRET"]
        assert len(secret) == 2, refusals  # the first handoff, and the same commit handed off again
        message = secret[0]["message"]
        assert "deploy/id_ed25519: file name matches 'id_*'" in message
        assert "deploy/id_ed25519:1: private-key" in message and "id_ed25519.pub" not in message
        commit = git(repo, "rev-parse", re.match(r"[0-9a-f]{12}", message).group())  # type: ignore[union-attr]
    finally:
        stop(repo, run_id)
    delivered = refs(repo, f"refs/agentops/runs/{run_id}/deliveries/")
    assert list(delivered.values()) == [tasks["Other"]["delivery"]] and commit not in delivered.values()
    assert git(repo, "notes", "--ref=agentops/evidence", "show", commit, check=False) == ""  # never verified
    key = git(repo, "show", f"{commit}:deploy/id_ed25519")
    body = [line for line in key.splitlines() if line and "PRIVATE KEY" not in line]
    assert body
    shown = cli(repo, "agentops-run", "log", run_id).stdout + cli(repo, "agentops-run", "log", run_id, "--json").stdout
    recorded = shown + supervisor_log(repo, run_id) + _state_text(repo, run_id)
    assert "RUN_DELIVERY_SECRET" in shown
    assert not any(line in recorded for line in body)


def _dump_environment(path: Path) -> dict[str, list[str]]:
    code = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"
    return {"run": ["python3", "-c", code, str(path)]}


@pytest.mark.slow
def test_the_supervisors_token_is_kept_from_its_agents_and_its_base64_is_refused(tmp_path: Path) -> None:
    """The attack as found: a token exported before ``run start``, its base64 committed by a worker."""
    repo = project(tmp_path, extra_policy=UNCONFINED)  # unconfined: the agent writes its environment out here
    dumped = tmp_path / "agent-environment.json"
    leaked = _in_base64(HELD_TOKEN, 1)
    leaky = child(
        "l",
        "Leaky",
        [[_dump_environment(dumped), write_step("src/data.txt", leaked), commit_step("Add data"), HANDOFF], [HANDOFF]],
    )
    person = {"GITHUB_TOKEN": HELD_TOKEN, "MY_SERVICE_PASSWORD": SERVICE_PASSWORD}
    run_id = start(repo, recipe(tmp_path, leaky + simple_child("o", "src/o.txt", title="Other")), env=person)
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        tasks = {t["title"]: t for t in doc["tasks"] if t["parent"]}
        assert tasks["Other"]["status"] == "delivered"
        assert tasks["Leaky"]["status"] == "blocked" and "RUN_DELIVERY_SECRET" in tasks["Leaky"]["blockedReason"]
        refusals = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
        secret = [r for r in refusals if r["code"] == "RUN_DELIVERY_SECRET"]
        assert secret and "src/data.txt:1: held-secret:GITHUB_TOKEN (base64)" in secret[0]["message"], refusals
    finally:
        stop(repo, run_id)
    agent_env = json.loads(dumped.read_text())
    assert "GITHUB_TOKEN" not in agent_env and "MY_SERVICE_PASSWORD" not in agent_env
    assert HELD_TOKEN not in json.dumps(agent_env) and agent_env["AGENTOPS_WORKER_ID"]
    delivered = refs(repo, f"refs/agentops/runs/{run_id}/deliveries/")
    assert list(delivered.values()) == [tasks["Other"]["delivery"]]
    shown = cli(repo, "agentops-run", "log", run_id, "--json").stdout + supervisor_log(repo, run_id)
    assert HELD_TOKEN not in shown + _state_text(repo, run_id) and leaked not in shown


def _state_text(repo: Path, run_id: str) -> str:
    ref = f"refs/agentops/runs/{run_id}/state"
    names = git(repo, "ls-tree", "-r", "--name-only", ref).splitlines()
    done = subprocess.run(
        ["git", "log", "--format=%B", ref], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    )
    return "\n".join([*(git(repo, "show", f"{ref}:{name}") for name in names), done.stdout])


@pytest.mark.slow
def test_a_request_carrying_a_held_secret_is_refused_before_it_reaches_the_runs_state(tmp_path: Path) -> None:
    """Requests go into the run's state, which a shared remote gives to every clone: a question, a plan or a title
    holding a held value, in any encoding, is refused like a delivery holding it, and stored nowhere."""
    repo = project(tmp_path)
    leaked = _in_base64(HELD_TOKEN, 2)
    asker = child(
        "q",
        "Asker",
        [[{"question": f"is this right? {leaked}"}], [write_step("src/q.txt", "q\n"), commit_step("Add q"), HANDOFF]],
    )
    run_id = start(repo, recipe(tmp_path, asker), env={"GITHUB_TOKEN": HELD_TOKEN})
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        refusals = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
    finally:
        stop(repo, run_id)
    assert [t["status"] for t in doc["tasks"] if t["parent"]] == ["delivered"]
    held = [r for r in refusals if "held-secret:GITHUB_TOKEN (base64)" in r["message"]]
    assert held and held[0]["code"] == "RUN_REQUEST_INVALID", refusals
    stored = _state_text(repo, run_id).replace(recipe_text(asker, finalize=False), "")  # the test's own recipe
    assert leaked not in stored + supervisor_log(repo, run_id)
