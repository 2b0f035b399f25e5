"""Reviews of an integration candidate: each required reviewer host judges it and writes a report.

A reviewer is an agent host run once, one-shot, in a checkout of the candidate. It gets:

* a **prompt** (``{prompt}`` in its argv, and ``$AGENTOPS_PROMPT`` naming the file) that says what to review, where
  the input is, where the report goes and the report's JSON Schema, inline;
* the **input** -- the goal, every task and its criteria, the candidate and its base, the diff and the
  verification evidence -- at ``.agentops/review/input-<reviewer>.json`` inside its working directory
  (``{input}``, ``$AGENTOPS_REVIEW_INPUT``), where every CLI may read;
* the **report** path, ``.agentops/review/report-<reviewer>.json`` (``{report}``, ``$AGENTOPS_REVIEW_REPORT``), also
  inside the working directory, where every CLI may write; ``.agentops/review/`` is excluded from commits. The
  report follows ``schemas/review-report.schema.json``: a verdict, per-criterion results, findings with a severity
  and a blocking flag.

A report that is missing or does not match the schema is asked for once more, with the validation error in the
prompt; after that the reviewer has not approved anything. The built-in scripted agent plays a reviewer from a
recipe's ``[[reviewers]]`` entry of the same name.

A review *blocks* the integration when its verdict is ``reject``, when any finding is blocking, or when the
reviewer wrote no valid report.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ..canonical import JsonObject, sha256_hex
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.private import read_private, remove_private, write_private
from ..gitstore.safegit import run_git
from ..hosts.launch import HostSpec, Launch, agent_environment, command_for, host_spec, passed_variables, unnest
from ..hosts.output import parse as parse_output
from ..model.delivery import Digest, ReviewResult
from ..model.policy import Policy
from ..model.usage import Usage
from ..process.command import CommandResult, run_command
from ..resources import data_dir
from ..sandbox.plan import Sandbox
from ..schema import documents
from ..verify.credentials import HeldSecrets
from ..verify.held import find_held, redact_held

MAX_DIFF: Final = 512 * 1024
REVIEW_TIMEOUT: Final = 1800.0
REVIEW_DIR: Final = ".agentops/review"
ATTEMPTS: Final = 2
Confine = Callable[[HostSpec, Path, Path, str], tuple[Sandbox, Path]]
"""(host, checkout, scratch dir, launch name) -> the launch's sandbox and the private path of its spec."""


@dataclass(frozen=True, slots=True)
class Review:
    """One reviewer's judgement: its report (None when it wrote no valid one), the report's digest, and the sandbox
    level the reviewer ran at (``namespace``, ``landlock``, ``none``; None: not known)."""

    reviewer: str
    report: Mapping[str, Any] | None
    digest: str
    problem: str | None = None
    attempts: int = 1
    sandbox: str | None = None
    usage: tuple[Usage, ...] = ()  # what each attempt's host reported it used (not part of the sealed record)

    @property
    def blocking(self) -> list[str]:
        """Why this review stops the integration (empty when it approves)."""
        if self.report is None:
            return [self.problem or "no valid report"]
        found = [f"{f['severity']}: {f['message']}" for f in self.report["findings"] if f["blocking"]]
        if self.report["verdict"] == "reject" and not found:
            found = [f"rejected: {self.report.get('summary') or 'no reason given'}"]
        return found

    def result(self) -> ReviewResult:
        """What the integration record and the receipt keep of it (``missing`` when it wrote no valid report)."""
        verdict = str(self.report["verdict"]) if self.report is not None else "missing"
        return ReviewResult(self.reviewer, verdict, Digest(self.digest), self.sandbox)

    def to_json(self) -> JsonObject:
        """The predicate's review record (``sandbox`` when known)."""
        return self.result().to_json()


def diff_text(repo_dir: Path, base: str, candidate: str) -> str:
    """``git diff --stat --patch base..candidate``, cut at 512 KiB (the reviewer can read the checkout itself)."""
    done = run_git(repo_dir, "diff", "--no-ext-diff", "--no-textconv", "--stat", "--patch", f"{base}..{candidate}")
    text = done.stdout[:MAX_DIFF].decode("utf-8", errors="replace")
    return text + ("\n[diff truncated]\n" if len(done.stdout) > MAX_DIFF else "")


def review_input(
    *,
    goal: str,
    tasks: Sequence[Mapping[str, object]],
    base: str,
    candidate: str,
    diff: str,
    evidence: Sequence[Mapping[str, object]],
) -> dict[str, Any]:
    """The document a reviewer reads."""
    return {
        "goal": goal,
        "tasks": list(tasks),
        "base": base,
        "candidate": candidate,
        "diff": diff,
        "evidence": list(evidence),
    }


def report_schema() -> str:
    """The report's JSON Schema as text, for the prompt."""
    return (data_dir("schemas") / "review-report.schema.json").read_text("utf-8")


def review_prompt(
    name: str, input_doc: Mapping[str, Any], *, input_path: str, report_path: str, retry: str | None
) -> str:
    """What a reviewer is asked (see the module docstring)."""
    criteria = [
        f"- task {t.get('id')} ({t.get('title')}), criterion {c.get('id')}: {c.get('description')}"
        for t in input_doc.get("tasks", [])
        for c in t.get("criteria", [])
    ]
    lines = [
        f"# You are reviewer `{name}` of a git-agentops integration",
        "",
        f"Goal of the run: {input_doc.get('goal', '')}",
        "",
        f"The current directory is a checkout of the integration candidate {str(input_doc.get('candidate'))[:12]}, "
        f"built on {str(input_doc.get('base'))[:12]}; it already passed the repository's verification. Judge whether "
        "it meets the goal and every acceptance criterion below, and whether it is safe to publish.",
        "",
        f"Read the review input, `{input_path}` (JSON: goal, tasks with their criteria, base, candidate, diff, "
        "verification evidence), and the code itself. Do not change any file except the report.",
        "",
        "Acceptance criteria:",
        *(criteria or ["(none recorded)"]),
        "",
        f"Write your report, as one JSON document, to `{report_path}`, then end your turn. It must match this JSON "
        "Schema exactly: every criterion above appears once in `criteria` (with its `taskId` and `id`, result "
        "`pass`, `fail` or `unknown`); `verdict` is `approve` or `reject`; each finding has a `severity` "
        "(info, low, medium, high, critical), a `message` and `blocking` (true only for what must be fixed before "
        f'publishing); `reviewer` is "{name}".',
        "",
        "```json",
        report_schema().strip(),
        "```",
    ]
    if retry:
        lines += ["", "## Your previous report was not accepted", "", retry, "", "Write a valid report this time."]
    return "\n".join(lines) + "\n"


def run_reviews(
    policy: Policy,
    *,
    checkout: Path,
    input_doc: Mapping[str, Any],
    environ: Mapping[str, str],
    clock: Clock,
    recipe: Path | None,
    git_common_dir: Path | None = None,
    log_dir: Path | None = None,
    confine: Confine | None = None,
) -> list[Review]:
    """Run the policy's required reviewers in turn on ``checkout``; one :class:`Review` each. ``confine`` gives
    each reviewer launch its sandbox and a private path for the launcher's spec (None: run unconfined)."""
    review = policy.doc["review"]
    names = list(review["reviewers"])[: int(review["required"])]
    scratch = checkout / REVIEW_DIR  # made by the first private write in it, never through a symlink
    held = HeldSecrets.from_environ(environ)  # a report goes into the run's state and the receipt: none of these
    results = []
    for name in names:
        results.append(
            _review(
                name,
                host_spec(policy, name),
                passed_variables(policy, name),
                checkout=checkout,
                scratch=scratch,
                input_doc=input_doc,
                environ=environ,
                clock=clock,
                recipe=recipe,
                git_common_dir=git_common_dir,
                log_dir=log_dir,
                confine=confine,
                held=held,
            )
        )
    return results


def _review(
    name: str,
    spec: HostSpec,
    pass_env: tuple[str, ...],
    *,
    checkout: Path,
    scratch: Path,
    input_doc: Mapping[str, Any],
    environ: Mapping[str, str],
    clock: Clock,
    recipe: Path | None,
    git_common_dir: Path | None,
    log_dir: Path | None,
    confine: Confine | None,
    held: HeldSecrets,
) -> Review:
    # the checkout is the reviewers' to write in: every file of ours there is written, read and removed without
    # following a symlink a reviewer (this one, an earlier attempt, another reviewer) may have put in its place
    relative = {part: f"{REVIEW_DIR}/{part}-{name}.{ext}" for part, ext in (("input", "json"), ("report", "json"))}
    prompt_rel = f"{REVIEW_DIR}/prompt-{name}.md"
    # indented: reviewers read it with their file tools, and some cut long lines (opencode, Gemini CLI at 2000)
    text = json.dumps(dict(input_doc), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    input_path = _put(checkout, relative["input"], text.encode())
    report_path, prompt_path = checkout / relative["report"], checkout / prompt_rel
    retry: str | None = None
    result: Review | None = None
    spent: list[Usage] = []
    for attempt in range(1, ATTEMPTS + 1):
        with contextlib.suppress(OSError):  # a directory in its place reads as no report below
            remove_private(checkout, relative["report"])
        prompt = review_prompt(
            name, input_doc, input_path=relative["input"], report_path=relative["report"], retry=retry
        )
        _put(checkout, prompt_rel, prompt.encode("utf-8"))
        launch = Launch(
            worktree=checkout,
            mailbox=checkout / ".agentops" / "mailbox",
            prompt_file=prompt_path,
            log_file=(log_dir or scratch) / f"review-{name}.log",
            run_id=environ.get("AGENTOPS_RUN_ID", ""),
            worker_id=f"reviewer-{name}",
            generation=attempt,
            recipe=recipe,
            git_common_dir=git_common_dir,
            extra={"input": str(input_path), "report": str(report_path)},
        )
        box = confine(spec, checkout, scratch, f"reviewer-{name}-{attempt}") if confine is not None else None
        ran = _run_reviewer(name, spec, launch, environ=environ, pass_env=pass_env, clock=clock, recipe=recipe, box=box)
        level = box[0].mode if box is not None else "none"  # unconfined: no wall at all
        report = parse_output(spec.kind, ran.output.decode("utf-8", errors="replace"))
        if report is not None and report.reported_usage:
            spent.append(Usage(attempt, report.input_tokens, report.output_tokens, report.cost_usd, report.partial))
        result = replace(
            _read_report(name, checkout, relative["report"], ran, attempt, held, _criteria_ids(input_doc)),
            sandbox=level,
            usage=tuple(spent),
        )
        if result.report is not None:
            return result
        retry = result.problem
    assert result is not None
    return result


def _run_reviewer(
    name: str,
    spec: HostSpec,
    launch: Launch,
    *,
    environ: Mapping[str, str],
    pass_env: tuple[str, ...],
    clock: Clock,
    recipe: Path | None,
    box: tuple[Sandbox, Path] | None = None,
) -> CommandResult:
    env = agent_environment(environ, spec, launch, pass_env=pass_env)
    for key in ("AGENTOPS_RUN_ID", "AGENTOPS_WORKER_ID", "AGENTOPS_GENERATION", "AGENTOPS_MAILBOX"):
        env.pop(key, None)  # a reviewer is not a worker: it has no mailbox and sends no requests
    env.update(
        {
            "AGENTOPS_REVIEW_INPUT": launch.extra["input"],
            "AGENTOPS_REVIEW_REPORT": launch.extra["report"],
            "AGENTOPS_REVIEWER": name,
            "AGENTOPS_PROMPT": str(launch.prompt_file),
        }
    )
    if recipe is not None:
        env["AGENTOPS_RECIPE"] = str(recipe)
    command, shell = command_for(spec, launch)  # a built-in agent's own interpreter and module, or the policy's argv
    argv: list[str] | str = command[0] if shell else command
    if box is not None:
        sandbox, spec_path = box
        if isinstance(argv, list) and sandbox.mode != "none":
            argv = unnest(spec, argv)[0]  # Codex's own sandbox cannot start inside ours
        full = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
        argv, shell = sandbox.wrap(full, launch.worktree, spec_path), False
        env = sandbox.environment(env)  # its private HOME and TMPDIR; none of the person's servers
    result = run_command(argv, cwd=launch.worktree, env=env, timeout=REVIEW_TIMEOUT, shell=shell, clock=clock)
    try:
        launch.log_file.parent.mkdir(parents=True, exist_ok=True)
        with launch.log_file.open("ab") as handle:
            handle.write(f"\n=== review attempt {launch.generation} by {name}\n".encode() + result.output[-65536:])
    except OSError:
        pass
    return result


def _put(checkout: Path, rel: str, data: bytes) -> Path:
    """Write one of our files in the reviewers' directory: what a reviewer left at its name (a symlink to a file
    of the user's, say) is removed first -- the link itself, never its target -- then the file written anew."""
    try:
        remove_private(checkout, rel)
    except OSError as exc:  # a directory there, say: ours cannot be written, and that is a coded refusal
        raise AgentOpsError("PATH_NOT_REGULAR", f"{checkout / rel} cannot be replaced: {exc.strerror}") from exc
    return write_private(checkout, rel, data, durable=False)


def _criteria_ids(input_doc: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """Every (task id, criterion id) the review input asks about."""
    return frozenset(
        (str(t.get("id")), str(c.get("id")))
        for t in input_doc.get("tasks", [])
        if isinstance(t, Mapping)
        for c in t.get("criteria", [])
        if isinstance(c, Mapping)
    )


def _coverage(report: Mapping[str, Any], asked: frozenset[tuple[str, str]]) -> str | None:
    """Why ``report`` does not judge exactly the criteria it was asked about (each once), or None."""
    judged = [(str(c.get("taskId")), str(c.get("id"))) for c in report.get("criteria", []) if isinstance(c, Mapping)]
    missing = sorted(asked - set(judged))
    unknown = sorted(set(judged) - asked)
    twice = sorted({key for key in judged if judged.count(key) > 1})
    parts = [
        f"{what}: {', '.join(f'{task}/{cid}' for task, cid in keys[:10])}"
        for what, keys in (("not judged", missing), ("not asked about", unknown), ("judged twice", twice))
        if keys
    ]
    return "; ".join(parts) or None


def _read_report(
    name: str,
    checkout: Path,
    rel: str,
    result: CommandResult,
    attempt: int,
    held: HeldSecrets,
    asked: frozenset[tuple[str, str]] = frozenset(),
) -> Review:
    try:
        data = read_private(checkout, rel, max_bytes=documents.DEFAULT_MAX_BYTES)
    except (AgentOpsError, OSError) as exc:  # a symlink, a FIFO, a directory, too large: not a report
        why = exc.message if isinstance(exc, AgentOpsError) else (exc.strerror or str(exc))
        return Review(name, None, sha256_hex(b""), f"reviewer {name} wrote an invalid report: {why}", attempt)
    if data is None:
        why = "timed out" if result.timed_out else (result.spawn_error or f"exited {result.exit_code}")
        tail = redact_held(result.tail.decode("utf-8", errors="replace")[-600:], held)
        return Review(name, None, sha256_hex(b""), f"reviewer {name} wrote no report ({why}): {tail}", attempt)
    carried = sorted({finding.rule for finding in find_held(data, held).found})
    if carried:
        why = f"it carries a secret the supervisor holds ({', '.join(carried)})"
        return Review(name, None, sha256_hex(data), f"reviewer {name} wrote an invalid report: {why}", attempt)
    try:
        report = documents.load(data, schema="review-report", what=f"review report of {name}")
    except AgentOpsError as exc:
        return Review(name, None, sha256_hex(data), f"reviewer {name} wrote an invalid report: {exc.message}", attempt)
    uncovered = _coverage(report, asked)
    if uncovered is not None:  # an approval that judged nothing approves nothing
        return Review(name, None, sha256_hex(data), f"reviewer {name} wrote an invalid report: {uncovered}", attempt)
    return Review(name, report, sha256_hex(data), None, attempt)
