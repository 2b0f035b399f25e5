"""Receipts record the sandbox level of every agent whose work they cover; ``--require-sandbox`` refuses weaker ones.

Invariants: a worker's recorded level is the weakest of its generations (a restart on a weaker machine is never
reported at the stronger level); a receipt's top-level level is the weakest of its deliveries, its reviews and the
coordinator, and is absent when one of them is not recorded; ``verify --require-sandbox LEVEL`` refuses a receipt
where any of these is weaker than LEVEL or missing (``RECEIPT_SANDBOX_WEAKER``) and judges nothing about levels
without the flag; the levels are covered by the seals and the signature like everything else.

Hermetic like ``test_receipt_policy`` (whose made-up chain and builder inputs it reuses), except the CLI cases,
which run the real command on the real repository of ``test_receipt_ranges``.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from git_agentops.errors import CODES, EXIT_NEGATIVE, AgentOpsError
from git_agentops.model.delivery import Digest, ReviewResult
from git_agentops.model.run import Role, Worker
from git_agentops.model.sandbox import LEVELS, weaker, weakest, weakest_of_all
from git_agentops.model.task import delivered
from git_agentops.receipts import Verdict, make_receipt
from git_agentops.receipts.build import integration_receipt
from git_agentops.schema import documents

from ..helpers import allowed_signer, ssh_key
from .test_receipt_policy import CREATED, P2, SHA_A, T2, _integration, _payload, _tasks
from .test_receipt_policy import _verify as _verify_policy
from .test_receipt_ranges import _attach, _target
from .test_receipt_ranges import _verify as _verify_cli
from .test_receipts import _reseal, _statement

# -- the weakest-level rule ---------------------------------------------------------------------------------------


def test_levels_are_ordered_strongest_first_and_the_sandbox_package_agrees() -> None:
    from git_agentops.sandbox.plan import LEVELS as PLAN_LEVELS

    assert LEVELS == PLAN_LEVELS == ("namespace", "landlock", "none")
    assert weaker("landlock", "namespace") and weaker("none", "landlock")
    assert not weaker("namespace", "landlock") and not weaker("landlock", "landlock")
    assert weaker("bogus", "none")  # an unknown level fails closed


def test_weakest_skips_unrecorded_levels_but_weakest_of_all_does_not() -> None:
    assert weakest(["namespace", "landlock", "namespace"]) == "landlock"
    assert weakest(["namespace", None]) == "namespace"
    assert weakest([None, None]) is None and weakest([]) is None
    assert weakest(["none", "bogus"]) == "bogus"
    assert weakest_of_all(["namespace", "none", "landlock"]) == "none"
    assert weakest_of_all(["namespace", None]) is None  # the unrecorded one could be the weakest


def _worker(sandbox: str | None = None) -> Worker:
    return Worker("child-a", Role.CHILD, "scripted", "/w/a", "refs/heads/agentops/run/a", generation=1, sandbox=sandbox)


def test_a_worker_records_the_weakest_level_any_generation_ran_at() -> None:
    worker = _worker()
    seen = []
    for level in ("namespace", "landlock", "namespace", "none", "namespace"):  # restarted on other machines
        worker = replace(worker, sandbox=worker.ran_at(level))
        seen.append(worker.sandbox)
    assert seen == ["namespace", "landlock", "landlock", "none", "none"]


def test_the_worker_record_carries_its_level_and_older_records_read_as_none() -> None:
    doc = _worker("landlock").to_json()
    documents.validate(doc, "worker", what="worker record")
    assert doc["sandbox"] == "landlock" and Worker.from_json(doc) == _worker("landlock")
    older = {k: v for k, v in doc.items() if k != "sandbox"}
    documents.validate(older, "worker", what="worker record")
    assert Worker.from_json(older).sandbox is None
    with pytest.raises(AgentOpsError) as refused:
        documents.validate({**doc, "sandbox": "chroot"}, "worker", what="worker record")
    assert refused.value.code == "SCHEMA_INVALID"


# -- the builder --------------------------------------------------------------------------------------------------


def _receipt(
    levels: Mapping[str, str | None], reviews: tuple[str | None, ...] = ("namespace",), *, keys: tuple[Path, ...] = ()
) -> bytes:
    """The pipeline's receipt of the two-delivery integration, its workers at ``levels`` (worker id -> level): T1
    delivered by ``worker-1`` (the tasks of ``test_receipt_policy``), T2 by ``worker-2``; one review per entry of
    ``reviews``."""
    tasks = _tasks()
    tasks[T2] = replace(tasks[T2], delivery=replace(delivered(tasks[T2]), worker_id="worker-2"))
    records = [ReviewResult(f"r{i}", "approve", Digest(SHA_A)) for i, _ in enumerate(reviews)]
    integration = replace(
        _integration(),
        reviews=tuple(
            r if level is None else replace(r, sandbox=level) for r, level in zip(records, reviews, strict=True)
        ),
    )
    run: Any = SimpleNamespace(
        run_id="run-1",
        goal="make it better",
        target="main",
        contract_hash="b" * 64,
        integration=integration,
        coordinator_id="coordinator",
    )
    workers = [replace(_worker(level), worker_id=name) for name, level in levels.items()]
    return integration_receipt(run, tasks, policy_config_hash=P2, created_at=CREATED, keys=list(keys), workers=workers)


ALL_NAMESPACE = {"coordinator": "namespace", "worker-1": "namespace", "worker-2": "namespace"}


def _verify(data: bytes, require: str | None, *, allowed: Path | None = None) -> Verdict:
    return _verify_policy(data, allowed=allowed, require_sandbox=require)


def _weaker(verdict: Verdict, *shown: str) -> None:
    assert not verdict.ok and verdict.code == "RECEIPT_SANDBOX_WEAKER", verdict.message
    for text in shown:
        assert text in verdict.message, (text, verdict.message)


def test_the_receipt_records_each_agents_level_and_the_weakest_at_the_top() -> None:
    predicate = _payload(_receipt(ALL_NAMESPACE))["predicate"]
    assert [d["sandbox"] for d in predicate["deliveries"]["value"]] == ["namespace", "namespace"]
    assert [r["sandbox"] for r in predicate["reviews"]["value"]] == ["namespace"]
    assert predicate["sandbox"] == "namespace"
    # the coordinator counts: its plan shaped the work
    assert _payload(_receipt({**ALL_NAMESPACE, "coordinator": "none"}))["predicate"]["sandbox"] == "none"
    # so does a reviewer
    assert _payload(_receipt(ALL_NAMESPACE, ("namespace", "landlock")))["predicate"]["sandbox"] == "landlock"
    # a level not recorded anywhere leaves the top-level one out: it could have been the weakest
    unknown = _payload(_receipt({**ALL_NAMESPACE, "worker-2": None}))["predicate"]
    assert "sandbox" not in unknown and "sandbox" not in unknown["deliveries"]["value"][1]


def test_an_all_namespace_receipt_meets_every_requirement() -> None:
    data = _receipt(ALL_NAMESPACE)
    for level in (None, *LEVELS):
        verdict = _verify(data, level)
        assert verdict.ok, (level, verdict.message)


def test_a_landlock_delivery_fails_namespace_and_passes_landlock() -> None:
    data = _receipt({**ALL_NAMESPACE, "worker-2": "landlock"})
    assert _payload(data)["predicate"]["sandbox"] == "landlock"
    _weaker(_verify(data, "namespace"), "namespace is required", f"worker worker-2 (delivery of {T2}) ran at landlock")
    assert _verify(data, "landlock").ok and _verify(data, "none").ok and _verify(data, None).ok
    assert CODES["RECEIPT_SANDBOX_WEAKER"].exit_status == EXIT_NEGATIVE


def test_a_weaker_reviewer_or_coordinator_fails_the_requirement_and_is_named() -> None:
    _weaker(_verify(_receipt(ALL_NAMESPACE, ("namespace", "none")), "landlock"), "reviewer r1 ran at none")
    _weaker(_verify(_receipt({**ALL_NAMESPACE, "coordinator": "landlock"}), "namespace"), "coordinator included")


def test_an_older_receipt_without_levels_fails_any_requirement_but_verifies_without_one() -> None:
    old = _receipt({}, (None,))  # no worker records with a level: what receipts were before
    predicate = _payload(old)["predicate"]
    assert "sandbox" not in predicate and all("sandbox" not in d for d in predicate["deliveries"]["value"])
    assert _verify(old, None).ok
    for level in LEVELS:
        _weaker(_verify(old, level), "records no level")
    # a partly recorded receipt names what is missing
    _weaker(_verify(_receipt({**ALL_NAMESPACE, "worker-1": None}), "none"), "worker worker-1", "no level recorded")


def test_the_levels_are_sealed_and_signed(tmp_path: Path) -> None:
    key = ssh_key(tmp_path / "key")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(allowed_signer("alice", key))
    data = _receipt({**ALL_NAMESPACE, "worker-2": "landlock"}, keys=(key,))
    assert _verify(data, "landlock", allowed=allowed).ok
    envelope = json.loads(data)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["sandbox"] = "namespace"  # the top-level claim, under the original signature
    statement["predicate"]["deliveries"]["value"][1]["sandbox"] = "namespace"  # a sealed one, seal not updated
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    forged = json.dumps(envelope).encode()
    assert _verify(forged, "namespace", allowed=allowed).code == "RECEIPT_SIGNATURE_INVALID"
    assert _verify(make_receipt(statement), "namespace").code == "RECEIPT_SEAL_INVALID"  # unsigned: the seal


# -- the command line ---------------------------------------------------------------------------------------------


def test_the_cli_requires_a_level_shows_it_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    t = _target(tmp_path)  # an honest receipt of before levels were recorded
    assert _verify_cli(t.repo, "main")[0] == 0
    code, verdicts = _verify_cli(t.repo, "main", "--require-sandbox", "none")
    assert code == 1 and verdicts[0]["code"] == "RECEIPT_SANDBOX_WEAKER"
    statement = _statement(t.world)
    _reseal(statement, "deliveries", lambda value: [{**d, "sandbox": "landlock"} for d in value])
    _reseal(statement, "reviews", lambda value: [{**r, "sandbox": "namespace"} for r in value])
    statement["predicate"]["sandbox"] = "landlock"
    _attach(t.repo, t.world.m2, make_receipt(statement, keys=[t.world.key]))
    code, verdicts = _verify_cli(t.repo, "main", "--require-sandbox", "namespace")
    assert code == 1 and verdicts[0]["code"] == "RECEIPT_SANDBOX_WEAKER", verdicts
    assert "worker worker-1" in verdicts[0]["message"] and "ran at landlock" in verdicts[0]["message"]
    assert _verify_cli(t.repo, f"{t.base}..main", "--require-sandbox", "landlock")[0] == 0
    assert _verify_cli(t.repo, "main")[0] == 0
    unknown = subprocess.run(
        ["git", "agentops-receipt", "verify", "main", "--require-sandbox", "chroot"],
        cwd=t.repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 2 and "error[USAGE]" in unknown.stderr and "chroot" in unknown.stderr
    shown = subprocess.run(
        ["git", "agentops-receipt", "show", "main"], cwd=t.repo, capture_output=True, text=True, timeout=60, check=True
    )
    assert "sandbox: landlock (worker-1 landlock, worker-1 landlock, reviewer claude namespace)" in shown.stdout
