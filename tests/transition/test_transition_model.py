"""The pure rules of a policy transition: what a proposal changes, what it may not weaken, its approvals, and the
journal record's stage order."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from git_agentops.model.judge import budget_raises, person_decisions, weakenings
from git_agentops.model.policy import effective
from git_agentops.transition.record import (
    ORDER,
    RequestedBy,
    Stage,
    Transition,
    approval_problems,
    capability_changes,
    describe_changes,
    transition_id,
)

RAW: dict[str, Any] = {
    "version": 1,
    "run": {"target": "main"},
    "verify": {
        "commands": [
            {"id": "tests", "argv": ["pytest", "-q"], "timeout": 300},
            {"id": "lint", "argv": ["ruff", "check"], "required": False},
        ],
        "runners": [{"id": "smoke", "argv": ["./smoke.sh"]}],
    },
    "worktree": {"setup": [{"argv": ["pip", "install", "-e", "."]}]},
    "hosts": {"claude": {"kind": "claude"}, "reviewer": {"kind": "scripted"}},
    "review": {"required": 1, "reviewers": ["reviewer"]},
    "receipts": {"require_signature": True, "allowed_signers": ".agentops/allowed_signers"},
    "guardrails": {"deny_patterns": ["ACME-[0-9]+"]},
    "sandbox": {"mode": "landlock", "required": True, "deny_read": ["~/.aws"]},
}
BASE: dict[str, Any] = effective(RAW)


def changed(edit: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    edit(doc)
    return effective(doc)


def paths(new: dict[str, Any], **kw: Any) -> list[str]:
    return [w.path for w in weakenings(BASE, new, **kw)]


WEAKEN = [
    ("a required command dropped", lambda d: d["verify"]["commands"].pop(0), "$.verify.commands[0]"),
    ("made optional", lambda d: d["verify"]["commands"][0].update(required=False), "$.verify.commands[0].required"),
    ("timeout cut", lambda d: d["verify"]["commands"][0].update(timeout=30), "$.verify.commands[0].timeout"),
    ("argv changed", lambda d: d["verify"]["commands"][0].update(argv=["true"]), "$.verify.commands[0].argv"),
    ("through a shell", lambda d: d["verify"]["commands"][0].update(shell=True), "$.verify.commands[0].shell"),
    ("env added", lambda d: d["verify"]["commands"][0].update(env={"PYTEST_ADDOPTS": "-k nothing"}), ".env"),
    ("parser changed", lambda d: d["verify"]["commands"][0].update(parser="junit"), "$.verify.commands[0].parser"),
    ("signature off", lambda d: d["receipts"].update(require_signature=False), "$.receipts.require_signature"),
    ("signers moved", lambda d: d["receipts"].update(allowed_signers="mine"), "$.receipts.allowed_signers"),
    ("plain commits", lambda d: d["receipts"].update(plain_commits="allow"), "$.receipts.plain_commits"),
    ("reviewer dropped", lambda d: d["review"].update(reviewers=[]), "$.review.reviewers[0]"),
    ("fewer reviews", lambda d: d["review"].update(required=0), "$.review.required"),
    ("scanning off", lambda d: d["guardrails"].update(secret_scanning=False), "$.guardrails.secret_scanning"),
    ("deny pattern gone", lambda d: d["guardrails"].update(deny_patterns=[]), "$.guardrails.deny_patterns[0]"),
    ("protected narrowed", lambda d: d["guardrails"].update(protected_paths=[".agentops/**"]), "protected_paths"),
    ("protected negated", lambda d: d["guardrails"].update(protected_paths=[*_protected(), "!.ci/**"]), "protected"),
    ("secret paths", lambda d: d["guardrails"].update(secret_paths=["*.pem"]), "$.guardrails.secret_paths"),
    ("sandbox off", lambda d: d["sandbox"].update(mode="none"), "$.sandbox.mode"),
    ("sandbox optional", lambda d: d["sandbox"].update(required=False), "$.sandbox.required"),
    ("sandbox widened", lambda d: d["sandbox"].update(writable=["~"]), "$.sandbox.writable"),
    ("deny_read gone", lambda d: d["sandbox"].update(deny_read=[]), "$.sandbox.deny_read[0]"),
    ("target moved", lambda d: d["run"].update(target="release"), "$.run.target"),
    ("worktrees moved", lambda d: d["run"].update(worktree_root="elsewhere"), "$.run.worktree_root"),
    ("who approves", lambda d: d["run"].update(policy_changes="coordinator"), "$.run.policy_changes"),
]


def _protected() -> list[str]:
    from git_agentops.model.policy import DEFAULT_PROTECTED_PATHS

    return list(DEFAULT_PROTECTED_PATHS)


@pytest.mark.parametrize(("what", "edit", "path"), WEAKEN, ids=[w[0] for w in WEAKEN])
def test_each_weakening_is_refused_with_its_json_path(what: str, edit: Any, path: str) -> None:
    """Invariant: a proposal may add to the trusted policy, never take a guard away; the path names what."""
    found = paths(changed(edit))
    assert any(path in p for p in found), (what, found)


def test_adding_and_strengthening_weaken_nothing() -> None:
    def edit(d: dict[str, Any]) -> None:
        d["verify"]["commands"][0]["timeout"] = 900  # longer is fine
        d["verify"]["commands"][0]["description"] = "the suite"
        d["verify"]["commands"].append({"id": "types", "argv": ["mypy", "."]})
        d["verify"]["commands"].pop(1)  # an optional command may go
        d["verify"]["runners"].append({"id": "acceptance", "argv": ["./accept.sh"]})
        d["review"]["required"] = 1
        d["guardrails"]["deny_patterns"].append("SECRET-[a-z]+")
        d["guardrails"]["protected_paths"] = [*_protected(), "docs/security/**"]
        d["sandbox"]["deny_read"].append("~/.gnupg")
        d["run"]["max_workers"] = 5

    assert weakenings(BASE, changed(edit)) == []


def test_removing_what_the_run_still_uses_is_refused() -> None:
    new = changed(lambda d: (d["verify"]["runners"].clear(), d["hosts"].pop("claude")))
    found = paths(new, used_runners={"smoke"}, used_hosts={"claude"})
    assert "$.verify.runners[id=smoke]" in found and "$.hosts.claude" in found
    assert paths(new) == []  # unused: removing them is fine


# -- issue 23, item 5: four changes that an approval alone let through ---------------------------------------------


def test_a_hosts_lists_are_judged_as_the_sandboxs_writable_and_may_only_shrink() -> None:
    """Before: ``[hosts.X] writable = ["/"]`` passed with one approval of ``host:X``. A host's writable (and
    pass_env, home_files, wherever a host has them) widened, or a new host that has any, is a weakening."""
    widened = changed(lambda d: d["hosts"]["claude"].update(writable=[*d["hosts"]["claude"]["writable"], "/"]))
    assert paths(widened) == ["$.hosts.claude.writable"]
    assert "/" in weakenings(BASE, widened)[0].message
    assert "$.hosts.codex.writable" in paths(changed(lambda d: d["hosts"].update(codex={"kind": "codex"})))
    assert paths(changed(lambda d: d["hosts"].update(other={"kind": "scripted"}))) == []  # writes nothing more
    assert paths(changed(lambda d: d["hosts"]["claude"].update(writable=["~/.claude"]))) == []  # narrowed
    for key, value in (("pass_env", ["AWS_SECRET_ACCESS_KEY"]), ("home_files", [".ssh/id_ed25519"])):
        before = copy.deepcopy(BASE)
        before["hosts"]["claude"][key] = ["TERM"]
        after = copy.deepcopy(before)
        after["hosts"]["claude"][key] = ["TERM", *value]
        assert [w.path for w in weakenings(before, after)] == [f"$.hosts.claude.{key}"], key
        assert weakenings(after, before) == []


def test_replacing_what_a_required_reviewers_host_runs_is_a_persons_decision() -> None:
    """Before: the required reviewer's host was replaced by a command that always approves, with one approval of
    ``host:reviewer``. Its kind, argv, resume_argv, shell, env or recipe changed is dropping the reviewer: not a
    weakening a person cannot approve at all, but never the coordinator's to approve."""
    edits = {
        "kind": lambda h: h.update(kind="command", argv=["sh", "-c", "echo approve"], writable=[]),
        "argv": lambda h: h.update(argv=["python3", "approve.py"]),
        "env": lambda h: h.update(env={"AGENTOPS_VERDICT": "approve"}),
        "shell": lambda h: h.update(shell=True, argv="echo approve"),
        "recipe": lambda h: h.update(recipe="always-approve.toml"),
    }
    for key, edit in edits.items():
        new = changed(lambda d, e=edit: e(d["hosts"]["reviewer"]))
        decided = [w.path for w in person_decisions(BASE, new)]
        assert f"$.hosts.reviewer.{key}" in decided, (key, decided)
        assert paths(new) == [], key  # a person may still approve it
    unused = changed(lambda d: d["hosts"]["claude"].update(argv=["claude", "-p", "{prompt}"]))
    assert person_decisions(BASE, unused) == []  # not a reviewer's host: an ordinary capability change
    optional = copy.deepcopy(BASE)
    optional["review"]["required"] = 0  # listed, but no integration waits for it
    replaced = copy.deepcopy(optional)
    replaced["hosts"]["reviewer"]["argv"] = ["python3", "approve.py"]
    assert person_decisions(optional, effective(replaced)) == []


def test_a_default_reviewer_host_following_the_verification_commands_is_not_a_replacement() -> None:
    """A ``claude`` reviewer left to its kind's default argv gets the new commands' tools: not a replaced reviewer."""
    raw = copy.deepcopy(RAW)
    raw["review"]["reviewers"] = ["claude"]  # the policy file names no argv: the kind's default
    base = effective(raw)
    raw["verify"]["commands"].append({"id": "types", "argv": ["mypy", "."]})
    grown = effective(raw)
    assert grown["hosts"]["claude"]["argv"] != base["hosts"]["claude"]["argv"]  # the derived allowed tools
    assert person_decisions(base, grown) == []
    raw["hosts"]["claude"]["argv"] = ["sh", "-c", "echo approve"]
    assert [w.path for w in person_decisions(base, effective(raw))] == [
        "$.hosts.claude.argv",
        "$.hosts.claude.resume_argv",
    ]


def test_a_required_reviewer_moved_behind_the_ones_that_run_is_dropped() -> None:
    base = copy.deepcopy(BASE)
    base["hosts"]["second"] = {"kind": "scripted"}
    base["review"]["reviewers"] = ["reviewer", "second"]
    base = effective(base)
    swapped = copy.deepcopy(base)
    swapped["review"]["reviewers"] = ["second", "reviewer"]
    assert [w.path for w in weakenings(base, effective(swapped))] == ["$.review.reviewers[0]"]


def test_any_change_of_the_setup_steps_is_a_persons_decision() -> None:
    """Before: a new setup step writing a ``conftest.py`` that marks every test passed went through with the
    coordinator's own approval of ``setup:1``. Setup runs before every required command: added, changed or removed,
    a step is a person's decision (a description is not a step)."""
    plant = {"argv": ["python3", "-c", "open('conftest.py', 'w').write('...')"]}
    for what, edit, where in (
        ("added", lambda d: d["worktree"]["setup"].append(plant), "$.worktree.setup[1]"),
        ("changed", lambda d: d["worktree"]["setup"][0].update(argv=["sh", "-c", "pip install -e . && x"]), "[0]"),
        ("removed", lambda d: d["worktree"]["setup"].clear(), "$.worktree.setup[0]"),
    ):
        new = changed(edit)
        found = person_decisions(BASE, new)
        assert len(found) == 1 and found[0].path.endswith(where) and what in found[0].message, (what, found)
        assert paths(new) == []  # a person may approve it
    assert person_decisions(BASE, changed(lambda d: d["worktree"]["setup"][0].update(description="pip"))) == []
    assert person_decisions(BASE, changed(lambda d: d["verify"]["runners"].append({"id": "x", "argv": ["x"]}))) == []


def test_raising_a_budget_is_refused_and_lowering_one_is_not() -> None:
    """Before: ``budget``, ``max_cost_usd`` and ``max_tokens`` raised went through with no approval at all. More
    budget is ``run resume --add-budget``, a person's command; removing a limit raises it to none."""
    limited = copy.deepcopy(BASE)
    limited["run"].update(max_cost_usd=5.0, max_tokens=100_000)
    limited = effective(limited)

    def run(**keys: Any) -> dict[str, Any]:
        doc = copy.deepcopy(limited)
        doc["run"].update(keys)
        return effective(doc)

    assert [w.path for w in budget_raises(limited, run(budget="2h"))] == ["$.run.budget"]  # 90m before
    assert [w.path for w in budget_raises(limited, run(max_cost_usd=50.0))] == ["$.run.max_cost_usd"]
    assert [w.path for w in budget_raises(limited, run(max_tokens=10**9))] == ["$.run.max_tokens"]
    gone = copy.deepcopy(limited)
    del gone["run"]["max_tokens"]
    assert "no limit" in budget_raises(limited, gone)[0].message
    assert budget_raises(limited, run(budget="30m", max_cost_usd=1.0, max_tokens=10)) == []  # lowered
    assert budget_raises(BASE, limited) == []  # a limit where there was none lowers it


def test_capability_changes_name_every_added_or_changed_capability_with_its_definition() -> None:
    def edit(d: dict[str, Any]) -> None:
        d["verify"]["commands"][1]["argv"] = ["ruff", "check", "--fix"]  # an optional command changed
        d["verify"]["commands"][0]["description"] = "only words"  # not a capability
        d["verify"]["runners"].append({"id": "acceptance", "argv": ["./accept.sh"]})
        d["worktree"]["setup"].append({"argv": ["npm", "ci"]})
        d["hosts"]["codex"] = {"kind": "codex"}

    changes = capability_changes(BASE, changed(edit))
    assert [(c.capability_id, c.change) for c in changes] == [
        ("command:lint", "changed"),
        ("host:codex", "added"),
        ("runner:acceptance", "added"),
        ("setup:1", "added"),
    ]
    assert changes[2].definition["argv"] == ["./accept.sh"]
    lines = describe_changes(changes)
    assert lines[0] == "command:lint (changed): ruff check --fix"
    assert lines[3] == "setup:1 (added): npm ci"


def test_every_change_needs_one_approval_with_a_reason_and_nothing_else() -> None:
    changes = capability_changes(BASE, changed(lambda d: d["verify"]["runners"].append({"id": "a", "argv": ["x"]})))
    assert approval_problems(changes, [{"capabilityId": "runner:a", "reason": "reads files"}]) == []
    missing = approval_problems(changes, [])
    assert [(p.code, p.path) for p in missing] == [("RUN_POLICY_UNAPPROVED", "$.approvals[capabilityId=runner:a]")]
    blank = approval_problems(changes, [{"capabilityId": "runner:a", "reason": "  "}])
    assert [p.code for p in blank] == ["RUN_POLICY_UNAPPROVED"]
    extra = approval_problems(
        changes, [{"capabilityId": "runner:a", "reason": "ok"}, {"capabilityId": "command:tests", "reason": "?"}]
    )
    assert [p.code for p in extra] == ["RUN_POLICY_INVALID"]
    twice = approval_problems(changes, [{"capabilityId": "runner:a", "reason": "ok"}] * 2)
    assert [p.code for p in twice] == ["RUN_POLICY_INVALID"]


def _transition(stage: Stage = Stage.PREPARED) -> Transition:
    return Transition(
        transition_id=transition_id("a" * 64, [], "b" * 64, "req-1"),
        run_id="run-1",
        stage=stage,
        old_hash="b" * 64,
        new_hash="a" * 64,
        proposal_digest="c" * 64,
        config_file=".agentops/proposals/p.toml",
        approvals=(),
        changes=(),
        mode="user",
        requested_by=RequestedBy.from_json(
            {"workerId": "coordinator", "generation": 1, "requestId": "req-1", "requestDigest": "d" * 64}
        ),
        requested_at=1.0,
    )


def test_stages_move_strictly_forward_and_refusal_only_before_bound() -> None:
    """Invariant: prepared -> fenced -> bound -> synchronized -> complete, each once; refused only before bound."""
    transition = _transition()
    for stage in ORDER[1:]:
        for wrong in ORDER:
            if wrong is not stage:  # a skipped, repeated or earlier stage
                with pytest.raises(ValueError):
                    transition.advanced(wrong, 2.0)
        transition = transition.advanced(stage, 2.0)
    assert [s.stage for s in transition.stages] == ["fenced", "bound", "synchronized", "complete"]
    assert transition.ended
    assert _transition().advanced(Stage.REFUSED, 2.0).ended
    assert _transition(Stage.FENCED).advanced(Stage.REFUSED, 2.0).ended
    for late in (Stage.BOUND, Stage.SYNCHRONIZED, Stage.COMPLETE):
        with pytest.raises(ValueError):
            _transition(late).advanced(Stage.REFUSED, 2.0)
    assert Transition.from_json(transition.to_json()) == transition


def test_the_same_change_proposed_again_is_a_new_transition() -> None:
    first = transition_id("a" * 64, [], "b" * 64, "req-1")
    assert first == transition_id("a" * 64, [], "b" * 64, "req-1")
    assert first != transition_id("a" * 64, [], "b" * 64, "req-2")
    assert first.startswith("policy-") and len(first) == len("policy-") + 16


# -- the request's command line ---------------------------------------------------------------------------------------


def _fields(*argv: str) -> dict[str, Any]:
    from git_agentops.cli.request import build_parser, fields_from_args

    return fields_from_args(build_parser().parse_args(["policy", *argv]))


def test_the_policy_request_pairs_each_approve_with_its_reason() -> None:
    fields = _fields(
        "--file", "p.toml", "--expected-policy-hash", "a" * 64,
        "--approve", "runner:x", "--reason", "reads files",
        "--approve", "host:codex", "--reason", "the team's CLI",
        "--approval", "setup:1=npm ci",
    )  # fmt: skip
    assert fields["configFile"] == "p.toml"
    assert [(a["capabilityId"], a["reason"]) for a in fields["approvals"]] == [
        ("setup:1", "npm ci"),
        ("runner:x", "reads files"),
        ("host:codex", "the team's CLI"),
    ]
    assert _fields("--config-file", "p.toml", "--expected-policy-hash", "a" * 64)["approvals"] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--approve", "runner:x"],
        ["--reason", "why"],
        ["--approve", "runner:x", "--reason", " "],
        ["--approve", "runner:x", "--reason", "a", "--reason", "b"],
    ],
)
def test_an_approve_without_exactly_one_reason_is_a_usage_error(argv: list[str]) -> None:
    from git_agentops.errors import AgentOpsError

    with pytest.raises(AgentOpsError) as caught:
        _fields("--file", "p.toml", "--expected-policy-hash", "a" * 64, *argv)
    assert caught.value.code == "USAGE"
