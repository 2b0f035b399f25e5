"""The Markdown form of ``git agentops-run report`` (what plain ``report RUN`` prints), rendered from the facts.

Everything agents wrote (titles, findings, messages, output tails) is escaped for where it goes: Markdown
punctuation is backslash-escaped, so a title holding ``<script>`` reads as text in any Markdown viewer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..transition.record import Transition
    from .record import EvidenceDoc, Generation, Report

_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|~&])")


def md(text: object, limit: int | None = None) -> str:
    """Agent-provided text made inert in Markdown: one line, punctuation backslash-escaped, cut at ``limit``."""
    line = " ".join(str(text).split())
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", line)


def short(commit: object) -> str:
    """A commit id as Markdown code, cut to 12 digits; ``-`` for none."""
    return f"`{str(commit)[:12]}`" if commit else "-"


def _offset(facts: Report, at: float | None) -> str:
    return f"+{at - facts.run.created_at:.1f}s" if at is not None else "-"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines if rows else ["(none)"]


def _result(e: EvidenceDoc) -> str:
    if e["missing"]:
        return "MISSING"
    if e["passed"]:
        return "passed"
    return "timed out" if e["timedOut"] else f"FAILED (exit {e['exitCode']})"


def _tests(tests: object) -> str:
    if not isinstance(tests, dict):
        return "-"
    failed = tests.get("failed", 0) + tests.get("errors", 0)
    return f"{tests.get('passed', 0)}/{tests.get('total', 0)} passed" + (f", {failed} failed" if failed else "")


def _generation_row(facts: Report, gen: Generation) -> list[str]:
    task = md(facts.task_title(gen.task_id), 40) if gen.task_id else "-"
    code = f"`{gen.code}`" if gen.code else "-"
    handoffs = ", ".join(short(h.commit) for h in gen.handoffs) or "-"
    usage = gen.usage
    tokens = usage.tokens if usage is not None else None
    cost = usage.cost_usd if usage is not None else None
    spent = f"{tokens} tok" + (f", ${cost:.4f}" if cost is not None else "")
    spent += " (partial)" if usage is not None and usage.partial else ""
    return [
        f"`{gen.id}`",
        gen.role,
        task,
        _offset(facts, gen.started_at),
        _offset(facts, gen.ended_at),
        gen.outcome,
        code,
        handoffs,
        str(len(gen.evidence)),
        spent if tokens is not None else "-",
    ]


def _policy_changes(transitions: Sequence[Transition]) -> list[str]:
    """The run's policy transitions: from and to, who approved, what each added or changed."""
    from ..transition.record import describe_changes

    if not transitions:
        return []
    lines = ["", "## Policy changes", ""]
    for t in transitions:
        by = t.approved_by
        outcome = f"refused ({t.refused.code})" if t.refused else t.stage
        lines.append(
            f"- `{t.transition_id}` {outcome}: {short(t.old_hash)} -> {short(t.new_hash)}, "
            f"proposed by {md(t.requested_by.worker_id)}, approved by {md(by.by if by else 'nobody yet')} "
            f"{md(by.name if by else '', 120)}"
        )
        lines += [f"  - {md(line, 400)}" for line in describe_changes(t.changes)]
    return lines


def markdown(facts: Report) -> str:
    """The report as Markdown (what plain ``report RUN`` prints)."""
    from ..clock import iso8601

    doc = facts.to_json()
    run = facts.run
    lines = [f"# Run {run.run_id}: {run.status}", ""]
    if run.status_reason:
        lines += [f"Status reason: {md(run.status_reason, 400)}", ""]
    lines += [
        f"**Goal:** {md(run.goal)}",
        "",
        f"Target `{md(run.target)}` from base {short(run.base_commit)}; host {md(run.host)}; "
        f"created {iso8601(run.created_at)}.",
        "",
    ]
    root = doc["root"]
    if root["taskId"]:
        lines.append(f"Root task **{md(root['title'])}** (`{root['taskId']}`), acceptance criteria:")
        lines += [f"- {md(c['id'])}: {md(c['description'])}" for c in root["criteria"]]
        lines.append("")
    lines += ["## Tasks", ""]
    rows = []
    for t in doc["tasks"]:
        delivery = t["delivery"] or {}
        delivered = (
            f"{short(delivery.get('commit'))} by {md(delivery.get('workerId'))} gen {delivery.get('generation')}"
            if delivery
            else "-"
        )
        rows.append(
            [
                f"`{t['taskId']}`",
                md(t["title"], 60),
                t["status"] + (f": {md(t['blockedReason'], 120)}" if t["blockedReason"] else ""),
                ", ".join(f"`{d}`" for d in t["dependencies"]) or ("root" if t["parent"] is None else "-"),
                delivered,
            ]
        )
    lines += _table(["task", "title", "status", "depends on", "delivery"], rows)
    made = [w for w in facts.workers if w.workspace is not None]
    if made:  # what each workspace cost: a slow or heavy setup is seen where it happens
        lines += ["", "## Workspaces", ""]
        lines += _table(
            ["worker", "task", "ready in", "disk", "ports and services"],
            [
                [
                    f"`{w.worker_id}`",
                    f"`{w.task_id}`" if w.task_id else "-",
                    f"{w.workspace.seconds:.1f}s",
                    f"{w.workspace.disk_bytes / 1e6:.0f} MB",
                    ", ".join(w.workspace.describe().split(", ")[2:]) or "-",
                ]
                for w in made
                if w.workspace is not None
            ],
        )
    lines += _policy_changes(facts.transitions)
    lines += ["", "## Timeline", ""]
    header = ["generation", "role", "task", "started", "ended", "outcome", "code", "handoffs", "evidence", "usage"]
    lines += _table(header, [_generation_row(facts, g) for g in facts.generations])
    for gen in facts.generations:
        for refusal in gen.refusals:
            lines.append(f"- `{gen.id}` refused `{refusal.code}`: {md(refusal.message, 300)}")
    lines += ["", "## Evidence", ""]
    rows = []
    for e in doc["evidence"]:
        origin = f"reused from {short(e['cachedFrom'])}" if e["cached"] else "fresh"
        where = f"{e['producer'] or '?'}/{e['checkout'] or '?'}" + ("" if e["authentic"] else ", MAC FAILS")
        rows.append(
            [
                f"`{e['id']}`",
                e["group"] + (f" `{e['generationId']}`" if e["generationId"] else ""),
                md(e["commandId"] or "?"),
                _result(e),
                _tests(e["tests"]),
                f"{(e['durationMs'] or 0) / 1000:.2f}s",
                origin,
                where,
                short(e["commit"]),
            ]
        )
    header = ["id", "of", "command", "result", "tests", "duration", "fresh/reused", "producer", "commit"]
    lines += _table(header, rows)
    lines += ["", "## Merge chain", ""]
    integration = facts.integration
    if integration is None or not integration.steps:
        lines.append("No candidate was built." if integration is None else f"Integration {integration.status}.")
    else:
        lines.append(
            f"Integration {integration.status} (attempt {integration.attempts or 1}): onto `{md(run.target)}` "
            f"at {short(integration.base)}, candidate {short(integration.candidate)}"
            + (f", failed `{integration.failure}`" if integration.failure else "")
        )
        lines.append("")
        for number, step in enumerate(integration.steps, start=1):
            label = step.label
            parents = step.parents
            lines.append(
                f"{number}. {short(step.commit)} merges {md(facts.task_title(label), 60)} (`{label}`) "
                f"delivery {short(parents[-1] if parents else None)}, tree {short(step.tree)}"
            )
    lines += ["", "## Reviews", ""]
    for review in doc["reviews"]:
        lines.append(
            f"- **{md(review['reviewer'])}**: {md(review['verdict'])} (report {short(review['reportDigest'])})"
            + (f" -- {md(review['summary'], 300)}" if review["summary"] else "")
        )
        for f in review["findings"]:
            where = f" at {md(f['path'])}" + (f":{f['line']}" if f.get("line") else "") if f.get("path") else ""
            blocking = "blocking" if f["blocking"] else "non-blocking"
            lines.append(f"  - {md(f['severity'])}, {blocking}{where}: {md(f['message'], 500)}")
    if not doc["reviews"]:
        lines.append("(none)")
    receipt = doc["receipt"]
    lines += ["", "## Receipt", ""]
    lines.append(
        f"Verdict: **{receipt['verdict']}**"
        + (f" `{receipt['code']}`" if receipt["code"] else "")
        + f" -- {md(receipt['message'], 600)}"
    )
    if receipt["commit"]:
        signed = ", ".join(f"`{s}`" for s in receipt["signatures"]) or "none"
        lines.append(f"Commit {short(receipt['commit'])}; signatures: {signed}.")
    usage = doc["usage"]
    lines += ["", "## Cost", ""]
    cost = f"${usage['costUsd']:.4f}" if usage["costUsd"] is not None else "not reported"
    lines.append(
        f"Tokens: {usage['tokens']}" + (f" of {usage['tokenLimit']}" if usage["tokenLimit"] else "") + f"; cost: {cost}"
        f"; active time {usage['usedSeconds']:.1f}s of {usage['limitSeconds']}s."
    )
    if facts.foreign_commits:
        lines += ["", f"**{facts.foreign_commits} foreign commit(s)** in the state journal (not acted on)."]
    return "\n".join(lines)
