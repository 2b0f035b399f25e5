"""The rules repository hooks enforce, for people and agents using plain git commands.

* **pre-commit** in a run worktree: only the current generation of a registered, active worker of an active run
  commits (its generation comes from ``$AGENTOPS_GENERATION`` or the mailbox instructions); no mailbox or other
  private files are staged; ``.agentops/policy.toml`` does not change (only the supervisor's policy
  synchronisation may, with ``AGENTOPS_POLICY_SYNC=1``). Secret scanning applies everywhere (see :mod:`.fast`).
* **pre-merge-commit** / **post-merge** in a worker worktree: merged commits must be frozen deliveries of the
  task's declared dependencies (post-merge cannot refuse: it warns, and the supervisor records the merge as
  ``WORKER_FOREIGN_MERGE`` at handoff -- a hook runs in the agent's own git process and never writes run state).
* **pre-push**: the integration target is pushed only to a commit with a valid receipt (the checks of
  ``git agentops-receipt verify``, offline), never rewound or deleted; agentops refs and notes never move
  backwards or disappear, and no note of receipts, deliveries or evidence is dropped or rewritten (:mod:`.history`).
* **reference-transaction** / **pre-receive**: :func:`git_agentops.gitstore.refnames.namespace_rule` -- deliveries
  create-only, run state/policy/journals and notes fast-forward only, never deleted; ``pre-receive`` also keeps
  the history a push could lose (:mod:`.history`: the target only moves forward and is never deleted, the
  receipts, deliveries and evidence notes keep every note by content) and demands receipts on the target, reading
  them from the notes as they will be once the push lands -- or a person's SSH-signed policy commit
  (:mod:`git_agentops.receipts.signed`), the one way a policy change lands without a run.

The target is the ``run.target`` of the policy committed at the pushed commit (or at the tip it replaces): a
branch of a repository without a policy is not checked. Whether the commits a push adds are covered is judged by
the policy at the tip it replaces, the trusted side: a branch's first push, and the push that first gives it a
policy, have nothing before them to be judged by and are taken as they are -- the target's baseline. That is how an
empty server with the hook already installed is set up (``git agentops-init --server`` prints the order).

Run state is read straight from the journal refs with ``git cat-file`` (no pygit2). Hooks are advisory --
``--no-verify`` and libgit2 skip them -- so the same rules also hold in the toolkit's own write paths, and CI's
``git agentops-receipt verify`` is the authority.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..gitstore.refnames import ZERO_OID, namespace_rule
from ..model.status import RunStatus, WorkerStatus
from .history import notes_refusals, target_refusals
from .names import HookName
from .where import NAMESPACES, Where, blobs, git

ACTIVE_WORKER = frozenset({WorkerStatus.ASSIGNED, WorkerStatus.STARTING, WorkerStatus.RUNNING, WorkerStatus.IDLE})
PRIVATE_PREFIXES = (".agentops/mailbox/", ".agentops/worktrees/", ".agentops/review/")
POLICY_FILE = ".agentops/policy.toml"


def _json(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _record(where: Where) -> dict[str, Any] | None:
    try:
        with open(os.path.join(where.git_dir, "agentops", "worktree.json"), "rb") as handle:
            return _json(handle.read(65536))
    except OSError:
        return None


def _is_ancestor(where: Where, old: str, new: str) -> bool:
    return git(where, ["merge-base", "--is-ancestor", old, new])[0] == 0


def worker_commit_refusals(where: Where, env: Mapping[str, str]) -> list[tuple[str, str]]:
    record = _record(where)
    if record is None:
        return [("HOOK_STALE_WORKER", "this worktree's ownership record is unreadable; commit from a live worker")]
    run_id, worker_id = str(record.get("runId")), str(record.get("workerId"))
    state = f"refs/agentops/runs/{run_id}/state"
    run, worker = (_json(b) for b in blobs(where, [f"{state}:run.json", f"{state}:workers/{worker_id}.json"]))
    refusals: list[tuple[str, str]] = []
    generation: Any = env.get("AGENTOPS_GENERATION")
    if not generation and where.toplevel:
        try:
            with open(os.path.join(where.toplevel, ".agentops", "mailbox", "instructions.json"), "rb") as handle:
                generation = (_json(handle.read(4 * 1024 * 1024)) or {}).get("generation")
        except OSError:
            generation = None
    if run is None or worker is None:
        refusals.append(
            (
                "HOOK_STALE_WORKER",
                f"run {run_id} has no worker {worker_id}: this worktree is not a live worker's; commit elsewhere",
            )
        )
    elif run.get("status") != RunStatus.ACTIVE or run.get("disableRestart"):
        refusals.append(
            (
                "HOOK_STALE_WORKER",
                f"run {run_id} is {run.get('status')}: workers do not commit now; "
                f"'git agentops-run resume {run_id}' first",
            )
        )
    elif worker.get("status") not in ACTIVE_WORKER:
        refusals.append(
            ("HOOK_STALE_WORKER", f"worker {worker_id} is {worker.get('status')}: only an active worker commits here")
        )
    elif str(generation) != str(worker.get("generation")):
        refusals.append(
            (
                "HOOK_STALE_WORKER",
                f"generation {generation} of {worker_id} is not current (the current "
                f"one is {worker.get('generation')}): a stopped generation may not "
                "commit; the supervisor restarted this worker",
            )
        )
    status, names = git(where, ["diff", "--cached", "--name-only", "-z", "--no-renames"], cwd=where.toplevel)
    staged = [n.decode("utf-8", errors="replace") for n in names.split(b"\0") if n] if status == 0 else []
    private = [p for p in staged if p.startswith(PRIVATE_PREFIXES)]
    if private:
        refusals.append(
            (
                "HOOK_PRIVATE_PATH",
                f"private files are staged: {', '.join(private[:5])}; unstage them "
                "(git restore --staged ...): the mailbox is never committed",
            )
        )
    refusals += merge_refusals(where, HookName.PRE_COMMIT)[0]  # concluding a merge that stopped on a conflict
    if POLICY_FILE in staged and env.get("AGENTOPS_POLICY_SYNC") != "1":
        refusals.append(
            (
                "HOOK_POLICY_CHANGE",
                f"{POLICY_FILE} is staged: a worker does not change the policy; ask "
                "the coordinator to propose it (git agentops-request policy)",
            )
        )
    return refusals


def _allowed_deliveries(where: Where, run_id: str, worker: Mapping[str, Any]) -> dict[str, str]:
    """commit -> task of the frozen deliveries of the worker's task's dependencies."""
    task_id = worker.get("taskId")
    if not task_id:
        return {}
    state = f"refs/agentops/runs/{run_id}/state"
    status, listing = git(where, ["ls-tree", "--name-only", f"{state}:tasks/{task_id}"])
    revisions = sorted(n for n in listing.decode().split() if n.startswith("r")) if status == 0 else []
    task = _json(blobs(where, [f"{state}:tasks/{task_id}/{revisions[-1]}"])[0]) if revisions else None
    dependencies = list((task or {}).get("dependencies", []))
    if not dependencies:
        return {}
    refs = [f"refs/agentops/runs/{run_id}/deliveries/{d}" for d in dependencies]
    status, out = git(where, ["for-each-ref", "--format=%(objectname) %(refname)", *refs])
    return {line.split()[0]: line.split()[1].rsplit("/", 1)[1] for line in out.decode().splitlines() if line}


def _merging(where: Where, hook: str) -> list[str] | None:
    """The commits being merged into HEAD, or None when that cannot be told.

    ``git merge`` writes ``MERGE_HEAD`` only when it stops (a conflict, ``--no-commit``), so a clean merge's
    ``pre-merge-commit`` learns them from ``$GIT_REFLOG_ACTION`` (``merge <commit>...``, as git sets it) or, for
    ``git pull``, from ``FETCH_HEAD``. ``post-merge`` reads the merge commit's parents.
    """
    if hook == HookName.POST_MERGE:
        status, out = git(where, ["rev-list", "--parents", "-n", "1", "HEAD"])
        parents = out.decode().split()[1:] if status == 0 else []
        return parents[1:]
    try:
        with open(os.path.join(where.git_dir, "MERGE_HEAD"), encoding="utf-8") as handle:
            return handle.read().split()
    except OSError:
        pass
    if hook != HookName.PRE_MERGE_COMMIT:
        return []  # an ordinary commit
    action = where.env.get("GIT_REFLOG_ACTION", "").split()
    if action[:1] == ["pull"]:
        try:
            with open(os.path.join(where.git_dir, "FETCH_HEAD"), encoding="utf-8", errors="replace") as handle:
                return [line.split()[0] for line in handle if line.strip() and "\tnot-for-merge\t" not in line]
        except OSError:
            return None
    if action[:1] != ["merge"] or len(action) < 2:
        return None
    commits = []
    for name in action[1:]:
        status, out = git(where, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}"])
        if status != 0:
            return None
        commits.append(out.decode().strip())
    return commits


def merge_refusals(where: Where, hook: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Refusals for a merge in a worker worktree (``pre-merge-commit``, or ``pre-commit`` concluding a merge
    that stopped), or for ``post-merge`` the warning it prints."""
    merging = _merging(where, hook)
    record = _record(where) if merging != [] else None
    if record is None:
        return [], []
    run_id, worker_id = str(record.get("runId")), str(record.get("workerId"))
    worker = _json(blobs(where, [f"refs/agentops/runs/{run_id}/state:workers/{worker_id}.json"])[0]) or {}
    allowed = _allowed_deliveries(where, run_id, worker)
    shown = ", ".join(f"{t} {c[:12]}" for c, t in allowed.items()) or "none"
    if merging is None:
        return [
            (
                "HOOK_MERGE_NOT_DELIVERY",
                "cannot tell which commits this merge brings in; in a worker worktree merge only the frozen "
                f"deliveries of the task's dependencies, by commit id or delivery ref (allowed: {shown})",
            )
        ], []
    foreign = [c for c in merging if c not in allowed]
    if not foreign:
        return [], []
    what = (
        f"{', '.join(c[:12] for c in foreign)} is not the frozen delivery of a dependency of this task "
        f"(allowed: {shown})"
    )
    if hook == HookName.POST_MERGE:  # a warning only: a hook runs in the agent's process and never writes run state
        return [("HOOK_MERGE_NOT_DELIVERY", what + "; the supervisor records it when this worker hands off")], []
    return [
        (
            "HOOK_MERGE_NOT_DELIVERY",
            what + "; merge only dependencies' deliveries (the supervisor merges them "
            "for you when it provisions a task), or 'git merge --abort'",
        )
    ], []


def check_ref_updates(where: Where, updates: Sequence[tuple[str, str | None, str]]) -> list[tuple[str, str]]:
    """``namespace_rule`` for (ref, old or None = read it now, new) updates."""
    unknown = [ref for ref, old, _ in updates if old is None]
    current: dict[str, str] = {}
    if unknown:
        _, out = git(where, ["for-each-ref", "--format=%(refname) %(objectname)", *unknown])
        current = dict(line.split(" ", 1) for line in out.decode().splitlines() if line)
    refusals = []
    for ref, old, new in updates:
        broken = namespace_rule(
            ref, old if old is not None else current.get(ref, ZERO_OID), new, lambda a, b: _is_ancestor(where, a, b)
        )
        if broken is not None:
            refusals.append(broken)
    return refusals


def receive_refusals(where: Where, stdin: bytes) -> list[tuple[str, str]]:
    """The server's checks of a push: :func:`check_ref_updates`; notes of receipts, deliveries and evidence that
    keep every note (:func:`.history.notes_refusals`); the integration target (named by the policy committed at the
    new or the old tip) never deleted nor rewound (:func:`.history.target_refusals`), and moved only to receipted
    commits, read from the notes as they will be after this push."""
    updates = []
    for line in stdin.decode("utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3:
            updates.append((parts[2], parts[0], parts[1]))
    refusals = check_ref_updates(where, updates) + notes_refusals(where, updates)
    incoming = {ref: new for ref, _, new in updates if ref.startswith("refs/notes/agentops/") and new != ZERO_OID}
    for ref, old, new in updates:
        if ref.startswith("refs/heads/"):
            refusals += _target_update_refusals(where, ref, old, new, where.env, incoming)
    return refusals


def _target_update_refusals(
    where: Where, ref: str, old: str, new: str, env: Mapping[str, str], incoming: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The rules of a branch update (all zeros: absent) when the policy at ``old`` or ``new`` names it the target.

    Never deleted nor rewound, whichever side names it. Receipts -- or a person's signed policy commit -- are
    demanded by the **old** tip's policy, the trusted side, exactly as ``receipt verify OLD..NEW`` reads its rules:
    a branch's first push, and the push that first gives it a policy, have no rules before them to be judged by.
    They are its baseline; that is how a server is bootstrapped (``git agentops-init --server`` says so).
    """
    name = ref.removeprefix("refs/heads/")
    before = _target_at(where, old) if old != ZERO_OID else None
    if name != before and (new == ZERO_OID or name != _target_at(where, new)):
        return []
    refused = target_refusals(where, ref, old, new)
    if refused or name != before or new == ZERO_OID:
        return refused
    return _receipt_refusals(where, new, old, env, incoming)


def _target_at(where: Where, commit: str) -> str | None:
    """The integration target named by the policy committed at ``commit`` (None without a policy there)."""
    blob = blobs(where, [f"{commit}:{POLICY_FILE}"])[0]
    if blob is None:
        return None
    import tomllib

    try:
        run = tomllib.loads(blob.decode("utf-8", errors="replace")).get("run", {})
    except tomllib.TOMLDecodeError:
        return "main"  # a broken policy still protects the default target
    target = run.get("target", "main") if isinstance(run, dict) else "main"
    return target if isinstance(target, str) else "main"


def push_refusals(where: Where, args: Sequence[str], stdin: bytes, env: Mapping[str, str]) -> list[tuple[str, str]]:
    lines = [line.split() for line in stdin.decode("utf-8", errors="replace").splitlines() if line.strip()]
    if not lines and env.get("PRE_COMMIT_REMOTE_BRANCH") and env.get("PRE_COMMIT_TO_REF"):
        lines = [
            ["?", env["PRE_COMMIT_TO_REF"], env["PRE_COMMIT_REMOTE_BRANCH"], env.get("PRE_COMMIT_FROM_REF", ZERO_OID)]
        ]
    refusals: list[tuple[str, str]] = []
    ours = []
    for parts in lines:
        if len(parts) != 4:
            continue
        _, local_sha, remote_ref, remote_sha = parts
        if remote_ref.encode().startswith(NAMESPACES):
            known = remote_sha == ZERO_OID or git(where, ["cat-file", "-e", remote_sha])[0] == 0
            if not known:
                refusals.append(
                    (
                        "HOOK_REF_FAST_FORWARD_ONLY",
                        f"{remote_ref} on the remote is at {remote_sha[:12]}, "
                        "which is not here: fetch it first, then push",
                    )
                )
                continue
            ours.append((remote_ref, remote_sha, local_sha))
        elif remote_ref.startswith("refs/heads/"):
            known = remote_sha != ZERO_OID and git(where, ["cat-file", "-e", remote_sha])[0] == 0
            old = remote_sha if known else ZERO_OID  # a tip not fetched here: the server judges the rest
            refusals += _target_update_refusals(where, remote_ref, old, local_sha, env)
    return refusals + check_ref_updates(where, ours) + notes_refusals(where, ours)


def _receipt_refusals(
    where: Where, local: str, remote: str, env: Mapping[str, str], incoming: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    from pathlib import Path

    from ..clock import SystemClock
    from ..errors import AgentOpsError
    from ..receipts.check import check

    cwd = Path(where.toplevel or where.git_dir)
    try:
        # every new commit covered by a receipt or a person's signed policy commit, judged by the old tip's policy
        # (which also says whether plain commits may land here): the rules of ``git agentops-receipt verify OLD..NEW``
        verdicts = check(
            cwd, f"{remote}..{local}", environ=env, clock=SystemClock(), incoming=incoming, require_covered=False
        )
    except AgentOpsError as exc:
        return [("HOOK_RECEIPT_INVALID", f"cannot check the receipts of {local[:12]}: {exc.message}")]
    bad = [v for v in verdicts if not v.ok]
    if not bad:
        return []
    first = bad[0]
    return [
        (
            "HOOK_RECEIPT_INVALID",
            f"{first.commit[:12]}: {first.code}: {first.message}. The target is pushed only to integrated, "
            "receipted commits (git agentops-receipt verify; push refs/notes/agentops/receipts too if the receipt "
            "exists) and to a person's policy commits, SSH-signed by a key the allowed signers at "
            f"{remote[:12]} list for namespace 'git'",
        )
    ]
