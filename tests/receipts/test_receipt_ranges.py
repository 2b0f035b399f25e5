"""``git agentops-receipt verify`` over ranges fails closed, and takes its rules from the trusted side.

Why: the verifier is the authority when hooks are bypassed. Each test below is one way an attacker (or a careless
push) got a range or a commit past it before: receipts and delivery notes removed together, a plain commit on the
target, an unsigned receipt under a pinned signers file, a commit that adds its own key to ``allowed_signers`` or
deletes the policy. Every case is a real repository with real merges, real SSH signatures and the real CLI.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_agentops.receipts import make_receipt

from ..conftest import git, make_repo
from ..helpers import allowed_signer, ssh_key
from .test_receipts import World, _commit, _reseal, _statement, merge_two

POLICY = 'version = 1\n[receipts]\nallowed_signers = ".agentops/allowed_signers"\nrequire_signature = true\n'


@dataclass
class Target:
    """A target branch with one receipted integration (two merges) on top of ``base``."""

    world: World
    base: str  # the range's base: the policy there is what the range is judged by

    @property
    def repo(self) -> Path:
        return self.world.repo


def _target(tmp_path: Path, *, extra_policy: str = "", before: Any = None, signer: str = "key") -> Target:
    """``before(repo, keys)`` may commit on main before the integration (what an attacker slips in)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    key, other = ssh_key(keys / "key"), ssh_key(keys / "other")
    repo = make_repo(
        tmp_path / "repo",
        files={
            ".agentops/policy.toml": POLICY + extra_policy,
            ".agentops/allowed_signers": allowed_signer("alice", key),
        },
    )
    base = git(repo, "rev-parse", "HEAD")
    if before is not None:
        before(repo, {"key": key, "other": other})
    start = git(repo, "rev-parse", "HEAD")
    d1, d2, m1, m2 = merge_two(repo, start)
    world = World(repo, start, d1, d2, m1, m2, key, other, keys / "allowed_signers")
    (keys / "allowed_signers").write_text(allowed_signer("alice", key))
    signing = {"key": [key], "other": [other], "none": []}[signer]
    _attach(repo, m2, make_receipt(_statement(world), keys=signing))
    return Target(world, base)


def _attach(repo: Path, commit: str, receipt: bytes) -> None:
    note = repo.parent / "receipt.json"
    note.write_bytes(receipt)
    git(repo, "notes", "--ref=agentops/receipts", "add", "-f", "-F", str(note), commit)


def _verify(repo: Path, spec: str, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        ["git", "agentops-receipt", "verify", spec, "--json", *extra],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)["verdicts"]


def _codes(verdicts: list[dict[str, Any]]) -> list[tuple[bool, str | None]]:
    return [(v["ok"], v["code"]) for v in verdicts]


def test_the_honest_range_and_commit_verify(tmp_path: Path) -> None:
    t = _target(tmp_path)
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 0 and _codes(verdicts) == [(True, None)]
    assert _verify(t.repo, "main")[0] == 0
    assert _verify(t.repo, "main", "--allowed-signers", str(t.world.allowed))[0] == 0


def test_removing_the_receipt_and_the_delivery_notes_fails_the_range(tmp_path: Path) -> None:
    """Before: "no integrated commit in that range", exit 0."""
    t = _target(tmp_path)
    git(t.repo, "notes", "--ref=agentops/receipts", "remove", "main")
    git(t.repo, "update-ref", "-d", "refs/notes/agentops/deliveries")
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 1
    assert _codes(verdicts) == [(False, "RECEIPT_MISSING")] * 3  # m2, m1, and: nothing in the range is covered
    assert "no commit of" in verdicts[-1]["message"]


def test_an_empty_range_is_not_a_pass(tmp_path: Path) -> None:
    t = _target(tmp_path)
    code, verdicts = _verify(t.repo, "main..main")
    assert code == 1 and _codes(verdicts) == [(False, "RECEIPT_MISSING")]


def test_a_plain_commit_after_a_receipted_merge_fails_unless_plain_commits_are_allowed(tmp_path: Path) -> None:
    """Before: only merges whose second parent had a delivery note were looked at."""
    t = _target(tmp_path)
    plain = _commit(t.repo, "hotfix.txt", "pushed by hand\n")
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 1 and _codes(verdicts) == [(False, "RECEIPT_MISSING"), (True, None)]
    assert verdicts[0]["commit"] == plain
    code, verdicts = _verify(t.repo, f"{t.base}..main", "--allow-plain-commits")
    assert code == 0 and _codes(verdicts) == [(True, "RECEIPT_NOT_COVERED"), (True, None)]


def test_the_base_policy_may_allow_plain_commits(tmp_path: Path) -> None:
    t = _target(tmp_path, extra_policy='plain_commits = "allow"\n')
    _commit(t.repo, "hotfix.txt", "pushed by hand\n")
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 0 and _codes(verdicts) == [(True, "RECEIPT_NOT_COVERED"), (True, None)]
    only_plain = git(t.repo, "rev-parse", "main~1")
    assert _verify(t.repo, f"{only_plain}..main")[0] == 1  # still: a range with nothing covered fails


def test_a_pinned_signers_file_requires_a_signature(tmp_path: Path) -> None:
    """Before: --allowed-signers without --require-signature accepted an unsigned forged receipt."""
    t = _target(tmp_path, signer="none")
    code, verdicts = _verify(t.repo, "main", "--allowed-signers", str(t.world.allowed))
    assert code == 1 and _codes(verdicts) == [(False, "RECEIPT_SIGNATURE_INVALID")]
    assert _verify(t.repo, "main", "--allowed-signers", str(t.world.allowed), "--allow-unsigned")[0] == 0


def _add_attacker_key(repo: Path, keys: dict[str, Path]) -> None:
    signers = repo / ".agentops" / "allowed_signers"
    signers.write_text(signers.read_text() + allowed_signer("mallory", keys["other"]))
    git(repo, "commit", "-q", "-am", "trust mallory")


def test_a_commit_adding_its_own_key_to_the_signers_does_not_vouch_for_the_receipts_after_it(tmp_path: Path) -> None:
    """Before: without a pin, the signers were read from the commit being verified."""
    t = _target(tmp_path, before=_add_attacker_key, signer="other")
    code, verdicts = _verify(t.repo, f"{t.base}..main", "--allow-plain-commits")
    assert code == 1
    assert "RECEIPT_UNTRUSTED_SIGNER" in {v["code"] for v in verdicts if not v["ok"]}, verdicts
    changed = [v for v in verdicts if v["code"] == "RECEIPT_POLICY_CHANGED"]
    assert len(changed) == 1 and ".agentops/allowed_signers" in changed[0]["message"]


def _delete_policy(repo: Path, keys: dict[str, Path]) -> None:
    git(repo, "rm", "-q", ".agentops/policy.toml")
    git(repo, "commit", "-q", "-m", "no more policy")


def test_a_commit_deleting_the_policy_cannot_ship_an_unsigned_receipt(tmp_path: Path) -> None:
    t = _target(tmp_path, before=_delete_policy, signer="none")
    code, verdicts = _verify(t.repo, f"{t.base}..main", "--allow-plain-commits")
    assert code == 1 and (False, "RECEIPT_SIGNATURE_INVALID") in _codes(verdicts)
    assert any(v["code"] == "RECEIPT_POLICY_CHANGED" for v in verdicts)


def _integrate(t: Target, *, change: str | None, signer: Path | None) -> str:
    """One more integration of two deliveries on main -- the first changing ``change`` (a signers line to add) --
    receipted by ``signer`` (None: unsigned); returns its last merge."""
    repo, start = t.repo, git(t.repo, "rev-parse", "main")
    name = f"n{start[:6]}"
    git(repo, "checkout", "-q", "-b", f"{name}-1", start)
    if change is not None:
        signers = repo / ".agentops" / "allowed_signers"
        signers.write_text(signers.read_text() + change)
        git(repo, "commit", "-q", "-am", "trust another signer")
    else:
        _commit(repo, f"{name}-1.txt", "1\n")
    d1 = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", f"{name}-2", start)
    d2 = _commit(repo, f"{name}-2.txt", "2\n")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", d1, "-m", "agentops: merge task 1")
    m1 = git(repo, "rev-parse", "HEAD")
    git(repo, "merge", "-q", "--no-ff", d2, "-m", "agentops: merge task 2")
    m2 = git(repo, "rev-parse", "HEAD")
    world = World(repo, start, d1, d2, m1, m2, t.world.key, t.world.other_key, t.world.allowed)
    _attach(repo, m2, make_receipt(_statement(world), keys=[signer] if signer else []))
    return m2


def test_a_signer_added_by_a_receipted_integration_is_trusted_after_it(tmp_path: Path) -> None:
    """The legitimate way to add a signer: the change is integrated -- and receipted -- under the old rules."""
    t = _target(tmp_path)
    _integrate(t, change=allowed_signer("mallory", t.world.other_key), signer=t.world.key)
    _integrate(t, change=None, signer=t.world.other_key)
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 0 and _codes(verdicts) == [(True, None)] * 3, verdicts
    assert verdicts[0]["principals"] == ["mallory"]


def test_a_signer_added_by_an_integration_signed_by_that_signer_is_not_trusted(tmp_path: Path) -> None:
    t = _target(tmp_path)
    _integrate(t, change=allowed_signer("mallory", t.world.other_key), signer=t.world.other_key)
    _integrate(t, change=None, signer=t.world.other_key)
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 1
    failed = [v for v in verdicts if not v["ok"]]  # both receipts, and the steps they no longer cover
    assert [v["code"] for v in failed] == ["RECEIPT_UNTRUSTED_SIGNER"] * 4  # a step: why its receipt does not count
    assert [v.get("coveredBy") for v in failed] == [None, failed[0]["commit"], None, failed[2]["commit"]]
    assert any(v["code"] == "RECEIPT_POLICY_CHANGED" for v in verdicts)


def test_receipt_show_says_whether_each_verification_was_fresh_or_reused(tmp_path: Path) -> None:
    t = _target(tmp_path)
    statement = _statement(t.world)
    _reseal(
        statement,
        "verification",
        lambda v: [v[0], {**v[0], "commandId": "lint", "cached": True, "cachedFrom": "c" * 40}],
    )
    _attach(t.repo, t.world.m2, make_receipt(statement, keys=[t.world.key]))
    shown = subprocess.run(
        ["git", "agentops-receipt", "show", "main"], cwd=t.repo, capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert "verify tests: passed, fresh" in shown.stdout
    assert f"verify lint: passed, reused from {'c' * 12}" in shown.stdout


def test_a_long_range_reports_progress_and_json_output_stays_clean(tmp_path: Path) -> None:
    from git_agentops.clock import SystemClock
    from git_agentops.receipts.check import check

    repo = make_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    script = "".join(f"commit refs/heads/main\ncommitter A <a@b> 0 +0000\ndata 1\n{i % 10}\n" for i in range(300))
    first = f"commit refs/heads/main\ncommitter A <a@b> 0 +0000\ndata 1\nx\nfrom {base}\n"
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=first + script, text=True, check=True)
    heard: list[str] = []
    verdicts = check(repo, f"{base}..main", environ={}, clock=SystemClock(), allow_plain=True, progress=heard.append)
    assert heard == ["receipts: 250/301 commits checked", "receipts: 301/301 commits checked"]
    assert [v.code for v in verdicts].count("RECEIPT_NOT_COVERED") == 301
    code, _ = _verify(repo, f"{base}..main", "--allow-plain-commits")  # --json: no progress lines anywhere
    assert code == 1


def test_a_range_whose_receipt_is_unsigned_names_that_receipt_for_every_step_instead_of_calling_it_missing(
    tmp_path: Path,
) -> None:
    """Before: each merge step of an unsigned run said ``RECEIPT_MISSING ... no receipt covers it``, sending the
    reader looking for a receipt that is there; it is there and does not count, and the verdict says so."""
    t = _target(tmp_path, signer="none")
    m1, m2 = t.world.m1, t.world.m2
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    assert code == 1
    assert [(v["commit"], v["ok"], v["code"]) for v in verdicts[:2]] == [
        (m2, False, "RECEIPT_SIGNATURE_INVALID"),  # the receipt itself: unsigned where a signature is required
        (m1, False, "RECEIPT_SIGNATURE_INVALID"),  # its other step: the same reason, not "missing"
    ]
    assert "unsigned" in verdicts[0]["message"] and "agentops.signingKey" in verdicts[0]["message"]
    step = verdicts[1]
    assert step["coveredBy"] == m2 and "coveredBy" not in verdicts[0]
    assert f"merge step 1 of 2 of the receipt on {m2[:12]}" in step["message"], step["message"]
    assert "which does not count: the receipt is unsigned" in step["message"], step["message"]
    assert "no receipt covers" not in " ".join(v["message"] for v in verdicts)
    last = verdicts[-1]  # the range as a whole: nothing covered, and the receipt that does not count is named
    assert (last["code"], len(verdicts)) == ("RECEIPT_MISSING", 3)
    assert f"{m2[:12]} RECEIPT_SIGNATURE_INVALID" in last["message"], last["message"]
    human = subprocess.run(
        ["git", "agentops-receipt", "verify", f"{t.base}..main"],
        cwd=t.repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert human.returncode == 1
    assert f"FAIL {m1[:12]} error[RECEIPT_SIGNATURE_INVALID]: {m1[:12]} is merge step 1 of 2" in human.stdout


def test_a_commit_an_invalid_receipt_does_not_name_is_still_missing(tmp_path: Path) -> None:
    """The invalid receipt explains only its own steps: a plain commit below it stays ``RECEIPT_MISSING``."""
    plain: list[str] = []

    def before(repo: Path, keys: dict[str, Path]) -> None:
        plain.append(_commit(repo, "hotfix.txt", "pushed by hand\n"))

    t = _target(tmp_path, before=before, signer="none")
    code, verdicts = _verify(t.repo, f"{t.base}..main")
    by_commit = {v["commit"]: v for v in verdicts[:-1]}
    assert code == 1 and by_commit[plain[0]]["code"] == "RECEIPT_MISSING"
    assert "coveredBy" not in by_commit[plain[0]]
    assert by_commit[t.world.m1]["coveredBy"] == t.world.m2
