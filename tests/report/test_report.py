"""``git agentops-run report``: the Markdown and JSON of real scripted runs hold every task, generation, evidence
record, merge step, review finding and the receipt verdict -- and agent-provided text stays text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git
from ..helpers import HANDOFF, Part, child, commit_step, recipe_text, simple_child, write_step
from ..integrate.test_integration import signed_project
from ..runkit import children_settled, cli, command, project, recipe, start, stop, task_by_title, wait_for

HOSTILE = "Part <script>alert(\"x\")</script> & 'q'"
HOSTILE_GOAL = "Build the parts <b>now</b> & \"then\" 'test'"
FINDING = "<img src=x onerror=alert(1)> \"quoted\" & 'single'"
REVIEWED = Part(
    reviewers=(
        {"name": "reviewer-a", "verdict": "approve"},
        {
            "name": "reviewer-b",
            "verdict": "approve",
            "findings": [{"severity": "low", "message": FINDING, "blocking": False}],
        },
    )
)


def complete_run(tmp_path: Path) -> tuple[Path, str]:
    """A signed, reviewed, complete run: A (hostile title), B after A repaired once, C; returns (repo, run id)."""
    repo, _ = signed_project(tmp_path)
    repaired = child(
        "b",
        "Part B",
        [
            [write_step("src/b.txt", "BAD\n"), commit_step("Add b (bad)"), HANDOFF],
            [write_step("src/b.txt", "b\n"), commit_step("Fix b"), HANDOFF],
        ],
        ["a"],
    )
    parts = simple_child("a", "src/a.txt", title=HOSTILE) + repaired + simple_child("c", "src/c.txt") + REVIEWED
    path = tmp_path / "recipe.toml"
    path.write_text(recipe_text(parts, finalize=True))
    done = cli(repo, "agentops-run", "start", "--goal", HOSTILE_GOAL, "--recipe", str(path), "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    run_id = str(json.loads(done.stdout)["runId"])
    status = json.loads(command(repo, "agentops-run", "status", run_id, "--json").stdout)
    assert status["status"] == "complete", status
    return repo, run_id


def report_json(repo: Path, run_id: str) -> dict[str, Any]:
    done = command(repo, "agentops-run", "report", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def expected_generations(status: dict[str, Any]) -> set[str]:
    return {f"gen-{w['workerId']}-{n}" for w in status["workers"] for n in range(1, w["generation"] + 1)}


@pytest.mark.slow
def test_report_of_a_complete_run_holds_every_fact_in_markdown_and_json(tmp_path: Path) -> None:
    repo, run_id = complete_run(tmp_path)
    status = json.loads(command(repo, "agentops-run", "status", run_id, "--json").stdout)
    refs_before = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    doc = report_json(repo, run_id)
    done = cli(repo, "agentops-run", "report", run_id)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert git(repo, "for-each-ref", "--format=%(refname) %(objectname)") == refs_before  # reads only

    # goal, root criteria, every task with its dependencies
    assert doc["goal"] == HOSTILE_GOAL and doc["status"] == "complete"
    assert len(doc["root"]["criteria"]) == 2
    assert {t["taskId"] for t in doc["tasks"]} == {t["taskId"] for t in status["tasks"]}
    a, b = task_by_title(doc, HOSTILE), task_by_title(doc, "Part B")
    assert b["dependencies"] == [a["taskId"]]
    for task in doc["tasks"]:
        assert task["taskId"] in text and task["status"] == "delivered"

    # a timeline of every generation of every worker
    ids = {g["id"] for g in doc["generations"]}
    assert ids == expected_generations(status)
    assert all(g["id"] in text for g in doc["generations"])
    gens = {(g["taskId"], g["generation"]): g for g in doc["generations"]}
    failed, repaired = gens[(b["taskId"], 1)], gens[(b["taskId"], 2)]
    assert failed["outcome"] == "failed" and failed["code"] == "RUN_VERIFICATION_FAILED"
    assert failed["refusals"][0]["code"] == "RUN_VERIFICATION_FAILED"
    assert repaired["outcome"] == "delivered" and repaired["delivered"] == b["delivery"]["commit"]
    assert "Generation 1 failed (RUN_VERIFICATION_FAILED)" in (repaired["reason"] or "")
    assert repaired["startedAt"] >= failed["endedAt"] >= failed["startedAt"]
    coordinator = next(g for g in doc["generations"] if g["role"] == "coordinator")
    assert coordinator["outcome"] == "finalized"

    # evidence: exactly what each delivery names, the refused handoff's failing record, the gate's
    evidence = {e["id"]: e for e in doc["evidence"]}
    for task in doc["tasks"]:
        if task["parent"] is not None:
            named = {f"ev-{d}" for d in task["delivery"]["evidence"]}
            assert named and named <= set(evidence)
            assert all(evidence[n]["passed"] and evidence[n]["authentic"] for n in named)
    bad = [evidence[n] for n in failed["evidence"]]
    assert bad and not bad[0]["passed"] and bad[0]["tests"] is None and "bad: ['src/b.txt']" in bad[0]["tail"]
    assert bad[0]["commit"] == failed["handoffs"][0]["commit"] != b["delivery"]["commit"]
    gate = [e for e in doc["evidence"] if e["group"] == "gate"]
    assert gate and all(e["passed"] and e["commit"] == doc["integration"]["candidate"] for e in gate)
    assert all(e["durationMs"] is not None and e["cached"] in (True, False) for e in doc["evidence"])
    for name in evidence:
        assert name in text

    # the merge chain, reviews with findings, the receipt verdict, cost
    steps = doc["integration"]["steps"]
    assert [s["label"] for s in steps] == doc["integration"]["order"] == [a["taskId"], b["taskId"], steps[2]["label"]]
    assert steps[-1]["commit"] == doc["integration"]["candidate"] == git(repo, "rev-parse", "main")
    assert all(s["commit"][:12] in text for s in steps)
    reviews = {r["reviewer"]: r for r in doc["reviews"]}
    assert reviews["reviewer-b"]["findings"] == [{"blocking": False, "message": FINDING, "severity": "low"}]
    receipt = doc["receipt"]
    assert receipt["verdict"] == "valid" and receipt["ok"] is True and receipt["principals"] == ["ci@example"]
    assert receipt["commit"] == doc["integration"]["candidate"] and receipt["signatures"]
    assert "Verdict: **valid**" in text
    assert doc["usage"]["tokens"] == 0 and doc["usage"]["costUsd"] is None and "## Cost" in text

    # agent-provided text is inert in Markdown
    assert not re.search(r"(?<!\\)[<>&]", text)  # every one backslash-escaped
    assert "\\<script\\>" in text and "\\<img src=x onerror=alert(1)\\>" in text and "\\&" in text

    # a receipt someone replaced is reported with the verdict CI would give it
    candidate = doc["integration"]["candidate"]
    git(repo, "notes", "--ref=agentops/receipts", "add", "-f", "-m", '{"not": "an envelope"}', candidate)
    receipt = report_json(repo, run_id)["receipt"]
    assert receipt["verdict"] == "invalid" and receipt["code"] == "RECEIPT_MALFORMED", receipt
    assert "Verdict: **invalid** `RECEIPT_MALFORMED`" in command(repo, "agentops-run", "report", run_id).stdout


@pytest.mark.slow
def test_html_report_is_one_escaped_file_with_every_id(tmp_path: Path) -> None:
    repo, run_id = complete_run(tmp_path)
    doc = report_json(repo, run_id)
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    done = command(repo, "agentops-run", "report", run_id, "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert str(page) in done.stdout and [p.name for p in page.parent.iterdir()] == ["report.html"]
    html = page.read_text("utf-8")
    assert "<script" not in html.lower() and "<img" not in html and "<b>now" not in html
    assert "Part &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;" in html
    assert "&lt;img src=x onerror=alert(1)&gt; &quot;quoted&quot; &amp; &#x27;single&#x27;" in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", html)  # nothing to fetch
    for task in doc["tasks"]:
        assert f'id="task-{task["taskId"]}"' in html
    for name in [g["id"] for g in doc["generations"]] + [e["id"] for e in doc["evidence"]]:
        assert html.count(f'id="{name}"') == 1
    assert html.count('class="edge"') == sum(len(t["dependencies"]) for t in doc["tasks"])
    assert 'id="receipt-verdict" class="verdict st-valid" data-verdict="valid"' in html
    # overwrites; prints the facts
    done = command(repo, "agentops-run", "report", run_id, "--html", str(page), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["runId"] == run_id
    # passes the look, not the write
    done = command(repo, "agentops-run", "report", run_id, "--html", "/proc/report.html")
    assert done.returncode == 3 and "error[OUTPUT_UNWRITABLE]: --html /proc/report.html" in done.stderr


@pytest.mark.slow
def test_report_of_a_run_with_a_blocked_task_has_no_receipt(tmp_path: Path) -> None:
    repo = project(tmp_path)
    always_bad = child("a", "Part A", [[write_step("src/a.txt", "BAD\n"), commit_step("Add a"), HANDOFF]])
    run_id = start(repo, recipe(tmp_path, always_bad + simple_child("b", "src/b.txt", ["a"])))
    try:
        wait_for(repo, run_id, children_settled)
    finally:
        stop(repo, run_id)  # waits for the supervisor: what follows reads a state nobody changes
    doc = report_json(repo, run_id)
    status = json.loads(command(repo, "agentops-run", "status", run_id, "--json").stdout)
    a = task_by_title(doc, "Part A")
    assert a["status"] == "blocked" and task_by_title(doc, "Part B")["status"] == "blocked"
    gens = [g for g in doc["generations"] if g["taskId"] == a["taskId"]]
    assert [(g["generation"], g["outcome"]) for g in gens] == [(1, "failed"), (2, "blocked")]
    assert gens[0]["code"] == "RUN_VERIFICATION_FAILED" and gens[1]["code"] == "RUN_NO_PROGRESS"
    passed = {e["id"] for e in doc["evidence"] if e["passed"]}
    assert all(g["evidence"] and not passed & set(g["evidence"]) for g in gens)  # each its own failing record
    assert {g["id"] for g in doc["generations"]} == expected_generations(status)
    assert doc["receipt"]["verdict"] == "none" and doc["receipt"]["commit"] is None
    assert doc["integration"] is None
    text = command(repo, "agentops-run", "report", run_id).stdout
    assert "Verdict: **none**" in text and "RUN_NO_PROGRESS" in text


def test_unknown_run_and_unwritable_html_path_are_coded_errors(tmp_path: Path) -> None:
    repo = project(tmp_path)
    for run_id in ("run-nope", "../etc"):
        done = command(repo, "agentops-run", "report", run_id, "--json")
        assert done.returncode == 3 and json.loads(done.stderr)["error"]["code"] == "RUN_NOT_FOUND", done.stderr
    page = tmp_path / "page.html"
    done = command(repo, "agentops-run", "report", "run-nope", "--html", str(page))
    assert done.returncode == 3 and "error[RUN_NOT_FOUND]" in done.stderr and not page.exists()
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "missing" / "r.html", tmp_path, tmp_path / "file" / "r.html"):
        done = command(repo, "agentops-run", "report", "run-nope", "--html", str(bad))
        assert done.returncode == 3 and "error[OUTPUT_UNWRITABLE]" in done.stderr, (bad, done.stderr)
        assert str(bad) in done.stderr
