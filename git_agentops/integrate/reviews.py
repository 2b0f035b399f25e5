"""Reviews of an integration candidate: each required reviewer host judges it and writes a report.

A reviewer is an agent host run once in a checkout of the candidate, with ``$AGENTOPS_REVIEW_INPUT`` naming a
JSON file (the goal, every task and its criteria, the candidate and its base, the diff and the verification
evidence) and ``$AGENTOPS_REVIEW_REPORT`` naming where to write its report (``schemas/review-report.schema.json``:
a verdict, per-criterion results, findings with a severity and a blocking flag). The built-in scripted agent plays
a reviewer from a recipe's ``[[reviewers]]`` entry of the same name; any other host runs its argv, with
``{input}`` and ``{report}`` replaced.

A review *blocks* the integration when its verdict is ``reject``, when any finding is blocking, or when the
reviewer wrote no valid report (a reviewer that crashed has not approved anything).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..canonical import canonical_bytes, sha256_hex
from ..clock import Clock
from ..errors import AgentOpsError
from ..hosts.launch import host_spec
from ..model.policy import Policy
from ..process.command import run_command
from ..schema import documents

MAX_DIFF: Final = 512 * 1024
REVIEW_TIMEOUT: Final = 1800.0


@dataclass(frozen=True, slots=True)
class Review:
    reviewer: str
    report: Mapping[str, Any] | None  # None when no valid report was written
    digest: str
    problem: str | None = None

    @property
    def blocking(self) -> list[str]:
        if self.report is None:
            return [self.problem or "no valid report"]
        found = [f"{f['severity']}: {f['message']}" for f in self.report["findings"] if f["blocking"]]
        if self.report["verdict"] == "reject" and not found:
            found = [f"rejected: {self.report.get('summary') or 'no reason given'}"]
        return found

    def to_json(self) -> dict[str, Any]:
        verdict = self.report["verdict"] if self.report is not None else "missing"
        return {"reviewer": self.reviewer, "verdict": verdict, "reportDigest": self.digest}


def diff_text(repo_dir: Path, base: str, candidate: str) -> str:
    done = subprocess.run(
        ["git", "diff", "--stat", "--patch", f"{base}..{candidate}"],
        cwd=repo_dir,
        capture_output=True,
        timeout=120,
        check=False,
    )
    text = done.stdout[:MAX_DIFF].decode("utf-8", errors="replace")
    return text + ("\n[diff truncated]\n" if len(done.stdout) > MAX_DIFF else "")


def review_input(
    *,
    goal: str,
    tasks: Sequence[Mapping[str, Any]],
    base: str,
    candidate: str,
    diff: str,
    evidence: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    return {
        "goal": goal,
        "tasks": list(tasks),
        "base": base,
        "candidate": candidate,
        "diff": diff,
        "evidence": list(evidence),
    }


def run_reviews(
    policy: Policy,
    *,
    checkout: Path,
    scratch: Path,
    input_doc: Mapping[str, Any],
    environ: Mapping[str, str],
    clock: Clock,
    recipe: Path | None,
) -> list[Review]:
    """Run the policy's required reviewers in turn on ``checkout``; one :class:`Review` each."""
    review = policy.doc["review"]
    names = list(review["reviewers"])[: int(review["required"])]
    scratch.mkdir(parents=True, exist_ok=True)
    input_path = scratch / "review-input.json"
    input_path.write_bytes(canonical_bytes(dict(input_doc)) + b"\n")
    results = []
    for name in names:
        spec = host_spec(policy, name)
        report_path = scratch / f"review-{name}.json"
        report_path.unlink(missing_ok=True)
        env = {k: v for k, v in environ.items() if not k.startswith("AGENTOPS_")}
        env.update(spec.env)
        env.update(
            {
                "AGENTOPS_REVIEW_INPUT": str(input_path),
                "AGENTOPS_REVIEW_REPORT": str(report_path),
                "AGENTOPS_REVIEWER": name,
            }
        )
        if recipe is not None:
            env["AGENTOPS_RECIPE"] = str(recipe)
        if spec.kind == "scripted":
            argv: list[str] | str = [sys.executable, "-m", "git_agentops.cli.agent"]
            shell = False
        elif isinstance(spec.argv, str):
            argv, shell = spec.argv.replace("{input}", str(input_path)).replace("{report}", str(report_path)), True
        else:
            argv = [a.replace("{input}", str(input_path)).replace("{report}", str(report_path)) for a in spec.argv]
            shell = False
        result = run_command(argv, cwd=checkout, env=env, timeout=REVIEW_TIMEOUT, shell=shell, clock=clock)
        results.append(_read_report(name, report_path, result))
    return results


def _read_report(name: str, path: Path, result: Any) -> Review:
    try:
        data = path.read_bytes()
    except OSError:
        why = "timed out" if result.timed_out else (result.spawn_error or f"exited {result.exit_code}")
        tail = result.tail.decode("utf-8", errors="replace")[-600:]
        return Review(name, None, sha256_hex(b""), f"reviewer {name} wrote no report ({why}): {tail}")
    try:
        report = documents.load(data, schema="review-report", what=f"review report of {name}")
    except AgentOpsError as exc:
        return Review(name, None, sha256_hex(data), f"reviewer {name} wrote an invalid report: {exc.message}")
    return Review(name, report, sha256_hex(data))
