"""Reviewers a model can do: a generated prompt with the report schema inline, input and report inside the
reviewer's working directory, and one retry with the validation error before an invalid report blocks."""

from __future__ import annotations

from pathlib import Path

from ..conftest import git
from ..helpers import simple_child
from ..runkit import events, project, recipe, start, stop, wait_for

# A command-host reviewer: it records its prompt, then writes the report the test asks for (valid, or not).
REVIEWER = r"""#!/bin/sh
set -eu
n=$(ls "$PWD/.agentops/review" | grep -c '^prompt-' || true)
cp "$AGENTOPS_PROMPT" "$RECORD/prompt-$(date +%s%N).md"
printf '%s\n' "$@" > "$RECORD/argv-$(date +%s%N).txt"
if (: > "$PWD/planted.txt") 2>/dev/null; then echo wrote > "$RECORD/tamper"; else echo refused > "$RECORD/tamper"; fi
if [ "$MODE" = "leak" ]; then  # a well-formed report whose summary smuggles out a secret, hex-encoded
  python3 - "$AGENTOPS_REVIEW_INPUT" "$AGENTOPS_REVIEW_REPORT" "$LEAK" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
criteria = [{"taskId": t["id"], "id": c["id"], "result": "pass"} for t in doc["tasks"] for c in t["criteria"]]
report = {"reviewer": "checker", "verdict": "approve", "summary": sys.argv[3], "criteria": criteria, "findings": []}
json.dump(report, open(sys.argv[2], "w"))
PY
elif grep -q 'previous report was not accepted' "$AGENTOPS_PROMPT" && [ "$MODE" = "fix" ]; then
  python3 - "$AGENTOPS_REVIEW_INPUT" "$AGENTOPS_REVIEW_REPORT" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
criteria = [{"taskId": t["id"], "id": c["id"], "result": "pass"} for t in doc["tasks"] for c in t["criteria"]]
json.dump({"reviewer": "checker", "verdict": "approve", "criteria": criteria, "findings": []}, open(sys.argv[2], "w"))
PY
elif [ "$MODE" = "nothing" ]; then  # schema-valid, approving, and judging no criterion at all
  echo '{"reviewer": "checker", "verdict": "approve", "criteria": [], "findings": []}' > "$AGENTOPS_REVIEW_REPORT"
else
  echo '{"reviewer": "checker", "verdict": "approve"}' > "$AGENTOPS_REVIEW_REPORT"
fi
"""


def _reviewed_project(tmp_path: Path, mode: str, leak: str = "") -> tuple[Path, Path]:
    record = tmp_path / "record"
    record.mkdir()
    script = tmp_path / "reviewer.sh"
    script.write_text(REVIEWER)
    script.chmod(0o755)
    hosts = (
        "[hosts.checker]\n"
        'kind = "command"\n'
        f'argv = ["{script}", "--input", "{{input}}", "--report", "{{report}}", "--prompt", "{{prompt}}"]\n'
        f'env = {{ RECORD = "{record}", MODE = "{mode}", LEAK = "{leak}" }}\n'
        f'writable = ["{record}"]\n'  # the reviewer is sandboxed: what it records must be granted
        '[review]\nrequired = 1\nreviewers = ["checker"]\n'
    )
    return project(tmp_path, extra_policy=hosts), record


def test_a_reviewer_gets_a_prompt_with_the_schema_and_paths_inside_its_checkout_and_one_retry(tmp_path: Path) -> None:
    """Invariant: {prompt}, {input} and {report} are filled for reviewers too; an invalid report is asked for once
    more with the validation error in the prompt, and a valid second report lets the run complete."""
    repo, record = _reviewed_project(tmp_path, "fix")
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    try:
        wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=120)
    finally:
        stop(repo, run_id)
    prompts = sorted(record.glob("prompt-*.md"))
    assert len(prompts) == 2  # the first report was invalid: one retry
    first, second = (p.read_text() for p in prompts)
    assert "# You are reviewer `checker`" in first and '"$id": "urn:git-agentops:schema:review-report"' in first
    assert "`.agentops/review/input-checker.json`" in first and "`.agentops/review/report-checker.json`" in first
    assert (
        "previous report was not accepted" in second
        and "'criteria' is a required property" in second.replace('"criteria"', "'criteria'")
    ) or "criteria" in second.split("previous report was not accepted", 1)[1]
    argv = sorted(record.glob("argv-*.txt"))[0].read_text().splitlines()
    assert argv[1].endswith("/.agentops/review/input-checker.json") and argv[3].endswith("report-checker.json")
    assert argv[5].startswith("# You are reviewer")  # {prompt} is the prompt text itself
    assert "{prompt}" not in "".join(argv)
    assert (record / "tamper").read_text() == "refused\n"  # in its sandbox a reviewer cannot change the checkout


def test_a_reviewer_that_writes_an_invalid_report_twice_blocks_the_integration(tmp_path: Path) -> None:
    """Invariant: two invalid reports are a blocking review (RUN_REVIEW_BLOCKED naming the validation error); the
    coordinator's finalize fails, and the same failure again blocks the run instead of looping."""
    repo, record = _reviewed_project(tmp_path, "never")
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] == "blocked", timeout=120)
    finally:
        stop(repo, run_id)
    assert "RUN_NO_PROGRESS" in (doc["statusReason"] or "")
    assert len(list(record.glob("prompt-*.md"))) == 4  # two integrations, each with one retry
    refused = [
        e for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED" and e["data"]["code"] == "RUN_REVIEW_BLOCKED"
    ]
    assert len(refused) == 2 and "invalid report" in refused[0]["data"]["message"]


def test_an_approval_that_judges_no_criterion_is_not_a_review(tmp_path: Path) -> None:
    """Invariant: a report must judge every criterion it was asked about, each once; a schema-valid approval that
    judges none (seen from a real agent CLI: "Approved: 0 criteria pass") is invalid, asked for again, and blocks."""
    repo, _ = _reviewed_project(tmp_path, "nothing")
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    try:
        wait_for(repo, run_id, lambda d: d["status"] == "blocked", timeout=120)
    finally:
        stop(repo, run_id)
    refused = [
        e for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED" and e["data"]["code"] == "RUN_REVIEW_BLOCKED"
    ]
    assert refused and "not judged:" in refused[0]["data"]["message"]
    assert "src/a.txt" not in git(repo, "ls-tree", "-r", "--name-only", "main")  # nothing was published


# A reviewer that attacks the supervisor's own files in its directory: the prompt and input of the next attempt
# become symlinks to a file of the user's, and its report is a FIFO (a reader would block), a directory, or a
# symlink to a secret.
ATTACKER = r"""#!/bin/sh
set -eu
d="$PWD/.agentops/review"
n=$(ls "$RECORD" | grep -c '^attempt-' || true)
: > "$RECORD/attempt-$n"
ln -sf "$VICTIM" "$d/prompt-checker.md"
ln -sf "$VICTIM" "$d/input-checker.json"
rm -f "$AGENTOPS_REVIEW_REPORT"
rm -rf "$AGENTOPS_REVIEW_REPORT"
case "$n" in
  0) mkfifo "$AGENTOPS_REVIEW_REPORT" ;;
  2) mkdir "$AGENTOPS_REVIEW_REPORT" ;;
  *) ln -s "$SECRET" "$AGENTOPS_REVIEW_REPORT" ;;
esac
"""


def test_a_reviewer_cannot_redirect_the_supervisors_writes_or_block_its_reads(tmp_path: Path) -> None:
    """Invariant: what a reviewer leaves in place of the supervisor's files in its directory is never followed:
    a symlinked prompt or input is replaced (the user's file it points to is untouched), a FIFO or symlinked
    report is an invalid report (no read blocks, no secret is read), and the review blocks with its code."""
    record, victim, secret = tmp_path / "record", tmp_path / "victim.txt", tmp_path / "secret.json"
    record.mkdir()
    victim.write_text("the user's own file\n")
    secret.write_text('{"reviewer": "checker", "verdict": "approve", "criteria": [], "findings": []}\n')
    script = tmp_path / "attacker.sh"
    script.write_text(ATTACKER)
    script.chmod(0o755)
    hosts = (
        "[hosts.checker]\n"
        'kind = "command"\n'
        f'argv = ["{script}"]\n'
        f'env = {{ RECORD = "{record}", VICTIM = "{victim}", SECRET = "{secret}" }}\n'
        f'writable = ["{record}"]\n'
        '[review]\nrequired = 1\nreviewers = ["checker"]\n'
    )
    repo = project(tmp_path, extra_policy=hosts)
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    try:
        wait_for(repo, run_id, lambda d: d["status"] == "blocked", timeout=120)
    finally:
        stop(repo, run_id)
    assert victim.read_text() == "the user's own file\n"
    assert len(list(record.glob("attempt-*"))) == 4  # two integrations, each with one retry: no read blocked
    refused = [
        e for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED" and e["data"]["code"] == "RUN_REVIEW_BLOCKED"
    ]
    assert len(refused) == 2, refused
    message = refused[0]["data"]["message"]
    assert "invalid report" in message and "symlink" in message, message


def test_a_review_report_carrying_a_held_secret_is_invalid_and_never_stored(tmp_path: Path) -> None:
    """A report goes into the run's state and the receipt: one holding a secret of the supervisor's environment,
    in any encoding, is an invalid report (and blocks after its retry), like a delivery holding it."""
    token = "ghp_" + "r8Lm3" * 7 + "z"
    repo, _record = _reviewed_project(tmp_path, "leak", leak=token.encode().hex())
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True), env={"GITHUB_TOKEN": token})
    try:
        wait_for(repo, run_id, lambda d: d["status"] == "blocked", timeout=120)
    finally:
        stop(repo, run_id)
    refused = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
    assert any("held-secret:GITHUB_TOKEN (hex)" in r["message"] for r in refused), refused
    log = git(repo, "log", "--format=%B", f"refs/agentops/runs/{run_id}/state")
    assert token.encode().hex() not in log and token not in log
