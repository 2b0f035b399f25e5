"""Receipts end to end: real commits, real ssh-keygen signatures, and a tamper suite over every field.

Every verdict is checked by its code: a receipt that fails for the wrong reason is a bug too.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from git_agentops.canonical import seal
from git_agentops.errors import CODES, EXIT_NEGATIVE, EXIT_REFUSED, AgentOpsError
from git_agentops.model.task import Criterion, Task, TaskStatus
from git_agentops.receipts import (
    PAYLOAD_TYPE,
    Signature,
    Verdict,
    build_predicate,
    build_statement,
    dsse,
    envelope,
    evidence_summary,
    make_receipt,
    pae,
    parse_envelope,
    sshsig,
    task_record,
    verify_receipt,
)
from git_agentops.receipts.sshsig import sign, verify
from git_agentops.receipts.statement import SEALED, completeness_problem
from git_agentops.schema import documents

from ..conftest import git, make_repo
from ..helpers import REPLACEMENTS, allowed_signer, public_key, ssh_key
from ..helpers import mutations as mutations_of

ROOT = "task-00000000-0000-4000-8000-000000000000"
T1 = "task-11111111-1111-4111-8111-111111111111"
T2 = "task-22222222-2222-4222-8222-222222222222"
SHA_A = "a" * 64
SHA_B = "b" * 64
NOW = datetime(2026, 1, 1, tzinfo=UTC)

Statement = dict[str, Any]


@dataclass
class World:
    """A real repository with two deliveries merged --no-ff onto main, and SSH keys."""

    repo: Path
    base: str
    d1: str
    d2: str
    m1: str
    m2: str
    key: Path
    other_key: Path
    allowed: Path

    def tree(self, commit: str) -> str:
        return git(self.repo, "rev-parse", f"{commit}^{{tree}}")

    def parents(self, commit: str) -> list[str]:
        return git(self.repo, "rev-list", "--parents", "-n1", commit).split()[1:]

    def chain(self, commit: str, base: str) -> list[str]:
        """First-parent history from ``commit`` down to ``base`` (excluded); all of it when base is not on it."""
        out = []
        for oid in git(self.repo, "rev-list", "--first-parent", commit).split():
            if oid == base:
                break
            out.append(oid)
        return out


def _commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"add {name}")
    return git(repo, "rev-parse", "HEAD")


def merge_two(repo: Path, start: str) -> tuple[str, str, str, str]:
    """Two deliveries made from ``start`` and merged ``--no-ff`` onto main, as an integration does:
    (delivery 1, delivery 2, merge 1, merge 2)."""
    git(repo, "checkout", "-q", "-b", "d1", start)
    d1 = _commit(repo, "a.txt", "a\n")
    git(repo, "checkout", "-q", "-b", "d2", start)
    d2 = _commit(repo, "b.txt", "b\n")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "d1", "-m", "agentops: merge task 1")
    m1 = git(repo, "rev-parse", "HEAD")
    git(repo, "merge", "-q", "--no-ff", "d2", "-m", "agentops: merge task 2")
    return d1, d2, m1, git(repo, "rev-parse", "HEAD")


@pytest.fixture
def world(tmp_path: Path) -> World:
    repo = make_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    d1, d2, m1, m2 = merge_two(repo, base)
    keys = tmp_path / "keys"
    keys.mkdir()
    key, other = ssh_key(keys / "key"), ssh_key(keys / "other")
    allowed = keys / "allowed_signers"
    allowed.write_text(allowed_signer("alice", key))
    return World(repo, base, d1, d2, m1, m2, key, other, allowed)


def _tasks(child_status: str = "delivered") -> list[dict[str, Any]]:
    return [
        {"id": ROOT, "parent": None, "status": "running", "title": "the goal"},
        {"id": T1, "parent": ROOT, "status": child_status},
        {"id": T2, "parent": ROOT, "status": "delivered", "dependencies": [T1]},
    ]


def _delivery(task: str, source: str) -> dict[str, Any]:
    return {"taskId": task, "workerId": "worker-1", "generation": 1, "sourceCommit": source, "deliveryDigest": SHA_A}


def _statement(w: World) -> Statement:
    steps = [
        {"label": "merge task 1", "commit": w.m1, "parents": [w.base, w.d1], "tree": w.tree(w.m1)},
        {"label": "merge task 2", "commit": w.m2, "parents": [w.m1, w.d2], "tree": w.tree(w.m2)},
    ]
    evidence = {
        "commandId": "tests",
        "kind": "command",
        "argvDigest": SHA_A,
        "exitCode": 0,
        "passed": True,
        "tests": {"passed": 3, "failed": 0, "skipped": 0, "errors": 0, "total": 3},
        "outputDigest": SHA_B,
        "tree": w.tree(w.m2),
        "commit": w.m2,
        "tail": "3 passed",  # dropped by evidence_summary
        "durationMs": 12,
    }
    predicate = build_predicate(
        run_id="run-1",
        goal="make it better",
        policy_config_hash=SHA_A,
        toolkit_version="0.1.0",
        tasks=_tasks(),
        contract_hash=SHA_B,
        deliveries=[_delivery(T1, w.d1), _delivery(T2, w.d2)],
        integration={"target": "main", "base": w.base, "order": [T1, T2], "steps": steps},
        verification=[evidence_summary(evidence)],
        reviews=[{"reviewer": "claude", "verdict": "approved", "reportDigest": SHA_A, "taskId": T1}],
        created_at=1_767_225_600.0,
    )
    return build_statement(commit=w.m2, tree=w.tree(w.m2), subject_name="main", predicate=predicate)


def _check(
    w: World,
    data: bytes | None,
    *,
    commit: str | None = None,
    require: bool = True,
    allowed: Path | str | None = "default",
    when: datetime | None = NOW,
) -> Verdict:
    commit = commit or w.m2
    return verify_receipt(
        data,
        commit=commit,
        tree=w.tree(commit),
        parents=w.parents(commit),
        first_parent_chain=w.chain,
        allowed_signers=w.allowed if allowed == "default" else allowed,  # type: ignore[arg-type]
        require_signature=require,
        when=when,
    )


def _doc(data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(data)
    return doc


def _payload_statement(data: bytes) -> Statement:
    statement: Statement = json.loads(base64.b64decode(_doc(data)["payload"]))
    return statement


def _with_payload(data: bytes, statement: Statement) -> bytes:
    """The same envelope (signatures kept) around another statement."""
    doc = _doc(data)
    doc["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(doc).encode()


def _signed(w: World, statement: Statement | None = None) -> bytes:
    return make_receipt(statement if statement is not None else _statement(w), keys=[w.key])


# -- DSSE --------------------------------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_example() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    # lengths are bytes, not characters; an empty body still has its separator
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_envelope_round_trips_and_is_canonical(world: World) -> None:
    statement = _statement(world)
    sig = Signature("SHA256:x", b"\x00\x01")
    doc = envelope(statement, [sig])
    parsed = parse_envelope(dsse.dump_envelope(doc))
    assert parsed.payload_type == PAYLOAD_TYPE
    assert parsed.signatures == (sig,)
    assert parsed.statement() == statement
    assert parsed.to_json() == doc
    assert parsed.payload == dsse.statement_payload(statement)


# -- SSH signatures ----------------------------------------------------------------------------------------------


def test_sign_and_verify_round_trip(world: World) -> None:
    data = pae(PAYLOAD_TYPE, b"{}")
    signature = sign(data, key=world.key)
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(world.key.with_suffix(".pub"))], capture_output=True, text=True, check=True
    )
    assert signature.keyid == listed.stdout.split()[1]
    assert verify(data, signature, allowed_signers=world.allowed) == "alice"
    assert verify(data, signature, allowed_signers=world.allowed, when=NOW) == "alice"
    with pytest.raises(AgentOpsError) as bad:
        verify(data + b" ", signature, allowed_signers=world.allowed)
    assert bad.value.code == "RECEIPT_SIGNATURE_INVALID"


def test_signing_failures_are_receipt_signing_failed(world: World, tmp_path: Path) -> None:
    for kwargs in ({"key": tmp_path / "no-such-key"}, {"key": world.key, "ssh_keygen": str(tmp_path / "nothing")}):
        with pytest.raises(AgentOpsError) as failed:
            sign(b"data", **kwargs)  # type: ignore[arg-type]
        assert failed.value.code == "RECEIPT_SIGNING_FAILED"
        assert failed.value.exit_status == EXIT_REFUSED


def test_a_key_that_needs_a_passphrase_fails_instead_of_prompting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    locked = ssh_key(tmp_path / "locked", passphrase="secret")
    with pytest.raises(AgentOpsError) as failed:
        sign(b"data", key=locked)
    assert failed.value.code == "RECEIPT_SIGNING_FAILED"


def test_a_signature_in_another_namespace_is_invalid(world: World) -> None:
    data = pae(PAYLOAD_TYPE, b"{}")
    with pytest.raises(AgentOpsError) as bad:
        verify(data, sign(data, key=world.key, namespace="git"), allowed_signers=world.allowed)
    assert bad.value.code == "RECEIPT_SIGNATURE_INVALID"


def test_verify_time_must_be_aware() -> None:
    assert sshsig.verify_time(NOW) == "20260101000000Z"
    with pytest.raises(ValueError, match="aware"):
        sshsig.verify_time(datetime(2026, 1, 1))


# -- verdicts on valid receipts ----------------------------------------------------------------------------------


def test_valid_signed_receipt(world: World) -> None:
    verdict = _check(world, _signed(world))
    assert verdict.ok, verdict.message
    assert (verdict.code, verdict.principals, verdict.commit) == (None, ("alice",), world.m2)
    assert "alice" in verdict.message
    assert verdict.to_json()["ok"] is True


def test_unsigned_receipt_passes_only_without_require_signature(world: World) -> None:
    unsigned = make_receipt(_statement(world))
    assert _check(world, unsigned, require=False).ok
    assert _check(world, unsigned, require=False, allowed=None).ok
    verdict = _check(world, unsigned, require=True)
    assert (verdict.ok, verdict.code) == (False, "RECEIPT_SIGNATURE_INVALID")
    assert "unsigned" in verdict.message


def test_several_signatures_must_all_verify(world: World, tmp_path: Path) -> None:
    statement = _statement(world)
    both = make_receipt(statement, keys=[world.key, world.other_key])
    assert _check(world, both).code == "RECEIPT_UNTRUSTED_SIGNER"
    world.allowed.write_text(allowed_signer("alice", world.key) + allowed_signer("bob", world.other_key))
    verdict = _check(world, both)
    assert verdict.ok and verdict.principals == ("alice", "bob")


def test_missing_receipt(world: World) -> None:
    verdict = _check(world, None)
    assert (verdict.ok, verdict.code) == (False, "RECEIPT_MISSING")


# -- trust -------------------------------------------------------------------------------------------------------


def test_a_key_not_in_allowed_signers_is_untrusted(world: World) -> None:
    data = make_receipt(_statement(world), keys=[world.other_key])
    verdict = _check(world, data)
    assert verdict.code == "RECEIPT_UNTRUSTED_SIGNER", verdict.message
    assert _check(world, data, require=False).code == "RECEIPT_UNTRUSTED_SIGNER"


def test_a_signature_is_never_ignored_without_allowed_signers(world: World, tmp_path: Path) -> None:
    data = _signed(world)
    assert _check(world, data, require=False, allowed=None).code == "RECEIPT_UNTRUSTED_SIGNER"
    assert _check(world, data, allowed=tmp_path / "absent").code == "RECEIPT_UNTRUSTED_SIGNER"


def test_an_expired_key_is_untrusted_at_verify_time(world: World) -> None:
    world.allowed.write_text(allowed_signer("alice", world.key, ',valid-before="20200101Z"'))
    data = _signed(world)
    verdict = _check(world, data, when=datetime.now(UTC))
    assert verdict.code == "RECEIPT_UNTRUSTED_SIGNER", verdict.message
    assert _check(world, data, when=None).code == "RECEIPT_UNTRUSTED_SIGNER"  # ssh-keygen's now
    assert _check(world, data, when=datetime(2019, 6, 1, tzinfo=UTC)).ok  # it was valid then
    world.allowed.write_text(allowed_signer("alice", world.key, ',valid-after="20300101Z"'))
    assert _check(world, data).code == "RECEIPT_UNTRUSTED_SIGNER"


def test_a_key_allowed_only_for_another_namespace_is_untrusted(world: World) -> None:
    world.allowed.write_text(f'alice namespaces="git" {public_key(world.key)}\n')
    verdict = _check(world, _signed(world))
    assert verdict.code == "RECEIPT_UNTRUSTED_SIGNER", verdict.message


# -- subject binding ---------------------------------------------------------------------------------------------


def test_a_receipt_copied_onto_another_commit_is_a_subject_mismatch(world: World) -> None:
    data = _signed(world)
    for other in (world.m1, world.d1, world.base):
        verdict = _check(world, data, commit=other)
        assert verdict.code == "RECEIPT_SUBJECT_MISMATCH", (other, verdict.message)


# -- the tamper suite --------------------------------------------------------------------------------------------

Mutation = Callable[[Statement, World], None]


def _pred(s: Statement) -> dict[str, Any]:
    predicate: dict[str, Any] = s["predicate"]
    return predicate


def _reseal(s: Statement, key: str, change: Callable[[Any], Any]) -> None:
    """Change a sealed value and recompute its digest: the seal stays consistent, the content is wrong."""
    value = copy.deepcopy(_pred(s)[key]["value"])
    value = change(value) or value
    _pred(s)[key] = seal(value)


def _set(path: str, value: Any) -> Mutation:
    """Set a value by dotted path under the statement (digits index lists; "w.<attr>" reads the World).

    No seal is updated.
    """

    def mutate(s: Statement, w: World) -> None:
        *parents, last = path.split(".")
        node: Any = s
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        resolved = getattr(w, value[2:]) if isinstance(value, str) and value.startswith("w.") else value
        node[int(last) if last.isdigit() else last] = resolved

    return mutate


def _seal_change(key: str, change: Callable[[Any], Any]) -> Mutation:
    return lambda s, w: _reseal(s, key, change)


def _step_commit(v: dict[str, Any]) -> None:
    v["steps"][0]["commit"] = v["steps"][1]["commit"]


# (name, mutation, the code when the tampered statement is signed again by the trusted key; None = still valid,
# because an unsealed plain field signed by a trusted key is an authentic claim)
TAMPERS: list[tuple[str, Mutation, str | None]] = [
    ("runId", _set("predicate.runId", "run-2"), None),
    ("goal.value", _set("predicate.goal.value", "make it worse"), "RECEIPT_SEAL_INVALID"),
    ("goal.digest", _set("predicate.goal.digest", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("goal resealed", _seal_change("goal", lambda v: "make it worse"), "RECEIPT_SEAL_INVALID"),
    ("goalHash", _set("predicate.goalHash", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("policy.value.configHash", _set("predicate.policy.value.configHash", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("policy.value.toolkitVersion", _set("predicate.policy.value.toolkitVersion", "9"), "RECEIPT_SEAL_INVALID"),
    ("policy.digest", _set("predicate.policy.digest", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("policy resealed", _seal_change("policy", lambda v: {**v, "configHash": SHA_B}), None),
    ("tasks.value.status", _set("predicate.tasks.value.1.status", "running"), "RECEIPT_SEAL_INVALID"),
    ("tasks.value.parent", _set("predicate.tasks.value.2.parent", T1), "RECEIPT_SEAL_INVALID"),
    ("tasks resealed: running", _seal_change("tasks", lambda v: _tasks("running")), "RECEIPT_INCOMPLETE"),
    ("tasks resealed: blocked", _seal_change("tasks", lambda v: _tasks("blocked")), "RECEIPT_INCOMPLETE"),
    ("tasks resealed: no root", _seal_change("tasks", lambda v: v[1:]), "RECEIPT_INCOMPLETE"),
    ("contractHash", _set("predicate.contractHash", SHA_A), None),
    (
        "deliveries.value.sourceCommit",
        _set("predicate.deliveries.value.0.sourceCommit", "w.d2"),
        "RECEIPT_SEAL_INVALID",
    ),
    ("deliveries.value.generation", _set("predicate.deliveries.value.1.generation", 2), "RECEIPT_SEAL_INVALID"),
    ("deliveries.digest", _set("predicate.deliveries.digest", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("deliveries resealed: dropped", _seal_change("deliveries", lambda v: v[:1]), "RECEIPT_INCOMPLETE"),
    (
        "deliveries resealed: source",
        _seal_change("deliveries", lambda v: [v[0], {**v[1], "sourceCommit": v[0]["sourceCommit"]}]),
        "RECEIPT_SUBJECT_MISMATCH",
    ),
    ("integration.value.base", _set("predicate.integration.value.base", "w.d1"), "RECEIPT_SEAL_INVALID"),
    ("integration.value.steps", _set("predicate.integration.value.steps.1.tree", "0" * 40), "RECEIPT_SEAL_INVALID"),
    ("integration.digest", _set("predicate.integration.digest", SHA_A), "RECEIPT_SEAL_INVALID"),
    (
        "integration resealed: order",
        _seal_change("integration", lambda v: {**v, "order": [T2, T1]}),
        "RECEIPT_SUBJECT_MISMATCH",
    ),
    (
        "integration resealed: base",
        _seal_change("integration", lambda v: {**v, "base": v["steps"][0]["parents"][1]}),
        "RECEIPT_SUBJECT_MISMATCH",
    ),
    ("integration resealed: step", _seal_change("integration", _step_commit), "RECEIPT_SUBJECT_MISMATCH"),
    (
        "integration resealed: one step",
        _seal_change("integration", lambda v: {**v, "steps": v["steps"][1:]}),
        "RECEIPT_SUBJECT_MISMATCH",
    ),
    ("verification.value.exitCode", _set("predicate.verification.value.0.exitCode", 1), "RECEIPT_SEAL_INVALID"),
    ("verification.value.tests", _set("predicate.verification.value.0.tests.failed", 1), "RECEIPT_SEAL_INVALID"),
    ("verification.digest", _set("predicate.verification.digest", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("reviews.value.verdict", _set("predicate.reviews.value.0.verdict", "rejected"), "RECEIPT_SEAL_INVALID"),
    ("reviews.value.reviewer", _set("predicate.reviews.value.0.reviewer", "mallory"), "RECEIPT_SEAL_INVALID"),
    ("reviews.digest", _set("predicate.reviews.digest", SHA_B), "RECEIPT_SEAL_INVALID"),
    ("toolkitVersion", _set("predicate.toolkitVersion", "9.9.9"), None),
    ("createdAt", _set("predicate.createdAt", "2030-01-01T00:00:00Z"), None),
    ("subject commit", _set("subject.0.digest.gitCommit", "w.m1"), "RECEIPT_SUBJECT_MISMATCH"),
    ("subject tree", _set("subject.0.digest.gitTree", "0" * 40), "RECEIPT_SUBJECT_MISMATCH"),
    ("subject name", _set("subject.0.name", "main"), "RECEIPT_MALFORMED"),
    ("predicateType", _set("predicateType", "https://slsa.dev/provenance/v1"), "RECEIPT_MALFORMED"),
    ("_type", _set("_type", "https://in-toto.io/Statement/v0.1"), "RECEIPT_MALFORMED"),
    ("extra predicate key", _set("predicate.note", "hi"), "RECEIPT_MALFORMED"),
    ("extra sealed key", _set("predicate.goal.note", "hi"), "RECEIPT_MALFORMED"),
    ("wrong type", _set("predicate.deliveries.value.0.generation", "1"), "RECEIPT_MALFORMED"),
]


def test_every_predicate_key_and_every_seal_is_tampered() -> None:
    names = [name for name, _, _ in TAMPERS]
    for key in documents.SCHEMAS.get()[0]["receipt-predicate"]["required"]:
        assert any(n == key or n.startswith((key + ".", key + " ")) for n in names), key
    for key in SEALED:
        assert any(n.startswith(key + ".value") for n in names), key  # a nested value inside the seal


@pytest.mark.parametrize(("name", "mutate", "resigned_code"), TAMPERS, ids=[t[0] for t in TAMPERS])
def test_tamper(world: World, name: str, mutate: Mutation, resigned_code: str | None) -> None:
    original = _signed(world)
    statement = _payload_statement(original)
    mutate(statement, world)
    assert statement != _payload_statement(original)

    # the original signature over the tampered payload: never valid (malformed ones fail before the signature)
    kept = _check(world, _with_payload(original, statement))
    expected_kept = "RECEIPT_MALFORMED" if resigned_code == "RECEIPT_MALFORMED" else "RECEIPT_SIGNATURE_INVALID"
    assert (kept.ok, kept.code) == (False, expected_kept), kept.message

    # signed again by the trusted key (or unsigned, where allowed): the check behind the signature catches it
    resigned = make_receipt(statement, keys=[world.key])
    unsigned = dsse.dump_envelope(envelope(statement, []))
    for data, require in ((resigned, True), (unsigned, False)):
        verdict = _check(world, data, require=require)
        assert (verdict.ok, verdict.code) == (resigned_code is None, resigned_code), (name, verdict.message)


def test_tampered_envelope_fields(world: World) -> None:
    original = _signed(world)
    doc = _doc(original)

    retyped = {**doc, "payloadType": "application/json"}
    verdict = _check(world, json.dumps(retyped).encode())
    assert verdict.code == "RECEIPT_MALFORMED" and "payloadType" in verdict.message

    blob = bytearray(base64.b64decode(doc["signatures"][0]["sig"]))
    for where in (len(blob) - 5, 30):  # inside the ed25519 signature; inside the public key
        flipped = bytearray(blob)
        flipped[where] ^= 0x01
        bad_sig = {**doc, "signatures": [{**doc["signatures"][0], "sig": base64.b64encode(flipped).decode()}]}
        verdict = _check(world, json.dumps(bad_sig).encode())
        assert verdict.code == "RECEIPT_SIGNATURE_INVALID", (where, verdict.message)

    truncated = {**doc, "signatures": [{**doc["signatures"][0], "sig": base64.b64encode(blob[:40]).decode()}]}
    assert _check(world, json.dumps(truncated).encode()).code == "RECEIPT_SIGNATURE_INVALID"
    not_sshsig = {**doc, "signatures": [{**doc["signatures"][0], "sig": base64.b64encode(b"junk!").decode()}]}
    assert _check(world, json.dumps(not_sshsig).encode()).code == "RECEIPT_SIGNATURE_INVALID"
    rekeyed = {**doc, "signatures": [{**doc["signatures"][0], "keyid": "SHA256:someone-else"}]}
    assert _check(world, json.dumps(rekeyed).encode()).code == "RECEIPT_SIGNATURE_INVALID"
    stripped = {**doc, "signatures": []}
    assert _check(world, json.dumps(stripped).encode()).code == "RECEIPT_SIGNATURE_INVALID"
    assert _check(world, json.dumps(stripped).encode(), require=False).ok


def test_a_consistent_receipt_for_a_history_the_commit_does_not_have(world: World) -> None:
    # Internally consistent and correctly signed, the last step right, but m1 did not have d2 as first parent.
    statement = _statement(world)
    _reseal(
        statement,
        "integration",
        lambda v: {**v, "base": world.d2, "steps": [{**v["steps"][0], "parents": [world.d2, world.d1]}, v["steps"][1]]},
    )
    verdict = _check(world, _signed(world, statement))
    assert verdict.code == "RECEIPT_SUBJECT_MISMATCH", verdict.message
    assert "first-parent" in verdict.message
    # without the ancestry walk only the last step is checked against the commit
    lenient = verify_receipt(
        _signed(world, statement),
        commit=world.m2,
        tree=world.tree(world.m2),
        parents=world.parents(world.m2),
        first_parent_chain=None,
        allowed_signers=world.allowed,
        require_signature=True,
        when=NOW,
    )
    assert lenient.ok


def test_a_base_the_repository_cannot_walk_to_is_a_mismatch(world: World) -> None:
    def broken(commit: str, base: str) -> list[str]:
        raise AgentOpsError("OBJECT_MISSING", f"{base} is not in this repository")

    verdict = verify_receipt(
        _signed(world),
        commit=world.m2,
        tree=world.tree(world.m2),
        parents=world.parents(world.m2),
        first_parent_chain=broken,
        allowed_signers=world.allowed,
        require_signature=True,
        when=NOW,
    )
    assert verdict.code == "RECEIPT_SUBJECT_MISMATCH"


# -- malformed inputs --------------------------------------------------------------------------------------------


def _envelope_json(**fields: Any) -> bytes:
    doc = {"payload": base64.b64encode(b'{"_type": 1}').decode(), "payloadType": PAYLOAD_TYPE, "signatures": []}
    doc.update(fields)
    return json.dumps(doc).encode()


def _payload(text: bytes) -> bytes:
    return _envelope_json(payload=base64.b64encode(text).decode())


MALFORMED: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("not json", b"this is not json"),
    ("not utf-8", b'{"payload": "\xff"}'),
    ("json array", b"[]"),
    ("json null", b"null"),
    ("huge", b'{"payload": "' + b"A" * (dsse.MAX_ENVELOPE_BYTES + 4) + b'"}'),
    ("nan", b'{"payload": NaN}'),
    ("duplicate key", b'{"payload": "", "payload": "", "payloadType": "x", "signatures": []}'),
    ("missing signatures", json.dumps({"payload": "", "payloadType": PAYLOAD_TYPE}).encode()),
    ("extra envelope field", _envelope_json(extra=1)),
    ("signatures not a list", _envelope_json(signatures="sig")),
    ("payload not a string", _envelope_json(payload=12)),
    ("payload base64 garbage", _envelope_json(payload="!!!not base64!!!")),
    ("payload bad padding", _envelope_json(payload="abc")),
    ("payload url-safe base64", _envelope_json(payload=base64.urlsafe_b64encode(b"\xfb\xff\xfe").decode())),
    ("payload non-canonical base64", _envelope_json(payload="YR==")),
    ("sig base64 garbage", _envelope_json(signatures=[{"keyid": "k", "sig": "@@@@"}])),
    ("sig extra field", _envelope_json(signatures=[{"keyid": "k", "sig": "AAAA", "x": 1}])),
    ("sig missing keyid", _envelope_json(signatures=[{"sig": "AAAA"}])),
    ("payloadType empty", _envelope_json(payloadType="")),
    ("payload not json", _payload(b"not json")),
    ("payload json list", _payload(b"[]")),
    ("payload wrong _type", _payload(b'{"_type": 1}')),
    ("payload bad utf-8", _payload(b'{"_type": "\xff"}')),
]


@pytest.mark.parametrize(("name", "data"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_inputs(world: World, name: str, data: bytes) -> None:
    verdict = _check(world, data, require=False)
    assert (verdict.ok, verdict.code) == (False, "RECEIPT_MALFORMED"), verdict.message
    with pytest.raises(AgentOpsError) as refused:
        parse_envelope(data).statement()
    assert refused.value.code == "RECEIPT_MALFORMED"


def test_malformed_statements(world: World) -> None:
    good = _statement(world)
    cases: list[Statement] = []
    for key in list(good):
        cases.append({k: v for k, v in good.items() if k != key})
    cases.append({**good, "extra": True})
    cases.append({**good, "subject": []})
    cases.append({**good, "subject": good["subject"] * 2})
    cases.append({**good, "subject": [{**good["subject"][0], "uri": "x"}]})
    cases.append({**good, "subject": [{**good["subject"][0], "digest": {"sha256": SHA_A}}]})
    cases.append({**good, "predicate": []})
    for statement in cases:
        verdict = _check(world, dsse.dump_envelope(envelope(statement, [])), require=False)
        assert verdict.code == "RECEIPT_MALFORMED", (statement.keys(), verdict.message)


def test_arbitrary_bytes_never_raise(world: World) -> None:
    samples = [bytes(range(256)), b"{" * 5000, b'{"a":' * 200 + b"1" + b"}" * 200, b"\x00", b"   "]
    for data in samples:
        verdict = _check(world, data, require=False)
        assert not verdict.ok and verdict.code == "RECEIPT_MALFORMED"


# -- completeness ------------------------------------------------------------------------------------------------


def test_an_incomplete_task_is_receipt_incomplete(world: World) -> None:
    statement = _statement(world)
    _reseal(statement, "tasks", lambda v: _tasks("ready"))
    verdict = _check(world, _signed(world, statement))
    assert verdict.code == "RECEIPT_INCOMPLETE"
    assert T1 in verdict.message and "ready" in verdict.message


def test_completeness_rule() -> None:
    t3 = "task-33333333-3333-4333-8333-333333333333"
    ok = _tasks()
    deliveries = [_delivery(T1, "1" * 40), _delivery(T2, "2" * 40)]
    assert completeness_problem(ok, deliveries) is None
    # an intermediate task is complete through its delivered children; leaves need their own delivery
    nested = [*ok, {"id": t3, "parent": T2, "status": "delivered"}]
    assert completeness_problem(nested, [deliveries[0], _delivery(t3, "3" * 40)]) is None
    assert "no delivery" in (completeness_problem(nested, deliveries[:1]) or "")
    problems = {
        "two roots": ([*ok, {"id": t3, "parent": None, "status": "delivered"}], deliveries),
        "unknown parent": (
            [*ok, {"id": t3, "parent": "task-99999999-9999-4999-8999-999999999999", "status": "delivered"}],
            deliveries,
        ),
        "cycle": (
            [ok[0], {"id": T1, "parent": T2, "status": "delivered"}, {"id": T2, "parent": T1, "status": "delivered"}],
            deliveries,
        ),
        "duplicate task": ([*ok, ok[1]], deliveries),
        "delivered twice": (ok, deliveries + deliveries[:1]),
        "delivery of an unknown task": (ok, [*deliveries, _delivery(t3, "3" * 40)]),
        "delivery of the root": (ok, [*deliveries, _delivery(ROOT, "3" * 40)]),
        "missing delivery": (ok, deliveries[:1]),
        "child not delivered": (_tasks("running"), deliveries),
    }
    for why, (tasks, delivered) in problems.items():
        assert completeness_problem(tasks, delivered), why


# -- building ----------------------------------------------------------------------------------------------------


def test_builders_validate_and_accept_model_tasks(world: World) -> None:
    task = Task(
        id=T1,
        title="t",
        intent="i",
        goal="g",
        criteria=(Criterion("c", "d", runner="acceptance"),),
        parent=ROOT,
        dependencies=(T2,),
        status=TaskStatus.DELIVERED,
    )
    assert task_record(task) == {
        "id": T1,
        "parent": ROOT,
        "status": "delivered",
        "title": "t",
        "revision": 1,
        "dependencies": [T2],
    }
    statement = _statement(world)
    predicate = statement["predicate"]
    assert predicate["createdAt"] == "2026-01-01T00:00:00.000Z"
    assert "tail" not in predicate["verification"]["value"][0]
    with pytest.raises(AgentOpsError) as bad:
        build_statement(commit="nope", tree=world.tree(world.m2), subject_name="main", predicate=predicate)
    assert bad.value.code == "SCHEMA_INVALID"
    assert statement["subject"][0]["name"] == "git:main"


def test_receipt_codes_are_registered_as_negative_answers() -> None:
    for code in (
        "RECEIPT_MISSING",
        "RECEIPT_MALFORMED",
        "RECEIPT_SIGNATURE_INVALID",
        "RECEIPT_UNTRUSTED_SIGNER",
        "RECEIPT_SUBJECT_MISMATCH",
        "RECEIPT_SEAL_INVALID",
        "RECEIPT_INCOMPLETE",
    ):
        assert CODES[code].exit_status == EXIT_NEGATIVE
    assert CODES["RECEIPT_SIGNING_FAILED"].exit_status == EXIT_REFUSED


# -- schemas -----------------------------------------------------------------------------------------------------


def test_receipt_schemas_agree_with_the_reference_validator(world: World) -> None:
    """Our subset validator and jsonschema agree on every single-step mutation of a real receipt."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    raw, ours = documents.SCHEMAS.get()
    registry: Registry[Any] = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in raw.values())
    statement = _statement(world)
    examples = {
        "in-toto-statement": statement,
        "receipt-predicate": statement["predicate"],
        "dsse-envelope": _doc(_signed(world, statement)),
    }
    for name, example in examples.items():
        reference = Draft202012Validator(raw[name], registry=registry)
        assert not ours.errors(example, documents.SCHEMA_ID_PREFIX + name)
        assert reference.is_valid(example)
        mutations = mutations_of(copy.deepcopy(example), replacements=(*REPLACEMENTS, "a" * 64), every_item=False)
        rejected = 0
        for mutated in mutations:
            mine = not ours.errors(mutated, documents.SCHEMA_ID_PREFIX + name)
            assert mine == reference.is_valid(mutated), (name, mutated)
            rejected += not mine
        assert rejected > len(mutations) // 2, name  # the schemas are strict: most mutations are refused
