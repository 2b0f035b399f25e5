"""Judging a proposed policy against the one in force: what no approval makes acceptable, and what only a person's.

A mid-run policy change (:mod:`git_agentops.transition`) is one of three kinds, and this module, purely, sorts it:

* :func:`weakenings` -- what it removes or weakens that must stay: a required command dropped, made optional, its
  timeout cut, its argv, shell, environment or parser changed; ``require_signature`` turned off, the signer list
  moved, plain commits allowed; a reviewer dropped, a required one moved out of the first ``review.required``, or
  fewer reviews required; secret scanning off, a deny or secret pattern or a protected path removed; the sandbox
  turned off, made optional, widened; a host's ``writable`` (or ``pass_env``, ``home_files``) list widened -- a new
  host with any counts -- exactly as ``[sandbox] writable``; the run's target, worktree root or ``policy_changes``
  changed; a runner or host a task or worker still uses removed. Each is refused as ``RUN_POLICY_INVALID`` with
  its JSON path, whoever approves: trust was given for an exact policy; a run may add to it, never take its guards
  away.
* :func:`budget_raises` -- ``run.budget``, ``max_cost_usd`` or ``max_tokens`` raised (or a limit removed). A run's
  budget is what a person allowed it to spend; more is ``git agentops-run resume --add-budget``, a person's
  command, so the proposal is refused whoever would approve it (``RUN_POLICY_BUDGET_RAISED``). Lowering is fine.
* :func:`person_decisions` -- changes an approval may carry, but only a person's: any change of the
  ``[[worktree.setup]]`` steps (setup runs in the verification checkout before every required command, so a step
  that writes a ``conftest.py`` marking every test passed weakens them all at once), and any change of what a
  required reviewer's host runs (its kind, argv, resume_argv, shell, env or recipe: a reviewer replaced by a
  command that always approves is a reviewer dropped). With ``policy_changes = "coordinator"`` they are refused
  (``RUN_POLICY_PERSON_REQUIRED``) -- the coordinator would be approving its own weakening; with ``"user"`` the
  person approving the transition decides them.

Everything else the proposal adds or changes is an ordinary capability change
(:func:`~git_agentops.transition.record.capability_changes`), which the approver ``policy_changes`` names may approve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ..canonical import digest
from ..transition.record import policy_changes
from . import hosts as hostkinds
from .policy import DEFAULT_BUDGET, DEFAULT_PROTECTED_PATHS, DEFAULT_SECRET_PATHS, duration_seconds
from .policydoc import Argv, HostDoc, PolicyDoc

# -- what may not change -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Weakening:
    """A guard the proposal removes or weakens, at ``path`` (a JSON path into the proposed or old policy)."""

    path: str
    message: str


_FIXED_RUN_KEYS: Final = ("target", "worktree_root", "remote")


def weakenings(
    old: PolicyDoc,
    new: PolicyDoc,
    *,
    used_runners: Iterable[str] = (),
    used_hosts: Iterable[str] = (),
) -> list[Weakening]:
    """Every guard of ``old`` that ``new`` removes or weakens (see the module docstring); empty when none.

    ``used_runners`` are the runners the run's current tasks name, ``used_hosts`` the hosts its workers and the
    policy's required reviewers run on: removing one is refused too.
    """
    found: list[Weakening] = []
    found += _commands(old, new)
    found += _run(old, new)
    found += _receipts(old, new)
    found += _review(old, new)
    found += _guardrails(old, new)
    found += _sandbox(old, new)
    found += _host_lists(old, new)
    runners = {r["id"] for r in new["verify"]["runners"]}
    for runner_id in sorted(set(used_runners) - runners):
        found.append(
            Weakening(f"$.verify.runners[id={runner_id}]", f"runner {runner_id!r} is removed, but a task names it")
        )
    for host in sorted(set(used_hosts) - set(new["hosts"])):
        found.append(Weakening(f"$.hosts.{host}", f"host {host!r} is removed, but the run uses it"))
    return found


def _commands(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    proposed = {c["id"]: (i, c) for i, c in enumerate(new["verify"]["commands"])}
    for index, command in enumerate(old["verify"]["commands"]):
        if not command.get("required", True):
            continue
        where = f"$.verify.commands[{index}]"
        if command["id"] not in proposed:
            yield Weakening(where, f"the required command {command['id']!r} is dropped")
            continue
        at, now = proposed[command["id"]]
        where = f"$.verify.commands[{at}]"
        if not now.get("required", True):
            yield Weakening(f"{where}.required", f"the required command {command['id']!r} is made optional")
        if float(now["timeout"]) < float(command["timeout"]):
            yield Weakening(
                f"{where}.timeout",
                f"the timeout of {command['id']!r} is cut from {command['timeout']:g}s to {now['timeout']:g}s",
            )
        for key in ("argv", "shell", "env", "parser"):
            if digest({"v": now.get(key)}) != digest({"v": command.get(key)}):
                yield Weakening(f"{where}.{key}", f"the {key} of the required command {command['id']!r} changes")


def _run(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    if new.get("version") != old.get("version"):
        yield Weakening("$.version", "the policy version changes")
    for key in _FIXED_RUN_KEYS:
        if new["run"].get(key) != old["run"].get(key):
            yield Weakening(f"$.run.{key}", f"run.{key} is fixed for the run's life")
    if policy_changes(new) != policy_changes(old):
        yield Weakening("$.run.policy_changes", "a run cannot change who approves its own policy changes")
    if new.get("controls", {}) != old.get("controls", {}):
        yield Weakening("$.controls", "a run cannot change who may answer, approve or review it from afar")


def _receipts(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    before, after = old["receipts"], new["receipts"]
    if before.get("require_signature") and not after.get("require_signature"):
        yield Weakening("$.receipts.require_signature", "require_signature is turned off")
    if before.get("allowed_signers") != after.get("allowed_signers"):
        yield Weakening("$.receipts.allowed_signers", "the signer list receipts are checked against moves")
    if before.get("plain_commits", "refuse") == "refuse" and after.get("plain_commits", "refuse") != "refuse":
        yield Weakening("$.receipts.plain_commits", "plain commits on the target would be allowed")


def required_reviewers(doc: PolicyDoc) -> list[str]:
    """The reviewers an integration waits for: the first ``review.required`` of ``review.reviewers`` (each the name
    of the host it runs on), as :func:`git_agentops.integrate.reviews.run_reviews` runs them."""
    return list(doc["review"].get("reviewers", ()))[: int(doc["review"]["required"])]


def _review(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    if int(new["review"]["required"]) < int(old["review"]["required"]):
        yield Weakening("$.review.required", "fewer reviews would be required")
    if int(new["review"].get("people", 0)) < int(old["review"].get("people", 0)):
        yield Weakening("$.review.people", "fewer approvals by people would be required")
    kept = set(new["review"].get("reviewers", ()))
    required, still = set(required_reviewers(old)), set(required_reviewers(new))
    for index, reviewer in enumerate(old["review"].get("reviewers", ())):
        if reviewer not in kept:
            yield Weakening(f"$.review.reviewers[{index}]", f"the reviewer {reviewer!r} is dropped")
        elif reviewer in required and reviewer not in still:  # moved behind the ones that run
            yield Weakening(f"$.review.reviewers[{index}]", f"the required reviewer {reviewer!r} would not run")


def _guardrails(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    before, after = old["guardrails"], new["guardrails"]
    if before.get("secret_scanning", True) and not after.get("secret_scanning", True):
        yield Weakening("$.guardrails.secret_scanning", "secret scanning is turned off")
    kept = set(after.get("deny_patterns", ()))
    for index, pattern in enumerate(before.get("deny_patterns", ())):
        if pattern not in kept:
            yield Weakening(f"$.guardrails.deny_patterns[{index}]", f"the deny pattern {pattern!r} is removed")
    listed = {
        "secret_paths": (
            before.get("secret_paths", DEFAULT_SECRET_PATHS),
            after.get("secret_paths", DEFAULT_SECRET_PATHS),
        ),
        "protected_paths": (
            before.get("protected_paths", DEFAULT_PROTECTED_PATHS),
            after.get("protected_paths", DEFAULT_PROTECTED_PATHS),
        ),
    }
    for key, (was_listed, now_listed) in listed.items():
        was, now = list(was_listed), list(now_listed)
        added = now[len(was) :]
        # the last matching pattern decides: only patterns appended at the end, none of them a '!', add nothing back
        if now[: len(was)] != was or any(p.startswith("!") for p in added):
            yield Weakening(
                f"$.guardrails.{key}", f"guardrails.{key} may only grow, by patterns appended at its end (no '!')"
            )


def _sandbox(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    before, after = old.get("sandbox", {}), new.get("sandbox", {})
    if before.get("mode", "landlock") == "landlock" and after.get("mode", "landlock") != "landlock":
        yield Weakening("$.sandbox.mode", "the sandbox is turned off")
    if before.get("required", False) and not after.get("required", False):
        yield Weakening("$.sandbox.required", "the sandbox is made optional")
    widened = sorted(set(after.get("writable", ())) - set(before.get("writable", ())))
    if widened:
        yield Weakening("$.sandbox.writable", f"agents would be allowed to write {', '.join(widened)}")
    kept = set(after.get("deny_read", ()))
    for index, path in enumerate(before.get("deny_read", ())):
        if path not in kept:
            yield Weakening(f"$.sandbox.deny_read[{index}]", f"agents would be allowed to read {path}")


HOST_LISTS: Final = ("writable", "pass_env", "home_files")
"""A host's lists that give its agents more of the person's machine: paths to write, variables of the person's
environment, files of the person's home. Each may only shrink during a run, as ``[sandbox] writable`` (a key the
policy does not have is an empty list)."""


def _host_lists(old: PolicyDoc, new: PolicyDoc) -> Iterable[Weakening]:
    for name, host in sorted(new["hosts"].items()):
        before: Mapping[str, object] = old["hosts"].get(name, {})
        for key in HOST_LISTS:
            widened = sorted(_entries(host.get(key)) - _entries(before.get(key)))
            if widened:
                yield Weakening(
                    f"$.hosts.{name}.{key}",
                    f"agents on host {name!r} would get more of the machine ({key}: {', '.join(widened)})",
                )


def _entries(value: object) -> set[str]:
    if isinstance(value, Mapping):
        return {f"{k}={v}" for k, v in value.items()}
    if isinstance(value, str):
        return {value}
    return {str(v) for v in value} if isinstance(value, Iterable) else set()  # absent: none


# -- budgets and a person's decisions ----------------------------------------------------------------------------


def budget_raises(old: PolicyDoc, new: PolicyDoc) -> list[Weakening]:
    """Every budget of ``old`` that ``new`` raises or removes (``run.budget``, ``max_cost_usd``, ``max_tokens``).

    Refused as ``RUN_POLICY_BUDGET_RAISED`` whoever approves: more budget is ``git agentops-run resume
    --add-budget``, a person's command.
    """
    before, after = old["run"], new["run"]
    found = []
    was, now = str(before.get("budget", DEFAULT_BUDGET)), str(after.get("budget", DEFAULT_BUDGET))
    if duration_seconds(now) > duration_seconds(was):
        found.append(Weakening("$.run.budget", f"the active-time budget would rise from {was} to {now}"))
    limits = {
        "max_cost_usd": (before.get("max_cost_usd"), after.get("max_cost_usd")),
        "max_tokens": (before.get("max_tokens"), after.get("max_tokens")),
    }
    for key, (limit, proposed) in limits.items():
        if limit is not None and (proposed is None or float(proposed) > float(limit)):
            shown = "no limit" if proposed is None else str(proposed)
            found.append(Weakening(f"$.run.{key}", f"run.{key} would rise from {limit} to {shown}"))
    return found


REVIEWER_HOST_KEYS: Final = ("kind", "argv", "resume_argv", "shell", "env", "recipe")
"""What decides what a reviewer's host runs: changing any of them replaces the reviewer."""
_DERIVED: Final = "<the kind's default>"


def person_decisions(old: PolicyDoc, new: PolicyDoc) -> list[Weakening]:
    """The changes only a person may approve (see the module docstring): each setup step added, changed or removed,
    and each change of what a required reviewer's host runs. A host left to its kind's default argv and
    environment is not changed by those defaults following the verification commands (a ``claude`` host's allowed
    tools)."""
    found = []
    before, after = _steps(old), _steps(new)
    for index in range(max(len(before), len(after))):
        if index >= len(after):
            what = "removed"
        elif index >= len(before):
            what = "added"
        elif digest(before[index]) != digest(after[index]):
            what = "changed"
        else:
            continue
        found.append(
            Weakening(
                f"$.worktree.setup[{index}]",
                f"setup step {index} is {what}: setup runs in the verification checkout before every required "
                "command, so it decides what they all see -- a person's decision",
            )
        )
    old_argvs, new_argvs = _verify_argvs(old), _verify_argvs(new)
    for name in required_reviewers(old):
        was = _reviewer_host(old["hosts"].get(name), old_argvs)
        now = _reviewer_host(new["hosts"].get(name), new_argvs)
        for key in REVIEWER_HOST_KEYS:
            if digest({"v": was.get(key)}) != digest({"v": now.get(key)}):
                found.append(
                    Weakening(
                        f"$.hosts.{name}.{key}",
                        f"the {key} of host {name!r}, which the required reviewer {name!r} runs on, changes: "
                        "replacing a reviewer's command is dropping the reviewer -- a person's decision",
                    )
                )
    return found


def _verify_argvs(doc: PolicyDoc) -> list[Argv]:
    return [c["argv"] for c in (*doc["verify"]["commands"], *doc["verify"]["runners"])]


def _reviewer_host(host: HostDoc | None, verify_argvs: list[Argv]) -> dict[str, object]:
    """What a reviewer's host runs, with the parts its kind derives from the verification commands marked as such
    (an absent host -- the built-in ``scripted`` -- is ``{"kind": "built-in"}``)."""
    if host is None:
        return {"kind": "built-in"}
    kind = str(host["kind"])
    out: dict[str, object] = {key: host.get(key) for key in REVIEWER_HOST_KEYS}
    argv = host.get("argv")
    if isinstance(argv, list) and argv and argv == list(hostkinds.default_argv(kind, verify_argvs)):
        out["argv"] = _DERIVED
        resume = host.get("resume_argv")
        if isinstance(resume, list) and resume == list(hostkinds.default_resume_argv(kind, argv)):
            out["resume_argv"] = _DERIVED
    defaults = hostkinds.default_env(kind, verify_argvs)
    env = dict(host.get("env") or {})
    out["env"] = {k: _DERIVED if defaults.get(k) == v else v for k, v in env.items()}
    return out


def _steps(doc: PolicyDoc) -> list[dict[str, object]]:
    """The setup steps as they run (a description runs nothing)."""
    return [{k: v for k, v in step.items() if k != "description"} for step in doc["worktree"]["setup"]]
