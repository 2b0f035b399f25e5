"""The HTML form of ``git agentops-run report``: one self-contained page that opens anywhere, offline.

One file, nothing else: inline CSS, the task graph and the timeline as inline SVG, no script at all, no font, image
or stylesheet fetched -- a ``Content-Security-Policy`` meta tag forbids every load, so even a string that escaped
its escaping could run nothing. Every string that came from an agent or a command (titles, intents, findings,
messages, output tails) goes through :func:`html.escape` with quotes, in text and in attributes alike.

Stable ids, for people linking into a report and for tests: ``task-<taskId>`` (a node of the dependency graph),
``gen-<workerId>-<n>`` (a generation), ``ev-<digest>`` (an evidence record, by the digest delivery notes name),
``receipt-verdict``; the graph's edges are described in :mod:`.graph`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..clock import iso8601
from .graph import graph_svg
from .record import Generation, Report

CSP: Final = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

CSS: Final = """
:root { --ok:#1a7f37; --bad:#cf222e; --warn:#9a6700; --info:#0969da; --muted:#656d76; --line:#d0d7de;
  --bg:#f6f8fa; --card:#fff; --ink:#1f2328; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
  color:var(--ink); background:var(--bg); }
main { max-width:1180px; margin:0 auto; padding:20px 24px 48px; }
header h1 { font-size:22px; margin:0 0 4px; }
h2 { font-size:17px; margin:28px 0 10px; padding-bottom:4px; border-bottom:1px solid var(--line); }
code, pre, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
pre { white-space:pre-wrap; word-break:break-word; background:#f3f4f6; border:1px solid var(--line);
  border-radius:6px; padding:8px 10px; margin:6px 0; max-height:320px; overflow:auto; }
.goal { font-size:16px; margin:6px 0 8px; }
.meta { color:var(--muted); }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600;
  border:1px solid currentColor; vertical-align:middle; }
.st-complete,.st-delivered,.st-valid,.st-passed,.st-approve,.st-finalized { color:var(--ok); }
.st-blocked,.st-failed,.st-invalid,.st-reject,.st-missing { color:var(--bad); }
.st-budget-limited,.st-paused,.st-stopping,.st-interrupted,.st-stopped,.st-awaiting-input { color:var(--warn); }
.st-active,.st-running,.st-handing-off,.st-planned,.st-ready,.st-idle,.st-none { color:var(--info); }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(120px, 1fr)); gap:10px; margin:14px 0 4px; }
.card { color:inherit; text-decoration:none; background:var(--card); border:1px solid var(--line);
  border-radius:8px; padding:10px 14px; }
.card:hover { border-color:var(--info); }
.card b { display:block; font-size:20px; }
.card span { color:var(--muted); font-size:12px; }
table { border-collapse:collapse; width:100%; background:var(--card); border:1px solid var(--line); }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { background:#eef1f4; font-size:12px; text-transform:uppercase; letter-spacing:.03em; color:var(--muted); }
tr:target, article:target { outline:2px solid var(--info); outline-offset:-2px; }
.graph { background:var(--card); border:1px solid var(--line); border-radius:8px; overflow-x:auto; padding:6px;
  text-align:center; }
svg text { font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif; }
.node rect { fill:#fff; stroke:currentColor; stroke-width:1.6; }
.node text { fill:var(--ink); font-size:12.5px; }
.node text.sub { fill:currentColor; font-size:11px; }
.node.root rect { stroke-dasharray:4 3; }
.edge { fill:none; stroke:#8c959f; stroke-width:1.4; }
.lanes { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:8px 12px; }
.lane { display:flex; align-items:center; gap:10px; height:26px; }
.lane .who { width:230px; flex:none; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; font-size:12.5px; }
.lane .track { position:relative; flex:1; height:16px; background:#eef1f4; border-radius:4px; }
.bar { position:absolute; top:0; height:16px; border-radius:4px; background:currentColor; opacity:.85;
  min-width:6px; text-decoration:none; }
.axis { display:flex; justify-content:space-between; color:var(--muted); font-size:11px; margin-left:240px; }
article.gen { background:var(--card); border:1px solid var(--line); border-left:4px solid currentColor;
  border-radius:6px; padding:8px 12px; margin:8px 0; }
article.gen > * { color:var(--ink); }
article.gen h3 { font-size:14px; margin:0 0 4px; }
.finding { margin:4px 0; }
.verdict { font-size:16px; font-weight:600; padding:10px 14px; border-radius:8px; background:var(--card);
  border:1px solid currentColor; }
details summary { cursor:pointer; color:var(--muted); }
footer { margin-top:36px; color:var(--muted); font-size:12px; }
"""


def e(value: object) -> str:
    """``value`` as HTML text or a double-quoted attribute value: ``& < > " '`` escaped."""
    return html.escape("" if value is None else str(value), quote=True)


def _short(commit: object) -> str:
    return f'<code title="{e(commit)}">{e(str(commit)[:12])}</code>' if commit else "-"


def _badge(status: object) -> str:
    return f'<span class="badge st-{e(status)}">{e(status)}</span>'


def _offset(facts: Report, at: float | None) -> str:
    return f"+{at - facts.run.created_at:.1f}s" if at is not None else "-"


def render(facts: Report, *, version: str) -> str:
    """The whole page; its footer names the toolkit's ``version`` (the command passes ``git_agentops.__version__``:
    a page is rendered from values only)."""
    run = facts.run
    parts = [
        *_head(f"Run {run.run_id}: {run.status}"),
        _header(facts),
        _section(
            "graph", "Tasks and dependencies", f'<div class="graph">{graph_svg(facts.tasks, run.root_task_id)}</div>'
        ),
        _section("timeline", "Timeline", _timeline(facts)),
        _section("tasks", "Tasks", _tasks(facts)),
        _section("generations", "Generations", "\n".join(_generation(facts, g) for g in facts.generations)),
        _section("evidence", "Evidence", _evidence(facts)),
        _section("merge-chain", "Merge chain", _merge_chain(facts)),
        _section("reviews", "Reviews", _reviews(facts)),
        _section("receipt", "Receipt", _receipt(facts)),
        _section("cost", "Cost", _cost(facts)),
        f"<footer>git-agentops {e(version)} -- read from the refs and notes of run {e(run.run_id)}; "
        "this page loads nothing and runs no script.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{e(title)}</title>",
        f"<style>{CSS}</style></head><body><main>",
    ]


def render_board(rows: Sequence[Mapping[str, Any]], reports: Sequence[Report], *, version: str, now: float) -> str:
    """``report --html --all``: one page of every run -- the board (``run list --all``'s rows: here and on a
    remote, what each waits for, its spend, its age), then each of this repository's runs in brief (goal, status,
    tasks and their deliveries, cost), each under ``run-<runId>``; ``report --html RUN`` has a run's whole story."""
    waiting = sum(1 for r in rows if r.get("waitsFor"))
    board = [
        "<table><thead><tr><th>run</th><th>where</th><th>status</th><th>waits for / goal</th><th>active</th>"
        "<th>tokens</th><th>cost</th><th>age</th></tr></thead><tbody>"
    ]
    local = {f.run.run_id for f in reports}
    for r in rows:
        run_id = str(r["runId"])
        name = f'<a href="#run-{e(run_id)}">{e(run_id)}</a>' if run_id in local else e(run_id)
        waits = r.get("waitsFor")
        what = f"<b class='st-awaiting-input'>waits for {e(waits)}</b>" if waits else e(r.get("goal", ""))
        verified = "" if r.get("verified", True) else ' <span class="meta" title="not verified here">?</span>'
        cost = r.get("costUsd")
        board.append(
            f"<tr><td><code>{name}</code></td><td>{e(r['where'])}</td><td>{_badge(r['status'])}{verified}</td>"
            f"<td>{what}</td><td>{float(r.get('usedSeconds') or 0):.0f}s</td><td>{e(r.get('tokens') or 0)}</td>"
            f"<td>{_dollars(cost) if cost is not None else '-'}</td>"
            f"<td>{e(iso8601(float(r['createdAt'])) if r.get('createdAt') else '-')}</td></tr>"
        )
    board.append("</tbody></table>")
    parts = [
        *_head(f"{len(rows)} runs, {waiting} waiting"),
        f"<header><h1>Every run</h1><p class='meta'>{len(rows)} run(s), {waiting} waiting for a person, as of "
        f"{e(iso8601(now))}</p></header>",
        _section("board", "Board", "".join(board)),
        *(_brief(facts) for facts in reports),
        f"<footer>git-agentops {e(version)} -- read from the refs and notes of this repository"
        " (and the runs a remote holds); this page loads nothing and runs no script.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _brief(facts: Report) -> str:
    run = facts.run
    usage = facts.usage()
    tasks = "".join(
        f"<tr><td>{e(t.title)}</td><td>{_badge(t.status)}</td><td>{_short(t.delivery.commit if t.delivery else None)}"
        "</td></tr>"
        for t in facts.tasks
        if t.parent is not None
    )
    body = (
        f'<p class="goal"><b>Goal:</b> {e(run.goal)} {_badge(run.status)}</p>'
        f'<p class="meta">target <code>{e(run.target)}</code> · host {e(run.host)} · created '
        f"{e(iso8601(run.created_at))} · {e(usage['tokens'])} tokens · {_dollars(usage['costUsd'])} · active "
        f"{usage['usedSeconds']:.0f}s of {e(usage['limitSeconds'])}s · receipt {e(facts.receipt.verdict)}"
        + (f" · {e(run.status_reason)}" if run.status_reason else "")
        + "</p>"
        + (
            "<table><thead><tr><th>task</th><th>status</th><th>delivery</th></tr></thead><tbody>"
            + tasks
            + "</tbody></table>"
            if tasks
            else "<p class='meta'>No task planned yet.</p>"
        )
    )
    return _section(f"run-{run.run_id}", f"Run {run.run_id}", body)


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{e(anchor)}"><h2>{e(title)}</h2>\n{body}\n</section>'


def _header(facts: Report) -> str:
    run = facts.run
    root = next((t for t in facts.tasks if t.id == run.root_task_id), None)
    children = [t for t in facts.tasks if t.parent is not None]
    delivered = sum(1 for t in children if str(t.status) == "delivered")
    failed = sum(1 for g in facts.generations if g.outcome in ("failed", "blocked"))
    passed = sum(1 for x in facts.evidence if x.record and x.record.get("passed"))
    usage = facts.usage()
    cost = f"${usage['costUsd']:.2f}" if usage["costUsd"] is not None else "cost n/a"
    cards = [
        (f"{delivered}/{len(children)}", "tasks delivered", "#tasks", ""),
        (str(len(facts.generations)), f"generations, {failed} failed", "#generations", ""),
        (f"{passed}/{len(facts.evidence)}", "evidence records passed", "#evidence", ""),
        (str(len(facts.integration.steps or ()) if facts.integration else 0), "merge steps", "#merge-chain", ""),
        (str(len(facts.reviews)), "reviews", "#reviews", ""),
        (f"{usage['tokens']}", f"tokens, {cost}", "#cost", ""),
        (f"{usage['usedSeconds']:.0f}s", f"active of {usage['limitSeconds']}s", "#cost", ""),
        (facts.receipt.verdict, "receipt", "#receipt", f"st-{facts.receipt.verdict}"),
    ]
    out = [
        f"<header><h1>Run <code>{e(run.run_id)}</code> {_badge(run.status)}</h1>",
        f'<p class="goal"><b>Goal:</b> {e(run.goal)}</p>',
        f'<p class="meta">target <code>{e(run.target)}</code> from base {_short(run.base_commit)} · host '
        f"{e(run.host)} · created {e(iso8601(run.created_at))}"
        + (f" · {e(run.status_reason)}" if run.status_reason else "")
        + "</p>",
    ]
    if root is not None:
        out.append(f"<p><b>Root task:</b> {e(root.title)} -- acceptance criteria:</p><ul>")
        out += [f"<li><code>{e(c.id)}</code> {e(c.description)}</li>" for c in root.criteria]
        out.append("</ul>")
    out.append('<div class="cards">')
    out += [
        f'<a class="card" href="{where}"><b class="{tone}">{e(big)}</b><span>{e(small)}</span></a>'
        for big, small, where, tone in cards
    ]
    out.append("</div></header>")
    return "\n".join(out)


# -- sections ----------------------------------------------------------------------------------------------------------


def _tasks(facts: Report) -> str:
    rows = []
    for t in facts.tasks:
        delivery = t.delivery
        got = (
            f"{_short(delivery.commit)} by {e(delivery.worker_id)} "
            f'<a href="#gen-{e(delivery.worker_id)}-{e(delivery.generation)}">gen '
            f"{e(delivery.generation)}</a>"
            if delivery
            else "-"
        )
        deps = ", ".join(f'<a href="#about-{e(d)}">{e(facts.task_title(d))}</a>' for d in t.dependencies)
        criteria = "".join(f"<li><code>{e(c.id)}</code> {e(c.description)}</li>" for c in t.criteria)
        blocked = f"<pre>{e(t.blocked_reason)}</pre>" if t.blocked_reason else ""
        rows.append(
            f'<tr id="about-{e(t.id)}"><td><b>{e(t.title)}</b><br><code class="meta">{e(t.id)}</code></td>'
            f"<td>{_badge(t.status)}{blocked}</td><td>{deps or ('root' if t.parent is None else '-')}</td>"
            f"<td>{e(t.intent)}<ul>{criteria}</ul></td><td>{got}</td></tr>"
        )
    return (
        "<table><thead><tr><th>task</th><th>status</th><th>depends on</th>"
        "<th>intent and criteria</th><th>delivery</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _timeline(facts: Report) -> str:
    start = facts.run.created_at
    ends = [g.ended_at or g.started_at for g in facts.generations] + [x.time for x in facts.run_events]
    end = max([start + 1.0, *ends])
    span = end - start
    lanes: dict[str, list[Generation]] = {}
    for gen in facts.generations:
        lanes.setdefault(gen.worker_id, []).append(gen)
    out = ['<div class="lanes">']
    for worker_id, gens in lanes.items():
        task = facts.task_title(gens[0].task_id) if gens[0].task_id else ""
        bars = []
        for gen in gens:
            left = 100 * (gen.started_at - start) / span
            width = max(100 * ((gen.ended_at or end) - gen.started_at) / span, 0.5)
            tip = f"{gen.id}: {gen.outcome}" + (f" ({gen.code})" if gen.code else "")
            bars.append(
                f'<a class="bar st-{e(gen.outcome)}" href="#{e(gen.id)}" title="{e(tip)}" '
                f'style="left:{left:.2f}%;width:{min(width, 100 - left):.2f}%"></a>'
            )
        out.append(
            f'<div class="lane"><div class="who" title="{e(task)}"><code>{e(worker_id)}</code> {e(task)}</div>'
            f'<div class="track">{"".join(bars)}</div></div>'
        )
    out.append(f'<div class="axis"><span>+0s</span><span>+{span / 2:.1f}s</span><span>+{span:.1f}s</span></div>')
    out.append("</div>")
    return "\n".join(out)


def _generation(facts: Report, gen: Generation) -> str:
    task = f'<a href="#about-{e(gen.task_id)}">{e(facts.task_title(gen.task_id))}</a>' if gen.task_id else "no task"
    lines = [
        f'<article id="{e(gen.id)}" class="gen st-{e(gen.outcome)}" data-outcome="{e(gen.outcome)}">',
        f"<h3><code>{e(gen.worker_id)}</code> generation {gen.number} {_badge(gen.outcome)}"
        + (f" <code>{e(gen.code)}</code>" if gen.code else "")
        + "</h3>",
        f'<div class="body">{e(gen.role)} on {task} · started {_offset(facts, gen.started_at)} · ended '
        f"{_offset(facts, gen.ended_at)}",
    ]
    if gen.usage:
        u = gen.usage
        cost = f", ${u.cost_usd:.4f}" if u.cost_usd is not None else ""
        floor = " (partial: stopped before its host printed all it used)" if u.partial else ""
        lines.append(f" · {e(u.input_tokens)} in / {e(u.output_tokens)} out tokens{e(cost)}{e(floor)}")
    lines.append("</div>")
    if gen.reason:
        lines.append(f"<details><summary>why this generation started</summary><pre>{e(gen.reason)}</pre></details>")
    for handoff in gen.handoffs:
        links = ", ".join(f'<a href="#{e(name)}"><code>{e(name[:15])}</code></a>' for name in handoff.evidence)
        lines.append(f"<div>handoff {_short(handoff.commit)} at {_offset(facts, handoff.at)}: evidence {links or '-'}")
        lines.append("</div>")
    if gen.delivered:
        lines.append(f"<div>delivered {_short(gen.delivered)}</div>")
    for refusal in gen.refusals:
        lines.append(f"<div>refused <code>{e(refusal.code)}</code><pre>{e(refusal.message)}</pre></div>")
    if gen.message and not any(r.message == gen.message for r in gen.refusals):
        lines.append(f"<pre>{e(gen.message)}</pre>")
    events = "".join(
        f"<tr><td>{_offset(facts, x.time)}</td><td><code>{e(x.code)}</code></td><td>{e(x.summary)}</td></tr>"
        for x in gen.events
    )
    lines.append(f"<details><summary>{len(gen.events)} events</summary><table>{events}</table></details>")
    lines.append("</article>")
    return "\n".join(lines)


def _evidence(facts: Report) -> str:
    rows = []
    for fact in facts.evidence:
        r = fact.to_json()
        if r["missing"]:
            result = '<span class="badge st-missing">missing</span>'
        elif r["passed"]:
            result = _badge("passed")
        else:
            why = "timed out" if r["timedOut"] else f"exit {r['exitCode']}"
            result = f'<span class="badge st-failed">{e(why)}</span>'
        tests = r["tests"] if isinstance(r["tests"], dict) else None
        counted = f"{tests.get('passed', 0)}/{tests.get('total', 0)}" if tests else "-"
        origin = f"reused from {_short(r['cachedFrom'])}" if r["cached"] else "fresh"
        of = f'<a href="#{e(fact.generation_id)}">{e(fact.generation_id)}</a>' if fact.generation_id else "final gate"
        mac = "" if fact.authentic else ' <span class="badge st-failed">MAC fails</span>'
        tail = f"<details><summary>output tail</summary><pre>{e(r['tail'])}</pre></details>" if r["tail"] else ""
        rows.append(
            f'<tr id="{e(fact.id)}"><td><code>{e(r["commandId"])}</code><br><code class="meta" '
            f'title="{e(fact.digest)}">{e(fact.id[:15])}</code></td><td>{of}</td><td>{result}{mac}{tail}</td>'
            f"<td>{e(counted)}</td><td>{(r['durationMs'] or 0) / 1000:.2f}s</td><td>{origin}</td>"
            f"<td>{e(r['producer'] or '?')}/{e(r['checkout'] or '?')}</td><td>{_short(r['commit'])}</td></tr>"
        )
    return (
        "<table><thead><tr><th>command</th><th>of</th><th>result</th><th>tests</th>"
        "<th>duration</th><th>fresh / reused</th><th>producer</th><th>commit</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="8">no evidence</td></tr>')
        + "</tbody></table>"
    )


def _merge_chain(facts: Report) -> str:
    integration = facts.integration
    if integration is None:
        return "<p>The run has not asked to integrate.</p>"
    out = [
        f"<p>{_badge(integration.status)} onto <code>{e(facts.run.target)}</code> at {_short(integration.base)}"
        f" · candidate {_short(integration.candidate)} · attempt {e(integration.attempts or 1)}"
        + (f" · failed <code>{e(integration.failure)}</code>" if integration.failure else "")
        + "</p><ol>"
    ]
    for step in integration.steps or ():
        label = step.label
        parents = step.parents
        out.append(
            f'<li id="step-{e(step.commit)}">{_short(step.commit)} merges '
            f'<a href="#about-{e(label)}">{e(facts.task_title(label))}</a> delivery '
            f"{_short(parents[-1] if parents else None)} onto {_short(parents[0] if parents else None)}"
            f" · tree {_short(step.tree)}</li>"
        )
    out.append("</ol>")
    events = [x for x in facts.run_events if x.code.startswith(("INTEGRATION_", "REVIEWS_", "RUN_COMPLETE"))]
    out += [f"<div class='meta'>{_offset(facts, x.time)} <code>{e(x.code)}</code> {e(x.summary)}</div>" for x in events]
    return "\n".join(out)


def _reviews(facts: Report) -> str:
    out = []
    if not facts.reviews:
        out.append("<p>No review was recorded.</p>")
    for review in facts.reviews:
        doc = review.to_json()
        out.append(
            f'<article class="gen st-{e(review.verdict)}" id="review-{e(review.reviewer)}"><h3>{e(review.reviewer)} '
            f"{_badge(review.verdict)} <code class='meta' title='{e(review.report_digest)}'>"
            f"{e(review.report_digest[:12])}</code></h3>"
        )
        if doc["summary"]:
            out.append(f"<p>{e(doc['summary'])}</p>")
        out += [_finding(f) for f in doc["findings"]]
        failed = [c for c in doc["criteria"] if c.get("result") != "pass"]
        notes = "".join(
            f"; {e(c.get('id'))} of {e(facts.task_title(str(c.get('taskId'))))}: {e(c.get('result'))}" for c in failed
        )
        passing = len(doc["criteria"]) - len(failed)
        out.append(f"<div class='meta'>{passing} of {len(doc['criteria'])} criteria pass{notes}</div></article>")
    return "\n".join(out)


def _finding(finding: Mapping[str, object]) -> str:
    where = ""
    if finding.get("path"):
        where = f" <code>{e(finding['path'])}{':' + e(finding['line']) if finding.get('line') else ''}</code>"
    blocking = "blocking" if finding.get("blocking") else "non-blocking"
    tone = "failed" if finding.get("blocking") else "none"
    return (
        f'<div class="finding"><span class="badge st-{tone}">{e(finding.get("severity"))}, {blocking}</span>{where} '
        f"{e(finding.get('message'))}</div>"
    )


def _receipt(facts: Report) -> str:
    receipt = facts.receipt
    label = {"valid": "valid", "invalid": "INVALID", "none": "no receipt"}[receipt.verdict]
    out = [
        f'<p id="receipt-verdict" class="verdict st-{e(receipt.verdict)}" data-verdict="{e(receipt.verdict)}">'
        f"{e(label)}" + (f" <code>{e(receipt.code)}</code>" if receipt.code else "") + f" -- {e(receipt.message)}</p>",
    ]
    if receipt.commit:
        signed = ", ".join(f"<code>{e(s)}</code>" for s in receipt.signatures) or "none"
        out.append(f"<p>on {_short(receipt.commit)} · signatures: {signed}</p>")
        out += [_summary_line(v) for v in receipt.verification]
    return "\n".join(out)


def _summary_line(record: Mapping[str, object]) -> str:
    origin = f"reused from {_short(record.get('cachedFrom'))}" if record.get("cached") else "fresh"
    verdict = "passed" if record.get("passed") else f"failed (exit {record.get('exitCode')})"
    return f"<div class='meta'>sealed: <code>{e(record.get('commandId'))}</code> {e(verdict)}, {origin}</div>"


def _cost(facts: Report) -> str:
    usage = facts.usage()
    rows = [
        f"<tr><td><a href='#{e(g.id)}'>{e(g.id)}</a></td><td>{e(g.usage.input_tokens)}</td>"
        f"<td>{e(g.usage.output_tokens)}</td><td>{_dollars(g.usage.cost_usd)}</td></tr>"
        for g in facts.generations
        if g.usage
    ]
    limit = f" of {usage['tokenLimit']}" if usage["tokenLimit"] else ""
    out = [
        f"<p>{e(usage['tokens'])} tokens{e(limit)}{' (partial)' if usage.get('partial') else ''} · "
        f"{_dollars(usage['costUsd'])} · active time "
        f"{usage['usedSeconds']:.1f}s of {e(usage['limitSeconds'])}s</p>",
    ]
    if rows:
        out.append(
            "<table><thead><tr><th>generation</th><th>input tokens</th><th>output tokens</th><th>cost</th></tr>"
            "</thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
    else:
        out.append("<p class='meta'>No host reported tokens or cost for this run.</p>")
    return "\n".join(out)


def _dollars(value: object) -> str:
    return f"${value:.4f}" if isinstance(value, int | float) else "cost not reported"
