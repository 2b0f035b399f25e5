"""Judging one commit's receipt: the check CI runs on every integrated commit.

Why a verdict and not an exception: a bad receipt is the *answer* of ``git agentops-receipt verify`` (exit 1), not
a failure of the tool, and a range of commits is judged commit by commit. :func:`verify_receipt` therefore
returns a :class:`Verdict` for every receipt, however broken, and raises only for programming errors.

The checks run in this order and the first failure is the verdict, each with its own code:

1. ``RECEIPT_MISSING`` -- no receipt;
2. ``RECEIPT_MALFORMED`` -- the envelope is not strict JSON matching ``dsse-envelope``, its payloadType is not
   in-toto's, or the payload is not a receipt statement (``_type``, ``predicateType``, ``in-toto-statement`` and
   ``receipt-predicate`` schemas);
3. ``RECEIPT_SIGNATURE_INVALID`` / ``RECEIPT_UNTRUSTED_SIGNER`` -- every signature must verify against
   ``allowed_signers`` (several signatures: all of them); with ``require_signature`` an unsigned receipt is
   ``RECEIPT_SIGNATURE_INVALID``. A signed receipt with no allowed signers file to check it against is
   ``RECEIPT_UNTRUSTED_SIGNER``: a signature is never ignored;
4. ``RECEIPT_SUBJECT_MISMATCH`` -- the subject's ``gitCommit``/``gitTree`` are not the commit and its tree;
5. ``RECEIPT_SEAL_INVALID`` -- a seal's digest does not recompute, or ``goalHash`` is not the goal's;
6. ``RECEIPT_INCOMPLETE`` -- the task tree is not complete (rule in :mod:`.statement`);
7. ``RECEIPT_SUBJECT_MISMATCH`` -- the merge chain: internally (order, parents, source commits: see
   :func:`.statement.chain_problem`), then against the repository -- the last step is the commit, with its real
   parents and tree, and (given ``first_parent_chain``) the first-parent history from the commit down to the
   recorded base is exactly the steps' commits;
8. ``RECEIPT_POLICY_MISMATCH`` -- the policy transitions do not chain from ``baseConfigHash`` to ``configHash``, the
   final verification names another policy (or, after a transition, none), or a delivery's evidence was proven
   under a policy the run never had (rule in :mod:`.statement`, :func:`.statement.policy_problem`);
9. ``RECEIPT_SANDBOX_WEAKER`` -- only with ``require_sandbox``: the receipt's top-level ``sandbox`` or a delivery's
   or review's is weaker than the level required, or not recorded (an older receipt): CI can refuse work done by
   agents behind a weaker wall than it trusts (:func:`.statement.sandbox_problem`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from ..canonical import JsonObject, check_seal
from ..errors import AgentOpsError
from . import sshsig
from .dsse import Envelope, parse_envelope
from .shape import DeliveryDoc, IntegrationDoc, PredicateDoc, SealDoc, SealedValues, StatementDoc
from .statement import (
    PREDICATE_TYPES,
    chain_problem,
    completeness_problem,
    goal_hash,
    policy_problem,
    sandbox_problem,
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one commit's receipt: ``ok``, or the first failed check's ``code`` and message."""

    commit: str
    ok: bool
    code: str | None
    message: str
    principals: tuple[str, ...] = ()
    covers: tuple[str, ...] = ()  # a valid receipt's merge steps: the commits of the target it vouches for
    claims: tuple[str, ...] = ()  # the merge steps a parsed receipt names, valid or not (to explain, never to cover)
    run_id: str | None = None  # the run a parsed receipt names
    covered_by: str | None = None  # a range's commit only an invalid receipt names: that receipt's commit

    def to_json(self) -> JsonObject:
        """The verdict as ``git agentops-receipt`` reports it; ``principals``: the signers whose signatures verified;
        ``coveredBy``: for a commit an invalid receipt names as a merge step, the commit carrying that receipt."""
        doc: JsonObject = {
            "commit": self.commit,
            "ok": self.ok,
            "code": self.code,
            "message": self.message,
            "principals": list(self.principals),
        }
        if self.covered_by is not None:
            doc["coveredBy"] = self.covered_by
        return doc


class _Fail(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def verify_receipt(
    data: bytes | None,
    *,
    commit: str,
    tree: str,
    parents: Sequence[str],
    first_parent_chain: Callable[[str, str], list[str]] | None,
    allowed_signers: Path | None,
    require_signature: bool,
    when: datetime | None,
    ssh_keygen: str = "ssh-keygen",
    require_sandbox: str | None = None,
) -> Verdict:
    """Judge the receipt ``data`` (the note's bytes, None when there is none) of ``commit`` (module docstring).

    ``tree`` and ``parents`` are the commit's real tree and parents. ``first_parent_chain(commit, base)`` returns
    the commit's first-parent history, newest first, from ``commit`` (included) until just before ``base``; when
    ``base`` is not on that path, the whole history (a walk may also stop early once it is longer than the
    receipt's steps: any list that is not exactly the steps fails). Note that ``git rev-list --first-parent
    base..commit`` is *not* that walk: it also stops at commits merely reachable from ``base``. None skips the
    walk. ``when`` is the time signing keys must be valid at (typically the committer date; None: now).
    ``require_sandbox`` is the weakest sandbox level accepted (``namespace``, ``landlock`` or ``none``; None: the
    levels are not judged).
    """
    principals: list[str] = []
    claims: tuple[str, ...] = ()
    run_id: str | None = None
    try:
        if data is None:
            raise _Fail("RECEIPT_MISSING", f"commit {commit[:12]} has no receipt")
        env, statement = _parse(data)
        claims, run_id = _claims(statement)
        principals = _check_signatures(env, allowed_signers, require_signature, when, ssh_keygen)
        _check_subject(statement, commit, tree)
        predicate = statement["predicate"]
        values = _check_seals(predicate, jcs=PREDICATE_TYPES[statement["predicateType"]])
        problem = completeness_problem(values["tasks"], values["deliveries"])
        if problem:
            raise _Fail("RECEIPT_INCOMPLETE", f"the receipt is incomplete: {problem}")
        _check_chain(
            values["integration"],
            deliveries=values["deliveries"],
            commit=commit,
            tree=tree,
            parents=parents,
            first_parent_chain=first_parent_chain,
        )
        problem = policy_problem(values["policy"], values["verification"], values["deliveries"])
        if problem:
            raise _Fail("RECEIPT_POLICY_MISMATCH", f"the receipt's policy record is inconsistent: {problem}")
        if require_sandbox is not None:
            problem = sandbox_problem(
                predicate.get("sandbox"), values["deliveries"], values["reviews"], required=require_sandbox
            )
            if problem:
                raise _Fail("RECEIPT_SANDBOX_WEAKER", problem)
    except _Fail as failure:
        return Verdict(commit, False, failure.code, failure.message, tuple(principals), claims=claims, run_id=run_id)
    signed = f"signed by {', '.join(principals)}" if principals else "unsigned"
    steps = tuple(step["commit"] for step in values["integration"]["steps"])
    message = f"receipt of run {predicate['runId']} is valid ({signed})"
    return Verdict(commit, True, None, message, tuple(principals), steps, claims=steps, run_id=run_id)


def _claims(statement: StatementDoc) -> tuple[tuple[str, ...], str | None]:
    """The merge steps and run a schema-valid statement names, before any of it is checked: only to say which
    receipt a range's commit was meant to be covered by when that receipt does not count, never to cover it."""
    predicate = statement["predicate"]
    integration = cast(IntegrationDoc, predicate["integration"]["value"])  # the schema checked its shape
    return tuple(str(step["commit"]) for step in integration["steps"]), str(predicate["runId"])


def claimed_steps(data: bytes) -> tuple[tuple[str, ...], str | None]:
    """The merge steps and run a receipt note names, unchecked (none when it does not parse): for the caller to hold
    against that run's own record, never what covers a commit in a verification."""
    try:
        return _claims(_parse(data)[1])
    except (_Fail, KeyError, TypeError, ValueError):
        return (), None


def _parse(data: bytes) -> tuple[Envelope, StatementDoc]:
    try:
        env = parse_envelope(data)
        return env, env.statement()
    except AgentOpsError as exc:
        raise _Fail(exc.code, exc.message) from exc


def _check_signatures(
    env: Envelope, allowed_signers: Path | None, require: bool, when: datetime | None, ssh_keygen: str
) -> list[str]:
    if not env.signatures:
        if require:
            raise _Fail(
                "RECEIPT_SIGNATURE_INVALID",
                "the receipt is unsigned but the rules require a signature (a run signs its receipt when "
                "git config agentops.signingKey names a key)",
            )
        return []
    if allowed_signers is None:
        raise _Fail(
            "RECEIPT_UNTRUSTED_SIGNER",
            f"the receipt has {len(env.signatures)} signature(s) but no allowed signers file is configured "
            "to check them against ([receipts] allowed_signers)",
        )
    data = env.signing_input()
    principals = []
    for index, signature in enumerate(env.signatures):
        try:
            principals.append(
                sshsig.verify(data, signature, allowed_signers=allowed_signers, when=when, ssh_keygen=ssh_keygen)
            )
        except AgentOpsError as exc:
            prefix = f"signature {index + 1} of {len(env.signatures)}: " if len(env.signatures) > 1 else ""
            raise _Fail(exc.code, prefix + exc.message) from exc
    return principals


def _check_subject(statement: StatementDoc, commit: str, tree: str) -> None:
    (subject,) = statement["subject"]  # the schema allows exactly one
    claimed = subject["digest"]
    if claimed["gitCommit"] != commit:
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH",
            f"the receipt is for commit {claimed['gitCommit'][:12]}, not {commit[:12]} (copied from another commit?)",
        )
    if claimed["gitTree"] != tree:
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH",
            f"the receipt names tree {claimed['gitTree'][:12]}, but commit {commit[:12]} has tree {tree[:12]}",
        )


def _check_seals(predicate: PredicateDoc, *, jcs: bool) -> SealedValues:
    """The sealed values, each once its seal recomputed, checked in :data:`.statement.SEALED` order (the first
    broken seal is the one reported), then the optional ones (:data:`.statement.OPTIONAL_SEALED`) present."""

    def opened(key: str, sealed: SealDoc) -> Any:  # the schema declared the value's shape; the seal vouches for it
        try:
            return check_seal(sealed, jcs=jcs)
        except AgentOpsError as exc:
            raise _Fail("RECEIPT_SEAL_INVALID", f"predicate.{key}: {exc.message}") from exc

    values = SealedValues(
        goal=opened("goal", predicate["goal"]),
        policy=opened("policy", predicate["policy"]),
        tasks=opened("tasks", predicate["tasks"]),
        deliveries=opened("deliveries", predicate["deliveries"]),
        integration=opened("integration", predicate["integration"]),
        verification=opened("verification", predicate["verification"]),
        reviews=opened("reviews", predicate["reviews"]),
    )
    if "usage" in predicate:
        values["usage"] = opened("usage", predicate["usage"])
    if predicate["goalHash"] != goal_hash(values["goal"]):
        raise _Fail("RECEIPT_SEAL_INVALID", "predicate.goalHash is not the hash of the recorded goal")
    return values


def _check_chain(
    integration: IntegrationDoc,
    *,
    deliveries: Sequence[DeliveryDoc],
    commit: str,
    tree: str,
    parents: Sequence[str],
    first_parent_chain: Callable[[str, str], list[str]] | None,
) -> None:
    problem = chain_problem(integration, deliveries)
    if problem:
        raise _Fail("RECEIPT_SUBJECT_MISMATCH", f"the recorded merge chain is inconsistent: {problem}")
    steps = integration["steps"]
    last = steps[-1]
    if last["commit"] != commit:
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH",
            f"the last merge step is commit {last['commit'][:12]}, not the receipt's commit {commit[:12]}",
        )
    if list(last["parents"]) != list(parents):
        shown = ", ".join(p[:12] for p in parents) or "none"
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH",
            f"the last merge step records parents {', '.join(p[:12] for p in last['parents'])}; "
            f"commit {commit[:12]} has {shown}",
        )
    if last["tree"] != tree:
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH", f"the last merge step records tree {last['tree'][:12]}, not {tree[:12]}"
        )
    if first_parent_chain is None:
        return
    expected = [step["commit"] for step in reversed(steps)]
    try:
        actual = first_parent_chain(commit, integration["base"])
    except AgentOpsError as exc:  # the recorded base is not in this repository, or git failed on it
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH", f"cannot walk from {commit[:12]} to the recorded base: {exc.message}"
        ) from exc
    if actual != expected:
        raise _Fail(
            "RECEIPT_SUBJECT_MISMATCH",
            f"the first-parent history from {commit[:12]} to the base {integration['base'][:12]} has "
            f"{len(actual)} commit(s) that are not the {len(expected)} recorded merge steps",
        )
