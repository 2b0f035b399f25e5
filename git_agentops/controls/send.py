"""The sending machine's side: look at the remote's copy of the run, sign the person's decision, push it.

``git agentops-run answer|approve|refuse|review`` on a machine that does not supervise the run (``--remote NAME``,
or a run this repository does not have) mirrors the remote's refs of the run (``refs/agentops-sync/<remote>/``,
never the run's own refs), checks what the person decides is there and waiting -- an open question, a prepared
policy transition, whose changes are shown, an integration waiting for people -- signs the control with the
person's key and pushes it as a new ref, create-only (the push's lease says the ref must not exist). Only the
supervising machine judges it: what the mirror says is read unverified, for the person's sake.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AgentOpsError
from ..gitstore import sync
from ..gitstore.journal import Journal
from ..gitstore.objects import write_blob, write_commit, write_tree
from ..gitstore.refs import create_ref, list_refs, read_ref
from ..gitstore.repo import Store
from ..runs import state as runstate
from ..transition import journal as transitions
from ..transition.record import Transition
from .record import DOCUMENT_FILE, SIGNATURE_FILE, Control, control_ref
from .signing import sign


@dataclass(frozen=True, slots=True)
class RemoteRun:
    """The remote's copy of a run, as mirrored here (unverified)."""

    remote: str
    run_id: str
    view: runstate.RunView

    def open_question(self, question_id: str) -> dict[str, object]:
        """The open question ``question_id``; ``RUN_QUESTION_UNKNOWN`` naming the open ones otherwise."""
        questions = {str(q["questionId"]): q for q in self.view.questions()}
        found = questions.get(question_id)
        if found is None or found.get("answer") is not None:
            open_ids = [q for q, doc in questions.items() if doc.get("answer") is None]
            raise AgentOpsError(
                "RUN_QUESTION_UNKNOWN",
                f"{self.run_id} on {self.remote} has no open question {question_id!r} "
                f"(open: {', '.join(open_ids) or 'none'})",
            )
        return found


def fetch_run(store: Store, remote: str, run_id: str) -> RemoteRun:
    """Mirror the remote's refs of ``run_id`` and read its state; ``RUN_NOT_FOUND`` when the remote has no such run,
    ``SYNC_REMOTE_UNREACHABLE``."""
    runstate.check_run_id(run_id)
    sync.mirror(store, remote, (f"refs/agentops/runs/{run_id}/",))
    ref = _mirrored(remote, runstate.state_ref(run_id))
    if read_ref(store, ref) is None:
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {run_id!r} here or on {remote}")
    return RemoteRun(remote, run_id, runstate.RunView(Journal(store, ref).read(verify=False)))


def pending_transition(store: Store, remote: str, run_id: str, given: str) -> Transition:
    """The remote run's transition ``given`` (its id or a unique prefix of at least 4), still to be decided;
    ``RUN_TRANSITION_UNKNOWN``, ``RUN_POLICY_TRANSITION_STALE``."""
    prefix = _mirrored(remote, transitions.journal_prefix(run_id))
    names = sorted(name[len(prefix) :] for name in list_refs(store, prefix))
    matches = [n for n in names if n == given] or [
        n for n in names if len(given) >= 4 and (n.startswith(given) or n[len("policy-") :].startswith(given))
    ]
    if len(matches) != 1:
        raise AgentOpsError(
            "RUN_TRANSITION_UNKNOWN",
            f"{run_id} on {remote} has no single transition {given!r} (it has: {', '.join(names) or 'none'})",
        )
    found = transitions.read_unverified(store, prefix + matches[0])
    if found is None:
        raise AgentOpsError("RUN_TRANSITION_UNKNOWN", f"{matches[0]} of {run_id} on {remote} holds no transition")
    if found.ended:
        raise AgentOpsError("RUN_POLICY_TRANSITION_STALE", f"{found.transition_id} is {found.stage}")
    return found


def send(store: Store, remote: str, control: Control, keys: Sequence[Path]) -> str:
    """Sign ``control``, store it as a commit on its ref here, and push that ref to ``remote`` create-only; returns
    the commit. ``CONTROL_NO_KEY``, ``RECEIPT_SIGNING_FAILED``, ``SYNC_REMOTE_UNREACHABLE``, ``SYNC_PUSH_REFUSED``."""
    armored = sign(control, keys)
    tree = write_tree(
        store,
        {
            DOCUMENT_FILE: (write_blob(store, control.payload()), 0o100644),
            SIGNATURE_FILE: (write_blob(store, armored), 0o100644),
        },
    )
    assert tree is not None
    message = f"agentops control: {control.describe()} of {control.run_id}\n\nSigned by {control.by}.\n"
    commit = write_commit(store, tree, [], message)
    ref = control_ref(control.run_id, control.control_id)
    create_ref(store, ref, commit, "agentops: a signed control sent")
    sync.push_atomic(store, remote, [sync.Send(ref, commit, None)])
    return commit


def _mirrored(remote: str, ref: str) -> str:
    return sync.mirror_prefix(remote) + ref[len("refs/") :]


def wait_for_outcome(
    store: Store, remote: str, run_id: str, control_id: str, timeout: float, *, poll: float = 1.0
) -> dict[str, Any] | None:
    """The recorded outcome of ``control_id`` as the remote's copy of the run's state says, within ``timeout``
    seconds (the sender's ``--wait``); None if the supervisor has not pushed one by then."""
    deadline = time.monotonic() + timeout
    state = _mirrored(remote, runstate.state_ref(run_id))
    while True:
        sync.mirror(store, remote, (runstate.state_ref(run_id),), timeout=max(5.0, min(60.0, timeout)))
        if read_ref(store, state) is not None:
            view = runstate.RunView(Journal(store, state).read(verify=False))
            found = view.control(control_id)
            if found is not None:
                return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll)
