"""Integration end to end: publish by CAS, receipts CI can verify, contention, conflicts, crash at every step."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from ..conftest import git, make_repo
from ..helpers import HANDOFF, allowed_signer, child, reviewers, simple_child, ssh_key, write_step
from ..runkit import CHECK_PY, cli, events, recipe, status, trust, verify_receipts, wait_for, wait_supervisor_gone

REVIEWERS = reviewers("reviewer-a", "reviewer-b")
POLICY = """version = 1
[run]
target = "main"
max_workers = 3
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
[hosts.reviewer-a]
kind = "scripted"
[hosts.reviewer-b]
kind = "scripted"
[review]
required = 2
reviewers = ["reviewer-a", "reviewer-b"]
[receipts]
allowed_signers = ".agentops/allowed_signers"
require_signature = true
"""
SLOW_CHECK = CHECK_PY.replace(
    "import pathlib, sys",
    "import pathlib, sys, time\nif pathlib.Path('SLOW').exists(): time.sleep(float(pathlib.Path('SLOW').read_text()))",
)


def signed_project(root: Path, *, check: str = CHECK_PY) -> tuple[Path, Path]:
    key = ssh_key(root / "key", comment="ci")
    repo = make_repo(
        root / "repo",
        files={
            "check.py": check,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": POLICY,
            ".gitignore": "__pycache__/\n",
            ".agentops/allowed_signers": allowed_signer("ci@example", key),
        },
    )
    git(repo, "config", "agentops.signingKey", str(key))
    trust(repo)
    return repo, repo / ".agentops" / "allowed_signers"


def _start(repo: Path, recipe_path: Path, *, env: dict[str, str] | None = None, detach: bool = True) -> str:
    args = ["git", "agentops-run", "start", "--goal", "Build the parts", "--recipe", str(recipe_path), "--json"]
    if detach:
        args.append("--detach")
    done = subprocess.run(
        args, cwd=repo, capture_output=True, text=True, timeout=180, check=False, env={**os.environ, **(env or {})}
    )
    assert done.returncode in (0, 1), done.stderr
    return str(json.loads(done.stdout)["runId"])


def _verify(repo: Path, spec: str, *extra: str) -> tuple[int, dict[str, object]]:
    done = verify_receipts(repo, spec, "--json", *extra)
    return done.returncode, json.loads(done.stdout) if done.stdout else {"stderr": done.stderr}


@pytest.mark.slow
def test_end_to_end_target_moves_by_exactly_the_candidate_with_a_verifiable_receipt(tmp_path: Path) -> None:
    repo, signers = signed_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    path = recipe(
        tmp_path,
        simple_child("a", "src/a.txt")
        + simple_child("b", "src/b.txt", ["a"])
        + simple_child("c", "src/c.txt")
        + REVIEWERS,
        finalize=True,
    )
    run_id = _start(repo, path, detach=False)
    doc = status(repo, run_id)
    assert doc["status"] == "complete", doc
    candidate = doc["integration"]["candidate"]
    assert git(repo, "rev-parse", "main") == candidate
    assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/candidate") == candidate
    chain = git(repo, "rev-list", "--first-parent", f"{base}..main").split()
    assert len(chain) == 3 and git(repo, "rev-parse", f"{chain[-1]}^1") == base  # one merge per delivery, on base
    note = json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", candidate))
    statement = json.loads(base64.b64decode(note["payload"]))
    assert statement["subject"][0]["digest"] == {
        "gitCommit": candidate,
        "gitTree": git(repo, "rev-parse", "main^{tree}"),
    }
    order = statement["predicate"]["integration"]["value"]["order"]
    titles = {t["taskId"]: t["title"] for t in doc["tasks"]}
    assert [titles[t] for t in order] == ["Part A", "Part B", "Part C"]  # dependency order, ties by plan order
    assert [r["verdict"] for r in doc["integration"]["reviews"]] == ["approve", "approve"]
    code, result = _verify(repo, "main", "--allowed-signers", str(signers), "--require-signature")
    assert code == 0 and result["ok"] is True
    assert _verify(repo, f"{base}..main")[0] == 0  # the range: every integration merge is covered
    (tmp_path / "other_signers").write_text(allowed_signer("x", ssh_key(tmp_path / "other")))
    code, result = _verify(repo, "main", "--allowed-signers", str(tmp_path / "other_signers"))
    assert code == 1 and result["verdicts"][0]["code"] == "RECEIPT_UNTRUSTED_SIGNER"  # type: ignore[index]
    assert not any(Path(w["worktree"]).exists() for w in doc["workers"])  # worktrees removed...
    assert git(repo, "for-each-ref", f"refs/agentops/runs/{run_id}/deliveries/").count("\n") == 2  # ...refs kept
    git(repo, "fsck", "--strict")


@pytest.mark.slow
def test_the_receipt_records_every_agents_sandbox_level_and_meets_require_sandbox_namespace(tmp_path: Path) -> None:
    """Invariant: on a machine that gives namespaces (this one), every delivery and review of the receipt, and the
    receipt as a whole, say ``namespace``, and CI's ``--require-sandbox namespace`` accepts it."""
    repo, signers = signed_project(tmp_path)
    path = recipe(tmp_path, simple_child("a", "src/a.txt") + simple_child("b", "src/b.txt") + REVIEWERS, finalize=True)
    run_id = _start(repo, path, detach=False)
    doc = status(repo, run_id)
    assert doc["status"] == "complete", doc
    assert [w["sandbox"] for w in doc["workers"]] == ["namespace"] * 3  # the coordinator and both children
    note = json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", "main"))
    predicate = json.loads(base64.b64decode(note["payload"]))["predicate"]
    assert predicate["sandbox"] == "namespace"
    assert [d["sandbox"] for d in predicate["deliveries"]["value"]] == ["namespace", "namespace"]
    assert [r["sandbox"] for r in predicate["reviews"]["value"]] == ["namespace", "namespace"]
    code, result = _verify(repo, "main", "--allowed-signers", str(signers), "--require-sandbox", "namespace")
    assert code == 0 and result["ok"] is True, result


@pytest.mark.slow
def test_receipt_copied_or_tampered_and_lost_receipts_are_reported(tmp_path: Path) -> None:
    repo, signers = signed_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    run_id = _start(repo, recipe(tmp_path, simple_child("a", "src/a.txt") + REVIEWERS, finalize=True), detach=False)
    assert status(repo, run_id)["status"] == "complete"
    note = git(repo, "notes", "--ref=agentops/receipts", "show", "main")
    # copied onto another commit
    git(repo, "commit", "-q", "--allow-empty", "-m", "someone else")
    git(repo, "notes", "--ref=agentops/receipts", "add", "-m", note, "main")
    code, result = _verify(repo, "main", "--allowed-signers", str(signers))
    assert code == 1 and result["verdicts"][0]["code"] == "RECEIPT_SUBJECT_MISMATCH"  # type: ignore[index]
    # tampered payload (the goal) under the original signature
    git(repo, "reset", "-q", "--hard", "main~1")
    doc = json.loads(note)
    statement = json.loads(base64.b64decode(doc["payload"]))
    statement["predicate"]["goal"]["value"] = "something else"
    doc["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    git(repo, "notes", "--ref=agentops/receipts", "add", "-f", "-m", json.dumps(doc), "main")
    code, result = _verify(repo, "main", "--allowed-signers", str(signers))
    assert code == 1 and result["verdicts"][0]["code"] == "RECEIPT_SIGNATURE_INVALID"  # type: ignore[index]
    # a delivery merged by hand on top (a re-merge without a receipt) is reported in a range
    git(repo, "notes", "--ref=agentops/receipts", "add", "-f", "-m", note, "main")
    delivery = git(repo, "for-each-ref", "--format=%(objectname)", f"refs/agentops/runs/{run_id}/deliveries/")
    git(repo, "merge", "-q", "--no-ff", "-m", "re-merge by hand", "--allow-unrelated-histories", delivery, check=False)
    git(repo, "commit", "-q", "--allow-empty", "-m", "hand merge")
    side = git(repo, "commit-tree", "main^{tree}", "-p", "main", "-p", delivery, "-m", "hand-made integration")
    git(repo, "update-ref", "refs/heads/main", side)
    code, result = _verify(repo, f"{base}..main", "--allowed-signers", str(signers))
    codes = [v["code"] for v in result["verdicts"]]  # type: ignore[attr-defined]
    assert code == 1 and codes[0] == "RECEIPT_MISSING" and codes[-1] is None


@pytest.mark.slow
def test_target_moved_during_integration_is_rebuilt_reverified_and_keeps_the_other_commit(tmp_path: Path) -> None:
    repo, _ = signed_project(tmp_path, check=SLOW_CHECK)
    slow = child(
        "s", "Slow", [[write_step("SLOW", "2"), write_step("src/s.txt", "s\n"), '{ commit = "Add s" }', HANDOFF]]
    )
    run_id = _start(repo, recipe(tmp_path, slow + simple_child("a", "src/a.txt") + REVIEWERS, finalize=True))
    wait_for(repo, run_id, lambda d: (d.get("integration") or {}).get("status") == "prepared", timeout=120)
    other = git(repo, "commit-tree", "main^{tree}", "-p", "main", "-m", "a commit by someone else")
    git(repo, "update-ref", "refs/heads/main", other)
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=120)
    assert doc["status"] == "complete", doc
    assert doc["integration"]["attempts"] == 2 and doc["integration"]["base"] == other
    assert git(repo, "merge-base", "--is-ancestor", other, "main", check=False) == ""  # the other commit survives
    assert _verify(repo, "main")[0] == 0
    assert [e["code"] for e in events(repo, run_id)].count("INTEGRATION_VERIFIED") == 2  # re-verified


@pytest.mark.slow
def test_an_integration_conflict_becomes_a_repair_task_and_the_run_publishes_both_sides(tmp_path: Path) -> None:
    """Invariant: a conflict between two deliveries is refused ``RUN_INTEGRATION_CONFLICT`` naming both tasks and
    the paths, and nothing is resolved by favouring a side: a repair task is planned, its worktree starts merging
    the conflicting delivery (conflict markers with both sides), its worker resolves and delivers, the coordinator
    finalizes again, and the target gets both sides with a receipt that verifies."""
    repo, signers = signed_project(tmp_path)
    before = git(repo, "rev-parse", "main")
    left = child("a", "Left", [[write_step("src/base.txt", "from left\n"), '{ commit = "left" }', HANDOFF]])
    both = "from left\nfrom right\n"
    right = child(
        "b",
        "Right",
        [[write_step("src/base.txt", "from right\n"), '{ commit = "right" }', HANDOFF]],
        repair=[
            [
                {"run": ["sh", "-c", "grep -c '^[<|=>]\\{7\\}' src/base.txt > markers.txt"]},
                write_step("src/base.txt", both),
                '{ commit = "keep both sides" }',
                HANDOFF,
            ]
        ],
    )
    run_id = _start(repo, recipe(tmp_path, left + right + REVIEWERS, finalize=True))
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    assert doc["status"] == "complete", doc["blocked"]
    failures = [
        e
        for e in events(repo, run_id)
        if e["code"] == "REQUEST_REFUSED" and e["data"]["code"] == "RUN_INTEGRATION_CONFLICT"
    ]
    assert len(failures) == 1 and "src/base.txt" in failures[0]["data"]["message"]
    originals = {t["taskId"] for t in doc["tasks"] if t["parent"] and not t["title"].startswith("Resolve")}
    assert len(originals) == 2 and all(task in failures[0]["data"]["message"] for task in originals)
    [fixer] = [t for t in doc["tasks"] if t["title"].startswith("Resolve the merge conflict of: ")]
    assert fixer["status"] == "delivered" and fixer["taskId"] in failures[0]["data"]["message"]
    assert git(repo, "show", "main:src/base.txt") == both.strip()
    assert git(repo, "show", "main:markers.txt") == "4"  # ours, the merge base, theirs: both sides were shown
    [b] = [t for t in doc["tasks"] if t["title"] == "Right"]
    repaired = git(repo, "rev-parse", f"{fixer['delivery']}^2")
    assert repaired == b["delivery"]  # the repair is the conflicting delivery merged, not a rewrite
    assert [e["code"] for e in events(repo, run_id)].count("TASK_REPAIR_PLANNED") == 1
    assert git(repo, "merge-base", "--is-ancestor", before, "main", check=False) == ""
    verdict = _verify(repo, f"{before}..main", "--allowed-signers", str(signers))
    assert verdict[0] == 0, verdict


STEPS = [
    "delivery:verified",
    "delivery:noted",
    "delivery:frozen",
    "integration:prepared",
    "integration:verified",
    "integration:reviewed",
    "integration:moved",
    "integration:published",
    "integration:receipted",
]


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_kill_9_after_each_step_then_resume_moves_the_target_once_with_a_receipt(tmp_path: Path, step: str) -> None:
    """Invariant: after a crash at any step and a resume, the target moved exactly once and carries a receipt."""
    repo, signers = signed_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    run_id = _start(
        repo,
        recipe(
            tmp_path, simple_child("a", "src/a.txt") + simple_child("b", "src/b.txt", ["a"]) + REVIEWERS, finalize=True
        ),
        env={"AGENTOPS_FAULT": step},
    )
    wait_supervisor_gone(repo, run_id)  # killed by the fault injection
    assert "fault injection" in (repo / ".git" / "agentops" / "runs" / run_id / "supervisor.log").read_text()
    moved = git(repo, "rev-parse", "main") != base
    has_receipt = git(repo, "notes", "--ref=agentops/receipts", "list", "main", check=False) != ""
    assert moved == (step in ("integration:moved", "integration:published", "integration:receipted"))
    resumed = cli(repo, "agentops-run", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=120)
    assert doc["status"] == "complete", doc
    chain = git(repo, "rev-list", "--first-parent", f"{base}..main").split()
    assert len(chain) == 2  # the target moved once: one merge per delivery on top of the base
    assert git(repo, "rev-parse", "main") == doc["integration"]["candidate"]
    assert _verify(repo, "main", "--allowed-signers", str(signers), "--require-signature")[0] == 0
    assert has_receipt == (step == "integration:receipted")  # before the resume: a receipt only once receipted
    assert git(repo, "status", "--porcelain") == ""  # the checkout of main followed: never the move reversed, staged
    # fsck once the supervisor is gone: "complete" is written before it removes the workers' worktrees, and a
    # worktree half removed (its HEAD still listed, its quarantined objects already deleted) reads as missing
    wait_supervisor_gone(repo, run_id)
    git(repo, "fsck", "--strict")
