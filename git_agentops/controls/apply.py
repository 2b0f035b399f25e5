"""The supervising machine's side: gather the run's signed controls, judge each, apply it exactly once, in order.

Controls reach the repository two ways: the supervisor's own fetch of the remote (:class:`Fetcher`, every
``[controls] interval`` seconds, into the sync mirror ``refs/agentops-sync/<remote>/agentops/runs/<run>/controls/``)
and ``git agentops-sync fetch``, which adopts them as local refs -- the supervisor sees those on its next tick.
:func:`apply_pending` takes every control id the run's state has no record of, in id order (the order they were
made), and for each:

1. reads the commit behind it -- from the local ref and from the mirror; when the two differ (a ref planted here by
   someone without the key, say) each is judged and the first good one counts;
2. parses ``control.json`` (``CONTROL_INVALID``; it must name this run and its own ref's id: a control is never
   replayed under another id or run), checks ``control.sig`` against the allowed signers committed at the run's base
   (``CONTROL_UNSIGNED``, ``CONTROL_SIGNATURE_INVALID``, ``CONTROL_NOT_ALLOWED``) and the ``[controls]`` patterns of
   its kind (``CONTROL_NOT_ALLOWED``);
3. applies it as the person's own command would (:mod:`git_agentops.runs.controls`), the record of its outcome
   written in the same journal commit as its effect; a decision whose target is no longer pending is
   ``CONTROL_STALE``. A refusal is recorded too (``RUN_CONTROL_REFUSED``), so every control is handled once.

The record lives in the run's state, which only a supervisor of the run can write (its MAC): nobody can make a
control count twice by deleting or re-pushing its ref, and nobody can mark one handled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import pygit2

from .. import eventkinds as kinds
from ..clock import Clock
from ..errors import (
    AgentOpsError,
    ControlStale,
    QuestionUnknown,
    RunNotActive,
    StateTampered,
    TransitionStale,
    TransitionUnknown,
)
from ..gitstore import sync
from ..gitstore.journal import Change, Event
from ..gitstore.refs import create_ref, list_refs, read_ref
from ..gitstore.repo import Store
from ..model.policy import Policy
from ..runs import controls as runcontrols
from ..runs import state as runstate
from ..schema.documents import parse_json
from ..transition import journal as transitions
from . import people
from .record import DOCUMENT_FILE, MAX_DOCUMENT, MAX_SIGNATURE, SIGNATURE_FILE, Control, Outcome, controls_prefix, is_id
from .signing import check_allowed, rule_of, signer

BATCH: Final = 32
"""Controls handled in one tick at most: a flood pushed by someone with write access cannot stall the run."""


def mirror_controls(remote: str, run_id: str) -> str:
    """Where the supervisor's fetch mirrors the remote's controls of a run."""
    return sync.mirror_prefix(remote) + controls_prefix(run_id)[len("refs/") :]


def gather(store: Store, run_id: str, remote: str | None) -> dict[str, list[str]]:
    """Every control id of the run seen here or in the remote's mirror, with its commit(s), local first."""
    found: dict[str, list[str]] = {}
    places = [controls_prefix(run_id)] + ([mirror_controls(remote, run_id)] if remote else [])
    for prefix in places:
        for name, commit in list_refs(store, prefix).items():
            commits = found.setdefault(name[len(prefix) :], [])
            if commit not in commits:
                commits.append(commit)
    return found


@dataclass(frozen=True, slots=True)
class Rules:
    """What a control is judged by: the allowed signers committed at the run's base, and the bound policy."""

    policy: Policy
    signers: bytes | None
    source: str

    @classmethod
    def of(cls, store: Store, run_id: str, policy: Policy) -> Rules:
        """The rules of ``run_id``: ``[controls] allowed_signers`` (else the receipts') as committed at its base."""
        path = policy.controls_signers
        base = runstate.read(store, run_id).run().base_commit
        if path is None:
            return cls(policy, None, "no allowed_signers is named in [controls] or [receipts]")
        return cls(policy, _file_at(store, base, path), f"{path} at {base[:12]}")


def _file_at(store: Store, commit: str, path: str) -> bytes | None:
    try:
        tree = store.repo[commit].peel(pygit2.Tree)
        entry = tree[path]
    except (KeyError, ValueError, pygit2.GitError):
        return None
    blob = store.repo[entry.id]
    return bytes(blob.data) if isinstance(blob, pygit2.Blob) and blob.size <= 16 * 1024 * 1024 else None


def read_control(store: Store, commit: str) -> tuple[Control, bytes | None]:
    """The control a commit holds and its armored signature (None: unsigned); ``CONTROL_INVALID``."""
    obj: object = store.repo.get(commit)
    if not isinstance(obj, pygit2.Commit):
        raise AgentOpsError("CONTROL_INVALID", f"{commit[:12]} is not a commit")
    files: dict[str, bytes] = {}
    for name, limit in ((DOCUMENT_FILE, MAX_DOCUMENT), (SIGNATURE_FILE, MAX_SIGNATURE)):
        if name not in obj.tree:
            continue
        entry = obj.tree[name]
        blob = store.repo[entry.id]
        if not isinstance(blob, pygit2.Blob) or blob.size > limit:
            raise AgentOpsError("CONTROL_INVALID", f"{name} of {commit[:12]} is not a file of at most {limit} bytes")
        files[name] = bytes(blob.data)
    if DOCUMENT_FILE not in files:
        raise AgentOpsError("CONTROL_INVALID", f"{commit[:12]} holds no {DOCUMENT_FILE}")
    try:
        doc = parse_json(files[DOCUMENT_FILE], what="control", max_bytes=MAX_DOCUMENT)
    except AgentOpsError as exc:
        raise AgentOpsError("CONTROL_INVALID", exc.message) from exc
    return Control.from_json(doc), files.get(SIGNATURE_FILE)


def judge(store: Store, run_id: str, control_id: str, commit: str, rules: Rules) -> tuple[Control, str]:
    """The control behind ``commit`` and the principal allowed to send it; a coded error otherwise."""
    control, armored = read_control(store, commit)
    if control.control_id != control_id or control.run_id != run_id:
        raise AgentOpsError(
            "CONTROL_INVALID",
            f"the control on {control_id} of {run_id} says it is {control.control_id} of {control.run_id}: "
            "a control is never replayed under another id or run",
        )
    principal = signer(control, armored, rules.signers, rules.source)
    check_allowed(control, principal, rules.policy.controls_allowed(rule_of(control.kind)))
    return control, principal


def apply_pending(
    store: Store, run_id: str, policy: Policy, clock: Clock, *, remote: str | None, log: Callable[[str], None]
) -> list[Outcome]:
    """Handle every control not handled yet, oldest id first, at most :data:`BATCH`; returns what was done."""
    found = gather(store, run_id, remote)
    if not found:
        return []
    view = runstate.read(store, run_id)
    pending = sorted(cid for cid in found if is_id(cid) and view.control(cid) is None)
    if not pending:
        return []
    rules = Rules.of(store, run_id, policy)
    done = []
    for control_id in pending[:BATCH]:
        outcome = _handle(store, run_id, control_id, found[control_id], rules, clock)
        if outcome is not None:
            verb = "applied" if outcome.applied else f"refused ({outcome.code})"
            log(f"control {control_id} ({outcome.kind}) from {outcome.signer or 'an unknown signer'}: {verb}")
            done.append(outcome)
    return done


def _handle(
    store: Store, run_id: str, control_id: str, commits: list[str], rules: Rules, clock: Clock
) -> Outcome | None:
    first: tuple[str, AgentOpsError, str] | None = None
    for commit in commits:
        try:
            control, principal = judge(store, run_id, control_id, commit, rules)
        except AgentOpsError as exc:
            kind = _kind_of(store, commit)
            first = first or (commit, exc, kind)
            continue
        _adopt(store, run_id, control_id, commit)
        return _apply(store, run_id, control, principal, commit, clock)
    assert first is not None
    commit, error, kind = first
    refused = Outcome(control_id, kind, commit, False, error.code, error.message, None, clock.now())
    return _refuse(store, run_id, refused)


def _kind_of(store: Store, commit: str) -> str:
    try:
        return read_control(store, commit)[0].kind
    except AgentOpsError:
        return "answer"  # unreadable: recorded under the kind every control may be


def _adopt(store: Store, run_id: str, control_id: str, commit: str) -> None:
    """Keep the control as a local ref too (it was fetched into the mirror): its history stays here."""
    ref = controls_prefix(run_id) + control_id
    if read_ref(store, ref) is None:
        create_ref(store, ref, commit, "agentops: a signed control adopted")


def _apply(store: Store, run_id: str, control: Control, principal: str, commit: str, clock: Clock) -> Outcome | None:
    outcome = Outcome(control.control_id, control.kind, commit, True, None, control.describe(), principal, clock.now())
    signed = runcontrols.Signed(control.control_id, principal, outcome.to_json())
    label = f"{principal} (signed control {control.control_id})"
    try:
        match control.kind:
            case "answer":
                assert control.question_id is not None and control.text is not None
                runcontrols.answer(store, run_id, control.question_id, control.text, clock, signed=signed)
            case "approve":
                assert control.transition is not None
                runcontrols.approve(store, run_id, control.transition, label, clock, signed=signed)
            case "refuse":
                assert control.transition is not None
                _refuse_transition(store, run_id, control, label, clock, outcome)
            case _:
                assert control.candidate is not None and control.decision is not None
                people.decide(
                    store,
                    run_id,
                    decision_id=control.control_id,
                    principal=principal,
                    decision=control.decision,
                    reason=control.reason or "",
                    candidate=control.candidate,
                    accepted=control.accept.split(",") if control.accept is not None else None,
                    rejected=None,
                    clock=clock,
                    signed=signed,
                )
    except StateTampered:
        raise  # the supervisor's own handling: the run's state is contained first
    except (ControlStale, QuestionUnknown, TransitionStale, TransitionUnknown, RunNotActive) as exc:
        if runstate.read(store, run_id).control(control.control_id) is not None:
            return None  # handled meanwhile
        stale = replace(outcome, applied=False, code="CONTROL_STALE", message=f"{exc.code}: {exc.message}")
        return _refuse(store, run_id, stale)
    except AgentOpsError as exc:
        refused = replace(outcome, applied=False, code=exc.code, message=exc.message)
        return _refuse(store, run_id, refused)
    return outcome


def _refuse_transition(store: Store, run_id: str, control: Control, label: str, clock: Clock, outcome: Outcome) -> None:
    assert control.transition is not None
    transition = transitions.read(store, run_id, transitions.resolve(store, run_id, control.transition))
    already = transition.refused is not None and transition.refused.by == label[:256]
    if not already:  # a crash after the refusal and before its record: it is not refused twice
        runcontrols.refuse(store, run_id, control.transition, label, control.reason or "", clock)
    record(store, run_id, outcome, kinds.RUN_CONTROL_APPLIED)


def record(store: Store, run_id: str, outcome: Outcome, code: kinds.EventCode) -> None:
    """Write ``outcome`` in the run's state alone (a refusal, or a control whose effect was written elsewhere)."""

    def fn(change: Change, view: runstate.RunView) -> None:
        runcontrols.Signed(outcome.control_id, outcome.signer or "", outcome.to_json()).put(change, view)

    data: dict[str, Any] = {"runId": run_id, "controlId": outcome.control_id, "kind": outcome.kind}
    if outcome.applied:
        data["signer"] = outcome.signer or ""
        summary = f"control {outcome.control_id} ({outcome.message}) by {outcome.signer} applied"
    else:
        data["code"] = outcome.code or "CONTROL_INVALID"
        summary = f"control {outcome.control_id} refused: {outcome.code}: {outcome.message[:300]}"
    runstate.mutate(runstate.journal(store, run_id), fn, Event(code, summary, data))


def _refuse(store: Store, run_id: str, outcome: Outcome) -> Outcome | None:
    try:
        record(store, run_id, outcome, kinds.RUN_CONTROL_REFUSED)
    except ControlStale:
        return None  # handled meanwhile
    return outcome


class Fetcher:
    """Fetches the remote's controls of one run into the mirror every ``interval`` seconds, in a thread of its own
    (a slow remote never holds the supervisor's loop), and pushes the run's refs back when its state moved, so that a
    board on another machine (``run list --all --remote``) and the sender see what was done. (A run on a remote
    target has none: its lease renewals fetch and push the same refs.) Failures are said in the log once each, and
    never stop the run."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        remote: str,
        interval: float,
        *,
        log: Callable[[str], None],
        timeout: float = 60.0,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.remote = remote
        self.interval = interval
        self.log = log
        self.timeout = timeout
        self.fresh = threading.Event()  # set after each fetch that brought something new
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said: str | None = None
        self._pushed: str | None = None

    def start(self) -> None:
        """Start fetching."""
        self._thread = threading.Thread(target=self._serve, name="agentops-controls", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the fetch in progress (bounded by its timeout); one last push of the run's refs."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)

    def _serve(self) -> None:
        store = self.store.reopen()  # this thread's own handle
        seen: Mapping[str, str] = {}
        while True:
            stopping = self._stop.is_set()
            try:
                if not stopping:
                    theirs = sync.mirror(store, self.remote, (controls_prefix(self.run_id),), timeout=self.timeout)
                    if theirs != seen:
                        seen = theirs
                        self.fresh.set()
                self._push(store)
                self._said = None
            except AgentOpsError as exc:
                message = f"controls from {self.remote}: {exc.code}: {exc.message}"
                if message != self._said:
                    self.log(message)
                    self._said = message
            except Exception as exc:  # noqa: BLE001 - a fetch gone wrong must never stop the run
                self.log(f"controls from {self.remote}: {type(exc).__name__}: {exc}")
            if stopping:
                return
            self._stop.wait(self.interval)

    def _push(self, store: Store) -> None:
        tip = read_ref(store, runstate.state_ref(self.run_id))
        if tip is None or tip == self._pushed:
            return
        sync.push(store, self.remote, (f"refs/agentops/runs/{self.run_id}/",), attempts=2, timeout=self.timeout)
        self._pushed = tip
